package promsample

import (
	"fmt"
	"math/bits"
	"slices"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
)

// columnWriter holds the per-row-group column buffers, reused across row
// groups.
type columnWriter struct {
	opts       *Options // the encoder's, for yield
	labelNames []string
	labelRanks []uint32   // labelNames' ranks in symbols
	symbols    []string   // the series' strings, which their ids index
	arena      *packArena // the series' packed samples
	strs       []parquet.ByteArray
	def        []int16
	ts         []int64
	vals       []float64
	ints       []int64
	hist       []parquet.ByteArray
	histBuf    []byte
	fdef       []int16 // value
	idef       []int16 // int
	hdef       []int16 // histogram
	hcount     []float64
	hsum       []float64
	divs       []float64
	ddef       []int16
	intEnds    []int    // per series: end of its values in ints
	tsBreaks   []int    // rows before which the timestamp column starts a page
	intBreaks  []int    // likewise for the integer column
	readBreaks []int    // rows before which every value column starts a page
	merged     []int    // scratch: readBreaks merged with tsBreaks or intBreaks
	rowsOf     []int32  // per series of the row group: its rows
	strVals    []uint32 // per string column, per series: 0 for "" (null unless required), else symbol rank + 1
	dictID     []int32  // per strVals value: 1 + its dictionary index, 0 when not in it
	dict       []uint32 // the dictionary's strVals values
	dictIdx    []int32
	valid      []byte
	unpacked   []Sample // one packed series' samples, decoded
}

// Page breaks in the delta-encoded columns. DELTA_BINARY_PACKED packs each
// block of 128 deltas at the width of (max - min) of the block, so the jump
// at a series boundary (timestamps back to the start of the span, values
// to another series' level) widens a whole block: with 25 ms scrape jitter
// that is ~14 extra bits on ~80 values, ~140 bytes per series. A new page
// restarts the encoding for about pageCostBytes. The writer starts a page
// at a boundary when the estimated widening costs more than a page. A
// constant-delta series (no jitter) is left alone: its widened block is a
// repeated bit pattern that LZ4 compresses to almost nothing.
const pageCostBytes = 48

// deltaStats summarises the deltas of one run of int64 values.
type deltaStats struct {
	first, last int64
	minD, maxD  int64
	n           int
}

func (d *deltaStats) add(v int64) {
	if d.n > 0 {
		dv := v - d.last
		if d.n == 1 {
			d.minD, d.maxD = dv, dv
		} else {
			d.minD, d.maxD = min(d.minD, dv), max(d.maxD, dv)
		}
	} else {
		d.first = v
	}
	d.last = v
	d.n++
}

func bitsFor(span int64) int {
	if span < 0 { // overflowed: the full width
		return 64
	}
	return 64 - bits.LeadingZeros64(uint64(span))
}

// worthBreak reports whether a page break between a run ending at prevLast
// and run cur saves more than a page costs.
func worthBreak(prevLast int64, cur *deltaStats) bool {
	if cur.n < 2 || cur.minD == cur.maxD {
		return false
	}
	bd := cur.first - prevLast
	ws := bitsFor(cur.maxD - cur.minD)
	wb := bitsFor(max(cur.maxD, bd) - min(cur.minD, bd))
	// The widening costs (wb-ws) bits on each value of the block the jump
	// falls in: up to a block of 128, and no more than the run has. A
	// series of a few samples (a segment of a million series holds two or
	// three of each) saves less than a page costs, and pages cut that
	// short made a reader decode a page header per series.
	return int64(wb-ws)*int64(min(cur.n, 128))/8 > pageCostBytes
}

func (cw *columnWriter) planBreaks(series []*seriesData) {
	cw.tsBreaks, cw.intBreaks, cw.readBreaks = cw.tsBreaks[:0], cw.intBreaks[:0], cw.readBreaks[:0]
	// Read breaks: every value column starts a page at the first series
	// boundary at least PageRows rows after the last, so a read of a few
	// series decodes pages of about PageRows rows (the page index says
	// where each starts), not a whole row group.
	last := 0
	at := 0
	for _, s := range series {
		if at-last >= PageRows && !cw.opts.FormatV1 {
			cw.readBreaks = append(cw.readBreaks, at)
			last = at
		}
		at += s.numRows()
	}
	row := 0
	var prevTS, prevInt int64
	haveTS, haveInt := false, false
	var ts, in deltaStats
	intStart := 0
	for si, s := range series {
		n := s.numRows()
		ts, in = deltaStats{}, deltaStats{}
		for _, t := range cw.ts[row : row+n] {
			ts.add(t)
		}
		for _, iv := range cw.ints[intStart:cw.intEnds[si]] {
			in.add(iv)
		}
		intStart = cw.intEnds[si]
		if haveTS && worthBreak(prevTS, &ts) {
			cw.tsBreaks = append(cw.tsBreaks, row)
		}
		if haveInt && in.n > 0 && worthBreak(prevInt, &in) {
			cw.intBreaks = append(cw.intBreaks, row)
		}
		if n > 0 {
			prevTS, haveTS = ts.last, true
		}
		if in.n > 0 {
			prevInt, haveInt = in.last, true
		}
		row += n
	}
}

// mergeBreaks returns the union of readBreaks and b, ascending, in scratch.
func (cw *columnWriter) mergeBreaks(b []int) []int {
	out := cw.merged[:0]
	i, j := 0, 0
	for i < len(cw.readBreaks) || j < len(b) {
		switch {
		case j >= len(b) || (i < len(cw.readBreaks) && cw.readBreaks[i] < b[j]):
			out = append(out, cw.readBreaks[i])
			i++
		case i >= len(cw.readBreaks) || b[j] < cw.readBreaks[i]:
			out = append(out, b[j])
			j++
		default:
			out = append(out, b[j])
			i, j = i+1, j+1
		}
	}
	cw.merged = out
	return out
}

// pagedWriter is what writePaged needs of arrow-go's typed column chunk
// writers.
type pagedWriter[V any] interface {
	WriteBatch(values []V, defLevels, repLevels []int16) (int64, error)
	FlushCurrentPage() error
	Close() error
}

// writePaged writes the next column, starting a new page at every row in
// breaks (ascending, within (0, rows)). def is nil for a required column.
func writePaged[V any](rg file.SerialRowGroupWriter, vals []V, def []int16, breaks []int) error {
	cc, err := rg.NextColumn()
	if err != nil {
		return err
	}
	c, ok := cc.(pagedWriter[V])
	if !ok {
		return fmt.Errorf("promsample: column writer %T does not write %T", cc, *new(V))
	}
	rows := len(vals)
	if def != nil {
		rows = len(def)
	}
	r, v := 0, 0
	for _, b := range append(breaks, rows) {
		if b > rows || b <= r {
			continue
		}
		nv := b - r
		var d []int16
		if def != nil {
			d = def[r:b]
			nv = 0
			for _, x := range d {
				nv += int(x)
			}
		}
		if _, err := c.WriteBatch(vals[v:v+nv], d, nil); err != nil {
			return err
		}
		r, v = b, v+nv
		if b < rows {
			if err := c.FlushCurrentPage(); err != nil {
				return err
			}
		}
	}
	return c.Close()
}

// stringValues sets rowsOf and strVals for series (a row group) and
// returns their rows. The string columns read them column by column
// instead of every series' labels once per column (which, for want of
// cache, was a tenth of a seal).
func (cw *columnWriter) stringValues(series []*seriesData) int {
	n, nl := len(series), len(cw.labelRanks)
	cw.rowsOf = slices.Grow(cw.rowsOf[:0], n)[:n]
	cw.strVals = slices.Grow(cw.strVals[:0], (1+nl)*n)[:(1+nl)*n]
	clear(cw.strVals)
	rows := 0
	for i, s := range series {
		r := s.numRows()
		cw.rowsOf[i] = int32(r) // at most 4*RowGroupRows (splitLongSeries)
		rows += r
		cw.strVals[i] = s.name // 0 without a name or with "" (see seriesData.name)
		// Both pairs and labelRanks ascend by name (labels are sorted, and
		// ranks are the strings' order): one pass over each. A label name
		// repeated (invalid) keeps its first value, as labels.Get does.
		k := 0
		for j := 0; j+1 < len(s.pairs) && k < nl; j += 2 {
			name := s.pairs[j]
			for k < nl && cw.labelRanks[k] < name {
				k++
			}
			if k < nl && cw.labelRanks[k] == name {
				// labels.Get finds no label named "", and "" is null.
				if v := s.pairs[j+1]; cw.symbols[name] != "" && cw.symbols[v] != "" {
					cw.strVals[(1+k)*n+i] = v + 1
				}
				k++
			}
		}
	}
	return rows
}

// writeRowGroup writes series (all with at least one sample or histogram,
// or none at all) as one row group. Within a series, rows are the float
// samples and histograms merged by timestamp (floats first on a tie).
func (cw *columnWriter) writeRowGroup(w *file.Writer, series []*seriesData) error {
	rows := cw.stringValues(series)
	if rows == 0 {
		return nil
	}
	rg, err := w.AppendRowGroupChecked()
	if err != nil {
		return err
	}
	// Row order: per series, merge samples and histograms by T.
	cw.ts, cw.vals, cw.ints, cw.hist = cw.ts[:0], cw.vals[:0], cw.ints[:0], cw.hist[:0]
	cw.fdef, cw.idef, cw.hdef, cw.ddef = cw.fdef[:0], cw.idef[:0], cw.hdef[:0], cw.ddef[:0]
	cw.hcount, cw.hsum, cw.histBuf = cw.hcount[:0], cw.hsum[:0], cw.histBuf[:0]
	cw.divs, cw.intEnds = cw.divs[:0], cw.intEnds[:0]
	type span struct{ start, end int }
	var hspans []span
	for _, s := range series {
		var samples []Sample
		samples, cw.unpacked = s.samplesInto(cw.arena, cw.unpacked)
		div := chooseDivisor(samples)
		// The loop appends to locals, stored back once per series: an
		// append that assigns to a field of *cw writes a pointer into the
		// heap, and while the collector marks every such write pays a
		// barrier (4% of the receiver's CPU went to them).
		ts, ints, vals, divs := cw.ts, cw.ints, cw.vals, cw.divs
		idef, fdef, ddef, hdef := cw.idef, cw.fdef, cw.ddef, cw.hdef
		i, j := 0, 0
		for i < len(samples) || j < len(s.hists) {
			if j >= len(s.hists) || (i < len(samples) && samples[i].T <= s.hists[j].T) {
				v := samples[i].V
				ts = append(ts, samples[i].T)
				if iv, ok := scaledInt(v, div); ok {
					ints = append(ints, iv)
					idef = append(idef, 1)
					fdef = append(fdef, 0)
					if div != 1 {
						divs = append(divs, div)
						ddef = append(ddef, 1)
					} else {
						ddef = append(ddef, 0)
					}
				} else {
					ddef = append(ddef, 0)
					vals = append(vals, v)
					idef = append(idef, 0)
					fdef = append(fdef, 1)
				}
				hdef = append(hdef, 0)
				i++
				continue
			}
			h := s.hists[j]
			ts = append(ts, h.T)
			start := len(cw.histBuf)
			if cw.histBuf, err = appendHistogram(cw.histBuf, h); err != nil {
				return err
			}
			hspans = append(hspans, span{start, len(cw.histBuf)})
			if h.H != nil {
				cw.hcount, cw.hsum = append(cw.hcount, float64(h.H.Count)), append(cw.hsum, h.H.Sum)
			} else {
				cw.hcount, cw.hsum = append(cw.hcount, h.FH.Count), append(cw.hsum, h.FH.Sum)
			}
			idef, fdef, hdef = append(idef, 0), append(fdef, 0), append(hdef, 1)
			ddef = append(ddef, 0)
			j++
		}
		cw.ts, cw.ints, cw.vals, cw.divs = ts, ints, vals, divs
		cw.idef, cw.fdef, cw.ddef, cw.hdef = idef, fdef, ddef, hdef
		cw.intEnds = append(cw.intEnds, len(cw.ints))
	}
	for _, sp := range hspans {
		cw.hist = append(cw.hist, cw.histBuf[sp.start:sp.end])
	}

	// __name__ and the label columns: one value per series. A yield before
	// each column (see yield).
	n := len(series)
	for k := range 1 + len(cw.labelRanks) {
		cw.opts.yield()
		if err := cw.writeStrings(rg, cw.strVals[k*n:(k+1)*n], k == 0); err != nil {
			return err
		}
	}
	cw.planBreaks(series)
	for _, write := range [...]func() error{
		func() error { return writePaged[int64](rg, cw.ts, nil, cw.mergeBreaks(cw.tsBreaks)) },
		func() error { return writePaged[float64](rg, cw.vals, cw.fdef, cw.readBreaks) },
		func() error { return writePaged[int64](rg, cw.ints, cw.idef, cw.mergeBreaks(cw.intBreaks)) },
		func() error { return writePaged[float64](rg, cw.divs, cw.ddef, cw.readBreaks) },
		func() error { return writePaged[parquet.ByteArray](rg, cw.hist, cw.hdef, cw.readBreaks) },
		func() error { return writeFloat64(rg, cw.hcount, cw.hdef) },
		func() error { return writeFloat64(rg, cw.hsum, cw.hdef) },
	} {
		cw.opts.yield()
		if err := write(); err != nil {
			return err
		}
	}
	return rg.Close()
}

// str returns the string of a strVals value.
func (cw *columnWriter) str(v uint32) string {
	if v == 0 {
		return ""
	}
	return cw.symbols[v-1]
}

// stringBytes returns the bytes of s without copying them. The column
// writer only reads the values it is given (it copies them into its pages
// and statistics), so sharing the string's immutable bytes is safe; a copy
// per row was 8% of the server's CPU under load.
func stringBytes(s string) parquet.ByteArray {
	if s == "" {
		return parquet.ByteArray{}
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// dictEncoder is what writeStrings needs of arrow-go's dictionary encoder
// (an internal type, reached through ColumnChunkWriter.CurrentEncoder).
type dictEncoder interface {
	PutDictionary(values arrow.Array) error
	NumEntries() int
}

// writeStrings writes a string column holding one value per series of the
// row group, vals (strVals' encoding; "" is null unless required),
// repeated on each of the series' rows (rowsOf).
//
// The column is dictionary-encoded, and the dictionary is built here, per
// series: arrow-go's own path hashes every row's value (and allocated per
// row in v18.8), which cost more CPU than the DELTA_BYTE_ARRAY it replaced.
// Given the dictionary (PutDictionary, as pqarrow does for Arrow
// dictionary arrays) the writer only run-length encodes the indices. The
// page statistics, which WriteDictIndices leaves alone, are filled here
// from the dictionary: every entry is referenced.
func (cw *columnWriter) writeStrings(rg file.SerialRowGroupWriter, vals []uint32, required bool) error {
	c, err := nextColumn[*file.ByteArrayColumnChunkWriter](rg)
	if err != nil {
		return err
	}
	enc, ok := c.CurrentEncoder().(dictEncoder)
	if !ok || c.CurrentEncoder().Encoding() != parquet.Encodings.PlainDict || enc.NumEntries() != 0 {
		// Not dictionary-encoded: one value per row.
		cw.strs, cw.def = cw.strs[:0], cw.def[:0]
		for i, v := range vals {
			b := stringBytes(cw.str(v))
			for range cw.rowsOf[i] {
				if required || v != 0 {
					cw.strs = append(cw.strs, b)
					cw.def = append(cw.def, 1)
				} else {
					cw.def = append(cw.def, 0)
				}
			}
		}
		def := cw.def
		if required {
			def = nil
		}
		if _, err := c.WriteBatch(cw.strs, def, nil); err != nil {
			return err
		}
		return c.Close()
	}
	// dictID is all zero between columns (cleared below, entry by entry).
	if len(cw.dictID) < len(cw.symbols)+1 {
		cw.dictID = make([]int32, len(cw.symbols)+1)
	}
	cw.dict, cw.dictIdx, cw.def = cw.dict[:0], cw.dictIdx[:0], cw.def[:0]
	cw.valid = cw.valid[:0]
	rows, nulls := 0, 0
	for _, n := range cw.rowsOf {
		rows += int(n)
	}
	// Sized once and filled by index: appending row by row was a quarter
	// of this function. A required column has no definition levels.
	cw.dictIdx = slices.Grow(cw.dictIdx, rows)[:rows]
	if !required {
		cw.def = slices.Grow(cw.def, rows)[:rows]
	}
	at := 0
	for i, v := range vals {
		n := int(cw.rowsOf[i])
		id, d := int32(0), int16(1)
		if v == 0 && !required {
			d = 0
			nulls += n
		} else if x := cw.dictID[v]; x > 0 {
			id = x - 1
		} else {
			id = int32(len(cw.dict))
			cw.dictID[v] = id + 1
			cw.dict = append(cw.dict, v)
		}
		idx := cw.dictIdx[at : at+n]
		for i := range idx {
			idx[i] = id
		}
		if !required {
			def := cw.def[at : at+n]
			for i := range def {
				def[i] = d
			}
		}
		at += n
	}
	for _, v := range cw.dict {
		cw.dictID[v] = 0
	}
	var validity *memory.Buffer
	if nulls > 0 {
		cw.valid = slices.Grow(cw.valid[:0], int(bitutil.BytesForBits(int64(rows))))[:bitutil.BytesForBits(int64(rows))]
		clear(cw.valid)
		for i, d := range cw.def {
			if d == 1 {
				bitutil.SetBit(cw.valid, i)
			}
		}
		validity = memory.NewBufferBytes(cw.valid)
	}
	db := array.NewBinaryBuilder(memory.DefaultAllocator, arrow.BinaryTypes.Binary)
	defer db.Release()
	db.Reserve(len(cw.dict))
	for _, v := range cw.dict {
		db.Append(stringBytes(cw.str(v)))
	}
	dict := db.NewArray()
	defer dict.Release()
	if err := enc.PutDictionary(dict); err != nil {
		return err
	}
	if enc.NumEntries() != len(cw.dict) {
		return fmt.Errorf("promsample: dictionary of %d values has %d entries", len(cw.dict), enc.NumEntries())
	}
	if st := c.PageStatistics(); st != nil && len(cw.dict) > 0 {
		st.IncNulls(int64(nulls))
		st.IncNumValues(int64(rows - nulls))
		if err := st.UpdateFromArrow(dict, false); err != nil {
			return err
		}
	} else if st != nil {
		st.IncNulls(int64(nulls))
	}
	idx := array.NewInt32Data(array.NewData(arrow.PrimitiveTypes.Int32, rows,
		[]*memory.Buffer{validity, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(cw.dictIdx))}, nil, nulls, 0))
	defer idx.Release()
	def := cw.def
	if required {
		def = nil
	}
	if err := c.WriteDictIndices(idx, def, nil); err != nil {
		return err
	}
	return c.Close()
}

func nextColumn[T any](rg file.SerialRowGroupWriter) (T, error) {
	var zero T
	c, err := rg.NextColumn()
	if err != nil {
		return zero, err
	}
	t, ok := c.(T)
	if !ok {
		return zero, fmt.Errorf("promsample: column writer is %T, want %T", c, zero)
	}
	return t, nil
}

func writeByteArray(rg file.SerialRowGroupWriter, vals []parquet.ByteArray, def []int16) error {
	c, err := nextColumn[*file.ByteArrayColumnChunkWriter](rg)
	if err != nil {
		return err
	}
	if _, err := c.WriteBatch(vals, def, nil); err != nil {
		return err
	}
	return c.Close()
}

func writeInt64(rg file.SerialRowGroupWriter, vals []int64, def []int16) error {
	c, err := nextColumn[*file.Int64ColumnChunkWriter](rg)
	if err != nil {
		return err
	}
	if _, err := c.WriteBatch(vals, def, nil); err != nil {
		return err
	}
	return c.Close()
}

func writeFloat64(rg file.SerialRowGroupWriter, vals []float64, def []int16) error {
	c, err := nextColumn[*file.Float64ColumnChunkWriter](rg)
	if err != nil {
		return err
	}
	if _, err := c.WriteBatch(vals, def, nil); err != nil {
		return err
	}
	return c.Close()
}
