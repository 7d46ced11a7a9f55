package promsample

import (
	"fmt"
	"io"
	"sort"

	"github.com/apache/arrow-go/v18/parquet/file"
)

// SegmentReader reads chosen series of one segment through an io.ReaderAt,
// decoding only the pages that hold their rows. It needs the segment's
// catalog index (format 2: the series table says where a series' rows
// are, the page checksums let it verify what it decodes) and its layout
// (SegmentLayout: the footer and the page index, read once) and reads
// those pages, nothing else: a one-series read of a large segment costs a
// few pages per column, not the segment.
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
	rgEnd  []int64   // end row of each row group (the layout's)
	starts rowStarts // the series table's row starts (the layout's)
	// per row group, the readers of the paged columns, made on first use
	rg   int
	rgr  *file.RowGroupReader
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
// catalog index is x: OpenSegmentLayout, then its NewReader. It refuses an
// index without a series table (one written before format 2: read such a
// segment with ReadSegment) with ErrUnsupportedVersion. Errors match
// ErrCorruptSegment otherwise.
func NewSegmentReader(r io.ReaderAt, size int64, x *Index) (*SegmentReader, error) {
	l, err := OpenSegmentLayout(r, size, x)
	if err != nil {
		return nil, err
	}
	return l.NewReader(r)
}

// Index returns the index the reader was opened with.
func (sr *SegmentReader) Index() *Index { return sr.x }

// SeriesRows returns the rows [from, to) series i of the index's table
// occupies.
func (sr *SegmentReader) SeriesRows(i int) (from, to int64) { return sr.starts.span(i) }

// ReadSeries reads series i of the index's table (its float samples and
// histograms; exemplars live in the footer, see ReadSegment) and appends
// those in [mint, maxt] (Unix ms, inclusive) to s. Series must be read in
// ascending i for the column readers to move forward only.
func (sr *SegmentReader) ReadSeries(i int, mint, maxt int64, s *Series) (err error) {
	defer recoverCorrupt(&err)
	if i < 0 || i >= sr.starts.series() {
		return fmt.Errorf("promsample: series %d of %d", i, sr.starts.series())
	}
	from, to := sr.starts.span(i)
	for from < to {
		g := sort.Search(len(sr.rgEnd), func(k int) bool { return sr.rgEnd[k] > from })
		if g == len(sr.rgEnd) {
			return corruptSegment("series rows beyond the last row group", nil)
		}
		sr.openRowGroup(g)
		rgStart := sr.rgEnd[g] - sr.x.RowGroups[g].Rows
		end := min(to, sr.rgEnd[g])
		if err := sr.readRows(from-rgStart, end-from, mint, maxt, s); err != nil {
			return fmt.Errorf("row group %d: %w", g, err)
		}
		from = end
	}
	return nil
}

// openRowGroup makes row group g the one read. Its column readers are
// made on first use (column): a float series never needs the integer,
// divisor and histogram readers, and each reader costs ~32 KiB of
// buffers to make (at a million series, once its pages were cached,
// making all five was a sixth of a warm one-series query_range's CPU).
func (sr *SegmentReader) openRowGroup(g int) {
	if sr.rg != g {
		sr.rg, sr.rgr = g, sr.f.RowGroup(g)
		sr.ts, sr.val, sr.ival, sr.div, sr.hist = nil, nil, nil, nil, nil
	}
}

// column returns *c, the reader of column col of the open row group,
// making it first if need be.
func column[R comparable](sr *SegmentReader, c *R, col int) (R, error) {
	var zero R
	if *c != zero {
		return *c, nil
	}
	r, err := columnReader[R](sr.rgr, col)
	if err != nil {
		return zero, err
	}
	*c = r
	return r, nil
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
		if o < 0 || o >= sr.starts.series() {
			return fmt.Errorf("promsample: series %d of %d", o, sr.starts.series())
		}
	}
	from := sr.starts.at(ords[0])
	_, to := sr.starts.span(ords[len(ords)-1])
	var cur Series
	k := 0
	for pos := from; pos < to; {
		g := sort.Search(len(sr.rgEnd), func(i int) bool { return sr.rgEnd[i] > pos })
		if g == len(sr.rgEnd) {
			return corruptSegment("series rows beyond the last row group", nil)
		}
		sr.openRowGroup(g)
		rgStart := sr.rgEnd[g] - sr.x.RowGroups[g].Rows
		end := min(to, sr.rgEnd[g])
		if err := sr.decodeRows(pos-rgStart, end-pos); err != nil {
			return fmt.Errorf("row group %d: %w", g, err)
		}
		for k < len(ords) {
			o := ords[k]
			a, b := sr.starts.span(o)
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
	ts, err := column(sr, &sr.ts, sr.cols.ts)
	if err != nil {
		return err
	}
	if rr.ts, rr.def, err = seekRead(ts, row, n, rr.ts, rr.def); err != nil {
		return err
	}
	val, err := column(sr, &sr.val, sr.cols.value)
	if err != nil {
		return err
	}
	if rr.vals, rr.fdef, err = seekRead(val, row, n, rr.vals, rr.fdef); err != nil {
		return err
	}
	// A row holds exactly one kind of value: a float, an integer (with its
	// divisor, null when 1) or a histogram. A column no row here can use
	// is not read: its chunk lies further into the segment, and a read at
	// an offset of a segment BLOB walks the overflow chain up to it
	// (archive.SegmentBlob), so a float series' read stops at __value__
	// instead of walking on to __hist__ near the end of the row group.
	// decodeRows then sees those rows' definition levels as null.
	if floats := countDefined(rr.fdef[:n]); floats < int(n) {
		ival, err := column(sr, &sr.ival, sr.cols.ival)
		if err != nil {
			return err
		}
		if rr.ints, rr.idef, err = seekRead(ival, row, n, rr.ints, rr.idef); err != nil {
			return err
		}
		if countDefined(rr.idef[:n]) > 0 {
			div, err := column(sr, &sr.div, sr.cols.div)
			if err != nil {
				return err
			}
			if rr.divs, rr.ddef, err = seekRead(div, row, n, rr.divs, rr.ddef); err != nil {
				return err
			}
		} else {
			rr.divs, rr.ddef = rr.divs[:0], nulls(rr.ddef, n)
		}
		if floats+countDefined(rr.idef[:n]) < int(n) {
			hist, err := column(sr, &sr.hist, sr.cols.hist)
			if err != nil {
				return err
			}
			if rr.ba, rr.hdef, err = seekRead(hist, row, n, rr.ba, rr.hdef); err != nil {
				return err
			}
		} else {
			rr.ba, rr.hdef = rr.ba[:0], nulls(rr.hdef, n)
		}
	} else {
		rr.ints, rr.idef = rr.ints[:0], nulls(rr.idef, n)
		rr.divs, rr.ddef = rr.divs[:0], nulls(rr.ddef, n)
		rr.ba, rr.hdef = rr.ba[:0], nulls(rr.hdef, n)
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

// countDefined counts the non-null entries of definition levels def.
func countDefined(def []int16) int {
	n := 0
	for _, d := range def {
		if d == 1 {
			n++
		}
	}
	return n
}

// nulls returns def grown to n and all null (level 0).
func nulls(def []int16, n int64) []int16 {
	def = grow(def, n)
	clear(def)
	return def
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

// segment is in memory.
