package promread

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// specialFloats are the values whose bits a lossy path would change.
var specialFloats = []uint64{
	0x7ff0000000000002, // Prometheus's stale marker
	0x7ff8000000000001, // a NaN with another payload
	0x7ff8000000000000, // the usual NaN
	0xfff8000000000000, // a negative NaN
	math.Float64bits(math.Inf(1)),
	math.Float64bits(math.Inf(-1)),
	1,                  // the smallest subnormal
	0x000fffffffffffff, // the largest subnormal
	0x8000000000000000, // -0.0
	0,                  // +0.0
	math.Float64bits(math.MaxFloat64),
	math.Float64bits(-math.SmallestNonzeroFloat64),
}

func sameBits(t *testing.T, what string, got, want []promsample.Sample) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d samples, want %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i].T != want[i].T || math.Float64bits(got[i].V) != math.Float64bits(want[i].V) {
			t.Fatalf("%s: sample %d is (%d, %#x), want (%d, %#x)", what, i, got[i].T, math.Float64bits(got[i].V), want[i].T, math.Float64bits(want[i].V))
		}
	}
}

func TestPackedFloatsKeepEveryBit(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	var in []promsample.Sample
	ts := int64(-5000) // negative timestamps too
	for i := 0; i < 1000; i++ {
		var v float64
		switch {
		case i%7 == 0:
			v = math.Float64frombits(specialFloats[(i/7)%len(specialFloats)])
		case i%5 == 0:
			v = math.Float64frombits(rng.Uint64()) // arbitrary bits, NaNs included
		default:
			v = float64(i) * 1.5
		}
		in = append(in, promsample.Sample{T: ts, V: v})
		if i%11 == 3 {
			// the same timestamp with another value: both are kept
			in = append(in, promsample.Sample{T: ts, V: v + 1})
		}
		ts += int64(1 + rng.Intn(30_000))
	}
	e, err := newMetricEntry([]promsample.Series{{Labels: labels.FromStrings("__name__", "m"), Samples: in}})
	if err != nil {
		t.Fatal(err)
	}
	if want := (len(in) + chunkSamples - 1) / chunkSamples; len(e.chunks) != want {
		t.Fatalf("%d chunks, want %d", len(e.chunks), want)
	}
	var u unpacker
	got, err := u.floats(e, &e.series[0], math.MinInt64, math.MaxInt64, nil)
	if err != nil {
		t.Fatal(err)
	}
	sameBits(t, "all", got, in)

	// Every sub-range, including ones that start or end inside a chunk,
	// between two chunks, and on a timestamp shared by two samples.
	for k := 0; k < 300; k++ {
		i, j := rng.Intn(len(in)), rng.Intn(len(in))
		if i > j {
			i, j = j, i
		}
		mint, maxt := in[i].T, in[j].T
		if k%3 == 1 {
			mint++
		}
		if k%3 == 2 {
			maxt--
		}
		var want []promsample.Sample
		for _, s := range in {
			if s.T >= mint && s.T <= maxt {
				want = append(want, s)
			}
		}
		got, err := u.floats(e, &e.series[0], mint, maxt, nil)
		if err != nil {
			t.Fatal(err)
		}
		sameBits(t, "range", got, want)
		if n := e.countIn(&e.series[0], mint, maxt); n < len(want) {
			t.Fatalf("countIn %d below the %d samples in range", n, len(want))
		}
		has, err := e.hasFloatsIn(&u, &e.series[0], mint, maxt)
		if err != nil {
			t.Fatal(err)
		}
		if has != (len(want) > 0) {
			t.Fatalf("hasFloatsIn [%d, %d] = %v with %d samples", mint, maxt, has, len(want))
		}
	}
	// A range that falls between two samples holds nothing.
	has, err := e.hasFloatsIn(&u, &e.series[0], in[500].T+1, in[501].T-1)
	if err != nil || has {
		t.Fatalf("gap between samples: has=%v err=%v", has, err)
	}
}

// TestPackedEntryIsCompact: the cache accounts an entry at a few bytes per
// regular sample, not the 16 of a decoded one.
func TestPackedEntryIsCompact(t *testing.T) {
	var series []promsample.Series
	for i := 0; i < 100; i++ {
		var fl []promsample.Sample
		for j := 0; j < 1440; j++ {
			fl = append(fl, promsample.Sample{T: int64(j) * 5000, V: float64(j * (i%50 + 1))})
		}
		series = append(series, promsample.Series{Labels: labels.FromStrings("__name__", "m", "id", string(rune('a'+i%26))+string(rune('a'+i/26))), Samples: fl})
	}
	e, err := newMetricEntry(series)
	if err != nil {
		t.Fatal(err)
	}
	perSample := float64(e.size()) / (100 * 1440)
	if perSample > 4 || perSample < 0.2 {
		t.Fatalf("%.2f bytes per sample accounted", perSample)
	}
	if got, _, _ := e.postingsFor([]*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "id", "ba")}, nil); len(got) != 1 || e.series[got[0]].lbls.Get("id") != "ba" {
		t.Fatalf("postings for id=ba: %v", got)
	}
	t.Logf("%.2f bytes per sample", perSample)
}

// TestPostingsForIntersects: the series postingsFor lists for any set of
// equality matchers are exactly those that satisfy them all, with the
// scratch buffer reused across calls, and the entry's postings lists are
// never written.
func TestPostingsForIntersects(t *testing.T) {
	rng := rand.New(rand.NewSource(8))
	var series []promsample.Series
	for i := 0; i < 600; i++ {
		series = append(series, promsample.Series{Labels: labels.FromStrings("__name__", "m",
			"a", fmt.Sprint(i%7), "b", fmt.Sprint(i%13), "c", fmt.Sprint(rng.Intn(40)), "d", fmt.Sprint(i/300)),
			Samples: []promsample.Sample{{T: int64(i), V: 1}}})
	}
	slices.SortFunc(series, func(a, b promsample.Series) int { return labels.Compare(a.Labels, b.Labels) })
	e, err := newMetricEntry(series)
	if err != nil {
		t.Fatal(err)
	}
	snapshot := fmt.Sprint(e.postings)
	var buf []int32
	for round := 0; round < 500; round++ {
		var ms []*labels.Matcher
		for _, name := range []string{"a", "b", "c", "d", "__name__", "zz"} {
			switch rng.Intn(3) {
			case 0:
				v := fmt.Sprint(rng.Intn(45))
				if name == "__name__" {
					v = "m"
				}
				ms = append(ms, labels.MustNewMatcher(labels.MatchEqual, name, v))
			case 1:
				ms = append(ms, labels.MustNewMatcher(labels.MatchEqual, name, "")) // not by postings
			}
		}
		rng.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
		var idx []int32
		var ok bool
		idx, ok, buf = e.postingsFor(ms, buf[:0])
		var want []int32
		any := false
		for i := range e.series {
			all := true
			for _, m := range ms {
				if byPostings(m) {
					any = true
					all = all && m.Matches(e.series[i].lbls.Get(m.Name))
				}
			}
			if all {
				want = append(want, int32(i))
			}
		}
		if ok != any {
			t.Fatalf("round %d %v: ok %v, want %v", round, ms, ok, any)
		}
		if ok && !slices.Equal(idx, want) && !(len(idx) == 0 && len(want) == 0) {
			t.Fatalf("round %d %v: %v, want %v", round, ms, idx, want)
		}
	}
	if fmt.Sprint(e.postings) != snapshot {
		t.Fatal("postingsFor wrote into the entry's postings")
	}
}
