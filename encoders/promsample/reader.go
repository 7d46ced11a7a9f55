package promsample

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"github.com/cespare/xxhash/v2"
	"math"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/schema"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// Query selects series and a sample-time range.
type Query struct {
	MinT, MaxT int64             // Unix ms, inclusive
	Matchers   []*labels.Matcher // all must match; none selects every series
}

// AllTime returns a Query over every timestamp with the given matchers.
func AllTime(ms ...*labels.Matcher) Query {
	return Query{MinT: math.MinInt64, MaxT: math.MaxInt64, Matchers: ms}
}

func (q *Query) matches(ls labels.Labels) bool {
	for _, m := range q.Matchers {
		if !m.Matches(ls.Get(m.Name)) {
			return false
		}
	}
	return true
}

// nameMatches reports whether a series with metric name n may match.
func (q *Query) nameMatches(n string) bool {
	for _, m := range q.Matchers {
		if m.Name == labels.MetricName && !m.Matches(n) {
			return false
		}
	}
	return true
}

// ReadRows answers q from live wal rows (of either row format) without
// building Parquet: the read path's live tail. The answer equals what
// ReadSegment returns for the segment the Encoder makes of the same rows
// (for rows the Encoder seals: closed epochs; ReadRows reads open ones too).
func ReadRows(rows []archive.Row, q Query) ([]Series, error) {
	c := newCollector()
	rc := newRowCollector(c)
	for i := range rows {
		if err := rc.add(rows[i].Data); err != nil {
			return nil, fmt.Errorf("row ts %d: %w", rows[i].TS, err)
		}
	}
	series, _ := c.finish()
	var out []Series
	var b labels.ScratchBuilder
	for _, s := range series {
		ls := s.labels(c.symbols, &b)
		if !q.matches(ls) {
			continue
		}
		r := Series{Labels: ls, Samples: inRange(s.samples, q), Histograms: histInRange(s.hists, q), Exemplars: exInRange(s.exemplars, q)}
		if len(r.Samples)+len(r.Histograms)+len(r.Exemplars) > 0 {
			out = append(out, r)
		}
	}
	return out, nil
}

// ReadRowsMetadata returns the distinct metadata carried by rows, sorted.
func ReadRowsMetadata(rows []archive.Row) ([]Metadata, error) {
	c := newCollector()
	rc := newRowCollector(c)
	for i := range rows {
		if err := rc.add(rows[i].Data); err != nil {
			return nil, fmt.Errorf("row ts %d: %w", rows[i].TS, err)
		}
	}
	_, meta := c.finish()
	return meta, nil
}

func inRange(s []Sample, q Query) []Sample {
	lo, _ := slices.BinarySearchFunc(s, q.MinT, func(x Sample, t int64) int { return cmpInt(x.T, t) })
	hi, _ := slices.BinarySearchFunc(s, q.MaxT+1, func(x Sample, t int64) int { return cmpInt(x.T, t) })
	if q.MaxT == math.MaxInt64 {
		hi = len(s)
	}
	if lo >= hi {
		return nil
	}
	return s[lo:hi]
}

func histInRange(s []Histogram, q Query) []Histogram {
	var out []Histogram
	for _, h := range s {
		if h.T >= q.MinT && h.T <= q.MaxT {
			out = append(out, h)
		}
	}
	return out
}

func exInRange(s []Exemplar, q Query) []Exemplar {
	var out []Exemplar
	for _, e := range s {
		if e.T >= q.MinT && e.T <= q.MaxT {
			out = append(out, e)
		}
	}
	return out
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// segmentFile is an opened segment.
type segmentFile struct {
	r     *file.Reader
	index Index
	kv    map[string]string
}

func openSegment(seg []byte) (*segmentFile, error) {
	// Layout: "PAR1", pages, footer, uint32 footer length, "PAR1".
	if len(seg) < 12 || string(seg[len(seg)-4:]) != "PAR1" || string(seg[:4]) != "PAR1" {
		return nil, corruptSegment("not a Parquet file", nil)
	}
	footerLen := int64(binary.LittleEndian.Uint32(seg[len(seg)-8:]))
	dataEnd := int64(len(seg)) - 8 - footerLen
	if dataEnd < 4 {
		return nil, corruptSegment("footer length out of range", nil)
	}
	r, err := file.NewParquetReader(bytes.NewReader(seg))
	if err != nil {
		return nil, corruptSegment("parquet footer", err)
	}
	md := r.MetaData()
	kv, err := footerKV(md)
	if err != nil {
		return nil, err
	}
	// Column chunks must tile the data region exactly, in order, as the
	// writer laid them out, and the checksum must cover them: then every
	// page decoded is one the checksum covers, read from where it was
	// written. Between the last chunk and the footer lies the page index
	// (segments since index format 2), which the catalog's index checks.
	next, err := checkLayout(md, dataEnd)
	if err != nil {
		return nil, err
	}
	if next > dataEnd {
		return nil, corruptSegment("column chunks do not tile the data region", nil)
	}
	if sum := strconv.FormatUint(xxhash.Sum64(seg[:next]), 16); kv[KeyDataChecksum] != sum {
		return nil, corruptSegment(fmt.Sprintf("data checksum %s, footer says %q", sum, kv[KeyDataChecksum]), nil)
	}
	raw, err := base64.StdEncoding.DecodeString(kv[KeySegmentIndex])
	if err != nil {
		return nil, corruptSegment("footer index", err)
	}
	idx, err := ParseIndex(raw)
	if err != nil {
		return nil, err
	}
	if len(idx.RowGroups) != r.NumRowGroups() {
		return nil, corruptSegment(fmt.Sprintf("index lists %d row groups, file has %d", len(idx.RowGroups), r.NumRowGroups()), nil)
	}
	for i, g := range idx.RowGroups {
		if n := r.RowGroup(i).NumRows(); n != g.Rows || n > MaxRowGroupRows || n < 0 {
			return nil, corruptSegment(fmt.Sprintf("row group %d has %d rows (index: %d, max %d)", i, n, g.Rows, MaxRowGroupRows), nil)
		}
	}
	return &segmentFile{r: r, index: idx, kv: kv}, nil
}

// recoverCorrupt turns a panic inside the Parquet library (malformed input
// it does not check) into ErrCorruptSegment.
func recoverCorrupt(err *error) {
	if p := recover(); p != nil {
		*err = corruptSegment("parquet decoder panicked", fmt.Errorf("%v", p))
	}
}

// ReadSegment answers q from one segment's bytes: the series that match,
// labels sorted and series in (metric name, labels) order, with float
// samples, histograms and exemplars in [q.MinT, q.MaxT], each in time
// order. It decodes only the row groups whose metric names and time span
// (from the footer's index) can match, and within them the value columns
// only when a series matched. Errors match ErrCorruptSegment or
// ErrUnsupportedVersion; it never panics.
func ReadSegment(seg []byte, q Query) (out []Series, err error) {
	defer recoverCorrupt(&err)
	sf, err := openSegment(seg)
	if err != nil {
		return nil, err
	}
	if !sf.index.Overlaps(q.MinT, q.MaxT) {
		return nil, nil
	}
	cols, err := sf.columns()
	if err != nil {
		return nil, err
	}
	var rr rowGroupReader
	read := make([]bool, len(sf.index.RowGroups))
	most := 0 // the series the groups read hold at most
	for i, g := range sf.index.RowGroups {
		if g.MinT > q.MaxT || g.MaxT < q.MinT || !slices.ContainsFunc(sf.index.MetricsOf(i), q.nameMatches) ||
			!cols.statsMayMatch(sf.r.RowGroup(i), q) {
			continue
		}
		read[i], most = true, most+int(min(max(g.Series, 0), g.Rows))
	}
	// A query without matchers (a compaction's merge) takes every series
	// of the groups it reads: out is sized for them once. Grown by
	// append, it was copied ~20 times over a read of a million-series
	// archive's segment (166 k series), 40% of a merge. The counts are the
	// footer's, which a corrupt segment can inflate (each group's up to
	// MaxRowGroupRows), so the size is at most one series per byte of the
	// segment; past that, out grows with what is decoded. A query with
	// matchers grows it group by group with the series that matched
	// (rowGroupReader.read): sized for every series of its metric, one
	// series asked of an old segment would hold megabytes.
	if len(q.Matchers) == 0 {
		out = make([]Series, 0, min(most, len(seg)))
	}
	for i := range sf.index.RowGroups {
		if !read[i] {
			continue
		}
		if out, err = rr.read(sf.r.RowGroup(i), cols, q, out); err != nil {
			return nil, fmt.Errorf("row group %d: %w", i, err)
		}
	}
	// Exemplars live in the footer.
	extras, err := sf.extras()
	if err != nil {
		return nil, err
	}
	var added []Series // appended after the loop: out must stay sorted for the search
	for _, s := range extras.Series {
		if !q.matches(s.Labels) {
			continue
		}
		ex := exInRange(s.Exemplars, q)
		if len(ex) == 0 {
			continue
		}
		k, found := slices.BinarySearchFunc(out, s.Labels, func(x Series, ls labels.Labels) int { return compareSeries(x.Labels, ls) })
		if found {
			out[k].Exemplars = ex
			continue
		}
		added = append(added, Series{Labels: s.Labels, Exemplars: ex})
	}
	if len(added) > 0 {
		out = append(out, added...)
		slices.SortFunc(out, func(a, b Series) int { return compareSeries(a.Labels, b.Labels) })
	}
	return out, nil
}

// compareSeries is the canonical series order: metric name, then labels.
func compareSeries(a, b labels.Labels) int {
	if c := strings.Compare(a.Get(labels.MetricName), b.Get(labels.MetricName)); c != 0 {
		return c
	}
	return labels.Compare(a, b)
}

// ReadSegmentMetadata returns the metadata stored in a segment, sorted.
func ReadSegmentMetadata(seg []byte) (meta []Metadata, err error) {
	defer recoverCorrupt(&err)
	sf, err := openSegment(seg)
	if err != nil {
		return nil, err
	}
	extras, err := sf.extras()
	if err != nil {
		return nil, err
	}
	return extras.Metadata, nil
}

// ReadSegmentIndex returns a segment's index from its footer (the same
// value as the Segment.Index the encoder returned).
func ReadSegmentIndex(seg []byte) (x Index, err error) {
	defer recoverCorrupt(&err)
	sf, err := openSegment(seg)
	if err != nil {
		return Index{}, err
	}
	return sf.index, nil
}

func (sf *segmentFile) extras() (Batch, error) {
	v, ok := sf.kv[KeyExtras]
	if !ok {
		return Batch{}, nil
	}
	raw, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return Batch{}, corruptSegment("footer extras", err)
	}
	b, err := DecodeBatch(raw)
	if err != nil {
		return Batch{}, corruptSegment("footer extras", err)
	}
	return b, nil
}

// segmentColumns locates the columns of a segment.
type segmentColumns struct {
	name                       int
	labels                     []int    // column indexes
	labelNames                 []string // label name per labels entry
	ts, value, ival, div, hist int
}

func (sf *segmentFile) columns() (*segmentColumns, error) {
	sc := sf.r.MetaData().Schema
	c := &segmentColumns{name: -1, ts: -1, value: -1, ival: -1, div: -1, hist: -1}
	want := map[string]struct {
		p   *int
		typ parquet.Type
	}{
		ColMetric:    {&c.name, parquet.Types.ByteArray},
		ColTimestamp: {&c.ts, parquet.Types.Int64},
		ColValue:     {&c.value, parquet.Types.Double},
		ColInt:       {&c.ival, parquet.Types.Int64},
		ColDiv:       {&c.div, parquet.Types.Double},
		ColHist:      {&c.hist, parquet.Types.ByteArray},
	}
	for i := 0; i < sc.NumColumns(); i++ {
		col := sc.Column(i)
		if col.MaxRepetitionLevel() != 0 || col.MaxDefinitionLevel() > 1 {
			return nil, corruptSegment("nested column "+col.Path(), nil)
		}
		name := col.Name()
		if w, ok := want[name]; ok {
			if col.PhysicalType() != w.typ {
				return nil, corruptSegment("column "+name+" has type "+col.PhysicalType().String(), nil)
			}
			*w.p = i
			continue
		}
		if ln, ok := columnLabel(name); ok {
			if col.PhysicalType() != parquet.Types.ByteArray {
				return nil, corruptSegment("label column "+name+" is not BYTE_ARRAY", nil)
			}
			c.labels = append(c.labels, i)
			c.labelNames = append(c.labelNames, ln)
		}
	}
	if c.name < 0 || c.ts < 0 || c.value < 0 || c.ival < 0 || c.div < 0 || c.hist < 0 {
		return nil, corruptSegment("missing a fixed column", nil)
	}
	return c, nil
}

// statsMayMatch prunes a row group with the label columns' statistics:
// an equality matcher on a non-empty value cannot match a row group whose
// column is all null or whose [min, max] excludes the value. Within a
// metric, series are sorted by label values, so this narrows a one-series
// query to the row group(s) holding it.
func (c *segmentColumns) statsMayMatch(rg *file.RowGroupReader, q Query) bool {
	for _, m := range q.Matchers {
		if m.Type != labels.MatchEqual || m.Value == "" || m.Name == labels.MetricName {
			continue
		}
		k := slices.Index(c.labelNames, m.Name)
		if k < 0 {
			return false // the label is absent from every row
		}
		cc, err := rg.MetaData().ColumnChunk(c.labels[k])
		if err != nil {
			return true
		}
		st, err := cc.Statistics()
		if err != nil || st == nil {
			return true
		}
		if st.HasNullCount() && st.NullCount() == rg.NumRows() {
			return false
		}
		if bs, ok := st.(*metadata.ByteArrayStatistics); ok && bs.HasMinMax() {
			if m.Value < string(bs.Min()) || m.Value > string(bs.Max()) {
				return false
			}
		}
	}
	return true
}

// rowGroupReader holds buffers reused across row groups.
type rowGroupReader struct {
	names  []string
	labels [][]string
	def    []int16
	fdef   []int16
	idef   []int16
	hdef   []int16
	ts     []int64
	vals   []float64
	ints   []int64
	divs   []float64
	ddef   []int16
	ba     []parquet.ByteArray
	sb     labels.ScratchBuilder
	runs   []seriesRun // a group's series runs (read's scratch)
}

type seriesRun struct {
	lbls       labels.Labels
	start, end int
	matched    bool
}

func (rr *rowGroupReader) read(rg *file.RowGroupReader, c *segmentColumns, q Query, out []Series) ([]Series, error) {
	n := rg.NumRows()
	var err error
	if rr.names, err = rr.readStrings(rg, c.name, n, rr.names); err != nil {
		return out, err
	}
	if cap(rr.labels) < len(c.labels) {
		rr.labels = make([][]string, len(c.labels))
	}
	rr.labels = rr.labels[:len(c.labels)]
	for k, ci := range c.labels {
		if rr.labels[k], err = rr.readStrings(rg, ci, n, rr.labels[k]); err != nil {
			return out, err
		}
	}
	// Series runs: consecutive rows with equal label values.
	runs := rr.runs[:0]
	defer func() { rr.runs = runs }()
	for r := 0; r < int(n); r++ {
		same := r > 0 && rr.names[r] == rr.names[r-1]
		for k := 0; same && k < len(c.labels); k++ {
			same = rr.labels[k][r] == rr.labels[k][r-1]
		}
		if same {
			runs[len(runs)-1].end = r + 1
			continue
		}
		rr.sb.Reset()
		if n := rr.names[r]; n != "" {
			rr.sb.Add(labels.MetricName, n)
		}
		for k, ln := range c.labelNames {
			if v := rr.labels[k][r]; v != "" {
				rr.sb.Add(ln, v)
			}
		}
		rr.sb.Sort()
		ls := rr.sb.Labels()
		if !q.matches(ls) {
			runs = append(runs, seriesRun{start: r, end: r + 1})
			continue
		}
		runs = append(runs, seriesRun{lbls: ls, start: r, end: r + 1, matched: true})
	}
	matched := 0
	for _, s := range runs {
		if s.matched {
			matched++
		}
	}
	if matched == 0 {
		return out, nil
	}
	// Room for the group's series at once (a no-op when ReadSegment
	// sized out for every series: a query without matchers).
	out = slices.Grow(out, matched)
	if err := rr.readValues(rg, c, n); err != nil {
		return out, err
	}
	// The row group's samples share one array, cut per series (capped, so
	// that an append to one cannot write into the next) and sized to what
	// is kept: a slice grown sample by sample was ~4 allocations a series
	// at a million series, a few samples each.
	kept := 0
	for _, s := range runs {
		for r := s.start; s.matched && r < s.end; r++ {
			if t := rr.ts[r]; t >= q.MinT && t <= q.MaxT && (rr.fdef[r] == 1 || rr.idef[r] == 1) {
				kept++
			}
		}
	}
	samples := make([]Sample, 0, kept)
	var at valuePos
	for _, s := range runs {
		var res Series
		first := len(samples)
		for r := s.start; r < s.end; r++ {
			t := rr.ts[r]
			keep := s.matched && t >= q.MinT && t <= q.MaxT
			v, hb, hist, err := rr.value(r, &at)
			switch {
			case err != nil:
				return out, err
			case !keep:
			case !hist:
				samples = append(samples, Sample{T: t, V: v})
			default:
				h, err := decodeHistogram(hb, t)
				if err != nil {
					return out, corruptSegment(fmt.Sprintf("histogram at row %d", r), err)
				}
				res.Histograms = append(res.Histograms, h)
			}
		}
		if len(samples) > first {
			res.Samples = samples[first:len(samples):len(samples)]
		}
		if len(res.Samples)+len(res.Histograms) == 0 {
			continue
		}
		// A series cut into pieces continues the previous result.
		if last := len(out) - 1; last >= 0 && labels.Equal(out[last].Labels, s.lbls) {
			out[last].Samples = append(out[last].Samples, res.Samples...)
			out[last].Histograms = append(out[last].Histograms, res.Histograms...)
			continue
		}
		res.Labels = s.lbls
		out = append(out, res)
	}
	return out, nil
}

// valuePos is a position in the dense value slices of a rowGroupReader.
type valuePos struct{ vi, ii, di, hi int }

// value returns row r's value, which rr's columns hold, and moves at past
// it: a float sample's value, or (hist true) a histogram's encoding. Rows
// must be taken in order from the group's first.
func (rr *rowGroupReader) value(r int, at *valuePos) (v float64, hb []byte, hist bool, err error) {
	switch {
	case rr.fdef[r] == 1:
		v = rr.vals[at.vi]
		at.vi++
	case rr.idef[r] == 1:
		v = float64(rr.ints[at.ii])
		if rr.ddef[r] == 1 {
			v /= rr.divs[at.di]
			at.di++
		}
		at.ii++
	case rr.hdef[r] == 1:
		hb, hist = rr.ba[at.hi], true
		at.hi++
	default:
		return 0, nil, false, corruptSegment(fmt.Sprintf("row %d has no value", r), nil)
	}
	return v, hb, hist, nil
}

// readValues reads the timestamp and value columns of a row group of n
// rows into rr.
func (rr *rowGroupReader) readValues(rg *file.RowGroupReader, c *segmentColumns, n int64) (err error) {
	if rr.ts, rr.def, err = readInt64(rg, c.ts, n, rr.ts, rr.def); err != nil {
		return err
	}
	if rr.vals, rr.fdef, err = readFloat64(rg, c.value, n, rr.vals, rr.fdef); err != nil {
		return err
	}
	if rr.ints, rr.idef, err = readInt64(rg, c.ival, n, rr.ints, rr.idef); err != nil {
		return err
	}
	if rr.divs, rr.ddef, err = readFloat64(rg, c.div, n, rr.divs, rr.ddef); err != nil {
		return err
	}
	rr.ba, rr.hdef, err = readByteArrays(rg, c.hist, n, rr.ba, rr.hdef)
	return err
}

// decodeHistogram decodes a histogram's encoding (a __hist__ value).
func decodeHistogram(b []byte, t int64) (Histogram, error) {
	hr := reader{b: b}
	h := hr.histogram(t)
	if hr.err == nil && hr.left() != 0 {
		hr.fail("trailing histogram bytes")
	}
	return h, hr.err
}

func grow[T any](s []T, n int64) []T {
	if int64(cap(s)) < n {
		return make([]T, n)
	}
	return s[:n]
}

func columnReader[T any](rg *file.RowGroupReader, col int) (T, error) {
	var zero T
	cr, err := rg.Column(col)
	if err != nil {
		return zero, corruptSegment("column", err)
	}
	t, ok := cr.(T)
	if !ok {
		return zero, corruptSegment(fmt.Sprintf("column %d reader is %T", col, cr), nil)
	}
	return t, nil
}

// readLoop calls read until n levels were read. read returns (levels,
// values) read starting at the given offsets.
func readLoop(n int64, read func(levelOff int64, valueOff int) (int64, int, error)) (int, error) {
	var levels int64
	values := 0
	for levels < n {
		l, v, err := read(levels, values)
		if err != nil {
			return 0, corruptSegment("column data", err)
		}
		if l == 0 {
			return 0, corruptSegment(fmt.Sprintf("column ends after %d of %d rows", levels, n), nil)
		}
		levels += l
		values += v
	}
	return values, nil
}

// valueReader is what arrow-go's typed column chunk readers (Int64,
// Float64, ByteArray) have in common.
type valueReader[V any] interface {
	ReadBatch(batchSize int64, values []V, defLvls, repLvls []int16) (int64, int, error)
	Descriptor() *schema.Column
}

// readValues reads n rows of a column into vals (the values present)
// and def (one definition level per row; all 1 for a required column).
func readValues[V any, R valueReader[V]](rg *file.RowGroupReader, col int, n int64, vals []V, def []int16) ([]V, []int16, error) {
	cr, err := columnReader[R](rg, col)
	if err != nil {
		return vals, def, err
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

func readInt64(rg *file.RowGroupReader, col int, n int64, vals []int64, def []int16) ([]int64, []int16, error) {
	return readValues[int64, *file.Int64ColumnChunkReader](rg, col, n, vals, def)
}

func readFloat64(rg *file.RowGroupReader, col int, n int64, vals []float64, def []int16) ([]float64, []int16, error) {
	return readValues[float64, *file.Float64ColumnChunkReader](rg, col, n, vals, def)
}

func readByteArrays(rg *file.RowGroupReader, col int, n int64, vals []parquet.ByteArray, def []int16) ([]parquet.ByteArray, []int16, error) {
	return readValues[parquet.ByteArray, *file.ByteArrayColumnChunkReader](rg, col, n, vals, def)
}

// readStrings reads a BYTE_ARRAY column as one string per row ("" for
// null), sharing one string among equal consecutive values: rows of a
// series repeat their labels, so this allocates once per series. It reads
// page by page without copying the page's bytes (ReadBatchInPage), turning
// them into strings before the next page replaces them.
func (rr *rowGroupReader) readStrings(rg *file.RowGroupReader, col int, n int64, out []string) ([]string, error) {
	cr, err := columnReader[*file.ByteArrayColumnChunkReader](rg, col)
	if err != nil {
		return out, err
	}
	out = grow(out, n)
	rr.ba, rr.def = grow(rr.ba, n), grow(rr.def, n)
	required := cr.Descriptor().MaxDefinitionLevel() == 0
	prev := ""
	var prevData *byte
	var done int64
	for done < n {
		levels, nv, err := cr.ReadBatchInPage(n-done, rr.ba, rr.def, nil)
		if err != nil {
			return out, corruptSegment("column data", err)
		}
		if levels == 0 {
			return out, corruptSegment(fmt.Sprintf("column ends after %d of %d rows", done, n), nil)
		}
		vi := 0
		prevData = nil
		for i := int64(0); i < levels; i++ {
			if !required && rr.def[i] == 0 {
				out[done+i] = ""
				continue
			}
			if vi >= nv {
				return out, corruptSegment("fewer values than definition levels", nil)
			}
			b := rr.ba[vi]
			vi++
			// Dictionary-encoded pages hand back the same dictionary
			// entry for every row of a run: compare bytes only when
			// the entry changes. Equal address and length mean equal
			// bytes only among the values of one call (all live at
			// once), hence prevData is reset per call.
			if p := unsafe.SliceData(b); p != prevData || len(b) != len(prev) {
				if string(b) != prev {
					prev = string(b)
				}
				prevData = p
			}
			out[done+i] = prev
		}
		done += levels
	}
	return out, nil
}

// footerKV returns a segment footer's key/value metadata, refusing a
// segment another encoder version wrote (ErrUnsupportedVersion).
func footerKV(md *metadata.FileMetaData) (map[string]string, error) {
	kv := map[string]string{}
	for _, k := range md.KeyValueMetadata() {
		if k.Value != nil {
			kv[k.Key] = *k.Value
		}
	}
	if v := kv[KeyEncoder]; v != EncoderVersion {
		return nil, fmt.Errorf("%w: segment encoder %q, reading %q", ErrUnsupportedVersion, v, EncoderVersion)
	}
	return kv, nil
}
