package promread

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// A one-series read keeps the pages it decoded, so asking again opens no
// segment BLOB and answers the same; a read of a whole metric keeps none.
func TestLoneSeriesReadsKeepTheirPages(t *testing.T) {
	f := newFixture(t)
	var want []*series
	for seal := 0; seal < 2; seal++ {
		var b promsample.Batch
		for i := range 2000 {
			lbl := ls("__name__", "m", "id", fmt.Sprint(i))
			sm := floats(int64(seal)*100_000, int64(seal)*100_000+19*1000, 1000, func(t int64) float64 { return float64(t*int64(i)) + 0.25 })
			b.Series = append(b.Series, promsample.Series{Labels: lbl, Samples: sm})
			if i == 1234 {
				if seal == 0 {
					want = []*series{{lbls: lbl}}
				}
				want[0].floats = append(want[0].floats, sm...)
			}
		}
		f.write("s", b)
		f.seal("s")
	}
	q, err := NewQueryable(f.a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	one := func() []*series {
		t.Helper()
		querier, _ := q.Querier(0, 1_000_000)
		return readAll(t, querier.Select(context.Background(), true, nil,
			mustMatcher(labels.MatchEqual, "__name__", "m"), mustMatcher(labels.MatchEqual, "id", "1234")))
	}
	equalSeries(t, "first", want, one())
	opened, read := q.s.blobsOpened.Load(), q.s.segmentsRead.Load()
	if opened != 2 || read != 2 || entries(q.s.pages, kindPage) == 0 || entries(q.s.cache, kindPage) != 0 {
		t.Fatalf("first ask: %d BLOBs opened, %d segments read, %d pages kept (%d beside directories); want 2, 2, some (0)",
			opened, read, entries(q.s.pages, kindPage), entries(q.s.cache, kindPage))
	}
	equalSeries(t, "again", want, one())
	if got := q.s.blobsOpened.Load(); got != opened || q.s.segmentsRead.Load() != 2*read {
		t.Fatalf("asked again: %d BLOBs opened in all, %d segments read; want %d, %d", got, q.s.segmentsRead.Load(), opened, 2*read)
	}

	// The whole metric is read as runs of series, whose pages are not kept.
	fresh, err := NewQueryable(f.a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	querier, _ := fresh.Querier(0, 1_000_000)
	if got := readAll(t, querier.Select(context.Background(), true, nil, mustMatcher(labels.MatchEqual, "__name__", "m"))); len(got) != 2000 {
		t.Fatalf("whole metric: %d series, want 2000", len(got))
	}
	if n := entries(fresh.s.pages, kindPage); n != 0 {
		t.Fatalf("a read of the whole metric kept %d pages", n)
	}
}

// entries counts the cache's entries of one kind.
func entries(c *cache, kind uint8) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k := range c.items {
		if k.kind == kind {
			n++
		}
	}
	return n
}

// Pages evict one another, never a directory or a layout: with room for a
// few pages only, reading many series one at a time keeps every
// segment's directory and layout cached.
func TestPagesNeverEvictDirectories(t *testing.T) {
	f := newFixture(t)
	for seal := 0; seal < 2; seal++ {
		var b promsample.Batch
		for i := range 2000 {
			b.Series = append(b.Series, promsample.Series{Labels: ls("__name__", "m", "id", fmt.Sprint(i)),
				Samples: floats(int64(seal)*100_000, int64(seal)*100_000+19*1000, 1000, func(t int64) float64 { return float64(t) / 7 })})
		}
		f.write("s", b)
		f.seal("s")
	}
	q, err := NewQueryable(f.a, Options{CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2000; i += 37 {
		querier, _ := q.Querier(0, 1_000_000)
		got := readAll(t, querier.Select(context.Background(), true, nil,
			mustMatcher(labels.MatchEqual, "__name__", "m"), mustMatcher(labels.MatchEqual, "id", fmt.Sprint(i))))
		if len(got) != 1 || len(got[0].floats) != 40 {
			t.Fatalf("id %d: %d series", i, len(got))
		}
	}
	if d, l := entries(q.s.cache, kindDir), entries(q.s.cache, kindLayout); d != 2 || l != 2 {
		t.Errorf("%d directories and %d layouts cached, want 2 and 2", d, l)
	}
	st := q.s.pages.stats()
	if st.Entries == 0 || st.Bytes > st.MaxBytes || st.MaxBytes != (1<<20)/pageCacheShare {
		t.Errorf("page cache: %d pages, %d of %d bytes; want some, within (1 MiB / %d)", st.Entries, st.Bytes, st.MaxBytes, pageCacheShare)
	}
	if n := entries(q.s.cache, kindPage); n != 0 {
		t.Errorf("%d pages beside the directories", n)
	}
}
