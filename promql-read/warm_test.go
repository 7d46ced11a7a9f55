package promread

import (
	"context"
	"fmt"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// Warm caches the layouts of the newest segments, newest first, within a
// quarter of the cache, so that the first questions after a restart do not
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

	// A quarter of the cache holds a little more than one layout: the
	// newest, and the one after it that crosses the budget, and no more.
	q, err := NewQueryable(f.a, Options{CacheBytes: warmLayoutShare * (one + 1)})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := cached(q)
	want := []bool{true, true, false, false, false}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("small cache: layouts cached %v (newest first), want %v", got, want)
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
