package promread

import (
	"context"
	"errors"
	"math"
	"math/rand"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

// randomSelection builds a selection over three sources (two "segments"
// and a "tail") of a metric with n series: most series are in all three
// with overlapping, repeated or disjoint spans, some in one; a few also
// have an extra piece and histograms. It returns the selection and the answer a model merge gives.
func randomSelection(t testing.TB, rng *rand.Rand, n int, mint, maxt int64) (*selection, []*series) {
	sel, want, err := randomSelectionBudget(t, rng, n, mint, maxt, &budget{})
	if err != nil {
		t.Fatal(err)
	}
	return sel, want
}

// randomSelectionBudget is randomSelection under a sample budget.
func randomSelectionBudget(t testing.TB, rng *rand.Rand, n int, mint, maxt int64, b *budget) (*selection, []*series, error) {
	t.Helper()
	type src struct{ list []promsample.Series }
	var srcs [3]src
	want := expected{}
	var extra [][]promsample.Sample
	for i := 0; i < n; i++ {
		lbls := labels.FromStrings("__name__", "m", "i", string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676)))
		base := int64(rng.Intn(1000)) * 1000
		for k := range srcs {
			if rng.Intn(4) == 0 {
				continue
			}
			from := base + int64(k)*int64(rng.Intn(3))*100_000 // k-th piece may repeat the start of earlier ones
			fl := floats(from, from+int64(rng.Intn(400))*1000, 1000, func(ts int64) float64 {
				if rng.Intn(50) == 0 {
					// Not -0.0: gogo turns it into +0.0 (see
					// TestSamplesEncoderKeepsNegativeZero).
					if b := specialFloats[rng.Intn(len(specialFloats))]; b != 1<<63 {
						return math.Float64frombits(b)
					}
				}
				return float64(ts/1000) * 0.25
			})
			var hs []promsample.Histogram
			if i%17 == 0 && k == 0 {
				hs = []promsample.Histogram{{T: from + 500, H: testHistogram(i)}}
			}
			srcs[k].list = append(srcs[k].list, promsample.Series{Labels: lbls, Samples: fl, Histograms: hs})
			want.add(lbls, fl, hs)
		}
		var ex []promsample.Sample
		if i%9 == 0 {
			ex = floats(base+333, base+20_333, 5000, func(ts int64) float64 { return -float64(ts) })
			want.add(lbls, ex, nil)
		}
		extra = append(extra, ex)
	}
	x := seriesindex.New()
	acc := newAccumulator(context.Background(), x, b)
	p := selectParams{mint: mint, maxt: maxt}
	// The pieces in the order the sources give them; the accumulator
	// files them by slot, the place of their series in the sorted refs.
	type piece struct {
		ref seriesindex.Ref
		s   promsample.Series
	}
	var all []piece
	add := func(s promsample.Series) {
		ref, _ := x.Add(s.Labels)
		all = append(all, piece{ref, s})
	}
	for _, s := range srcs {
		for _, sr := range s.list {
			add(sr)
		}
	}
	for i, ex := range extra {
		if len(ex) == 0 {
			continue
		}
		add(promsample.Series{Labels: labels.FromStrings("__name__", "m", "i", string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676))), Samples: ex})
	}
	var refs []seriesindex.Ref
	for _, pc := range all {
		refs = append(refs, pc.ref)
	}
	slices.Sort(refs)
	refs = slices.Compact(refs)
	acc.setRefs(refs)
	var err error
	for _, pc := range all {
		slot, _ := slices.BinarySearch(refs, pc.ref)
		fl, hs := trimSamples(pc.s.Samples, mint, maxt), trimHists(pc.s.Histograms, mint, maxt)
		if e := acc.add(int32(slot), fl, hs, nil, len(fl) > 0, p); e != nil && err == nil {
			err = e
		}
	}
	return acc.finish(p), want.selectModel(mint, maxt), err
}

// TestMaterializeParallelMatchesModel: a selection decoded on four
// goroutines in many small runs gives exactly the model's series, as one
// goroutine does, and charges the budget for every float it decodes.
func TestMaterializeParallelMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	for round := 0; round < 6; round++ {
		mint, maxt := int64(rng.Intn(300_000)), int64(300_000+rng.Intn(900_000))
		if round == 0 {
			mint, maxt = math.MinInt64, math.MaxInt64
		}
		sel, want := randomSelection(t, rng, 40+rng.Intn(300), mint, maxt)
		for _, par := range []parallelism{{workers: 1}, {workers: 4, runSamples: 1 + rng.Intn(2000)}} {
			got, err := materialize(context.Background(), sel, false, false, par)
			if err != nil {
				t.Fatal(err)
			}
			equalSeries(t, "materialize", want, got)
		}
	}
	checkBudget(t, rng, func(sel *selection, par parallelism) error {
		_, err := materialize(context.Background(), sel, false, false, par)
		return err
	})
}

// checkBudget builds a random selection under a sample budget of half and
// of four times what it holds, and decodes it on one goroutine and on
// three: the first must be refused with ErrTooManySamples (pieces are
// charged as they are added), the second must succeed.
func checkBudget(t *testing.T, rng *rand.Rand, decode func(*selection, parallelism) error) {
	t.Helper()
	seed := rng.Int63()
	_, want := randomSelection(t, rand.New(rand.NewSource(seed)), 300, math.MinInt64, math.MaxInt64)
	total := 0
	for _, sr := range want {
		total += len(sr.floats) + len(sr.hists)
	}
	for _, limit := range []int{total / 2, total * 4} {
		for _, par := range []parallelism{{workers: 1}, {workers: 3, runSamples: 500}} {
			sel, _, err := randomSelectionBudget(t, rand.New(rand.NewSource(seed)), 300, math.MinInt64, math.MaxInt64, &budget{limit: int64(limit)})
			if err == nil {
				err = decode(sel, par)
			}
			if limit < total && !errors.Is(err, ErrTooManySamples) {
				t.Fatalf("limit %d of %d, %+v: %v", limit, total, par, err)
			}
			if limit > total && err != nil {
				t.Fatalf("limit %d of %d, %+v: %v", limit, total, par, err)
			}
		}
	}
}

// TestParallelRunsEachOnceAndStopsAtError: every index runs exactly once
// on the goroutines asked for; after an error no new index starts, and the
// lowest failing index's error is returned.
func TestParallelRunsEachOnceAndStopsAtError(t *testing.T) {
	const n = 1000
	var seen [n]atomic.Int32
	var workers [4]atomic.Int32
	err := parallel(context.Background(), 4, n, func(w, i int) error {
		seen[i].Add(1)
		workers[w].Add(1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range seen {
		if seen[i].Load() != 1 {
			t.Fatalf("index %d ran %d times", i, seen[i].Load())
		}
	}
	var started atomic.Int32
	boom := errors.New("boom")
	err = parallel(context.Background(), 4, n, func(w, i int) error {
		started.Add(1)
		if i == 10 || i == 12 {
			return boom
		}
		return nil
	})
	if err != boom || started.Load() == n {
		t.Fatalf("error %v after %d of %d started", err, started.Load(), n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := parallel(ctx, 2, n, func(w, i int) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
}
