package promsample

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/schema"
	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/prometheus/model/labels"
)

// write encodes series and meta as one segment: the Parquet bytes and the
// index. symbols are the series' strings, sorted, that their pairs and
// names index (collector.finish sets both). sizeHint is the expected
// size of the segment: the output buffer is allocated once at about that
// size instead of doubling its way up (garbage of about the segment's size,
// at the seal's memory peak).
func (e *Encoder) write(c *collector, series []*seriesData, meta []Metadata, sizeHint int) (data, index []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			data, index, err = nil, nil, fmt.Errorf("promsample: parquet writer panicked: %v", p)
		}
	}()
	if c.arena.err != nil {
		return nil, nil, c.arena.err // samples were dropped: no segment
	}
	symbols, arena, isName := c.symbols, &c.arena, c.isName
	// The series table (format 2) first: the series' pairs move into it,
	// and their slabs are garbage before the segment is written.
	var table *SeriesTable
	if !e.Opts.FormatV1 {
		table = newSeriesTable(series, symbols) // before splitLongSeries: one entry a series
	}
	distinct := len(series)
	series = splitLongSeries(series, 4*e.rowGroupRows(), arena)
	sk, err := e.newSink(symbols, arena, isName, dictionaryLabels(series, symbols), meta, sizeHint)
	if err != nil {
		return nil, nil, err
	}
	defer sk.release()
	sk.idx.Series = int64(distinct)
	for _, s := range series {
		if err := sk.add(s); err != nil {
			return nil, nil, err
		}
	}
	// The series are live until the last row group is written (finish's
	// probe counts them; nothing refers to them after it).
	defer runtime.KeepAlive(series)
	return sk.finish(table)
}

// segmentSink writes one segment series by series, in canonical order: it
// cuts row groups as the series arrive and writes each as soon as it is
// cut, so that a caller holding no more than a row group's series at a
// time (a merge that streams its inputs) writes a segment of any size.
// The footer's key-value metadata, which holds the index of every row
// group, is written by finish: Parquet puts it after the pages.
type segmentSink struct {
	e        *Encoder
	symbols  []string
	target   int
	idx      Index
	metricID map[uint32]int
	meta     []Metadata
	extras   []Series // series with exemplars, for the footer
	sb       labels.ScratchBuilder
	// The row group being gathered: its series, rows and summary; last
	// is the name of the series added last.
	cur     []*seriesData
	curRows int
	g       RowGroupInfo
	last    uint32
	buf     bytes.Buffer
	w       *file.Writer
	cw      *columnWriter
}

// newSink starts a segment whose series use symbols, and whose label
// columns are the names isName marks (by rank) other than __name__; dict
// says which are dictionary-encoded (see dictionaryLabels).
func (e *Encoder) newSink(symbols []string, arena *packArena, isName []bool, dict map[string]bool, meta []Metadata, sizeHint int) (*segmentSink, error) {
	// Label columns: the union of label names, sorted (symbols are, and
	// ids are ranks).
	var labelNames []string
	var labelRanks []uint32
	for r, ok := range isName {
		if ok && symbols[r] != labels.MetricName {
			labelNames, labelRanks = append(labelNames, symbols[r]), append(labelRanks, uint32(r))
		}
	}
	var mem memory.Allocator = newWriteAllocator() // dropped with this write
	if e.goAlloc {
		mem = memory.NewGoAllocator()
	}
	root, props, err := segmentSchema(labelNames, dict, mem, !e.Opts.FormatV1)
	if err != nil {
		return nil, err
	}
	sk := &segmentSink{e: e, symbols: symbols, target: e.rowGroupRows(), metricID: map[uint32]int{}, meta: meta,
		idx: Index{MinT: math.MaxInt64, MaxT: math.MinInt64}}
	sk.g = RowGroupInfo{MinT: math.MaxInt64, MaxT: math.MinInt64}
	sk.buf.Grow(min(max(sizeHint, 4<<10), 64<<20))
	// The key-value metadata is appended by finish, in the order a writer
	// given it up front would write it: the file's bytes are the same.
	if sk.w, err = file.NewParquetWriterWithError(&sk.buf, root, file.WithWriterProps(props)); err != nil {
		return nil, err
	}
	sk.cw = e.spare.get()
	sk.cw.opts = &e.Opts
	sk.cw.labelNames, sk.cw.labelRanks, sk.cw.symbols, sk.cw.arena = labelNames, labelRanks, symbols, arena
	return sk, nil
}

// release hands the column buffers back for the next write.
func (sk *segmentSink) release() {
	if sk.cw != nil {
		sk.e.spare.put(sk.cw)
		sk.cw = nil
	}
}

// add appends series s (after every series before it in canonical order,
// and at most 4 row groups' rows: splitLongSeries). The caller counts
// distinct series in idx.Series.
func (sk *segmentSink) add(s *seriesData) error {
	if _, ok := sk.metricID[s.name]; !ok {
		sk.metricID[s.name] = len(sk.idx.Metrics)
		sk.idx.Metrics = append(sk.idx.Metrics, metricName(s, sk.symbols))
	}
	if len(s.exemplars) > 0 {
		sk.extras = append(sk.extras, Series{Labels: s.labels(sk.symbols, &sk.sb), Exemplars: s.exemplars})
	}
	// A group ends at target rows, or at a quarter of it where a metric
	// ends.
	if sk.curRows > 0 && (sk.curRows >= sk.target || (sk.curRows >= sk.target/4 && s.name != sk.last)) {
		if err := sk.flush(); err != nil {
			return err
		}
	}
	sk.cur, sk.last = append(sk.cur, s), s.name
	idx, g := &sk.idx, &sk.g
	n := s.numRows()
	if n == 0 {
		// Exemplars only: no Parquet rows, but keep the index span.
		for _, ex := range s.exemplars {
			idx.MinT, idx.MaxT = min(idx.MinT, ex.T), max(idx.MaxT, ex.T)
		}
		idx.Exemplars += int64(len(s.exemplars))
		return nil
	}
	if sk.curRows == 0 {
		g.FirstMetric = sk.metricID[s.name]
	}
	g.LastMetric = sk.metricID[s.name]
	g.Rows += int64(n)
	g.Series++
	sk.curRows += n
	if lo, hi, ok := s.sampleSpan(sk.cw.arena); ok {
		g.MinT, g.MaxT = min(g.MinT, lo), max(g.MaxT, hi)
	}
	for _, h := range s.hists {
		g.MinT, g.MaxT = min(g.MinT, h.T), max(g.MaxT, h.T)
	}
	idx.MinT, idx.MaxT = min(idx.MinT, g.MinT), max(idx.MaxT, g.MaxT)
	for _, ex := range s.exemplars {
		idx.MinT, idx.MaxT = min(idx.MinT, ex.T), max(idx.MaxT, ex.T)
	}
	idx.Samples += int64(s.numSamples())
	idx.Histograms += int64(len(s.hists))
	idx.Exemplars += int64(len(s.exemplars))
	return nil
}

// flush writes the row group gathered and starts the next.
func (sk *segmentSink) flush() error {
	if err := sk.cw.writeRowGroup(sk.w, sk.cur); err != nil {
		return err
	}
	sk.idx.RowGroups = append(sk.idx.RowGroups, sk.g)
	clear(sk.cur) // written: the series may go
	sk.cur, sk.curRows = sk.cur[:0], 0
	sk.g = RowGroupInfo{MinT: math.MaxInt64, MaxT: math.MinInt64}
	return nil
}

// finish writes the last row group and the footer, and returns the
// segment's bytes and index; table (format 2) is the segment's series.
func (sk *segmentSink) finish(table *SeriesTable) (data, index []byte, err error) {
	e, idx := sk.e, &sk.idx
	if sk.curRows > 0 {
		if err := sk.flush(); err != nil {
			return nil, nil, err
		}
	}
	sk.cur = nil
	e.probeAt("grouped")
	// The samples are written: the arena (and the collector it is part
	// of) is garbage from here, and so are the series, before the page
	// index is read back and the index encoded.
	sk.cw.arena = nil
	// The footer carries the summary (format 1): it is parsed on every
	// open. The catalog's index (format 2) adds the series table and the
	// page index's checksum, once the file is written.
	summary, err := idx.AppendBinary(nil)
	if err != nil {
		return nil, nil, err
	}
	add := func(k, v string) {
		if err == nil {
			err = sk.w.AppendKeyValueMetadata(k, v)
		}
	}
	add(KeyEncoder, EncoderVersion)
	if idx.MinT <= idx.MaxT {
		add(KeyMinTime, strconv.FormatInt(idx.MinT, 10))
		add(KeyMaxTime, strconv.FormatInt(idx.MaxT, 10))
	}
	add(KeySegmentIndex, base64.StdEncoding.EncodeToString(summary))
	if len(sk.extras) > 0 || len(sk.meta) > 0 {
		eb, encErr := EncodeBatch(&Batch{Series: sk.extras, Metadata: sk.meta})
		if encErr != nil {
			return nil, nil, encErr
		}
		add(KeyExtras, base64.StdEncoding.EncodeToString(eb))
	}
	// The data region (magic and every page) is checksummed in the footer:
	// the reader verifies it before any page is decoded, because the
	// Parquet decoder can loop forever on some corrupt pages.
	dataEnd := sk.buf.Len()
	add(KeyDataChecksum, strconv.FormatUint(xxhash.Sum64(sk.buf.Bytes()), 16))
	if err != nil {
		return nil, nil, err
	}
	if err := sk.w.Close(); err != nil {
		return nil, nil, err
	}
	e.probeAt("written")
	// Close wrote the page index between the data region and the footer;
	// the footer's checksum cannot cover it, the catalog's index does.
	out := sk.buf.Bytes()
	if e.Opts.FormatV1 {
		return out, summary, nil
	}
	footerStart := len(out) - 8 - int(binary.LittleEndian.Uint32(out[len(out)-8:]))
	idx.Table = table
	idx.PageIndexSum = xxhash.Sum64(out[dataEnd:footerStart])
	if idx.PageSums, err = pageSums(out); err != nil {
		return nil, nil, err
	}
	if index, err = idx.AppendBinary(make([]byte, 0, idx.encodedLen())); err != nil {
		return nil, nil, err
	}
	e.probeAt("indexed")
	return out, index, nil
}

// splitLongSeries cuts every series with more than maxRows rows into
// consecutive pieces by time; exemplars stay with the first piece.
func splitLongSeries(series []*seriesData, maxRows int, a *packArena) []*seriesData {
	long := false
	for _, s := range series {
		if s.numRows() > maxRows {
			long = true
			break
		}
	}
	if !long {
		return series
	}
	var out []*seriesData
	for _, s := range series {
		if s.numRows() <= maxRows {
			out = append(out, s)
			continue
		}
		s.unpack(a) // rare (a series longer than four row groups): cut it as a []Sample
		i, j := 0, 0
		first := true
		for i < len(s.samples) || j < len(s.hists) {
			p := &seriesData{name: s.name, pairs: s.pairs}
			if first {
				p.exemplars, first = s.exemplars, false
			}
			i0, j0 := i, j
			for n := 0; n < maxRows && (i < len(s.samples) || j < len(s.hists)); n++ {
				if j >= len(s.hists) || (i < len(s.samples) && s.samples[i].T <= s.hists[j].T) {
					i++
				} else {
					j++
				}
			}
			p.samples, p.hists = s.samples[i0:i:i], s.hists[j0:j:j]
			out = append(out, p)
		}
	}
	return out
}

// pageSums reads back the offset index of a segment just written and
// returns the checksum of every page of the PagedColumns.
func pageSums(seg []byte) ([][]uint64, error) {
	r, err := file.NewParquetReader(bytes.NewReader(seg))
	if err != nil {
		return nil, err
	}
	cols, err := pagedColumnIndexes(r.MetaData().Schema)
	if err != nil {
		return nil, err
	}
	pir := r.GetPageIndexReader()
	var out [][]uint64
	for g := 0; g < r.NumRowGroups(); g++ {
		rgi, err := pir.RowGroup(g)
		if err != nil {
			return nil, err
		}
		for _, c := range cols {
			oi, err := rgi.GetOffsetIndex(c)
			if err != nil || oi == nil {
				return nil, fmt.Errorf("promsample: no offset index for row group %d column %d: %v", g, c, err)
			}
			var sums []uint64
			for _, loc := range oi.GetPageLocations() {
				end := loc.Offset + int64(loc.CompressedPageSize)
				if loc.Offset < 0 || end > int64(len(seg)) || end < loc.Offset {
					return nil, fmt.Errorf("promsample: page location %d+%d out of range", loc.Offset, loc.CompressedPageSize)
				}
				sums = append(sums, xxhash.Sum64(seg[loc.Offset:end]))
			}
			out = append(out, sums)
		}
	}
	return out, nil
}

// pagedColumnIndexes returns the schema indexes of PagedColumns, in order.
func pagedColumnIndexes(sc *schema.Schema) ([]int, error) {
	out := make([]int, 0, len(PagedColumns))
	for _, name := range PagedColumns {
		i := sc.ColumnIndexByName(name)
		if i < 0 {
			return nil, corruptSegment("missing column "+name, nil)
		}
		out = append(out, i)
	}
	return out, nil
}
