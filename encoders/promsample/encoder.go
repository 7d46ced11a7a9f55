package promsample

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/cespare/xxhash/v2"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/schema"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// EncoderVersion is Encoder.Version(): recorded per source by the archive
// and in every segment's footer under KeyEncoder.
const EncoderVersion = "promsample/1"

// Column names of a segment. Label columns are named after their label;
// a label whose name starts with "__" (other than __name__) is stored in a
// column named LabelColumnEscape+name so it can never collide with these.
const (
	ColMetric         = "__name__"    // BYTE_ARRAY (STRING), required
	ColTimestamp      = "__ts__"      // INT64 TIMESTAMP(MILLIS, UTC), required
	ColValue          = "__value__"   // DOUBLE, null on the integer path and for histograms
	ColInt            = "__int__"     // INT64 k: the value is k / coalesce(__div__, 1), exactly
	ColDiv            = "__div__"     // DOUBLE divisor of __int__ (10^p or 2^-e), null when 1
	ColHist           = "__hist__"    // BYTE_ARRAY, one native histogram (format in doc.go)
	ColHistCount      = "__h_count__" // DOUBLE, the histogram's count (for SQL)
	ColHistSum        = "__h_sum__"   // DOUBLE, the histogram's sum (for SQL)
	LabelColumnEscape = "__label__"
)

// Footer key-value metadata keys.
const (
	KeyEncoder      = "dendro.encoder"     // EncoderVersion
	KeyMinTime      = "dendro.min_time_ms" // decimal Unix ms; absent when the segment has no samples
	KeyMaxTime      = "dendro.max_time_ms"
	KeySegmentIndex = "dendro.index"  // base64 (std) of the Index encoding
	KeyExtras       = "dendro.extras" // base64 (std) of a row-format Batch: exemplars and metadata
	// KeyDataChecksum is the xxhash64 (lowercase hex) of the file's bytes
	// before the footer: the leading magic and every page.
	KeyDataChecksum = "dendro.data_xxh64"
)

// DefaultRowGroupRows is the row count at which a row group is cut at the
// next series boundary (a quarter of it at the next metric boundary). A
// one-series read decodes the row groups holding that series: smaller
// groups make it cheaper, and each group costs ~100 bytes of footer per
// column plus a page per column.
const DefaultRowGroupRows = 32 << 10

// PageRows is how many rows a value column's page holds at most before
// the next series boundary starts a new one. A read of one series decodes
// about a page per column at each of its ends: smaller pages waste less of
// it, and each costs a page header and an offset index entry (~40 bytes).
const PageRows = 4096

// DefaultMaxMergeBytes bounds the input bytes of one Merge.
const DefaultMaxMergeBytes = 16 << 20

// Options tunes an Encoder; the zero value means defaults.
type Options struct {
	RowGroupRows  int   // 0 = DefaultRowGroupRows
	MaxMergeBytes int64 // 0 = DefaultMaxMergeBytes
	// FormatV1 writes segments as this encoder did before the catalog
	// index's format 2: a format-1 catalog index (no series table, no page
	// checksums), no page index, pages cut for compression only. For
	// tests of archives written before; readers still read them.
	FormatV1 bool
	// OwnThread says the encoder runs on a processor of its own, at a lower
	// CPU priority than the work it would otherwise delay (see
	// archive.WriterOptions.EncodeOn): it then does not yield between
	// steps (see yield), which for a goroutine locked to its thread costs
	// two thread switches each.
	OwnThread bool
}

// Encoder turns a stream's wal rows (each an EncodeBatch row) into one
// Parquet segment, and merges segments for compaction. It keeps nothing
// between calls but spare buffers, and is safe for concurrent use. The zero
// value is ready; an Encoder must not be copied after first use.
type Encoder struct {
	Opts Options

	// goAlloc makes the writer use arrow-go's Go allocator instead of a
	// writeAllocator (tests compare the two).
	goAlloc bool

	// probe, when set (by BenchmarkSealMemory), is called at the points of
	// an encode where the most of it is live: all rows collected, the
	// series canonical, the segment written, its index built. It must not
	// touch the encode's state; nil costs a comparison.
	probe func(phase string)

	spare spareWriters

	// unresolved counts samples, histograms and exemplars of format-2 rows
	// whose series' anchor was not among the rows encoded (see
	// rowCollector.epochs).
	unresolved atomic.Int64
}

// Unresolved returns how many samples, histograms and exemplars Encode has
// dropped because their series' anchor row was gone: rows of an epoch
// whose start a retention evicted before it was sealed.
func (e *Encoder) Unresolved() int64 { return e.unresolved.Load() }

// spareWriters keeps the column buffers of a finished write for the next
// one: rebuilt for every seal they were 7% of the bytes the server
// allocated. One set is kept (the writer seals one stream at a time), and
// none sized beyond the default row group's rows, so what stays is a MB or
// two.
type spareWriters struct {
	mu sync.Mutex
	cw *columnWriter
}

func (s *spareWriters) get() *columnWriter {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cw := s.cw; cw != nil {
		s.cw = nil
		return cw
	}
	return new(columnWriter)
}

func (s *spareWriters) put(cw *columnWriter) {
	if cap(cw.ts) > 4*DefaultRowGroupRows || cap(cw.unpacked) > 4*DefaultRowGroupRows {
		return // a long series' or a merge's buffers: not worth keeping
	}
	// Drop what refers to this write's labels (the rest holds no pointers
	// or points into the writer's own buffers).
	clear(cw.strs)
	clear(cw.dict)
	clear(cw.dictIDs)
	cw.labelNames, cw.strs, cw.dict = nil, cw.strs[:0], cw.dict[:0]
	cw.opts = nil
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cw = cw
}

var (
	_ archive.SegmentEncoder   = (*Encoder)(nil)
	_ archive.ConsumingEncoder = (*Encoder)(nil)
	_ archive.SegmentMerger    = (*Encoder)(nil)
)

// Version returns EncoderVersion.
func (e *Encoder) Version() string { return EncoderVersion }

func (e *Encoder) rowGroupRows() int {
	if e.Opts.RowGroupRows > 0 {
		return min(e.Opts.RowGroupRows, MaxRowGroupRows/4)
	}
	return DefaultRowGroupRows
}

// MaxRowGroupRows bounds a row group: the writer cuts a series longer than
// 4*RowGroupRows into pieces (consecutive row groups; the reader joins
// them), and the reader refuses a larger group, which bounds what a corrupt
// footer can make it allocate (~40 bytes per row).
const MaxRowGroupRows = 1 << 20

// splitLongSeries cuts every series with more than maxRows rows into
// consecutive pieces by time; exemplars stay with the first piece.
func splitLongSeries(series []*seriesData, maxRows int) []*seriesData {
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
		s.unpack() // rare (a series longer than four row groups): cut it as a []Sample
		i, j := 0, 0
		first := true
		for i < len(s.samples) || j < len(s.hists) {
			p := &seriesData{lbls: s.lbls, name: s.name, pairs: s.pairs}
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

// Encode decodes every row and writes one segment holding all of them:
// Rows = len(rows), FirstTS/LastTS the rows' first and last ts. A row that
// does not decode fails the whole encode (rows are written by EncodeBatch,
// so that is corruption, not lateness, and must not be silently dropped).
func (e *Encoder) Encode(stream string, rows []archive.Row) (*archive.Segment, error) {
	return e.encode(stream, rows, false)
}

// EncodeConsuming is Encode, releasing each row's Data once it is decoded
// (archive.ConsumingEncoder): a seal's rows then never sit in memory beside
// the samples decoded from them and the segment being written.
func (e *Encoder) EncodeConsuming(stream string, rows []archive.Row) (*archive.Segment, error) {
	return e.encode(stream, rows, true)
}

// yield gives up the processor between the steps of an encode: a row
// decoded, a column written, a segment read for a merge (each well under a
// millisecond at a seal's sizes). Encoding is the receiver's one long
// computation, and it runs beside request handlers and the archive writer,
// whose latency is the ingest rate: a sender waits for its commit before
// it sends again. Without the yields, a goroutine made runnable on the
// encoder's processor (a handler whose body arrived, the writer back from
// an fsync) could wait out the encoder's whole time slice, up to 10 ms.
// When nothing else is runnable, Gosched returns at once; a seal makes a
// few thousand calls. Options.OwnThread turns the yields off.
func (o *Options) yield() {
	if !o.OwnThread {
		runtime.Gosched()
	}
}

func (e *Encoder) encode(stream string, rows []archive.Row, consume bool) (*archive.Segment, error) {
	// Only closed units (format-1 rows, closed format-2 epochs) are
	// sealed; an open epoch at the end stays live (see closedPrefix).
	n, err := closedPrefix(rows)
	if err != nil {
		return nil, fmt.Errorf("stream %q: %w", stream, err)
	}
	rows = rows[:n]
	if len(rows) == 0 {
		return nil, nil
	}
	c := newPackingCollector()
	rowBytes, err := e.collectRows(newRowCollector(c), rows, consume)
	if err != nil {
		return nil, fmt.Errorf("stream %q %w", stream, err)
	}
	e.probeAt("collected")
	series, meta := c.finish()
	e.probeAt("finished")
	if len(series) == 0 && len(meta) == 0 {
		// Nothing but close markers (or empty rows): no segment; the rows
		// stay live and go with the next seal's.
		return nil, nil
	}
	// A segment takes about half its rows' bytes (rwload: 2.9 vs 6.9
	// bytes per sample).
	data, idx, err := e.write(series, c.symbols, meta, rowBytes/2)
	if err != nil {
		return nil, fmt.Errorf("stream %q: %w", stream, err)
	}
	return &archive.Segment{Bytes: data, Rows: int64(len(rows)), FirstTS: rows[0].TS, LastTS: rows[len(rows)-1].TS, Index: idx}, nil
}

// collectRows decodes rows into rc's collector and returns their bytes.
// rc is not kept: its string and epoch tables (a hundred bytes a series)
// are garbage before the series are written.
func (e *Encoder) collectRows(rc *rowCollector, rows []archive.Row, consume bool) (int, error) {
	defer func() { e.unresolved.Add(rc.unresolved) }()
	rowBytes := 0
	for i := range rows {
		if err := rc.add(rows[i].Data); err != nil {
			return 0, fmt.Errorf("row ts %d: %w", rows[i].TS, err)
		}
		rowBytes += len(rows[i].Data)
		if consume {
			rows[i].Data = nil
		}
		e.Opts.yield() // per row: ~50 µs of decoding
	}
	return rowBytes, nil
}

// Merge concatenates consecutive segments (in seq order) into one, as long
// as their total size stays within Options.MaxMergeBytes. It returns
// consumed < 2 and no segment when fewer than two fit. Samples are
// re-canonicalized, so duplicates across the merged segments go too.
func (e *Encoder) Merge(stream string, segs []archive.StoredSegment) (*archive.Segment, int, error) {
	limit := e.Opts.MaxMergeBytes
	if limit <= 0 {
		limit = DefaultMaxMergeBytes
	}
	n := 0
	var total int64
	for n < len(segs) && (n < 1 || total+int64(len(segs[n].Bytes)) <= limit) {
		total += int64(len(segs[n].Bytes))
		n++
	}
	if n < 2 {
		return nil, n, nil
	}
	c := newPackingCollector()
	all := Query{MinT: math.MinInt64, MaxT: math.MaxInt64}
	var rows int64
	for _, s := range segs[:n] {
		e.Opts.yield()
		got, err := ReadSegment(s.Bytes, all)
		if err != nil {
			return nil, 0, fmt.Errorf("stream %q segment %d: %w", stream, s.Seq, err)
		}
		for _, sr := range got {
			c.addSeries(sr)
		}
		meta, err := ReadSegmentMetadata(s.Bytes)
		if err != nil {
			return nil, 0, fmt.Errorf("stream %q segment %d: %w", stream, s.Seq, err)
		}
		c.add(&Batch{Metadata: meta})
		rows += s.Rows
	}
	series, meta := c.finish()
	data, idx, err := e.write(series, c.symbols, meta, int(total))
	if err != nil {
		return nil, 0, fmt.Errorf("stream %q: %w", stream, err)
	}
	return &archive.Segment{Bytes: data, Rows: rows, FirstTS: segs[0].FirstTS, LastTS: segs[n-1].LastTS, Index: idx}, n, nil
}

// labelColumn maps a label name to its column name.
func labelColumn(name string) string {
	if strings.HasPrefix(name, "__") {
		return LabelColumnEscape + name
	}
	return name
}

// columnLabel maps a column name back to a label name; ok is false for the
// fixed columns.
func columnLabel(col string) (string, bool) {
	if strings.HasPrefix(col, LabelColumnEscape) {
		return col[len(LabelColumnEscape):], true
	}
	if strings.HasPrefix(col, "__") {
		return "", false
	}
	return col, true
}

// rowGroupPlan is one row group: series [from, to).
type rowGroupPlan struct{ from, to int }

// write encodes canonical series into Parquet bytes and the index.
// write encodes series and meta as one segment. symbols are the series'
// strings, sorted, that their pairs index (collector.finish sets both);
// nil when the series have no pairs. sizeHint is the expected
// size of the segment: the output buffer is allocated once at about that
// size instead of doubling its way up (garbage of about the segment's size,
// at the seal's memory peak).
func (e *Encoder) write(series []*seriesData, symbols []string, meta []Metadata, sizeHint int) (data, index []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			data, index, err = nil, nil, fmt.Errorf("promsample: parquet writer panicked: %v", p)
		}
	}()
	// Label columns: the union of label names, sorted.
	nameSet := map[string]struct{}{}
	for _, s := range series {
		s.lbls.Range(func(l labels.Label) {
			if l.Name != labels.MetricName {
				nameSet[l.Name] = struct{}{}
			}
		})
	}
	labelNames := make([]string, 0, len(nameSet))
	for n := range nameSet {
		labelNames = append(labelNames, n)
	}
	slices.Sort(labelNames)

	// Plan row groups and build the index.
	idx := Index{MinT: math.MaxInt64, MaxT: math.MinInt64, Series: int64(len(series))}
	target := e.rowGroupRows()
	series = splitLongSeries(series, 4*target)
	metricID := map[string]int{}
	for _, s := range series {
		if _, ok := metricID[s.name]; !ok {
			metricID[s.name] = len(idx.Metrics)
			idx.Metrics = append(idx.Metrics, s.name)
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
		if lo, hi, ok := s.sampleSpan(); ok {
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
	extras.Metadata = meta
	for _, s := range series {
		if len(s.exemplars) > 0 {
			extras.Series = append(extras.Series, Series{Labels: s.lbls, Exemplars: s.exemplars})
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
	root, props, err := segmentSchema(labelNames, dictionaryLabels(series), mem, !e.Opts.FormatV1)
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
	cw.labelNames = labelNames
	for _, p := range plans {
		if err := cw.writeRowGroup(w, series[p.from:p.to]); err != nil {
			return nil, nil, err
		}
	}
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
	idx.Table = newSeriesTable(series, symbols)
	idx.PageIndexSum = xxhash.Sum64(out[dataEnd:footerStart])
	if idx.PageSums, err = pageSums(out); err != nil {
		return nil, nil, err
	}
	if index, err = idx.AppendBinary(nil); err != nil {
		return nil, nil, err
	}
	e.probeAt("indexed")
	return out, index, nil
}

// probeAt calls the probe, if any (see Encoder.probe).
func (e *Encoder) probeAt(phase string) {
	if e.probe != nil {
		e.probe(phase)
	}
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

// labelDictionary decides whether a label column (or __name__) with rows
// non-null rows and values distinct values in a segment is
// dictionary-encoded. Tests replace it to write every column one way:
// segments sealed before dictionaries use DELTA_BYTE_ARRAY throughout.
var labelDictionary = func(rows, values int) bool { return rows >= dictRowsPerValue*values }

// dictRowsPerValue is how many rows per distinct value a label column
// needs for dictionary encoding; below it, DELTA_BYTE_ARRAY. With few rows
// per value the column is mostly distinct values (a unique id, short
// series): the dictionary stores each once, LZ4 finds little to share
// between them, and the bit-packed indices cost bits on every row, while
// DELTA_BYTE_ARRAY shares prefixes between consecutive values and its
// repeated rows compress away. Measured on rwload-shaped data plus a
// random 36-byte id label per series, the whole segment with that column
// as a dictionary versus delta: 4 rows per series +10%, 16 +2.2%, 32 and
// 64 +1.5%, 120 -1.9%; the dictionary column still encodes and decodes
// faster. 32 keeps the size cost at about 1.5% where it is paid.
const dictRowsPerValue = 32

// dictionaryLabels returns, per label name (labels.MetricName for
// __name__), whether its column is dictionary-encoded: by default when it
// has at least dictRowsPerValue rows per distinct value in the segment.
func dictionaryLabels(series []*seriesData) map[string]bool {
	type card struct {
		rows   int
		values map[string]struct{}
	}
	cards := map[string]*card{}
	for _, s := range series {
		n := s.numRows()
		if n == 0 {
			continue
		}
		s.lbls.Range(func(l labels.Label) {
			c := cards[l.Name]
			if c == nil {
				c = &card{values: map[string]struct{}{}}
				cards[l.Name] = c
			}
			c.rows += n
			c.values[l.Value] = struct{}{}
		})
	}
	dict := make(map[string]bool, len(cards))
	for name, c := range cards {
		dict[name] = labelDictionary(c.rows, len(c.values))
	}
	return dict
}

// segmentSchema builds the Parquet schema and writer properties.
func segmentSchema(labelNames []string, dict map[string]bool, mem memory.Allocator, pageIndex bool) (*schema.GroupNode, *parquet.WriterProperties, error) {
	var errs []error
	node := func(n *schema.PrimitiveNode, err error) schema.Node {
		errs = append(errs, err)
		return n
	}
	str := schema.StringLogicalType{}
	fields := schema.FieldList{node(schema.NewPrimitiveNodeLogical(ColMetric, parquet.Repetitions.Required, str, parquet.Types.ByteArray, -1, -1))}
	opts := []parquet.WriterProperty{
		// The page index of the columns a read of a few series decodes
		// (PagedColumns): with it a reader seeks to the pages holding
		// their rows (cut at series boundaries, see planBreaks). The
		// writer writes a page index only when it is on by default, and a
		// column's own properties copy the defaults when first set, so
		// this comes first and the other columns turn it off.
		parquet.WithPageIndexEnabled(pageIndex),
		parquet.WithPageIndexEnabledFor(ColMetric, false),
		parquet.WithAllocator(mem),
		parquet.WithCompression(compress.Codecs.Lz4Raw),
		parquet.WithDictionaryDefault(false),
		parquet.WithVersion(parquet.V2_LATEST),
		parquet.WithDataPageVersion(parquet.DataPageV1),
		parquet.WithMaxRowGroupLength(math.MaxInt64),
		// Values reach the column encoders one batch at a time, and a
		// dictionary column's index buffer grows by reallocation with
		// each (1,024 rows by default): a tenth of the seal's bytes
		// allocated. A batch of a whole default row group grows it once.
		// Pages are still cut at the page size, so the file is the same.
		parquet.WithBatchSize(DefaultRowGroupRows),
		parquet.WithCreatedBy("dendro-receiver " + EncoderVersion),
		// __name__ and the label columns hold one run per series: a
		// dictionary page and RLE_DICTIONARY indices (see writeStrings)
		// where dictionaryLabels chose it, DELTA_BYTE_ARRAY otherwise.
		parquet.WithDictionaryFor(ColMetric, dict[labels.MetricName]),
		parquet.WithEncodingFor(ColMetric, parquet.Encodings.DeltaByteArray),
	}
	for _, n := range labelNames {
		col := labelColumn(n)
		fields = append(fields, node(schema.NewPrimitiveNodeLogical(col, parquet.Repetitions.Optional, str, parquet.Types.ByteArray, -1, -1)))
		opts = append(opts,
			parquet.WithDictionaryFor(col, dict[n]),
			parquet.WithEncodingFor(col, parquet.Encodings.DeltaByteArray),
			parquet.WithPageIndexEnabledFor(col, false))
	}
	fields = append(fields,
		node(schema.NewPrimitiveNodeLogical(ColTimestamp, parquet.Repetitions.Required,
			schema.NewTimestampLogicalType(true, schema.TimeUnitMillis), parquet.Types.Int64, -1, -1)),
		schema.NewFloat64Node(ColValue, parquet.Repetitions.Optional, -1),
		schema.NewInt64Node(ColInt, parquet.Repetitions.Optional, -1),
		schema.NewFloat64Node(ColDiv, parquet.Repetitions.Optional, -1),
		schema.NewByteArrayNode(ColHist, parquet.Repetitions.Optional, -1),
		schema.NewFloat64Node(ColHistCount, parquet.Repetitions.Optional, -1),
		schema.NewFloat64Node(ColHistSum, parquet.Repetitions.Optional, -1),
	)
	opts = append(opts,
		parquet.WithEncodingFor(ColTimestamp, parquet.Encodings.DeltaBinaryPacked),
		parquet.WithEncodingFor(ColValue, parquet.Encodings.ByteStreamSplit),
		parquet.WithEncodingFor(ColInt, parquet.Encodings.DeltaBinaryPacked),
		parquet.WithEncodingFor(ColHist, parquet.Encodings.DeltaByteArray),
		// Histogram pages are stored uncompressed: github.com/parquet-go/parquet-go
		// v0.32.0 fails on some LZ4_RAW pages of this column ("decoding
		// definition levels of data page v1: unexpected EOF") that arrow-go
		// and pierrec/lz4 decode fine; root cause not yet found. The blobs
		// are mostly float bits and barely compress anyway.
		parquet.WithCompressionFor(ColHist, compress.Codecs.Uncompressed),
		parquet.WithEncodingFor(ColHistCount, parquet.Encodings.ByteStreamSplit),
		parquet.WithEncodingFor(ColHistSum, parquet.Encodings.ByteStreamSplit),
		// Statistics only where a reader prunes with them (label columns and
		// the timestamp); value columns would pay for them in every page header.
		parquet.WithStatsFor(ColTimestamp, false),
		parquet.WithStatsFor(ColValue, false),
		parquet.WithStatsFor(ColInt, false),
		parquet.WithStatsFor(ColDiv, false),
		parquet.WithEncodingFor(ColDiv, parquet.Encodings.ByteStreamSplit),
		parquet.WithStatsFor(ColHist, false),
		parquet.WithStatsFor(ColHistCount, false),
		parquet.WithStatsFor(ColHistSum, false),
		parquet.WithPageIndexEnabledFor(ColHistCount, false),
		parquet.WithPageIndexEnabledFor(ColHistSum, false),
	)
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	root, err := schema.NewGroupNode("promsample", parquet.Repetitions.Required, fields, -1)
	if err != nil {
		return nil, nil, err
	}
	return root, parquet.NewWriterProperties(opts...), nil
}

// columnWriter holds the per-row-group column buffers, reused across row
// groups.
type columnWriter struct {
	opts       *Options // the encoder's, for yield
	labelNames []string
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
	intEnds    []int // per series: end of its values in ints
	tsBreaks   []int // rows before which the timestamp column starts a page
	intBreaks  []int // likewise for the integer column
	readBreaks []int // rows before which every value column starts a page
	merged     []int // scratch: readBreaks merged with tsBreaks or intBreaks
	dictIDs    map[string]int32
	dict       []string
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

// writeRowGroup writes series (all with at least one sample or histogram,
// or none at all) as one row group. Within a series, rows are the float
// samples and histograms merged by timestamp (floats first on a tie).
func (cw *columnWriter) writeRowGroup(w *file.Writer, series []*seriesData) error {
	rows := 0
	for _, s := range series {
		rows += s.numRows()
	}
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
		samples, cw.unpacked = s.samplesInto(cw.unpacked)
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
	cw.opts.yield()
	if err := cw.writeStrings(rg, series, true, func(s *seriesData) string { return s.name }); err != nil {
		return err
	}
	for _, ln := range cw.labelNames {
		cw.opts.yield()
		if err := cw.writeStrings(rg, series, false, func(s *seriesData) string { return s.lbls.Get(ln) }); err != nil {
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

// writeStrings writes a string column holding one value per series (""
// is null unless required), repeated on each of the series' rows.
//
// The column is dictionary-encoded, and the dictionary is built here, per
// series: arrow-go's own path hashes every row's value (and allocated per
// row in v18.8), which cost more CPU than the DELTA_BYTE_ARRAY it replaced.
// Given the dictionary (PutDictionary, as pqarrow does for Arrow
// dictionary arrays) the writer only run-length encodes the indices. The
// page statistics, which WriteDictIndices leaves alone, are filled here
// from the dictionary: every entry is referenced.
func (cw *columnWriter) writeStrings(rg file.SerialRowGroupWriter, series []*seriesData, required bool, value func(*seriesData) string) error {
	c, err := nextColumn[*file.ByteArrayColumnChunkWriter](rg)
	if err != nil {
		return err
	}
	enc, ok := c.CurrentEncoder().(dictEncoder)
	if !ok || c.CurrentEncoder().Encoding() != parquet.Encodings.PlainDict || enc.NumEntries() != 0 {
		// Not dictionary-encoded: one value per row.
		cw.strs, cw.def = cw.strs[:0], cw.def[:0]
		for _, s := range series {
			v := value(s)
			b := stringBytes(v)
			for range s.numRows() {
				if required || v != "" {
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
	if cw.dictIDs == nil {
		cw.dictIDs = map[string]int32{}
	}
	clear(cw.dictIDs)
	cw.dict, cw.dictIdx, cw.def = cw.dict[:0], cw.dictIdx[:0], cw.def[:0]
	cw.valid = cw.valid[:0]
	rows, nulls := 0, 0
	for _, s := range series {
		rows += s.numRows()
	}
	// Sized once and filled by index: appending row by row was a quarter
	// of this function. A required column has no definition levels.
	cw.dictIdx = slices.Grow(cw.dictIdx, rows)[:rows]
	if !required {
		cw.def = slices.Grow(cw.def, rows)[:rows]
	}
	at := 0
	for _, s := range series {
		n := s.numRows()
		v := value(s)
		id, d := int32(0), int16(1)
		if v == "" && !required {
			d = 0
			nulls += n
		} else if x, ok := cw.dictIDs[v]; ok {
			id = x
		} else {
			id = int32(len(cw.dict))
			cw.dictIDs[v] = id
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
		db.Append(stringBytes(v))
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

// Divisors of the scaled integer path. A value v is stored as the integer
// k = v*D in __int__ (with D in __div__) when |k| <= 2^53 and k/D gives v's
// exact bits: IEEE division is correctly rounded, so a decimal like 12.34
// (what an exporter prints and Prometheus parses) is exactly 1234/100, and
// k/2^-e is exactly k*2^e. Decimal divisors turn 2-decimal gauges and
// counters (node_cpu_seconds_total) into small-delta integers; binary ones
// strip the zero low bits of byte counts in pages (multiples of 4096).
const maxDecimalDivisor = 1e6 // divisors 10, 100, ..., 1e6 (each exact)

const maxBinaryShift = 24

// scaledInt returns k with k/div == v bit for bit, if there is one.
func scaledInt(v, div float64) (int64, bool) {
	if div == 1 {
		return isIntegral(v)
	}
	k := math.Round(v * div)
	if !(k >= -maxInt53 && k <= maxInt53) { // also refuses NaN
		return 0, false
	}
	// Check exactly what the reader computes (this also refuses -0).
	if ik := int64(k); math.Float64bits(float64(ik)/div) == math.Float64bits(v) {
		return ik, true
	}
	return 0, false
}

// chooseDivisor picks a series' divisor: the one that puts the most of its
// samples on the integer path, preferring 1, then the largest binary
// shift, then the smallest decimal.
func chooseDivisor(samples []Sample) float64 {
	if len(samples) == 0 {
		return 1
	}
	ints := 0
	tz := maxBinaryShift
	for _, s := range samples {
		if k, ok := isIntegral(s.V); ok {
			ints++
			if k != 0 {
				tz = min(tz, bits.TrailingZeros64(uint64(k)))
			}
		}
	}
	if ints == len(samples) {
		if tz > 0 && tz < maxBinaryShift {
			return math.Ldexp(1, -tz)
		}
		return 1
	}
	best, bestN := 1.0, ints
	for d := 10.0; d <= maxDecimalDivisor; d *= 10 {
		n := 0
		for _, s := range samples {
			if _, ok := scaledInt(s.V, d); ok {
				n++
			}
		}
		if n > bestN+len(samples)/8 { // worth a divisor column entry
			best, bestN = d, n
		}
		if n == len(samples) {
			break
		}
	}
	return best
}
