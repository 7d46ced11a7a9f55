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

// SegmentReader reads chosen series of one segment through an io.ReaderAt,
// decoding only the pages that hold their rows. It needs the segment's
// catalog index (format 2: the series table says where a series' rows
// are, the page checksums let it verify what it decodes) and reads the
// footer, the page index and those pages, nothing else: a one-series read
// of a large segment costs a few pages per column, not the segment.
//
// Every page it decodes is first checked against the index's checksum
// (verifiedReader), as ReadSegment checks the whole data region: the
// Parquet decoder can loop forever on some corrupt pages. The footer is
// parsed as ReadSegment parses it, and the page index only once its
// checksum matched.
//
// A SegmentReader is not safe for concurrent use, and reads through r
// only while its caller says r is valid (a BLOB reader lives for one
// archive snapshot).
type SegmentReader struct {
	x      *Index
	f      *file.Reader
	vr     *verifiedReader
	cols   *segmentColumns
	paged  []int   // schema indexes of PagedColumns
	rgEnd  []int64 // end row of each row group
	starts []int64 // the series table's row starts
	// per row group, the readers of the paged columns, made on first use
	rg   int
	ts   *file.Int64ColumnChunkReader
	val  *file.Float64ColumnChunkReader
	ival *file.Int64ColumnChunkReader
	div  *file.Float64ColumnChunkReader
	hist *file.ByteArrayColumnChunkReader
	bufs rowGroupReader
	// rowAt: per decoded row, the index of its value in the dense slice of
	// its kind (tagged) and of its divisor (-1: none); rowBase is the
	// first decoded row's index in the row group.
	rowAt   [][2]int32
	rowBase int64
}

// NewSegmentReader opens the segment of size bytes that r reads, whose
// catalog index is x. It refuses an index without a series table (one
// written before format 2: read such a segment with ReadSegment) with
// ErrUnsupportedVersion. Errors match ErrCorruptSegment otherwise.
func NewSegmentReader(r io.ReaderAt, size int64, x *Index) (_ *SegmentReader, err error) {
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
	vr := &verifiedReader{r: r, size: size}
	f, err := file.NewParquetReader(vr, file.WithReadProps(&parquet.ReaderProperties{
		BufferedStreamEnabled: true, BufferSize: 16 << 10}))
	if err != nil {
		return nil, corruptSegment("parquet footer", err)
	}
	md := f.MetaData()
	kv := map[string]string{}
	for _, k := range md.KeyValueMetadata() {
		if k.Value != nil {
			kv[k.Key] = *k.Value
		}
	}
	if v := kv[KeyEncoder]; v != EncoderVersion {
		return nil, fmt.Errorf("%w: segment encoder %q, reading %q", ErrUnsupportedVersion, v, EncoderVersion)
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
	// The page index is verified: serve it from memory from now on.
	vr.pinned, vr.pinnedAt = pidx, chunksEnd
	sr := &SegmentReader{x: x, f: f, vr: vr, rg: -1, starts: x.Table.RowStarts()}
	var end int64
	for i, g := range x.RowGroups {
		if n := f.RowGroup(i).NumRows(); n != g.Rows || n > MaxRowGroupRows || n < 0 {
			return nil, corruptSegment(fmt.Sprintf("row group %d has %d rows (index: %d, max %d)", i, n, g.Rows, MaxRowGroupRows), nil)
		}
		end += g.Rows
		sr.rgEnd = append(sr.rgEnd, end)
	}
	if sr.starts[len(sr.starts)-1] != end {
		return nil, corruptSegment(fmt.Sprintf("series table holds %d rows, the file %d", sr.starts[len(sr.starts)-1], end), nil)
	}
	if sr.cols, err = (&segmentFile{r: f}).columns(); err != nil {
		return nil, err
	}
	if sr.paged, err = pagedColumnIndexes(md.Schema); err != nil {
		return nil, err
	}
	return sr, nil
}

// checkLayout checks that the column chunks tile [4, end) in order and end
// at or before footerStart, as openSegment does, and returns end.
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

// Index returns the index the reader was opened with.
func (sr *SegmentReader) Index() *Index { return sr.x }

// SeriesRows returns the rows [from, to) series i of the index's table
// occupies.
func (sr *SegmentReader) SeriesRows(i int) (from, to int64) { return sr.starts[i], sr.starts[i+1] }

// ReadSeries reads series i of the index's table (its float samples and
// histograms; exemplars live in the footer, see ReadSegment) and appends
// those in [mint, maxt] (Unix ms, inclusive) to s. Series must be read in
// ascending i for the column readers to move forward only.
func (sr *SegmentReader) ReadSeries(i int, mint, maxt int64, s *Series) (err error) {
	defer recoverCorrupt(&err)
	if i < 0 || i >= len(sr.starts)-1 {
		return fmt.Errorf("promsample: series %d of %d", i, len(sr.starts)-1)
	}
	from, to := sr.starts[i], sr.starts[i+1]
	for from < to {
		g := sort.Search(len(sr.rgEnd), func(k int) bool { return sr.rgEnd[k] > from })
		if g == len(sr.rgEnd) {
			return corruptSegment("series rows beyond the last row group", nil)
		}
		if err := sr.openRowGroup(g); err != nil {
			return err
		}
		rgStart := sr.rgEnd[g] - sr.x.RowGroups[g].Rows
		end := min(to, sr.rgEnd[g])
		if err := sr.readRows(from-rgStart, end-from, mint, maxt, s); err != nil {
			return fmt.Errorf("row group %d: %w", g, err)
		}
		from = end
	}
	return nil
}

// openRowGroup makes the column readers of row group g.
func (sr *SegmentReader) openRowGroup(g int) error {
	if sr.rg == g {
		return nil
	}
	sr.rg = g
	if err := sr.vr.addPages(sr.f, g, sr.paged, sr.x.PageSums[g*len(PagedColumns):(g+1)*len(PagedColumns)]); err != nil {
		return err
	}
	rg := sr.f.RowGroup(g)
	var err error
	if sr.ts, err = columnReader[*file.Int64ColumnChunkReader](rg, sr.cols.ts); err != nil {
		return err
	}
	if sr.val, err = columnReader[*file.Float64ColumnChunkReader](rg, sr.cols.value); err != nil {
		return err
	}
	if sr.ival, err = columnReader[*file.Int64ColumnChunkReader](rg, sr.cols.ival); err != nil {
		return err
	}
	if sr.div, err = columnReader[*file.Float64ColumnChunkReader](rg, sr.cols.div); err != nil {
		return err
	}
	sr.hist, err = columnReader[*file.ByteArrayColumnChunkReader](rg, sr.cols.hist)
	return err
}

// ReadRun reads the series ords (ascending positions in the index's
// table) in one pass over the rows from the first's to the last's, and
// calls fn with each one's samples and histograms in [mint, maxt]: a read
// of many series of one metric reads each page once, where ReadSeries per
// series would seek for every one. The rows between them are decoded and
// skipped, so ords should be dense; fn's Series is reused (copy what is
// kept) and its Labels unset.
func (sr *SegmentReader) ReadRun(ords []int, mint, maxt int64, fn func(ord int, s *Series) error) (err error) {
	defer recoverCorrupt(&err)
	if len(ords) == 0 {
		return nil
	}
	for _, o := range ords {
		if o < 0 || o >= len(sr.starts)-1 {
			return fmt.Errorf("promsample: series %d of %d", o, len(sr.starts)-1)
		}
	}
	from, to := sr.starts[ords[0]], sr.starts[ords[len(ords)-1]+1]
	var cur Series
	k := 0
	for pos := from; pos < to; {
		g := sort.Search(len(sr.rgEnd), func(i int) bool { return sr.rgEnd[i] > pos })
		if g == len(sr.rgEnd) {
			return corruptSegment("series rows beyond the last row group", nil)
		}
		if err := sr.openRowGroup(g); err != nil {
			return err
		}
		rgStart := sr.rgEnd[g] - sr.x.RowGroups[g].Rows
		end := min(to, sr.rgEnd[g])
		if err := sr.decodeRows(pos-rgStart, end-pos); err != nil {
			return fmt.Errorf("row group %d: %w", g, err)
		}
		for k < len(ords) {
			o := ords[k]
			a, b := sr.starts[o], sr.starts[o+1]
			if a >= end {
				break
			}
			if err := sr.emit(int(max(a, pos)-pos), int(min(b, end)-pos), mint, maxt, &cur); err != nil {
				return err
			}
			if b > end {
				break // goes on in the next row group
			}
			if err := fn(o, &cur); err != nil {
				return err
			}
			cur.Samples, cur.Histograms = cur.Samples[:0], cur.Histograms[:0]
			k++
		}
		pos = end
	}
	return nil
}

// readRows reads rows [row, row+n) of the open row group.
func (sr *SegmentReader) readRows(row, n, mint, maxt int64, s *Series) error {
	if err := sr.decodeRows(row, n); err != nil {
		return err
	}
	return sr.emit(0, int(n), mint, maxt, s)
}

// decodeRows reads rows [row, row+n) of the open row group into the
// reader's buffers and resolves where each row's value is (rowAt).
func (sr *SegmentReader) decodeRows(row, n int64) error {
	rr := &sr.bufs
	var err error
	if rr.ts, rr.def, err = seekRead(sr.ts, row, n, rr.ts, rr.def); err != nil {
		return err
	}
	if rr.vals, rr.fdef, err = seekRead(sr.val, row, n, rr.vals, rr.fdef); err != nil {
		return err
	}
	if rr.ints, rr.idef, err = seekRead(sr.ival, row, n, rr.ints, rr.idef); err != nil {
		return err
	}
	if rr.divs, rr.ddef, err = seekRead(sr.div, row, n, rr.divs, rr.ddef); err != nil {
		return err
	}
	if rr.ba, rr.hdef, err = seekRead(sr.hist, row, n, rr.ba, rr.hdef); err != nil {
		return err
	}
	// Each row's position in the dense value slice of its kind.
	sr.rowAt = grow(sr.rowAt, n)
	vi, ii, di, hi := 0, 0, 0, 0
	for r := 0; r < int(n); r++ {
		switch {
		case rr.fdef[r] == 1:
			if vi >= len(rr.vals) {
				return corruptSegment("fewer values than rows", nil)
			}
			sr.rowAt[r] = [2]int32{int32(vi), -1}
			vi++
		case rr.idef[r] == 1:
			if ii >= len(rr.ints) {
				return corruptSegment("fewer values than rows", nil)
			}
			d := int32(-1)
			if rr.ddef[r] == 1 {
				if di >= len(rr.divs) {
					return corruptSegment("fewer divisors than rows", nil)
				}
				d = int32(di)
				di++
			}
			sr.rowAt[r] = [2]int32{int32(ii) | intTag, d}
			ii++
		case rr.hdef[r] == 1:
			if hi >= len(rr.ba) {
				return corruptSegment("fewer histograms than rows", nil)
			}
			sr.rowAt[r] = [2]int32{int32(hi) | histTag, -1}
			hi++
		default:
			return corruptSegment(fmt.Sprintf("row %d has no value", row+int64(r)), nil)
		}
	}
	sr.rowBase = row
	return nil
}

// Tags of rowAt's first element: which dense slice the row's value is in.
const (
	intTag  = 1 << 29
	histTag = 1 << 30
	tagMask = intTag | histTag
)

// emit appends rows [lo, hi) of the decoded rows in [mint, maxt] to s.
func (sr *SegmentReader) emit(lo, hi int, mint, maxt int64, s *Series) error {
	rr := &sr.bufs
	for r := lo; r < hi; r++ {
		t := rr.ts[r]
		if t < mint || t > maxt {
			continue
		}
		at := sr.rowAt[r]
		i := int(at[0] &^ tagMask)
		switch at[0] & tagMask {
		case 0:
			s.Samples = append(s.Samples, Sample{T: t, V: rr.vals[i]})
		case intTag:
			v := float64(rr.ints[i])
			if at[1] >= 0 {
				v /= rr.divs[at[1]]
			}
			s.Samples = append(s.Samples, Sample{T: t, V: v})
		default:
			hr := reader{b: rr.ba[i]}
			h := hr.histogram(t)
			if hr.err == nil && hr.left() != 0 {
				hr.fail("trailing histogram bytes")
			}
			if hr.err != nil {
				return corruptSegment(fmt.Sprintf("histogram at row %d", sr.rowBase+int64(r)), hr.err)
			}
			s.Histograms = append(s.Histograms, h)
		}
	}
	return nil
}

// seekRead reads rows [row, row+n) of a column chunk: the reader seeks
// with the offset index, so it decodes from the page holding row on.
func seekRead[V any, R interface {
	valueReader[V]
	SeekToRow(int64) error
}](cr R, row, n int64, vals []V, def []int16) ([]V, []int16, error) {
	if err := cr.SeekToRow(row); err != nil {
		return vals, def, corruptSegment("seek", err)
	}
	vals, def = grow(vals, n), grow(def, n)
	nv, err := readLoop(n, func(lo int64, vo int) (int64, int, error) {
		return cr.ReadBatch(n-lo, vals[vo:], def[lo:], nil)
	})
	if cr.Descriptor().MaxDefinitionLevel() == 0 {
		for i := range def {
			def[i] = 1
		}
	}
	return vals[:nv], def, err
}

// verifiedReader is the io.ReaderAt the Parquet reader of a SegmentReader
// reads through. The bytes of a registered page are handed out only from a
// copy whose checksum matched the index's; the page index region, checked
// at open, from memory; anything else (the footer, pages of columns never
// decoded) passes through.
type verifiedReader struct {
	r        io.ReaderAt
	size     int64
	pinned   []byte // the verified page index
	pinnedAt int64
	pages    []verifiedPage // sorted by off, disjoint
	pos      int64          // for Seek
}

type verifiedPage struct {
	off, end int64
	sum      uint64
	data     []byte // nil until read and verified
}

// addPages registers the pages of row group g's paged columns (cols, their
// checksums sums) from the offset index.
func (v *verifiedReader) addPages(f *file.Reader, g int, cols []int, sums [][]uint64) error {
	rgi, err := f.GetPageIndexReader().RowGroup(g)
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
			if loc.Offset < 4 || end > v.size || end <= loc.Offset {
				return corruptSegment(fmt.Sprintf("page location %d+%d out of range", loc.Offset, loc.CompressedPageSize), nil)
			}
			v.pages = append(v.pages, verifiedPage{off: loc.Offset, end: end, sum: sums[k][i]})
		}
	}
	slices.SortFunc(v.pages, func(a, b verifiedPage) int { return int(a.off - b.off) })
	v.pages = slices.CompactFunc(v.pages, func(a, b verifiedPage) bool { return a.off == b.off && a.end == b.end })
	for i := 1; i < len(v.pages); i++ {
		if v.pages[i].off < v.pages[i-1].end {
			return corruptSegment("overlapping pages", nil)
		}
	}
	return nil
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
			if pg.data == nil {
				b := make([]byte, pg.end-pg.off)
				if _, err := v.r.ReadAt(b, pg.off); err != nil {
					return n, err
				}
				if xxhash.Sum64(b) != pg.sum {
					return n, corruptSegment(fmt.Sprintf("page at %d: checksum", pg.off), nil)
				}
				pg.data = b
			}
			n += copy(p[n:], pg.data[at-pg.off:])
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

// segment is in memory.
