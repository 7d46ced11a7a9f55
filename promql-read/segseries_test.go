package promread

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// selectRange reads what ms select over [mint, maxt] ms, sorted.
func selectRange(t *testing.T, q *Queryable, mint, maxt int64, ms ...*labels.Matcher) []*series {
	t.Helper()
	querier, err := q.Querier(mint, maxt)
	if err != nil {
		t.Fatal(err)
	}
	defer querier.Close()
	return readAll(t, querier.Select(context.Background(), true, nil, ms...))
}

// A lone series keeps all its samples of each segment, whatever range it
// was first asked over: later questions, wider, narrower or elsewhere,
// are cut from them and answer what the segments hold, without decoding
// or opening anything. A series with histograms and a scan of a metric
// keep none.
func TestLoneSeriesKeepTheirSamples(t *testing.T) {
	f := newFixture(t)
	model := expected{}
	for seal := range 2 {
		var b promsample.Batch
		from := int64(seal) * 100_000
		for i := range 2000 {
			lbl := ls("__name__", "m", "id", fmt.Sprint(i))
			sm := floats(from, from+19_000, 1000, func(t int64) float64 { return float64(t*int64(i)) + 0.25 })
			b.Series = append(b.Series, promsample.Series{Labels: lbl, Samples: sm})
			model.add(lbl, sm, nil)
		}
		h := promsample.Series{Labels: ls("__name__", "h", "id", "1")}
		for k := range 20 {
			h.Histograms = append(h.Histograms, promsample.Histogram{T: from + int64(k)*1000, H: testHistogram(k)})
		}
		b.Series = append(b.Series, h)
		model.add(h.Labels, nil, h.Histograms)
		f.write("s", b)
		f.seal("s")
	}
	q, err := NewQueryable(f.a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	one := []*labels.Matcher{mustMatcher(labels.MatchEqual, "__name__", "m"), mustMatcher(labels.MatchEqual, "id", "1234")}

	// First asked over part of each segment: both are read whole for the
	// series, and kept.
	equalSeries(t, "first, part of each segment", model.selectModel(5_000, 110_000, one...), selectRange(t, q, 5_000, 110_000, one...))
	if got, n := q.s.seriesKept.Load(), entries(q.s.pages, kindSeries); got != 0 || n != 2 {
		t.Fatalf("first ask: %d answered from kept samples, %d kept; want 0, 2", got, n)
	}
	opened := q.s.blobsOpened.Load()
	for _, r := range []struct {
		what       string
		mint, maxt int64
		segments   int64 // that the range overlaps
	}{
		{"everything", 0, 1_000_000, 2},
		{"one sample", 15_000, 15_000, 1},
		{"the second segment's tail", 110_500, 200_000, 1},
		{"between samples", 15_100, 15_900, 1},
	} {
		before := q.s.seriesKept.Load()
		equalSeries(t, r.what, model.selectModel(r.mint, r.maxt, one...), selectRange(t, q, r.mint, r.maxt, one...))
		if got := q.s.seriesKept.Load() - before; got != r.segments {
			t.Fatalf("%s: %d segments answered from kept samples, want %d", r.what, got, r.segments)
		}
	}
	if got := q.s.blobsOpened.Load(); got != opened {
		t.Fatalf("asked again: %d BLOBs opened in all, want %d", got, opened)
	}

	// Histograms are read from their pages each time.
	hist := []*labels.Matcher{mustMatcher(labels.MatchEqual, "__name__", "h")}
	for _, what := range []string{"histograms", "histograms again"} {
		equalSeries(t, what, model.selectModel(0, 1_000_000, hist...), selectRange(t, q, 0, 1_000_000, hist...))
	}
	if n := entries(q.s.pages, kindSeries); n != 2 {
		t.Fatalf("after the histogram series: %d series kept, want 2", n)
	}

	// The whole metric is a long run: nothing kept.
	fresh, err := NewQueryable(f.a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := selectAll(t, fresh, mustMatcher(labels.MatchEqual, "__name__", "m")); len(got) != 2000 {
		t.Fatalf("whole metric: %d series, want 2000", len(got))
	}
	if n := entries(fresh.s.pages, kindSeries); n != 0 {
		t.Fatalf("a read of the whole metric kept %d series", n)
	}
}
