package promsample

import (
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"sort"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/cespare/xxhash/v2"
)

// A SegmentLayout is what a SegmentReader learns of a segment before it
// decodes a sample: the parsed footer, the verified page index, where
// every page of the paged columns lies with its checksum, and each
// series' first row. Making one reads the end of the segment (footer and
// page index) and parses them; a reader made from it reads only the pages
// of the series it is asked for.
//
// Why it is a value of its own: a segment is immutable, and inside an
// archive it is a chain of 4 KiB overflow pages that a read at offset X
// walks from the start up to X (archive.SegmentBlob). The footer is at
// the end, so a reader that parsed it on every question walked the whole
// chain each time, and parsed the footer and the offset indexes and
// summed the series' row counts again (at 166 k series a segment, most of
// a one-series read's CPU). A caller that keeps the layout (promql-read
// caches one per segment) pays that once.
//
// A SegmentLayout is immutable and safe for concurrent use; each
// SegmentReader made from it is for one goroutine.
type SegmentLayout struct {
	x      *Index
	size   int64
	md     *metadata.FileMetaData
	pidx   []byte // the page index region, verified
	pidxAt int64
	cols   *segmentColumns
	rgEnd  []int64   // end row of each row group
	starts rowStarts // the series table's row starts
	pages  []pageLoc // every page of the paged columns, by offset
}

// pageLoc is one page of a paged column: its byte range in the segment and
// the checksum the index holds for it.
type pageLoc struct {
	off, end int64
	sum      uint64
}

// OpenSegmentLayout reads and checks the layout of the segment of size
// bytes that r reads, whose catalog index is x. It refuses an index
// without a series table with ErrUnsupportedVersion; other errors match
// ErrCorruptSegment.
func OpenSegmentLayout(r io.ReaderAt, size int64, x *Index) (_ *SegmentLayout, err error) {
	defer recoverCorrupt(&err)
	if x.Table == nil || len(x.PageSums) != len(x.RowGroups)*len(PagedColumns) {
		return nil, fmt.Errorf("%w: the segment's index has no series table", ErrUnsupportedVersion)
	}
	if size < 12 {
		return nil, corruptSegment("not a Parquet file", nil)
	}
	var tail [8]byte
	if _, err := r.ReadAt(tail[:], size-8); err != nil {
		return nil, corruptSegment("footer", err)
	}
	if string(tail[4:]) != "PAR1" {
		return nil, corruptSegment("not a Parquet file", nil)
	}
	footerStart := size - 8 - int64(binary.LittleEndian.Uint32(tail[:4]))
	if footerStart < 4 {
		return nil, corruptSegment("footer length out of range", nil)
	}
	f, err := file.NewParquetReader(&verifiedReader{r: r, size: size}, file.WithReadProps(readProps()))
	if err != nil {
		return nil, corruptSegment("parquet footer", err)
	}
	md := f.MetaData()
	// WriterVersion is computed on first use and stored in md: compute it
	// now, so that readers sharing md only ever read it.
	md.WriterVersion()
	if _, err := footerKV(md); err != nil {
		return nil, err
	}
	chunksEnd, err := checkLayout(md, footerStart)
	if err != nil {
		return nil, err
	}
	if md.NumRowGroups() != len(x.RowGroups) {
		return nil, corruptSegment(fmt.Sprintf("index lists %d row groups, file has %d", len(x.RowGroups), md.NumRowGroups()), nil)
	}
	pidx := make([]byte, footerStart-chunksEnd)
	if _, err := r.ReadAt(pidx, chunksEnd); err != nil {
		return nil, corruptSegment("page index", err)
	}
	if xxhash.Sum64(pidx) != x.PageIndexSum {
		return nil, corruptSegment("page index checksum", nil)
	}
	l := &SegmentLayout{x: x, size: size, md: md, pidx: pidx, pidxAt: chunksEnd, starts: newRowStarts(x.Table.Rows)}
	var end int64
	for i, g := range x.RowGroups {
		if n := f.RowGroup(i).NumRows(); n != g.Rows || n > MaxRowGroupRows || n < 0 {
			return nil, corruptSegment(fmt.Sprintf("row group %d has %d rows (index: %d, max %d)", i, n, g.Rows, MaxRowGroupRows), nil)
		}
		end += g.Rows
		l.rgEnd = append(l.rgEnd, end)
	}
	if l.starts.total() != end {
		return nil, corruptSegment(fmt.Sprintf("series table holds %d rows, the file %d", l.starts.total(), end), nil)
	}
	if l.cols, err = (&segmentFile{r: f}).columns(); err != nil {
		return nil, err
	}
	paged, err := pagedColumnIndexes(md.Schema)
	if err != nil {
		return nil, err
	}
	// The page index is verified: the offset indexes are parsed from it.
	pr := &metadata.PageIndexReader{Input: &verifiedReader{r: r, size: size, pinned: pidx, pinnedAt: chunksEnd},
		Props: readProps(), FileMetadata: md}
	for g := range x.RowGroups {
		if err := l.addPages(pr, g, paged, x.PageSums[g*len(PagedColumns):(g+1)*len(PagedColumns)]); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(l.pages, func(a, b pageLoc) int { return int(a.off - b.off) })
	l.pages = slices.CompactFunc(l.pages, func(a, b pageLoc) bool { return a.off == b.off && a.end == b.end })
	for i := 1; i < len(l.pages); i++ {
		if l.pages[i].off < l.pages[i-1].end {
			return nil, corruptSegment("overlapping pages", nil)
		}
	}
	return l, nil
}

// readProps are the Parquet reader's properties: pages are read through a
// small buffer, never the whole column chunk at once.
func readProps() *parquet.ReaderProperties {
	return &parquet.ReaderProperties{BufferedStreamEnabled: true, BufferSize: 16 << 10}
}

// addPages records the pages of row group g's paged columns (cols, their
// checksums sums) from its offset index.
func (l *SegmentLayout) addPages(pr *metadata.PageIndexReader, g int, cols []int, sums [][]uint64) error {
	rgi, err := pr.RowGroup(g)
	if err != nil || rgi == nil {
		return corruptSegment(fmt.Sprintf("row group %d has no page index", g), err)
	}
	for k, c := range cols {
		oi, err := rgi.GetOffsetIndex(c)
		if err != nil || oi == nil {
			return corruptSegment(fmt.Sprintf("row group %d column %d has no offset index", g, c), err)
		}
		locs := oi.GetPageLocations()
		if len(locs) != len(sums[k]) {
			return corruptSegment(fmt.Sprintf("row group %d column %d: %d pages, %d checksums", g, c, len(locs), len(sums[k])), nil)
		}
		for i, loc := range locs {
			end := loc.Offset + int64(loc.CompressedPageSize)
			if loc.Offset < 4 || end > l.size || end <= loc.Offset {
				return corruptSegment(fmt.Sprintf("page location %d+%d out of range", loc.Offset, loc.CompressedPageSize), nil)
			}
			l.pages = append(l.pages, pageLoc{off: loc.Offset, end: end, sum: sums[k][i]})
		}
	}
	return nil
}

// Index returns the catalog index the layout was made with.
func (l *SegmentLayout) Index() *Index { return l.x }

// Bytes estimates the memory the layout holds, for a cache's budget. The
// parsed footer is counted at four times its encoded size (thrift structs
// and the wrappers around them).
func (l *SegmentLayout) Bytes() int64 {
	return 512 + 4*int64(l.md.Size()) + int64(len(l.pidx)) + 8*int64(len(l.rgEnd)) + l.starts.bytes() + 24*int64(len(l.pages))
}

// NewReader returns a reader of the segment through r, which must read the
// same bytes the layout was made from. It reads nothing until asked for a
// series.
func (l *SegmentLayout) NewReader(r io.ReaderAt) (*SegmentReader, error) {
	return l.NewCachedReader(r, nil)
}

// A PageCache keeps the verified pages of one segment from one reader to
// the next. Inside an archive, reading a page at offset X of a segment
// walks its BLOB's overflow chain up to X on every new snapshot
// (archive.SegmentBlob), more than half of what a warm one-series read
// of a large segment costs; a page found here costs a lookup.
//
// A reader asks Page before it reads a page and offers what it read,
// once its checksum matched, to AddPage. Both name the page by its offset
// and its checksum in the segment's index, so a cache keyed on them hands
// back only bytes that were verified against that checksum. The bytes are
// shared: neither the cache nor a reader modifies them. An implementation
// must be safe for concurrent use.
type PageCache interface {
	Page(off int64, sum uint64) ([]byte, bool)
	AddPage(off int64, sum uint64, b []byte)
}

// NewCachedReader is NewReader with the pages it decodes taken from, and
// given to, pc; nil is no cache. r is read only for pages pc does not
// hold, so a caller can open it lazily.
func (l *SegmentLayout) NewCachedReader(r io.ReaderAt, pc PageCache) (*SegmentReader, error) {
	vr := &verifiedReader{r: r, size: l.size, pinned: l.pidx, pinnedAt: l.pidxAt, pages: l.pages, pc: pc, lazy: true}
	// With the metadata given, NewParquetReader reads nothing.
	f, err := file.NewParquetReader(vr, file.WithReadProps(readProps()), file.WithMetadata(l.md))
	if err != nil {
		return nil, corruptSegment("parquet reader", err)
	}
	return &SegmentReader{x: l.x, f: f, vr: vr, cols: l.cols, rgEnd: l.rgEnd, starts: l.starts, rg: -1}, nil
}

// checkLayout checks that the column chunks tile [4, end) in order, each
// starting with its dictionary page if it has one (label columns), and end
// at or before footerStart, and returns end. openSegment and
// OpenSegmentLayout both rely on it.
func checkLayout(md *metadata.FileMetaData, footerStart int64) (int64, error) {
	next := int64(4)
	for i := 0; i < md.NumRowGroups(); i++ {
		rg := md.RowGroup(i)
		for c := 0; c < rg.NumColumns(); c++ {
			cc, err := rg.ColumnChunk(c)
			if err != nil {
				return 0, corruptSegment("column chunk metadata", err)
			}
			size, usize := cc.TotalCompressedSize(), cc.TotalUncompressedSize()
			start := cc.DataPageOffset()
			if cc.HasDictionaryPage() {
				if d := cc.DictionaryPageOffset(); d < start {
					start = d
				} else {
					start = -1
				}
			}
			if start != next || size <= 0 || size > footerStart-next || cc.DataPageOffset() >= next+size ||
				usize < 0 || usize > 256*size+1<<16 || cc.NumValues() != rg.NumRows() {
				return 0, corruptSegment(fmt.Sprintf("row group %d column %d: chunk layout", i, c), nil)
			}
			next += size
		}
	}
	return next, nil
}

// verifiedReader is the io.ReaderAt the Parquet reader of a SegmentReader
// reads through. The bytes of a page of a paged column are handed out
// only from a copy whose checksum matched the index's; the page index
// region, checked when the layout was made, from memory; anything else
// (the footer, pages of columns never decoded) passes through.
type verifiedReader struct {
	r        io.ReaderAt
	size     int64
	pinned   []byte // the verified page index (the layout's: read only)
	pinnedAt int64
	pages    []pageLoc      // the layout's: sorted by off, disjoint; read only
	data     map[int][]byte // pages[k]'s bytes once read and verified
	pc       PageCache      // nil: none
	pos      int64          // for Seek
	// lazy: a read that reaches a page not read yet, after bytes of
	// another, stops there (see ReadAt).
	lazy bool
}

// Seek is what the Parquet reader asks of a source besides ReadAt: where
// it ends.
func (v *verifiedReader) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
		v.pos = offset
	case io.SeekCurrent:
		v.pos += offset
	case io.SeekEnd:
		v.pos = v.size + offset
	}
	if v.pos < 0 {
		return 0, fmt.Errorf("promsample: seek to %d", v.pos)
	}
	return v.pos, nil
}

// ReadAt reads len(p) bytes at off, as io.ReaderAt does, except that a
// lazy reader returns fewer, and no error, when the read reaches a page
// of a paged column that it has not read yet after it copied bytes of
// another: the Parquet reader reads a column chunk through a buffer of
// 16 KiB (io.SectionReader.Read, then its own bufio-like reader, both
// io.Reader: a short read is a read), and refilling it after a page's
// body read ahead into the next page. That page is read whole and
// checked, ~29 KB at 4,096 rows, for nothing when the series asked for
// ends before it: a one-series read of a segment read two value pages
// where it needed one. Nothing reads a lazy reader but that buffer
// (NewCachedReader).
func (v *verifiedReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= v.size {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) {
		at := off + int64(n)
		if at >= v.size {
			return n, io.EOF
		}
		if v.pinned != nil && at >= v.pinnedAt && at < v.pinnedAt+int64(len(v.pinned)) {
			n += copy(p[n:], v.pinned[at-v.pinnedAt:])
			continue
		}
		k := sort.Search(len(v.pages), func(i int) bool { return v.pages[i].end > at })
		if k < len(v.pages) && v.pages[k].off <= at {
			pg := &v.pages[k]
			data, ok := v.data[k]
			if !ok {
				if v.lazy && n > 0 {
					return n, nil
				}
				var err error
				if data, err = v.page(pg); err != nil {
					return n, err
				}
				if v.data == nil {
					v.data = map[int][]byte{}
				}
				v.data[k] = data
			}
			n += copy(p[n:], data[at-pg.off:])
			continue
		}
		// Up to the next registered page or the pinned region.
		stop := off + int64(len(p))
		if k < len(v.pages) && v.pages[k].off < stop {
			stop = v.pages[k].off
		}
		if v.pinned != nil && v.pinnedAt > at && v.pinnedAt < stop {
			stop = v.pinnedAt
		}
		stop = min(stop, v.size)
		m, err := v.r.ReadAt(p[n:n+int(stop-at)], at)
		n += m
		if err != nil && !(err == io.EOF && n == len(p)) {
			return n, err
		}
	}
	return n, nil
}

// page returns pg's bytes, verified: from the page cache or read and
// checked against the index's checksum (then offered to the cache).
func (v *verifiedReader) page(pg *pageLoc) ([]byte, error) {
	if v.pc != nil {
		// The cache's bytes were verified against pg.sum when they were
		// added, and it hands out only what was added under pg.sum.
		if b, hit := v.pc.Page(pg.off, pg.sum); hit && int64(len(b)) == pg.end-pg.off {
			return b, nil
		}
	}
	data := make([]byte, pg.end-pg.off)
	if _, err := v.r.ReadAt(data, pg.off); err != nil {
		return nil, err
	}
	if xxhash.Sum64(data) != pg.sum {
		return nil, corruptSegment(fmt.Sprintf("page at %d: checksum", pg.off), nil)
	}
	if v.pc != nil {
		v.pc.AddPage(pg.off, pg.sum, data)
	}
	return data, nil
}
