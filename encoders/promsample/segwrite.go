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
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/schema"
	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/prometheus/model/labels"
)

// rowGroupPlan is one row group: series [from, to).
type rowGroupPlan struct{ from, to int }

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
	symbols, arena := c.symbols, &c.arena
	// Label columns: the union of label names, sorted (symbols are, and
	// ids are ranks).
	isName := make([]bool, len(symbols))
	for _, s := range series {
		for i := 0; i < len(s.pairs); i += 2 {
			isName[s.pairs[i]] = true
		}
	}
	var labelNames []string
	var labelRanks []uint32
	for r, ok := range isName {
		if ok && symbols[r] != labels.MetricName {
			labelNames, labelRanks = append(labelNames, symbols[r]), append(labelRanks, uint32(r))
		}
	}

	// Plan row groups and build the index.
	idx := Index{MinT: math.MaxInt64, MaxT: math.MinInt64, Series: int64(len(series))}
	target := e.rowGroupRows()
	// The series table (format 2) first: the series' pairs move into it,
	// and their slabs are garbage before the segment is written.
	var table *SeriesTable
	if !e.Opts.FormatV1 {
		table = newSeriesTable(series, symbols) // before splitLongSeries: one entry a series
	}
	series = splitLongSeries(series, 4*target, arena)
	metricID := map[uint32]int{}
	for _, s := range series {
		if _, ok := metricID[s.name]; !ok {
			metricID[s.name] = len(idx.Metrics)
			idx.Metrics = append(idx.Metrics, metricName(s, symbols))
		}
	}
	var plans []rowGroupPlan
	cur := rowGroupPlan{}
	curRows := 0
	var g RowGroupInfo
	g.MinT, g.MaxT = math.MaxInt64, math.MinInt64
	for i, s := range series {
		n := s.numRows()
		if curRows > 0 && (curRows >= target || (curRows >= target/4 && s.name != series[i-1].name)) {
			cur.to = i
			plans = append(plans, cur)
			idx.RowGroups = append(idx.RowGroups, g)
			cur, curRows = rowGroupPlan{from: i}, 0
			g = RowGroupInfo{MinT: math.MaxInt64, MaxT: math.MinInt64}
		}
		if n == 0 {
			// Exemplars only: no Parquet rows, but keep the index span.
			for _, ex := range s.exemplars {
				idx.MinT, idx.MaxT = min(idx.MinT, ex.T), max(idx.MaxT, ex.T)
			}
			idx.Exemplars += int64(len(s.exemplars))
			continue
		}
		if curRows == 0 {
			g.FirstMetric = metricID[s.name]
		}
		g.LastMetric = metricID[s.name]
		g.Rows += int64(n)
		g.Series++
		curRows += n
		if lo, hi, ok := s.sampleSpan(arena); ok {
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
	}
	if curRows > 0 {
		cur.to = len(series)
		plans = append(plans, cur)
		idx.RowGroups = append(idx.RowGroups, g)
	}
	// The footer carries the summary (format 1): it is parsed on every
	// open. The catalog's index (format 2) adds the series table and the
	// page index's checksum, once the file is written.
	summary, err := idx.AppendBinary(nil)
	if err != nil {
		return nil, nil, err
	}

	// Footer metadata.
	kv := metadata.NewKeyValueMetadata()
	add := func(k, v string) {
		if err == nil {
			err = kv.Append(k, v)
		}
	}
	add(KeyEncoder, EncoderVersion)
	if idx.MinT <= idx.MaxT {
		add(KeyMinTime, strconv.FormatInt(idx.MinT, 10))
		add(KeyMaxTime, strconv.FormatInt(idx.MaxT, 10))
	}
	add(KeySegmentIndex, base64.StdEncoding.EncodeToString(summary))
	var extras Batch
	var sb labels.ScratchBuilder
	extras.Metadata = meta
	for _, s := range series {
		if len(s.exemplars) > 0 {
			extras.Series = append(extras.Series, Series{Labels: s.labels(symbols, &sb), Exemplars: s.exemplars})
		}
	}
	if len(extras.Series) > 0 || len(extras.Metadata) > 0 {
		eb, encErr := EncodeBatch(&extras)
		if encErr != nil {
			return nil, nil, encErr
		}
		add(KeyExtras, base64.StdEncoding.EncodeToString(eb))
	}
	if err != nil {
		return nil, nil, err
	}

	var mem memory.Allocator = newWriteAllocator() // dropped with this write
	if e.goAlloc {
		mem = memory.NewGoAllocator()
	}
	root, props, err := segmentSchema(labelNames, dictionaryLabels(series, symbols), mem, !e.Opts.FormatV1)
	if err != nil {
		return nil, nil, err
	}
	var buf bytes.Buffer
	buf.Grow(min(max(sizeHint, 4<<10), 64<<20))
	w, err := file.NewParquetWriterWithError(&buf, root, file.WithWriterProps(props), file.WithWriteMetadata(kv))
	if err != nil {
		return nil, nil, err
	}
	cw := e.spare.get()
	defer e.spare.put(cw)
	cw.opts = &e.Opts
	cw.labelNames, cw.labelRanks, cw.symbols, cw.arena = labelNames, labelRanks, symbols, arena
	for _, p := range plans {
		if err := cw.writeRowGroup(w, series[p.from:p.to]); err != nil {
			return nil, nil, err
		}
	}
	e.probeAt("grouped")
	// The series are live until the last row group is written: the probe
	// above counts them (nothing refers to them after it).
	runtime.KeepAlive(series)
	// The samples are written: the arena (and the collector it is part
	// of) is garbage from here, and so are the series, before the page
	// index is read back and the index encoded.
	cw.arena = nil
	// The data region (magic and every page) is checksummed in the footer:
	// the reader verifies it before any page is decoded, because the
	// Parquet decoder can loop forever on some corrupt pages.
	dataEnd := buf.Len()
	if err := w.AppendKeyValueMetadata(KeyDataChecksum, strconv.FormatUint(xxhash.Sum64(buf.Bytes()), 16)); err != nil {
		return nil, nil, err
	}
	if err := w.Close(); err != nil {
		return nil, nil, err
	}
	e.probeAt("written")
	// Close wrote the page index between the data region and the footer;
	// the footer's checksum cannot cover it, the catalog's index does.
	out := buf.Bytes()
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
