package promread

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// pageEntries counts the pages the cache holds.
func pageEntries(c *cache) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k := range c.items {
		if k.kind == kindPage {
			n++
		}
	}
	return n
}

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
	if opened != 2 || read != 2 || pageEntries(q.s.cache) == 0 {
		t.Fatalf("first ask: %d BLOBs opened, %d segments read, %d pages kept; want 2, 2, some", opened, read, pageEntries(q.s.cache))
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
	if n := pageEntries(fresh.s.cache); n != 0 {
		t.Fatalf("a read of the whole metric kept %d pages", n)
	}
}
