package promread

import (
	"context"
	"fmt"
	"runtime"
	"testing"

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
			_, ok := q.s.cache.get(cacheKey{seg: id, kind: kindLayout})
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
	v, _ := probe.s.cache.get(cacheKey{seg: ids[0], kind: kindLayout})
	one := v.(*promsample.SegmentLayout).Bytes()

	// What the five directories take, alone in a cache.
	dirs := func(q *Queryable) int {
		n := 0
		for _, id := range ids {
			if _, ok := q.s.cache.get(cacheKey{seg: id, kind: kindDir}); ok {
				n++
			}
		}
		return n
	}
	sized, err := NewQueryable(f.a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sized.s.warmSegments(context.Background()); err != nil {
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
	tight.s.cache.put(cacheKey{kind: kindMetadata, metric: "filler 1"}, nil, fill/2)
	tight.s.cache.put(cacheKey{kind: kindMetadata, metric: "filler 2"}, nil, fill-fill/2)
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
	if err := big.s.warmSegments(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Room for the directories of the two newest rounds.
	var budget int64
	for i, id := range ids {
		v, ok := big.s.cache.get(cacheKey{seg: id, kind: kindDir})
		if !ok {
			t.Fatalf("default cache: no directory for segment %d", i)
		}
		if i%rounds >= rounds-2 {
			budget += v.(*segDir).bytes + 128
		}
	}
	q := withCache(t, f, budget+64)
	// One worker: directories go into the cache in the order they were
	// indexed. (With more, the few segments in flight at once may swap.)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	if err := q.s.warmSegments(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got []bool
	for _, id := range ids {
		_, ok := q.s.cache.get(cacheKey{seg: id, kind: kindDir})
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
		q.s.cache.remove(cacheKey{seg: id, kind: kindDir})
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
		_, ok := q.s.cache.get(cacheKey{seg: id, kind: kindDir})
		if want := i == hours-1; ok != want {
			t.Errorf("segment %d of %d: directory cached %v after a question about the last hour, want %v", i, hours, ok, want)
		}
	}
}
