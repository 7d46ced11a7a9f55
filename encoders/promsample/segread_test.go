package promsample

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// countingReaderAt counts the bytes read through it.
type countingReaderAt struct {
	r io.ReaderAt
	n atomic.Int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n.Add(int64(n))
	return n, err
}

func encodeFor(t *testing.T, enc *Encoder, batches []Batch) (*archive.Segment, *Index) {
	t.Helper()
	rows, _, err := toRows(batches, 1)
	if err != nil {
		t.Fatal(err)
	}
	seg, err := enc.Encode("s", rows["samples/00"])
	if err != nil {
		t.Fatal(err)
	}
	x, err := ParseIndex(seg.Index)
	if err != nil {
		t.Fatal(err)
	}
	return seg, &x
}

// Every series read through a SegmentReader, over any range, is what
// ReadSegment returns for it.
func TestSegmentReaderMatchesReadSegment(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		r := rand.New(rand.NewPCG(seed, 99))
		enc := &Encoder{Opts: Options{RowGroupRows: 1 + r.IntN(64)}}
		seg, x := encodeFor(t, enc, randBatches(r, 40))
		sr, err := NewSegmentReader(bytes.NewReader(seg.Bytes), int64(len(seg.Bytes)), x)
		if err != nil {
			t.Fatal(err)
		}
		mint, maxt := int64(math.MinInt64), int64(math.MaxInt64)
		if seed%2 == 1 {
			mint, maxt = int64(r.IntN(500000)), int64(500000+r.IntN(500000))
		}
		want, err := ReadSegment(seg.Bytes, Query{MinT: mint, MaxT: maxt})
		if err != nil {
			t.Fatal(err)
		}
		var sb labels.ScratchBuilder
		var got []Series
		for i := 0; i < x.Table.Len(); i++ {
			s := Series{Labels: x.Table.Labels(i, &sb)}
			if err := sr.ReadSeries(i, mint, maxt, &s); err != nil {
				t.Fatalf("seed %d series %d: %v", seed, i, err)
			}
			if len(s.Samples)+len(s.Histograms) > 0 {
				got = append(got, s)
			}
		}
		// ReadSegment adds exemplars from the footer: compare without them.
		var wantNoEx []Series
		for _, s := range want {
			s.Exemplars = nil
			if len(s.Samples)+len(s.Histograms) > 0 {
				wantNoEx = append(wantNoEx, s)
			}
		}
		if d := diffSeries(got, wantNoEx); d != "" {
			t.Fatalf("seed %d: %s", seed, d)
		}
	}
}

// A read of one series of a large segment reads a few pages per column,
// not the segment.
func TestSegmentReaderReadsFewBytes(t *testing.T) {
	cfg := defaultRW()
	cfg.Series, cfg.Samples = 6000, 60
	ds := cfg.build()
	enc := &Encoder{}
	seg, x := encodeFor(t, enc, ds.requests)
	cr := &countingReaderAt{r: bytes.NewReader(seg.Bytes)}
	sr, err := NewSegmentReader(cr, int64(len(seg.Bytes)), x)
	if err != nil {
		t.Fatal(err)
	}
	opened := cr.n.Load()
	i := x.Table.Len() / 2
	var s Series
	if err := sr.ReadSeries(i, math.MinInt64, math.MaxInt64, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Samples) != cfg.Samples {
		t.Fatalf("read %d samples, want %d", len(s.Samples), cfg.Samples)
	}
	read := cr.n.Load() - opened
	t.Logf("segment %d bytes; open read %d, one series %d", len(seg.Bytes), opened, read)
	if read > int64(len(seg.Bytes))/20 {
		t.Fatalf("one series read %d of the segment's %d bytes", read, len(seg.Bytes))
	}
}

// A damaged page or page index is refused before it is decoded.
func TestSegmentReaderRefusesDamage(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	enc := &Encoder{}
	seg, x := encodeFor(t, enc, randBatches(r, 60))
	sr, err := NewSegmentReader(bytes.NewReader(seg.Bytes), int64(len(seg.Bytes)), x)
	if err != nil {
		t.Fatal(err)
	}
	// Find a page of the timestamp column and damage it.
	pg := sr.vr.pages[0]
	bad := bytes.Clone(seg.Bytes)
	bad[(pg.off+pg.end)/2] ^= 0x40
	sr2, err := NewSegmentReader(bytes.NewReader(bad), int64(len(bad)), x)
	if err != nil {
		t.Fatal(err)
	}
	var failed bool
	for i := 0; i < x.Table.Len(); i++ {
		var s Series
		if err := sr2.ReadSeries(i, math.MinInt64, math.MaxInt64, &s); err != nil {
			if !errors.Is(err, ErrCorruptSegment) {
				t.Fatalf("err = %v, want ErrCorruptSegment", err)
			}
			failed = true
			break
		}
	}
	if !failed {
		t.Fatal("a damaged page was read without error")
	}
	// The page index region.
	md := sr.f.MetaData()
	_ = md
	bad = bytes.Clone(seg.Bytes)
	bad[sr.vr.pinnedAt+int64(len(sr.vr.pinned))/2] ^= 1
	if _, err := NewSegmentReader(bytes.NewReader(bad), int64(len(bad)), x); !errors.Is(err, ErrCorruptSegment) {
		t.Fatalf("damaged page index: err = %v", err)
	}
	// A format-1 index cannot drive it.
	sum := x.Summary()
	if _, err := NewSegmentReader(bytes.NewReader(seg.Bytes), int64(len(seg.Bytes)), &sum); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("format-1 index: err = %v", err)
	}
}

// ReadRun reads what ReadSeries reads, series by series, for any ascending
// set of series, across row groups and long series cut into pieces.
func TestReadRunMatchesReadSeries(t *testing.T) {
	for seed := uint64(0); seed < 12; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		enc := &Encoder{Opts: Options{RowGroupRows: 1 + r.IntN(40)}}
		seg, x := encodeFor(t, enc, randBatches(r, 50))
		mint, maxt := int64(math.MinInt64), int64(math.MaxInt64)
		if seed%3 == 1 {
			mint, maxt = int64(r.IntN(500000)), int64(500000+r.IntN(500000))
		}
		var ords []int
		for i := 0; i < x.Table.Len(); i++ {
			if seed%2 == 0 || r.IntN(3) == 0 {
				ords = append(ords, i)
			}
		}
		one, err := NewSegmentReader(bytes.NewReader(seg.Bytes), int64(len(seg.Bytes)), x)
		if err != nil {
			t.Fatal(err)
		}
		want := map[int]Series{}
		for _, o := range ords {
			var s Series
			if err := one.ReadSeries(o, mint, maxt, &s); err != nil {
				t.Fatal(err)
			}
			want[o] = s
		}
		run, err := NewSegmentReader(bytes.NewReader(seg.Bytes), int64(len(seg.Bytes)), x)
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		err = run.ReadRun(ords, mint, maxt, func(o int, s *Series) error {
			w := want[o]
			if d := diffSamples(s.Samples, w.Samples); d != "" {
				t.Fatalf("seed %d series %d: %s", seed, o, d)
			}
			if d := diffHists(s.Histograms, w.Histograms); d != "" {
				t.Fatalf("seed %d series %d: %s", seed, o, d)
			}
			seen++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if seen != len(ords) {
			t.Fatalf("seed %d: ReadRun reported %d of %d series", seed, seen, len(ords))
		}
	}
}

// furthestReaderAt records the furthest byte read through it.
type furthestReaderAt struct {
	r   io.ReaderAt
	end atomic.Int64
}

func (f *furthestReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.r.ReadAt(p, off)
	for {
		cur := f.end.Load()
		if off+int64(n) <= cur || f.end.CompareAndSwap(cur, off+int64(n)) {
			break
		}
	}
	return n, err
}

// One layout serves readers on several goroutines at once (promql-read
// shares one per segment), each reading what ReadSegment reads.
func TestSegmentLayoutServesConcurrentReaders(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	seg, x := encodeFor(t, &Encoder{Opts: Options{RowGroupRows: 16}}, randBatches(r, 60))
	l, err := OpenSegmentLayout(bytes.NewReader(seg.Bytes), int64(len(seg.Bytes)), x)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ReadSegment(seg.Bytes, Query{MinT: math.MinInt64, MaxT: math.MaxInt64})
	if err != nil {
		t.Fatal(err)
	}
	var wantNoEx []Series
	for _, s := range want {
		s.Exemplars = nil
		if len(s.Samples)+len(s.Histograms) > 0 {
			wantNoEx = append(wantNoEx, s)
		}
	}
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			sr, err := l.NewReader(bytes.NewReader(seg.Bytes))
			if err != nil {
				errs <- err
				return
			}
			var sb labels.ScratchBuilder
			var got []Series
			for i := 0; i < x.Table.Len(); i++ {
				s := Series{Labels: x.Table.Labels(i, &sb)}
				if err := sr.ReadSeries(i, math.MinInt64, math.MaxInt64, &s); err != nil {
					errs <- err
					return
				}
				if len(s.Samples)+len(s.Histograms) > 0 {
					got = append(got, s)
				}
			}
			if d := diffSeries(got, wantNoEx); d != "" {
				errs <- errors.New(d)
				return
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// A read of float series stops at the __value__ column: the integer,
// divisor and histogram columns that follow it in the file are not read,
// since in a segment BLOB every byte further on costs a longer walk of its
// page chain, and their readers are not even made.
func TestSegmentReaderSkipsColumnsTheRowsDoNotUse(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	var b Batch
	for i := range 3000 {
		s := Series{Labels: labels.FromStrings("__name__", "m", "id", fmt.Sprint(i))}
		for k := range 20 {
			s.Samples = append(s.Samples, Sample{T: int64(k) * 15000, V: r.Float64()}) // full-precision floats: the float path
		}
		b.Series = append(b.Series, s)
	}
	seg, x := encodeFor(t, &Encoder{}, []Batch{b})
	l, err := OpenSegmentLayout(bytes.NewReader(seg.Bytes), int64(len(seg.Bytes)), x)
	if err != nil {
		t.Fatal(err)
	}
	// Where __int__ begins in the row group holding row.
	intStart := func(row int64) int64 {
		g := 0
		for l.rgEnd[g] <= row {
			g++
		}
		cc, err := l.md.RowGroup(g).ColumnChunk(l.md.Schema.ColumnIndexByName(ColInt))
		if err != nil {
			t.Fatal(err)
		}
		if cc.HasDictionaryPage() {
			return min(cc.DataPageOffset(), cc.DictionaryPageOffset())
		}
		return cc.DataPageOffset()
	}
	for _, i := range []int{0, x.Table.Len() / 2, x.Table.Len() - 1} {
		fr := &furthestReaderAt{r: bytes.NewReader(seg.Bytes)}
		sr, err := l.NewReader(fr)
		if err != nil {
			t.Fatal(err)
		}
		readAllOf(t, sr, i, 20)
		if sr.ival != nil || sr.div != nil || sr.hist != nil {
			t.Errorf("series %d: made readers of columns a float series does not use", i)
		}
		start := intStart(l.starts.at(i))
		if got := fr.end.Load(); got > start {
			t.Errorf("series %d: read up to byte %d, past the start of %s at %d (segment %d bytes)", i, got, ColInt, start, len(seg.Bytes))
		}
	}
}

// mapPages is a PageCache in a map, counting what it is asked.
type mapPages struct {
	mu         sync.Mutex
	pages      map[[2]uint64][]byte
	hits, adds int
}

func (m *mapPages) Page(off int64, sum uint64) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.pages[[2]uint64{uint64(off), sum}]
	if ok {
		m.hits++
	}
	return b, ok
}

func (m *mapPages) AddPage(off int64, sum uint64, b []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pages == nil {
		m.pages = map[[2]uint64][]byte{}
	}
	m.pages[[2]uint64{uint64(off), sum}] = b
	m.adds++
}

// failingReaderAt fails every read.
type failingReaderAt struct{}

func (failingReaderAt) ReadAt([]byte, int64) (int, error) { return 0, errors.New("read") }

// A reader with a page cache reads a page once: a second reader of the
// same series takes every page from the cache and reads nothing, and a
// page the cache holds under another checksum is not used.
func TestCachedReaderReadsEachPageOnce(t *testing.T) {
	var b Batch
	for i := range 3000 {
		s := Series{Labels: labels.FromStrings("__name__", "m", "id", fmt.Sprint(i))}
		for k := range 20 {
			s.Samples = append(s.Samples, Sample{T: int64(k) * 15000, V: float64(i*k) + 0.5})
		}
		b.Series = append(b.Series, s)
	}
	seg, x := encodeFor(t, &Encoder{}, []Batch{b})
	l, err := OpenSegmentLayout(bytes.NewReader(seg.Bytes), int64(len(seg.Bytes)), x)
	if err != nil {
		t.Fatal(err)
	}
	read := func(r io.ReaderAt, pc PageCache, i int) (Series, error) {
		sr, err := l.NewCachedReader(r, pc)
		if err != nil {
			t.Fatal(err)
		}
		var s Series
		err = sr.ReadSeries(i, math.MinInt64, math.MaxInt64, &s)
		return s, err
	}
	for _, i := range []int{0, x.Table.Len() / 2, x.Table.Len() - 1} {
		pc := &mapPages{}
		first, err := read(bytes.NewReader(seg.Bytes), pc, i)
		if err != nil {
			t.Fatal(err)
		}
		if len(first.Samples) != 20 || pc.adds == 0 || pc.hits != 0 {
			t.Fatalf("series %d: %d samples, %d pages added, %d hits; want 20, some, 0", i, len(first.Samples), pc.adds, pc.hits)
		}
		adds := pc.adds
		again, err := read(failingReaderAt{}, pc, i)
		if err != nil {
			t.Fatalf("series %d from the cache: %v", i, err)
		}
		if !slices.Equal(first.Samples, again.Samples) || pc.adds != adds || pc.hits != adds {
			t.Fatalf("series %d from the cache: samples equal %v, %d adds, %d hits; want true, %d, %d",
				i, slices.Equal(first.Samples, again.Samples), pc.adds, pc.hits, adds, adds)
		}
		// The same offsets under other checksums: not this segment's pages.
		other := &mapPages{}
		for k, p := range pc.pages {
			other.AddPage(int64(k[0]), k[1]+1, p)
		}
		if _, err := read(failingReaderAt{}, other, i); err == nil {
			t.Fatalf("series %d: read pages cached under other checksums", i)
		}
	}
}

// FuzzSegmentReader reads a segment in place, given its catalog index,
// either of them damaged: a series at a time through a page cache (twice,
// the second time from the cache) and as one run. Any error is fine; a
// panic or a hang is not.
func FuzzSegmentReader(f *testing.F) {
	r := rand.New(rand.NewPCG(11, 11))
	for i := range 3 {
		seg, err := archive.Materialize(&Encoder{Opts: Options{RowGroupRows: 64 << i}}, "s", rowsOf(f, randBatches(r, 3)))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(seg.Bytes, seg.Index)
	}
	f.Fuzz(func(t *testing.T, seg, idx []byte) {
		x, err := ParseIndex(idx)
		if err != nil {
			return
		}
		l, err := OpenSegmentLayout(bytes.NewReader(seg), int64(len(seg)), &x)
		if err != nil {
			return
		}
		n := min(x.Table.Len(), 32)
		pc := &mapPages{}
		for range 2 {
			sr, err := l.NewCachedReader(bytes.NewReader(seg), pc)
			if err != nil {
				return
			}
			for i := range n {
				var s Series
				_ = sr.ReadSeries(i, math.MinInt64, math.MaxInt64, &s)
			}
		}
		sr, err := l.NewReader(bytes.NewReader(seg))
		if err != nil {
			return
		}
		ords := make([]int, n)
		for i := range ords {
			ords[i] = i
		}
		_ = sr.ReadRun(ords, math.MinInt64, math.MaxInt64, func(int, *Series) error { return nil })
	})
}

// A one-series read takes, of the value column, exactly the pages that
// hold the series' rows: the Parquet reader's buffer reads ahead past a
// page's end, and the reader must not read and check the next page for
// it (verifiedReader.lazy). The series are long enough for a page of
// 4,096 rows to be larger than that 16 KiB buffer, as in an archive.
func TestSeriesReadTakesOnlyItsValuePages(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var b Batch
	for i := range 3000 {
		s := Series{Labels: labels.FromStrings("__name__", "m", "id", fmt.Sprintf("%05d", i))}
		for k := range 20 {
			// Values that do not compress, as a counter's fractions do not.
			s.Samples = append(s.Samples, Sample{T: int64(k) * 15000, V: r.Float64() * 1e6})
		}
		b.Series = append(b.Series, s)
	}
	seg, x := encodeFor(t, &Encoder{}, []Batch{b})
	// The value column's pages, from the segment's own offset index.
	f, err := file.NewParquetReader(bytes.NewReader(seg.Bytes))
	if err != nil {
		t.Fatal(err)
	}
	col := f.MetaData().Schema.ColumnIndexByName(ColValue)
	type page struct{ off, first, end int64 }
	var pages []page
	var rgStart int64
	for g := range f.NumRowGroups() {
		rgi, err := f.GetPageIndexReader().RowGroup(g)
		if err != nil {
			t.Fatal(err)
		}
		oi, err := rgi.GetOffsetIndex(col)
		if err != nil {
			t.Fatal(err)
		}
		locs := oi.GetPageLocations()
		n := f.RowGroup(g).NumRows()
		cc, err := f.MetaData().RowGroup(g).ColumnChunk(col)
		if err != nil {
			t.Fatal(err)
		}
		if avg := cc.TotalCompressedSize() / int64(len(locs)); avg < 20<<10 {
			t.Fatalf("row group %d: value pages of %d bytes on average, want more than the 16 KiB buffer", g, avg)
		}
		for k, l := range locs {
			end := n
			if k+1 < len(locs) {
				end = locs[k+1].FirstRowIndex
			}
			pages = append(pages, page{l.Offset, rgStart + l.FirstRowIndex, rgStart + end})
		}
		rgStart += n
	}
	if len(pages) < 4 {
		t.Fatalf("%d value pages, want several", len(pages))
	}
	l, err := OpenSegmentLayout(bytes.NewReader(seg.Bytes), int64(len(seg.Bytes)), x)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1, x.Table.Len() / 3, x.Table.Len() / 2, x.Table.Len() - 1} {
		pc := &mapPages{}
		sr, err := l.NewCachedReader(bytes.NewReader(seg.Bytes), pc)
		if err != nil {
			t.Fatal(err)
		}
		readAllOf(t, sr, i, 20)
		from, to := sr.SeriesRows(i)
		var want, got []int64
		for _, p := range pages {
			if p.first < to && p.end > from {
				want = append(want, p.off)
			}
			for k := range pc.pages {
				if int64(k[0]) == p.off {
					got = append(got, p.off)
				}
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("series %d (rows %d-%d): read the value pages at %v, want %v", i, from, to, got, want)
		}
	}
}

// readAllOf reads series i of sr over all time and fails unless it holds
// n float samples.
func readAllOf(t *testing.T, sr *SegmentReader, i, n int) Series {
	t.Helper()
	var s Series
	if err := sr.ReadSeries(i, math.MinInt64, math.MaxInt64, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Samples) != n {
		t.Fatalf("series %d: %d samples, want %d", i, len(s.Samples), n)
	}
	return s
}
