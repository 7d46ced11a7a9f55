package promread

import (
	"context"
	"math"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// TestTailGrowsIncrementally: a live tail that grows between reads is
// extended from the previous one (new rows only), and the answer equals a
// cold read's: appended samples, a late sample landing in its place, an
// exact duplicate dropped, a same-timestamp sample with another value kept,
// a new series, special floats bit-exact, and a seal resetting the tail.
func TestTailGrowsIncrementally(t *testing.T) {
	f := newFixture(t)
	warm, err := NewQueryable(f.a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := ls("__name__", "m", "id", "a"), ls("__name__", "m", "id", "b")
	c := ls("__name__", "other", "id", "c")
	write := func(l labels.Labels, fl ...promsample.Sample) {
		f.write("src", promsample.Batch{Series: []promsample.Series{{Labels: l, Samples: fl}}})
	}
	check := func(step string) {
		t.Helper()
		for _, ms := range [][]*labels.Matcher{
			{mustMatcher(labels.MatchEqual, "__name__", "m")},
			{mustMatcher(labels.MatchEqual, "__name__", "m"), mustMatcher(labels.MatchEqual, "id", "a")},
			{mustMatcher(labels.MatchRegexp, "__name__", ".+")},
		} {
			cold, err := NewQueryable(f.a, Options{CacheBytes: -1})
			if err != nil {
				t.Fatal(err)
			}
			p := selectParams{mint: math.MinInt64, maxt: math.MaxInt64, matchers: ms, exemplars: true}
			got, err := warm.s.selectSeries(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			want, err := cold.s.selectSeries(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			equalSeries(t, step, want, got)
			for i := range want {
				sameBits(t, step, got[i].floats, want[i].floats)
				if len(got[i].exemplars) != len(want[i].exemplars) {
					t.Fatalf("%s: %s has %d exemplars, want %d", step, want[i].lbls, len(got[i].exemplars), len(want[i].exemplars))
				}
			}
		}
	}
	var s []promsample.Sample
	for i := range 200 {
		s = append(s, promsample.Sample{T: int64(i) * 1000, V: float64(i)})
	}
	write(a, s[:130]...)
	check("first rows")
	write(a, s[130:150]...)
	write(b, promsample.Sample{T: 5000, V: staleNaN})
	check("appended")
	write(a, promsample.Sample{T: 2500, V: math.Float64frombits(0x7ff8000000000001)}) // late
	write(a, s[140])                                                                  // exact duplicate
	write(a, promsample.Sample{T: s[149].T, V: -0.0})                                 // same ts, other value
	write(c, promsample.Sample{T: 1, V: math.Inf(-1)})
	// Histograms and exemplars: a new series, then more of both for it
	// and an exemplar on a series that had none.
	h := ls("__name__", "m", "id", "h")
	f.write("src", promsample.Batch{Series: []promsample.Series{{Labels: h,
		Histograms: []promsample.Histogram{{T: 1000, H: testHistogram(1)}}}}})
	check("a histogram series")
	f.write("src", promsample.Batch{Series: []promsample.Series{
		{Labels: h, Histograms: []promsample.Histogram{{T: 2000, H: testHistogram(2)}},
			Exemplars: []promsample.Exemplar{{Labels: ls("trace", "x"), T: 2000, V: 1}}},
		{Labels: b, Samples: []promsample.Sample{{T: 6000, V: 1}}, Exemplars: []promsample.Exemplar{{Labels: ls("trace", "y"), T: 6000, V: 1}}},
	}})
	check("histograms and exemplars added")
	write(a, promsample.Sample{T: s[149].T + 1, V: 7}) // h and b untouched: copied
	check("histograms and exemplars kept")
	check("late, duplicate, new metric")
	f.seal("src")
	write(a, s[150:]...)
	check("after a seal")
	// The tail after the seal holds only the new rows.
	q, _ := warm.Querier(s[150].T, math.MaxInt64)
	got := readAll(t, q.Select(context.Background(), true, nil, mustMatcher(labels.MatchEqual, "id", "a")))
	if len(got) != 1 || len(got[0].floats) != 50 {
		t.Fatalf("after the seal: %d series", len(got))
	}
	// Every row was decoded once: the tail grew by the new rows only, and
	// the seal dropped the parts it sealed instead of starting over.
	var decoded int64
	warm.s.idx.mu.Lock()
	for _, tl := range warm.s.idx.tails {
		decoded += tl.decoded
	}
	warm.s.idx.mu.Unlock()
	if decoded > int64(f.rows) {
		t.Fatalf("the tails decoded %d rows of %d written", decoded, f.rows)
	}
}

// TestCatalogMemoFollowsCommits: repeated questions reuse the catalog
// answers of an unchanged snapshot version, and a commit (new rows, a
// seal) is seen by the next question.
func TestCatalogMemoFollowsCommits(t *testing.T) {
	f := newFixture(t)
	q, err := NewQueryable(f.a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := ls("__name__", "m", "id", "a")
	count := func() int { t.Helper(); return floatsNamed(t, q, "m") }
	f.write("src", promsample.Batch{Series: []promsample.Series{{Labels: m, Samples: []promsample.Sample{{T: 1, V: 1}}}}})
	if n := count(); n != 1 {
		t.Fatalf("%d samples, want 1", n)
	}
	count()
	q.s.memos.mu.Lock()
	memoized := 0
	for _, mm := range q.s.memos.byConn {
		if mm.hasSrc && len(mm.spans) > 0 {
			memoized++
		}
	}
	q.s.memos.mu.Unlock()
	if memoized == 0 {
		t.Fatal("no catalog answers remembered")
	}
	f.write("src", promsample.Batch{Series: []promsample.Series{{Labels: m, Samples: []promsample.Sample{{T: 2, V: 2}}}}})
	if n := count(); n != 2 {
		t.Fatalf("after a write: %d samples, want 2", n)
	}
	f.seal("src")
	f.write("src", promsample.Batch{Series: []promsample.Series{{Labels: m, Samples: []promsample.Sample{{T: 3, V: 3}}}}})
	if n := count(); n != 3 {
		t.Fatalf("after a seal and a write: %d samples, want 3", n)
	}
}
