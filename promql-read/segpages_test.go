package promread

import (
	"context"
	"fmt"
	"slices"
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
		return selectAll(t, q, mustMatcher(labels.MatchEqual, "__name__", "m"), mustMatcher(labels.MatchEqual, "id", "1234"))
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
	if got := selectAll(t, fresh, mustMatcher(labels.MatchEqual, "__name__", "m")); len(got) != 2000 {
		t.Fatalf("whole metric: %d series, want 2000", len(got))
	}
	if n := entries(fresh.s.pages, kindPage); n != 0 {
		t.Fatalf("a read of the whole metric kept %d pages", n)
	}
}

// A selective selector whose series sit together in each segment is read
// as one short run, and keeps its pages as a lone series does: asked again
// it opens no BLOB and answers the same. A run longer than keepRunRows
// keeps none.
func TestShortRunsKeepTheirPages(t *testing.T) {
	const groups, perGroup, samples = 100, 20, 20
	f := newFixture(t)
	var want []*series
	for seal := 0; seal < 2; seal++ {
		var b promsample.Batch
		for i := range groups * perGroup {
			// Sorted by labels, a group's series are adjacent.
			lbl := ls("__name__", "m", "grp", fmt.Sprint(i/perGroup), "id", fmt.Sprint(i))
			from := int64(seal) * 100_000
			sm := floats(from, from+(samples-1)*1000, 1000, func(t int64) float64 { return float64(t*int64(i)) + 0.5 })
			b.Series = append(b.Series, promsample.Series{Labels: lbl, Samples: sm})
			if i/perGroup == 7 {
				if seal == 0 {
					want = append(want, &series{lbls: lbl})
				}
				want[i%perGroup].floats = append(want[i%perGroup].floats, sm...)
			}
		}
		f.write("s", b)
		f.seal("s")
	}
	// want in label order, as Select returns series.
	slices.SortFunc(want, func(a, b *series) int { return labels.Compare(a.lbls, b.lbls) })
	q, err := NewQueryable(f.a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	group := func() []*series {
		t.Helper()
		return selectAll(t, q, mustMatcher(labels.MatchEqual, "__name__", "m"), mustMatcher(labels.MatchEqual, "grp", "7"))
	}
	equalSeries(t, "first", want, group())
	opened := q.s.blobsOpened.Load()
	if opened != 2 || entries(q.s.pages, kindPage) == 0 {
		t.Fatalf("first ask: %d BLOBs opened, %d pages kept; want 2, some", opened, entries(q.s.pages, kindPage))
	}
	equalSeries(t, "again", want, group())
	if got := q.s.blobsOpened.Load(); got != opened {
		t.Fatalf("asked again: %d BLOBs opened in all, want %d", got, opened)
	}
	// Their samples were kept too (segseries.go): every series of the run,
	// in both segments.
	if got := q.s.seriesKept.Load(); got != 2*perGroup {
		t.Fatalf("asked again: %d series answered from kept samples, want %d", got, 2*perGroup)
	}

	// Half the groups: one run of ~20,000 rows a segment, over keepRunRows.
	if rows := groups / 2 * perGroup * samples; rows <= keepRunRows {
		t.Fatalf("the long run has %d rows, not over keepRunRows (%d)", rows, keepRunRows)
	}
	fresh, err := NewQueryable(f.a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := selectAll(t, fresh, mustMatcher(labels.MatchEqual, "__name__", "m"), mustMatcher(labels.MatchRegexp, "grp", "[1-4]?[0-9]"))
	if len(got) != groups/2*perGroup {
		t.Fatalf("half the groups: %d series, want %d", len(got), groups/2*perGroup)
	}
	if n, k := entries(fresh.s.pages, kindPage), entries(fresh.s.pages, kindSeries); n != 0 || k != 0 {
		t.Fatalf("a long run kept %d pages and %d series", n, k)
	}
}

// selectAll reads what ms select over [0, 1,000,000] ms, sorted.
func selectAll(t *testing.T, q *Queryable, ms ...*labels.Matcher) []*series {
	t.Helper()
	querier, _ := q.Querier(0, 1_000_000)
	return readAll(t, querier.Select(context.Background(), true, nil, ms...))
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
		got := selectAll(t, q, mustMatcher(labels.MatchEqual, "__name__", "m"), mustMatcher(labels.MatchEqual, "id", fmt.Sprint(i)))
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
