package promsample

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// EncoderVersion is Encoder.Version(): recorded per source by the archive
// and in every segment's footer under KeyEncoder.
const EncoderVersion = "promsample/1"

// DefaultMaxMergeBytes bounds the input bytes of one Merge of segments
// without series tables (decoded whole, see Merge).
const DefaultMaxMergeBytes = 16 << 20

// DefaultMaxStreamMergeBytes bounds the input bytes of one Merge of
// segments with series tables. A merge holds its output's bytes (about its
// input's) and its inputs' BLOBs.
const DefaultMaxStreamMergeBytes = 64 << 20

// DefaultMaxMergeSpan bounds how long a stretch of receipt time the
// segments of a run that compaction offers past its target rows may
// cover (archive.MergeBudget): an hour, the span dashboards ask for most,
// so that a one-series question over it reads a segment or a few.
const DefaultMaxMergeSpan = time.Hour

// Options tunes an Encoder; the zero value means defaults.
type Options struct {
	RowGroupRows  int   // 0 = DefaultRowGroupRows
	MaxMergeBytes int64 // 0 = DefaultMaxStreamMergeBytes, or DefaultMaxMergeBytes for segments without series tables
	// MaxMergeSpan bounds the receipt times of a run compaction offers
	// past its target rows (0 = DefaultMaxMergeSpan; see MergeBudget).
	MaxMergeSpan time.Duration
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
// between calls but spare buffers and a series count per stream name, and
// is safe for concurrent use. The zero value is ready; an Encoder must not
// be copied after first use.
type Encoder struct {
	Opts Options

	// goAlloc makes the writer use arrow-go's Go allocator instead of a
	// writeAllocator (tests compare the two).
	goAlloc bool

	// probe, when set (by BenchmarkSealMemory), is called at the points of
	// an encode where the most of it is live: all rows collected, the
	// series canonical, the row groups written (the series and samples
	// still live beside the output), the segment written, its index built.
	// It must not touch the encode's state; nil costs a comparison.
	probe func(phase string)

	spare spareWriters

	// sizes is, by stream name, the series count of the last seal of a
	// stream of that name, which sizes the next one's series index
	// (seriesIndex.reserve): at a million series growing it by doubling
	// was 1% of the receiver's CPU. A hint only: a stream's count changes
	// slowly, and sources that share stream names share their hints.
	sizesMu sync.Mutex
	sizes   map[string]int

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
	cw.labelNames, cw.labelRanks, cw.symbols, cw.arena = nil, nil, nil, nil
	cw.strs = cw.strs[:0]
	// dictID is indexed by this write's symbols: kept (all zero, as
	// writeStrings needs it, even after a failed write) when small.
	if cap(cw.dictID) > 4*DefaultRowGroupRows {
		cw.dictID = nil
	}
	clear(cw.dictID)
	cw.opts = nil
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cw = cw
}

var (
	_ archive.SegmentEncoder   = (*Encoder)(nil)
	_ archive.ConsumingEncoder = (*Encoder)(nil)
	_ archive.SegmentMerger    = (*Encoder)(nil)
	_ archive.MergeBudget      = (*Encoder)(nil)
)

// Version returns EncoderVersion.
func (e *Encoder) Version() string { return EncoderVersion }

func (e *Encoder) rowGroupRows() int {
	if e.Opts.RowGroupRows > 0 {
		return min(e.Opts.RowGroupRows, MaxRowGroupRows/4)
	}
	return DefaultRowGroupRows
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
	c.reserveFor = e.sizeHint(stream, -1)
	rowBytes, err := e.collectRows(newRowCollector(c), rows, consume)
	if err != nil {
		return nil, fmt.Errorf("stream %q %w", stream, err)
	}
	e.probeAt("collected")
	e.sizeHint(stream, c.count)
	series, meta := c.finish()
	e.probeAt("finished")
	if len(series) == 0 && len(meta) == 0 {
		// Nothing but close markers (or empty rows): no segment; the rows
		// stay live and go with the next seal's.
		return nil, nil
	}
	// A segment takes about half its rows' bytes (rwload: 2.9 vs 6.9
	// bytes per sample).
	data, idx, err := e.write(c, series, meta, rowBytes/2)
	if err != nil {
		return nil, fmt.Errorf("stream %q: %w", stream, err)
	}
	return &archive.Segment{Bytes: data, Rows: int64(len(rows)), FirstTS: rows[0].TS, LastTS: rows[len(rows)-1].TS, Index: idx}, nil
}

// sizeHint returns the series count stream's last seal collected, and
// records n as the next one's unless n < 0.
func (e *Encoder) sizeHint(stream string, n int) int {
	e.sizesMu.Lock()
	defer e.sizesMu.Unlock()
	last := e.sizes[stream]
	if n >= 0 {
		if e.sizes == nil {
			e.sizes = map[string]int{}
		}
		e.sizes[stream] = n
	}
	return last
}

// collectRows decodes rows into rc's collector and returns their bytes.
// rc is not kept: its epoch tables are garbage before the series are
// written. Its string table is the collector's, whose finish drops the
// table's map and keeps the strings the series use.
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
//
// Segments whose indexes carry their series tables (every segment sealed
// since format 2) are merged as a stream (mergeStream), holding a row group
// of each at a time, up to DefaultMaxStreamMergeBytes by default; others
// are decoded whole (mergeInMemory), up to DefaultMaxMergeBytes.
func (e *Encoder) Merge(stream string, segs []archive.StoredSegment) (*archive.Segment, int, error) {
	streaming := len(segs) >= 2 && IndexHasTable(segs[0].Index) && IndexHasTable(segs[1].Index)
	limit, _ := e.MergeBudget()
	if !streaming && e.Opts.MaxMergeBytes <= 0 {
		limit = DefaultMaxMergeBytes
	}
	n := 0
	var total int64
	for n < len(segs) && (n < 1 || total+int64(len(segs[n].Bytes)) <= limit) && (!streaming || IndexHasTable(segs[n].Index)) {
		total += int64(len(segs[n].Bytes))
		n++
	}
	if n < 2 {
		return nil, n, nil
	}
	var data, idx []byte
	var err error
	if streaming {
		data, idx, err = e.mergeStream(segs[:n])
	} else {
		data, idx, err = e.mergeInMemory(segs[:n], total)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("stream %q: %w", stream, err)
	}
	var rows int64
	for _, s := range segs[:n] {
		rows += s.Rows
	}
	return &archive.Segment{Bytes: data, Rows: rows, FirstTS: segs[0].FirstTS, LastTS: segs[n-1].LastTS, Index: idx}, n, nil
}

// MergeBudget says what one Merge takes at most (archive.MergeBudget):
// Options.MaxMergeBytes of segments (by default DefaultMaxStreamMergeBytes),
// received within Options.MaxMergeSpan (by default DefaultMaxMergeSpan) of
// each other.
func (e *Encoder) MergeBudget() (bytes, span int64) {
	bytes, span = e.Opts.MaxMergeBytes, int64(e.Opts.MaxMergeSpan)
	if bytes <= 0 {
		bytes = DefaultMaxStreamMergeBytes
	}
	if span <= 0 {
		span = int64(DefaultMaxMergeSpan)
	}
	return bytes, span
}

// mergeInMemory merges segs by decoding each whole into one collector: it
// holds every series of its inputs at once.
func (e *Encoder) mergeInMemory(segs []archive.StoredSegment, total int64) (data, index []byte, err error) {
	c := newPackingCollector()
	all := Query{MinT: math.MinInt64, MaxT: math.MaxInt64}
	for _, s := range segs {
		e.Opts.yield()
		got, err := ReadSegment(s.Bytes, all)
		if err != nil {
			return nil, nil, fmt.Errorf("segment %d: %w", s.Seq, err)
		}
		for _, sr := range got {
			c.addSeries(sr)
		}
		meta, err := ReadSegmentMetadata(s.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("segment %d: %w", s.Seq, err)
		}
		c.add(&Batch{Metadata: meta})
	}
	series, meta := c.finish()
	return e.write(c, series, meta, int(total))
}

// probeAt calls the probe, if any (see Encoder.probe).
func (e *Encoder) probeAt(phase string) {
	if e.probe != nil {
		e.probe(phase)
	}
}
