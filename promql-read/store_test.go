package promread

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// readAll reads a SeriesSet through its iterators.
func readAll(t testing.TB, ss storage.SeriesSet) []*series {
	t.Helper()
	var out []*series
	var it chunkenc.Iterator
	for ss.Next() {
		s := ss.At()
		r := &series{lbls: s.Labels()}
		it = s.Iterator(it)
		for typ := it.Next(); typ != chunkenc.ValNone; typ = it.Next() {
			switch typ {
			case chunkenc.ValFloat:
				tt, v := it.At()
				r.floats = append(r.floats, promsample.Sample{T: tt, V: v})
			case chunkenc.ValHistogram:
				tt, h := it.AtHistogram(nil)
				r.hists = append(r.hists, promsample.Histogram{T: tt, H: h})
			case chunkenc.ValFloatHistogram:
				tt, h := it.AtFloatHistogram(nil)
				r.hists = append(r.hists, promsample.Histogram{T: tt, FH: h})
			}
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := ss.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func mustMatcher(t labels.MatchType, n, v string) *labels.Matcher {
	return labels.MustNewMatcher(t, n, v)
}

func TestSelectMatchers(t *testing.T) {
	f := newFixture(t)
	want := standardData(f)
	q, err := NewQueryable(f.a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	eq, neq, re, nre := labels.MatchEqual, labels.MatchNotEqual, labels.MatchRegexp, labels.MatchNotRegexp
	cases := []struct {
		name string
		ms   []*labels.Matcher
		n    int // expected series count (also checked against the model)
	}{
		{"name equal", []*labels.Matcher{mustMatcher(eq, "__name__", "http_requests_total")}, 4},
		{"name and label", []*labels.Matcher{mustMatcher(eq, "__name__", "http_requests_total"), mustMatcher(eq, "env", "prod")}, 2},
		{"empty equal matches missing label", []*labels.Matcher{mustMatcher(eq, "__name__", "http_requests_total"), mustMatcher(eq, "env", "")}, 1},
		{"not-regexp .+ matches missing label", []*labels.Matcher{mustMatcher(eq, "__name__", "http_requests_total"), mustMatcher(nre, "env", ".+")}, 1},
		{"regexp .* matches missing label", []*labels.Matcher{mustMatcher(eq, "__name__", "http_requests_total"), mustMatcher(re, "env", ".*")}, 4},
		{"not-equal keeps missing label", []*labels.Matcher{mustMatcher(eq, "__name__", "http_requests_total"), mustMatcher(neq, "env", "prod")}, 2},
		{"regexp fully anchored", []*labels.Matcher{mustMatcher(re, "__name__", "http_requests")}, 0},
		{"regexp alternation over names", []*labels.Matcher{mustMatcher(re, "__name__", "temperature|late_metric")}, 3},
		{"regexp prefix over names", []*labels.Matcher{mustMatcher(re, "__name__", "temp.*")}, 2},
		{"no name matcher", []*labels.Matcher{mustMatcher(eq, "job", "api")}, 6},
		{"not-regexp on name", []*labels.Matcher{mustMatcher(nre, "__name__", "http.*|rpc.*"), mustMatcher(re, "job", ".+")}, 2},
		{"same name twice ANDed", []*labels.Matcher{mustMatcher(re, "__name__", "temp.*"), mustMatcher(re, "room", "a|b"), mustMatcher(neq, "room", "b")}, 1},
		{"dot matches newline class", []*labels.Matcher{mustMatcher(re, "__name__", "late_.*"), mustMatcher(re, "job", "b.t.h")}, 1},
		{"nonexistent label equal", []*labels.Matcher{mustMatcher(eq, "__name__", "temperature"), mustMatcher(eq, "nope", "x")}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			querier, _ := q.Querier(math.MinInt64, math.MaxInt64)
			got := readAll(t, querier.Select(context.Background(), true, nil, c.ms...))
			exp := want.selectModel(math.MinInt64, math.MaxInt64, c.ms...)
			if len(exp) != c.n {
				t.Fatalf("model has %d series, the table says %d", len(exp), c.n)
			}
			equalSeries(t, c.name, exp, got)
		})
	}
}

func TestSelectTimeRangeAndMerge(t *testing.T) {
	f := newFixture(t)
	want := standardData(f)
	q, _ := NewQueryable(f.a, Options{})
	for _, r := range [][2]int64{{0, 0}, {0, 3600_000}, {3500_000, 3700_000}, {600_000, 650_000}, {7000_000, 8000_000}, {10_000_000, 20_000_000}} {
		querier, _ := q.Querier(r[0], r[1])
		ms := []*labels.Matcher{mustMatcher(labels.MatchRegexp, "__name__", ".+")}
		got := readAll(t, querier.Select(context.Background(), true, nil, ms...))
		equalSeries(t, "range", want.selectModel(r[0], r[1], ms...), got)
	}
	// The series both sources hold is one series with both halves.
	querier, _ := q.Querier(0, math.MaxInt64)
	got := readAll(t, querier.Select(context.Background(), true, nil,
		mustMatcher(labels.MatchEqual, "__name__", "http_requests_total"), mustMatcher(labels.MatchEqual, "instance", "i0")))
	if len(got) != 1 || len(got[0].floats) != 241+20 {
		t.Fatalf("merged series: %d series, %d samples; want 1 series of 261", len(got), len(got[0].floats))
	}
}

func TestLateSamplesFound(t *testing.T) {
	f := newFixture(t)
	lbl := ls("__name__", "backlog", "job", "x")
	f.write("s", promsample.Batch{Series: []promsample.Series{{Labels: lbl, Samples: floats(1000_000, 2000_000, 1000, func(t int64) float64 { return 1 })}}})
	f.seal("s")
	// Received later, hours older in sample time: sealed, then live.
	f.write("s", promsample.Batch{Series: []promsample.Series{{Labels: lbl, Samples: floats(100_000, 200_000, 1000, func(t int64) float64 { return 2 })}}})
	f.seal("s")
	f.write("s", promsample.Batch{Series: []promsample.Series{{Labels: lbl, Samples: floats(500_000, 500_500, 100, func(t int64) float64 { return 3 })}}})
	// And one inside the first run's span, out of order.
	f.write("s", promsample.Batch{Series: []promsample.Series{{Labels: lbl, Samples: []promsample.Sample{{T: 1000_500, V: 4}}}}})
	q, _ := NewQueryable(f.a, Options{})
	for _, c := range []struct {
		mint, maxt int64
		n          int
	}{{0, math.MaxInt64, 1001 + 101 + 6 + 1}, {150_000, 150_000, 1}, {400_000, 600_000, 6}, {1000_000, 1001_000, 3}} {
		querier, _ := q.Querier(c.mint, c.maxt)
		got := readAll(t, querier.Select(context.Background(), true, nil, mustMatcher(labels.MatchEqual, "__name__", "backlog")))
		if len(got) != 1 || len(got[0].floats) != c.n {
			t.Fatalf("[%d, %d]: got %d series, want 1 of %d samples", c.mint, c.maxt, len(got), c.n)
		}
		for i := 1; i < len(got[0].floats); i++ {
			if got[0].floats[i].T <= got[0].floats[i-1].T {
				t.Fatalf("[%d, %d]: samples out of order at %d", c.mint, c.maxt, i)
			}
		}
	}
}

func TestExactDuplicatesRemoved(t *testing.T) {
	f := newFixture(t)
	lbl := ls("__name__", "dup", "job", "x")
	b := promsample.Batch{Series: []promsample.Series{{Labels: lbl, Samples: []promsample.Sample{{T: 1, V: 1}, {T: 2, V: staleNaN}}}}}
	f.write("s", b)
	f.seal("s")
	f.write("s", b) // a sender's retry, sealed in another segment
	f.seal("s")
	f.write("s", b) // and once more, live
	f.write("t", b) // and from another source
	q, _ := NewQueryable(f.a, Options{})
	querier, _ := q.Querier(0, 10)
	got := readAll(t, querier.Select(context.Background(), true, nil, mustMatcher(labels.MatchEqual, "__name__", "dup")))
	equalSeries(t, "dups", []*series{{lbls: lbl, floats: b.Series[0].Samples}}, got)
}

func TestSegmentsPrunedBySampleTime(t *testing.T) {
	f := newFixture(t)
	for i := 0; i < 5; i++ {
		f.write("s", promsample.Batch{Series: []promsample.Series{{Labels: ls("__name__", "m"),
			Samples: floats(int64(i)*1000_000, int64(i)*1000_000+999_000, 1000, func(t int64) float64 { return 1 })}}})
		f.seal("s")
	}
	q, _ := NewQueryable(f.a, Options{})
	querier, _ := q.Querier(2000_000, 2500_000)
	got := readAll(t, querier.Select(context.Background(), true, nil, mustMatcher(labels.MatchEqual, "__name__", "m")))
	if len(got) != 1 || len(got[0].floats) != 501 {
		t.Fatalf("got %v", names(got))
	}
	// Only one segment was read: the others' sample-time spans, from
	// their directories, are outside the range.
	if n := q.s.segmentsRead.Load(); n != 1 {
		t.Fatalf("%d segments read, want 1", n)
	}
}

// A series whose data retention removed leaves the index: label values
// and series no longer name it; one that still has data stays.
func TestEvictedSeriesLeaveTheIndex(t *testing.T) {
	f := newFixture(t)
	old, keep := ls("__name__", "m", "id", "old"), ls("__name__", "m", "id", "keep")
	f.write("s", promsample.Batch{Series: []promsample.Series{{Labels: old, Samples: []promsample.Sample{{T: 1, V: 1}}}}})
	f.seal("s")
	q, err := NewQueryable(f.a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	values := func() []string {
		t.Helper()
		vals, err := q.s.labelValues(context.Background(), math.MinInt64, math.MaxInt64, "id", nil)
		if err != nil {
			t.Fatal(err)
		}
		return vals
	}
	if got := values(); !slices.Equal(got, []string{"old"}) {
		t.Fatalf("before: %v", got)
	}
	cutoff := time.Now().UnixNano()
	f.write("s", promsample.Batch{Series: []promsample.Series{{Labels: keep, Samples: []promsample.Sample{{T: 2, V: 2}}}}})
	f.seal("s")
	if _, err := f.w.EvictBefore(context.Background(), f.srcs["s"], cutoff); err != nil {
		t.Fatal(err)
	}
	if got := values(); !slices.Equal(got, []string{"keep"}) {
		t.Fatalf("after the eviction: %v, want [keep]", got)
	}
	if q.s.x.Get(old) != 0 || q.s.x.Get(keep) == 0 {
		t.Fatal("the evicted series is still indexed, or the kept one is not")
	}
}
