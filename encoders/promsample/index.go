package promsample

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
)

// Index is a segment's index: the archive stores it as the segment's
// caller_index (Segment.Index), and the segment's Parquet footer carries
// the same bytes under KeySegmentIndex, so a reader plans from either the
// catalog (without fetching the BLOB) or the BLOB alone.
type Index struct {
	// MinT and MaxT are the sample-time span (Unix ms, inclusive) of every
	// float sample, histogram and exemplar in the segment. When the segment
	// holds none (metadata only), MinT > MaxT.
	MinT, MaxT int64
	Samples    int64 // float samples
	Histograms int64 // histogram samples
	Exemplars  int64
	Series     int64
	// Metrics are the metric names present, sorted; Parquet rows are
	// sorted by metric name first, so each row group covers a contiguous
	// run of them.
	Metrics   []string
	RowGroups []RowGroupInfo
	// Table lists the segment's series (format-2 indexes, the catalog's;
	// nil in a format-1 index, which segments written before it and every
	// segment footer carry).
	Table *SeriesTable
	// PageIndexSum is the xxhash64 of the segment's page index (the bytes
	// between its last column chunk and its footer), which the footer's
	// data checksum does not cover (format 2 only). A reader that seeks
	// with the page index checks it first.
	PageIndexSum uint64
	// PageSums are the xxhash64 of every page of the paged columns
	// (PagedColumns), per row group and column, in the order of the
	// offset index (format 2 only): a reader that decodes a few pages
	// cannot check the footer's checksum of them all, and checks these.
	PageSums [][]uint64 // [rowGroup*len(PagedColumns)+column][page]
}

// PagedColumns are the columns a read of a few series decodes: their
// pages start at series boundaries and the segment has their offset index.
var PagedColumns = [...]string{ColTimestamp, ColValue, ColInt, ColDiv, ColHist}

// RowGroupInfo describes one Parquet row group.
type RowGroupInfo struct {
	Rows        int64
	Series      int64
	MinT, MaxT  int64 // sample-time span of its rows, Unix ms inclusive
	FirstMetric int   // index into Index.Metrics of its first row's metric
	LastMetric  int   // ... and of its last row's
}

// Overlaps reports whether the segment may hold samples in [mint, maxt]
// (Unix ms, inclusive).
func (x *Index) Overlaps(mint, maxt int64) bool { return x.MinT <= maxt && x.MaxT >= mint }

// MetricsOf returns the metric names row group i covers.
func (x *Index) MetricsOf(i int) []string {
	g := x.RowGroups[i]
	return x.Metrics[g.FirstMetric : g.LastMetric+1]
}

const (
	indexFormatV1 = 1
	indexFormatV2 = 2 // format 1 and the series table
)

// AppendBinary appends the index's encoding to b: format 2 when it has a
// series table, else format 1.
func (x *Index) AppendBinary(b []byte) ([]byte, error) {
	if x.Table != nil {
		b = append(b, indexFormatV2)
	} else {
		b = append(b, indexFormatV1)
	}
	b = binary.AppendVarint(b, x.MinT)
	b = binary.AppendVarint(b, x.MaxT)
	b = binary.AppendUvarint(b, uint64(x.Samples))
	b = binary.AppendUvarint(b, uint64(x.Histograms))
	b = binary.AppendUvarint(b, uint64(x.Exemplars))
	b = binary.AppendUvarint(b, uint64(x.Series))
	b = binary.AppendUvarint(b, uint64(len(x.Metrics)))
	for _, m := range x.Metrics {
		b = binary.AppendUvarint(b, uint64(len(m)))
		b = append(b, m...)
	}
	b = binary.AppendUvarint(b, uint64(len(x.RowGroups)))
	for _, g := range x.RowGroups {
		b = binary.AppendUvarint(b, uint64(g.Rows))
		b = binary.AppendUvarint(b, uint64(g.Series))
		b = binary.AppendVarint(b, g.MinT)
		b = binary.AppendVarint(b, g.MaxT)
		b = binary.AppendUvarint(b, uint64(g.FirstMetric))
		b = binary.AppendUvarint(b, uint64(g.LastMetric-g.FirstMetric))
	}
	if x.Table != nil {
		b = binary.LittleEndian.AppendUint64(b, x.PageIndexSum)
		b = binary.AppendUvarint(b, uint64(len(x.PageSums)))
		for _, sums := range x.PageSums {
			b = binary.AppendUvarint(b, uint64(len(sums)))
			for _, v := range sums {
				b = binary.LittleEndian.AppendUint64(b, v)
			}
		}
		b = x.Table.appendBinary(b)
	}
	return b, nil
}

// encodedLen is len(AppendBinary(nil)): the writer sizes the index's
// buffer once (grown by appends, copying it was a tenth of a seal's CPU).
func (x *Index) encodedLen() int {
	n := 1 + varintLen(x.MinT) + varintLen(x.MaxT) + uvarintLen(uint64(x.Samples)) + uvarintLen(uint64(x.Histograms)) +
		uvarintLen(uint64(x.Exemplars)) + uvarintLen(uint64(x.Series)) + uvarintLen(uint64(len(x.Metrics)))
	for _, m := range x.Metrics {
		n += uvarintLen(uint64(len(m))) + len(m)
	}
	n += uvarintLen(uint64(len(x.RowGroups)))
	for _, g := range x.RowGroups {
		n += uvarintLen(uint64(g.Rows)) + uvarintLen(uint64(g.Series)) + varintLen(g.MinT) + varintLen(g.MaxT) +
			uvarintLen(uint64(g.FirstMetric)) + uvarintLen(uint64(g.LastMetric-g.FirstMetric))
	}
	if x.Table != nil {
		n += 8 + uvarintLen(uint64(len(x.PageSums)))
		for _, sums := range x.PageSums {
			n += uvarintLen(uint64(len(sums))) + 8*len(sums)
		}
		n += x.Table.encodedLen()
	}
	return n
}

// uvarintLen is len(binary.AppendUvarint(nil, v)).
func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

// varintLen is len(binary.AppendVarint(nil, v)).
func varintLen(v int64) int { return uvarintLen(uint64(v<<1) ^ uint64(v>>63)) }

// Summary returns the index without its series table: what a segment's
// footer carries (format 1), small enough to parse on every open.
func (x *Index) Summary() Index {
	y := *x
	y.Table, y.PageSums, y.PageIndexSum = nil, nil, 0
	return y
}

// ParseIndex decodes an index written by the Encoder (Segment.Index, or
// the footer's KeySegmentIndex value). Errors match ErrCorruptSegment or
// ErrUnsupportedVersion.
func ParseIndex(b []byte) (Index, error) { return parseIndex(b, true, nil) }

// ParseIndexHashes is ParseIndex for a reader that finds a segment's series
// by SeriesHash alone: the series table it returns holds Rows and Hashes,
// as after DropLabels, and the labels are checked as ParseIndex checks
// them but never built. The same bytes give the same error, or the same
// index less its labels. (Building the labels was most of ParseIndex's
// time on a table of 170 k series, and a reader that caches the table
// drops them at once.)
func ParseIndexHashes(b []byte) (Index, error) { return parseIndex(b, false, nil) }

// ParseIndexFunc is ParseIndexHashes for a reader that also wants each
// series' labels once, as they are parsed, without the table keeping them:
// the series index, rebuilt at open from every segment's table. (Keeping
// them cost that rebuild a sixth of its CPU, most of it zeroing ~10 MB a
// segment of 200 k series that was read once.) fn is called before the
// whole index has been checked: when ParseIndexFunc returns an error, the
// caller discards what fn gathered. A format-1 index never calls it.
func ParseIndexFunc(b []byte, fn SeriesFunc) (Index, error) { return parseIndex(b, false, fn) }

// IndexSpanBytes is how many leading bytes of an encoded index always
// hold its time span: its format byte and two varints.
const IndexSpanBytes = 1 + 2*binary.MaxVarintLen64

// ParseIndexSpan decodes the time span (Index.MinT, Index.MaxT) of an
// encoded index from its first bytes, IndexSpanBytes of them or all of a
// shorter index: a reader can learn a segment's span without reading,
// let alone parsing, its series table. It checks only what it reads, so
// an index ParseIndex refuses may still give a span here; where ParseIndex
// accepts an index, the two agree.
func ParseIndexSpan(head []byte) (minT, maxT int64, err error) {
	if len(head) == 0 {
		return 0, 0, corruptSegment("empty index", nil)
	}
	if head[0] != indexFormatV1 && head[0] != indexFormatV2 {
		return 0, 0, fmt.Errorf("%w: index format %d", ErrUnsupportedVersion, head[0])
	}
	r := reader{b: head[1:]}
	minT, maxT = r.varint(), r.varint()
	if r.err != nil {
		return 0, 0, corruptSegment("index span", r.err)
	}
	return minT, maxT, nil
}

func parseIndex(b []byte, withLabels bool, fn SeriesFunc) (Index, error) {
	x, r, err := parseIndexHead(b)
	if err != nil {
		return Index{}, err
	}
	if b[0] == indexFormatV2 && r.err == nil {
		x.Table = parseSeriesTable(&r, withLabels, fn)
	}
	if r.err == nil && r.left() != 0 {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		return Index{}, corruptSegment("index", r.err)
	}
	return x, nil
}

// parseIndexHead reads what precedes the series table of an encoded
// index, and returns a reader at the table (a format-2 index) or at its
// end. Failures are in the reader's err.
func parseIndexHead(b []byte) (Index, reader, error) {
	if len(b) == 0 {
		return Index{}, reader{}, corruptSegment("empty index", nil)
	}
	if b[0] != indexFormatV1 && b[0] != indexFormatV2 {
		return Index{}, reader{}, fmt.Errorf("%w: index format %d", ErrUnsupportedVersion, b[0])
	}
	r := reader{b: b[1:]}
	var x Index
	x.MinT = r.varint()
	x.MaxT = r.varint()
	x.Samples = r.nonNeg()
	x.Histograms = r.nonNeg()
	x.Exemplars = r.nonNeg()
	x.Series = r.nonNeg()
	if n := r.count(1); n > 0 {
		x.Metrics = make([]string, n)
		for i := range x.Metrics {
			x.Metrics[i] = string(r.bytes(r.count(1)))
		}
	}
	if n := r.count(6); n > 0 {
		x.RowGroups = make([]RowGroupInfo, n)
		for i := range x.RowGroups {
			g := &x.RowGroups[i]
			g.Rows = r.nonNeg()
			g.Series = r.nonNeg()
			g.MinT = r.varint()
			g.MaxT = r.varint()
			first, span := r.uvarint(), r.uvarint()
			if r.err == nil && (first >= uint64(len(x.Metrics)) || span >= uint64(len(x.Metrics))-first) {
				r.fail("row group metric range out of bounds")
			}
			g.FirstMetric, g.LastMetric = int(first), int(first+span)
		}
	}
	if b[0] == indexFormatV2 && r.err == nil {
		x.PageIndexSum = r.u64()
		n := r.count(1)
		if r.err == nil && n != len(x.RowGroups)*len(PagedColumns) {
			r.fail(fmt.Sprintf("page checksums for %d column chunks, want %d", n, len(x.RowGroups)*len(PagedColumns)))
		}
		x.PageSums = make([][]uint64, 0, n)
		for i := 0; i < n && r.err == nil; i++ {
			k := r.count(8)
			sums := make([]uint64, k)
			for j := range sums {
				sums[j] = r.u64()
			}
			x.PageSums = append(x.PageSums, sums)
		}
	}
	return x, r, nil
}

func (r *reader) nonNeg() int64 {
	v := r.uvarint()
	if v > math.MaxInt64 {
		r.fail("count out of range")
		return 0
	}
	return int64(v)
}

// IndexHasTable reports whether an encoded index (Segment.Index) is of a
// format that carries the series table, without parsing it.
func IndexHasTable(b []byte) bool { return len(b) > 0 && b[0] == indexFormatV2 }
