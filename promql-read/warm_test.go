package promread

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// Warm caches the layouts of the newest segments, newest first, within a
// share of the cache and its free room, so that the first questions after a restart do not
// each walk a segment's whole page chain to its footer.
func TestWarmCachesTheNewestLayouts(t *testing.T) {
	f := newFixture(t)
	for hour := range int64(5) {
		var b promsample.Batch
		for i := range 20 {
			b.Series = append(b.Series, promsample.Series{
				Labels:  ls("__name__", "up", "instance", fmt.Sprint("i", i)),
				Samples: floats(hour*3600_000, (hour+1)*3600_000-1, 60_000, func(int64) float64 { return 1 }),
			})
		}
		f.write("alpha", b)
		f.seal("alpha")
	}
	var ids []segmentID // newest first
	probe, err := NewQueryable(f.a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := probe.s.viewStreams(context.Background(), nameConstraint{all: true}, func(_ *catalog, src archive.SourceInfo, _ string, segs []archive.StreamSegment) error {
		for i := len(segs) - 1; i >= 0; i-- {
			ids = append(ids, probe.s.segID(src.ID, segs[i]))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(ids) != 5 {
		t.Fatalf("%d segments, want 5", len(ids))
	}
	cached := func(q *Queryable) []bool {
		var out []bool
		for _, id := range ids {
			_, ok := q.s.cache.get(cacheKey{seg: q.s.names.of(id), kind: kindLayout})
			out = append(out, ok)
		}
		return out
	}
	if err := probe.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	all := cached(probe)
	for i, ok := range all {
		if !ok {
			t.Fatalf("default cache: the layout of segment %d (newest first) is not cached after Warm: %v", i, all)
		}
	}
	v, _ := probe.s.cache.get(cacheKey{seg: probe.s.names.of(ids[0]), kind: kindLayout})
	one := v.(*promsample.SegmentLayout).Bytes()

	// What the five directories take, alone in a cache.
	dirs := func(q *Queryable) int {
		n := 0
		for _, id := range ids {
			if _, ok := q.s.cache.get(cacheKey{seg: q.s.names.of(id), kind: kindDir}); ok {
				n++
			}
		}
		return n
	}
	sized, err := NewQueryable(f.a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sized.s.warmSegments(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	dirBytes := sized.s.cache.stats().Bytes
	if n := dirs(sized); n != 5 {
		t.Fatalf("%d directories cached by warmSegments, want 5", n)
	}
	// The share of the cache holds a little more than one layout, and the
	// cache has room for the directories and two: the newest, and the one
	// after it that crosses the budget, and no more.
	q := withCache(t, f, warmLayoutShare*(one+1)+dirBytes+2*128)
	if err := q.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := cached(q)
	want := []bool{true, true, false, false, false}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("small cache: layouts cached %v (newest first), want %v", got, want)
	}

	// A cache with room for the directories and one layout and a half
	// beside what something else holds (filler), whose share would take
	// two: one layout is cached, and no directory is evicted to make room
	// for the second.
	const size = 40 << 10
	tight := withCache(t, f, size)
	if size/warmLayoutShare < 2*one {
		t.Fatalf("test setup: a share of %d bytes holds fewer than two layouts of %d", size, one)
	}
	fill := size - dirBytes - one - one/2 - 3*128 // two entries, and a layout's
	tight.s.cache.put(cacheKey{kind: kindMetadata, off: 1}, nil, fill/2)
	tight.s.cache.put(cacheKey{kind: kindMetadata, off: 2}, nil, fill-fill/2)
	if err := tight.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(cached(tight)), fmt.Sprint([]bool{true, false, false, false, false}); got != want {
		t.Errorf("tight cache: layouts cached %v (newest first), want %v", got, want)
	}
	if n := dirs(tight); n != 5 {
		t.Errorf("tight cache: %d of 5 directories left after Warm: layouts evicted them", n)
	}

	// No cache: nothing is warmed and Warm still succeeds.
	none, err := NewQueryable(f.a, Options{CacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	if n := none.s.warmLayouts(context.Background()); n != 0 {
		t.Errorf("without a cache Warm cached %d layouts", n)
	}
}

// segmentIDs returns the ids of every segment q's archive holds, stream by
// stream, by seq.
func segmentIDs(t *testing.T, q *Queryable) []segmentID {
	t.Helper()
	var ids []segmentID
	if err := q.s.viewStreams(context.Background(), nameConstraint{all: true}, func(_ *catalog, src archive.SourceInfo, _ string, segs []archive.StreamSegment) error {
		for _, m := range segs {
			ids = append(ids, q.s.segID(src.ID, m))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return ids
}

// withCache returns a Queryable over f's archive whose cache of
// directories and layouts holds n bytes (Options.CacheBytes also pays for
// the page cache).
func withCache(t *testing.T, f *fixture, n int64) *Queryable {
	t.Helper()
	q, err := NewQueryable(f.a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	q.s.cache = newCache(n)
	return q
}

// Warm indexes segments oldest first over every stream, so that a cache
// too small for every directory keeps the newest segments' (those the
// first questions after a restart mostly ask about), whatever their
// stream; stream by stream it kept the last streams' whole and none of
// the first ones'.
func TestWarmKeepsTheNewestDirectories(t *testing.T) {
	f := newFixture(t)
	// Two metrics in different streams, 40 series each, four seals.
	names := []string{"up"}
	for i := 0; len(names) < 2; i++ {
		if n := fmt.Sprint("m", i); promsample.StreamFor(n, testBuckets) != promsample.StreamFor("up", testBuckets) {
			names = append(names, n)
		}
	}
	const rounds = 4
	for r := range int64(rounds) {
		var b promsample.Batch
		for _, n := range names {
			for i := range 40 {
				b.Series = append(b.Series, promsample.Series{Labels: ls("__name__", n, "i", fmt.Sprint(i)),
					Samples: []promsample.Sample{{T: r * 60_000, V: 1}}})
			}
		}
		f.write("alpha", b)
		f.seal("alpha")
	}
	big, err := NewQueryable(f.a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ids := segmentIDs(t, big) // stream by stream, by seq
	if len(ids) != len(names)*rounds {
		t.Fatalf("%d segments, want %d", len(ids), len(names)*rounds)
	}
	if _, err := big.s.warmSegments(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	// Room for the directories of the two newest rounds, and the hash
	// table each stream's directories share (segdir.go).
	var budget int64
	tables := map[*hashTable]bool{}
	for i, id := range ids {
		v, ok := big.s.cache.get(cacheKey{seg: big.s.names.of(id), kind: kindDir})
		if !ok {
			t.Fatalf("default cache: no directory for segment %d", i)
		}
		if d := v.(*segDir); i%rounds >= rounds-2 {
			budget += d.bytes + 128
			if !tables[d.table] {
				tables[d.table] = true
				budget += d.table.bytes + 128
			}
		}
	}
	if len(tables) != len(names) {
		t.Fatalf("%d hash tables for %d streams of equal tables", len(tables), len(names))
	}
	q := withCache(t, f, budget+64)
	// One worker: directories go into the cache in the order they were
	// indexed. (With more, the few segments in flight at once may swap.)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	if _, err := q.s.warmSegments(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	var got []bool
	for _, id := range ids {
		_, ok := q.s.cache.get(cacheKey{seg: q.s.names.of(id), kind: kindDir})
		got = append(got, ok)
	}
	for i, ok := range got {
		// Every stream's newest segment is kept, and its oldest is not.
		if r := i % rounds; (r == rounds-1 && !ok) || (r == 0 && ok) {
			t.Fatalf("directories cached, stream by stream, oldest first: %v; want each stream's newest and not its oldest", got)
		}
	}
}

// A question skips the segments outside its range by their spans, which
// the index keeps: it never rebuilds the directory of one the cache let
// go only to find it out of range.
func TestQuestionsSkipSegmentsOutOfRangeWithoutTheirDirectories(t *testing.T) {
	f := newFixture(t)
	const hours = 4
	for h := range int64(hours) {
		var b promsample.Batch
		for i := range 10 {
			b.Series = append(b.Series, promsample.Series{Labels: ls("__name__", "up", "i", fmt.Sprint(i)),
				Samples: floats(h*3600_000, (h+1)*3600_000-1, 60_000, func(t int64) float64 { return float64(t) })})
		}
		f.write("alpha", b)
		f.seal("alpha")
	}
	q, err := NewQueryable(f.a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	ids := segmentIDs(t, q)
	if len(ids) != hours {
		t.Fatalf("%d segments, want %d", len(ids), hours)
	}
	for _, id := range ids {
		q.s.cache.remove(cacheKey{seg: q.s.names.of(id), kind: kindDir})
	}
	// The last hour.
	mint, maxt := int64(hours-1)*3600_000, int64(hours)*3600_000-1
	querier, err := q.Querier(mint, maxt)
	if err != nil {
		t.Fatal(err)
	}
	got := readAll(t, querier.Select(context.Background(), true, &storage.SelectHints{Start: mint, End: maxt},
		mustMatcher(labels.MatchEqual, "i", "3")))
	if len(got) != 1 || len(got[0].floats) != 60 || got[0].floats[0].T != mint {
		t.Fatalf("the last hour of i=3: %d series, %v", len(got), got)
	}
	for i, id := range ids {
		_, ok := q.s.cache.get(cacheKey{seg: q.s.names.of(id), kind: kindDir})
		if want := i == hours-1; ok != want {
			t.Errorf("segment %d of %d: directory cached %v after a question about the last hour, want %v", i, hours, ok, want)
		}
	}
}

// hourlyArchive writes hours sealed hours of batch(h) to a new archive,
// hour h received h hours after the first.
func hourlyArchive(t *testing.T, hours int64, batch func(h int64) promsample.Batch) *fixture {
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var clock atomic.Int64
	f := newFixtureClock(t, t.TempDir(), func() time.Time { return base.Add(time.Duration(clock.Load())) })
	for h := range hours {
		clock.Store(h * int64(time.Hour))
		f.write("alpha", batch(h))
		f.seal("alpha")
	}
	return f
}

// warmed returns a Queryable over f's archive, warmed.
func warmed(t *testing.T, f *fixture, opts Options) *Queryable {
	q, err := NewQueryable(f.a, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	return q
}

// With a WarmWindow, Warm indexes only the segments received within it and
// defers the older ones; every question still answers as after a full
// Warm, indexing first the deferred segments its range overlaps (and only
// those); WarmHistory indexes the rest.
func TestWarmWindowDefersHistory(t *testing.T) {
	const hours = 6
	f := hourlyArchive(t, hours, func(h int64) promsample.Batch {
		var b promsample.Batch
		for i := range 10 {
			b.Series = append(b.Series, promsample.Series{Labels: ls("__name__", "up", "i", fmt.Sprint(i)),
				Samples: floats(h*3600_000, (h+1)*3600_000-1, 60_000, func(t int64) float64 { return float64(t) })})
		}
		if h < 3 { // a series only the oldest hours hold
			b.Series = append(b.Series, promsample.Series{Labels: ls("__name__", "up", "i", "old", "h", fmt.Sprint(h)),
				Samples: floats(h*3600_000, (h+1)*3600_000-1, 60_000, func(t int64) float64 { return -float64(t) })})
		}
		return b
	})
	ctx := context.Background()
	full := warmed(t, f, Options{})
	// Received within 90 minutes of the newest: hours 4 and 5.
	q := warmed(t, f, Options{WarmWindow: 90 * time.Minute})
	if n := q.Deferred(); n != 4 {
		t.Fatalf("%d segments deferred, want 4 (hours 0 to 3)", n)
	}
	if got, want := q.s.x.Len(), full.s.x.Len()-3; got != want {
		t.Fatalf("%d series indexed before any question, want %d (all but the oldest hours' own)", got, want)
	}
	answer := func(q *Queryable, mint, maxt int64, ms ...*labels.Matcher) string {
		querier, err := q.Querier(mint, maxt)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, sr := range readAll(t, querier.Select(ctx, true, &storage.SelectHints{Start: mint, End: maxt}, ms...)) {
			fmt.Fprintf(&b, "%s %d", sr.lbls, len(sr.floats))
			for _, p := range sr.floats {
				fmt.Fprintf(&b, " %d:%g", p.T, p.V)
			}
			b.WriteByte('\n')
		}
		return b.String()
	}
	every := mustMatcher(labels.MatchRegexp, "__name__", ".+")
	for _, c := range []struct {
		name         string
		mint, maxt   int64
		deferredLeft int
	}{
		{"the last hour", 5 * 3600_000, 6*3600_000 - 1, 4},
		{"the second hour", 3600_000, 2*3600_000 - 1, 3},
		{"the second hour again", 3600_000, 2*3600_000 - 1, 3},
		{"hours 3 to 5", 3 * 3600_000, 6*3600_000 - 1, 2},
		{"all of it", 0, 6*3600_000 - 1, 0},
	} {
		want := answer(full, c.mint, c.maxt, every)
		if got := answer(q, c.mint, c.maxt, every); got != want || want == "" {
			t.Fatalf("%s: answered\n%s\nwant\n%s", c.name, got, want)
		}
		if n := q.Deferred(); n != c.deferredLeft {
			t.Fatalf("after %s: %d segments deferred, want %d", c.name, n, c.deferredLeft)
		}
		// A question skips the deferred segments outside its range by
		// their spans: it does not build their directories.
		q.s.idx.mu.Lock()
		for _, m := range q.s.idx.deferred {
			for id := range m {
				if _, ok := q.s.cache.get(cacheKey{seg: q.s.names.of(id), kind: kindDir}); ok {
					t.Errorf("after %s: the directory of deferred segment %d was built", c.name, id.seq)
				}
			}
		}
		q.s.idx.mu.Unlock()
	}

	// Label values, and WarmHistory, on a fresh one.
	q = warmed(t, f, Options{WarmWindow: 90 * time.Minute})
	values := func(q *Queryable, mint, maxt int64) []string {
		vs, err := q.s.labelValues(ctx, mint, maxt, "h", nil)
		if err != nil {
			t.Fatal(err)
		}
		return vs
	}
	if got := values(q, 4*3600_000, 6*3600_000); len(got) != 0 {
		t.Fatalf("values of h over the last two hours: %v, want none", got)
	}
	if got, want := values(q, 0, 2*3600_000-1), values(full, 0, 2*3600_000-1); !slices.Equal(got, want) || len(want) != 2 {
		t.Fatalf("values of h over the first two hours: %v, want %v", got, want)
	}
	n, err := q.WarmHistory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || q.Deferred() != 0 {
		t.Fatalf("WarmHistory indexed %d, %d left; want the 2 not asked about, none left", n, q.Deferred())
	}
	if q.s.x.Len() != full.s.x.Len() {
		t.Fatalf("%d series indexed after WarmHistory, want %d", q.s.x.Len(), full.s.x.Len())
	}
	if got, want := answer(q, 0, 6*3600_000-1, every), answer(full, 0, 6*3600_000-1, every); got != want {
		t.Fatalf("after WarmHistory: answered\n%s\nwant\n%s", got, want)
	}
}

// The window ends at the newest segment's first receipt. A restart after a
// stop of hours seals the rows its predecessor left live with a row of its
// own (an epoch's close marker, stamped at the restart), so the newest
// segment's last receipt is the restart's: measured from it, the window
// deferred every segment of the hours before the stop, which are what the
// first questions after it ask about.
func TestWarmWindowEndsAtTheNewestFirstReceipt(t *testing.T) {
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var clock atomic.Int64
	f := newFixtureClock(t, t.TempDir(), func() time.Time { return base.Add(time.Duration(clock.Load())) })
	batch := func(h int64) promsample.Batch {
		var b promsample.Batch
		for i := range 5 {
			b.Series = append(b.Series, promsample.Series{Labels: ls("__name__", "up", "i", fmt.Sprint(i)),
				Samples: floats(h*3600_000, (h+1)*3600_000-1, 600_000, func(t int64) float64 { return float64(t) })})
		}
		return b
	}
	for h := range int64(5) {
		clock.Store(h * int64(time.Hour))
		f.write("alpha", batch(h))
		f.seal("alpha")
	}
	// Hour 5 stays live through a stop of three hours; what the restart
	// writes to its stream is sealed with it.
	clock.Store(5 * int64(time.Hour))
	f.write("alpha", batch(5))
	clock.Store(8*int64(time.Hour) + int64(time.Minute))
	f.write("alpha", promsample.Batch{Series: []promsample.Series{{Labels: ls("__name__", "up", "i", "restart"),
		Samples: floats(8*3600_000, 8*3600_000, 1, func(int64) float64 { return 1 })}}})
	f.seal("alpha")
	// Received within 90 minutes of hour 5's first row: hours 4 and 5.
	q := warmed(t, f, Options{WarmWindow: 90 * time.Minute})
	if n := q.Deferred(); n != 4 {
		t.Fatalf("%d segments deferred, want 4 (hours 0 to 3)", n)
	}
}

// WarmHistory beside questions that index the same deferred segments: each
// answer is whole, and in the end every segment is indexed once over.
func TestWarmHistoryBesideQuestions(t *testing.T) {
	const hours = 12
	f := hourlyArchive(t, hours, func(h int64) promsample.Batch {
		var b promsample.Batch
		for i := range 20 {
			b.Series = append(b.Series, promsample.Series{Labels: ls("__name__", fmt.Sprint("m", i%3), "i", fmt.Sprint(i), "h", fmt.Sprint(h%4)),
				Samples: floats(h*3600_000, (h+1)*3600_000-1, 300_000, func(t int64) float64 { return float64(t + int64(i)) })})
		}
		return b
	})
	ctx := context.Background()
	full := warmed(t, f, Options{})
	q := warmed(t, f, Options{WarmWindow: time.Hour})
	if q.Deferred() == 0 {
		t.Fatal("nothing deferred")
	}
	every := mustMatcher(labels.MatchRegexp, "__name__", ".+")
	count := func(q *Queryable, mint, maxt int64) (series, samples int) {
		querier, err := q.Querier(mint, maxt)
		if err != nil {
			t.Error(err)
			return
		}
		for _, sr := range readAll(t, querier.Select(ctx, true, &storage.SelectHints{Start: mint, End: maxt}, every)) {
			series++
			samples += len(sr.floats)
		}
		return
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := q.WarmHistory(ctx); err != nil {
			t.Error(err)
		}
	}()
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 8 {
				h := int64((g*5 + k*7) % hours)
				mint, maxt := h*3600_000, (h+2)*3600_000-1
				gotSeries, gotSamples := count(q, mint, maxt)
				wantSeries, wantSamples := count(full, mint, maxt)
				if gotSeries != wantSeries || gotSamples != wantSamples || wantSamples == 0 {
					t.Errorf("hours %d-%d: %d series, %d samples; want %d, %d", h, h+1, gotSeries, gotSamples, wantSeries, wantSamples)
				}
			}
		}()
	}
	wg.Wait()
	if n := q.Deferred(); n != 0 {
		t.Fatalf("%d segments still deferred", n)
	}
	if q.s.x.Len() != full.s.x.Len() {
		t.Fatalf("%d series indexed, want %d", q.s.x.Len(), full.s.x.Len())
	}
}
