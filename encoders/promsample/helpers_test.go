package promsample

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
)

// Bit-exact comparisons: a plain == fails on every NaN (the stale marker is
// one), so values compare by math.Float64bits and histograms by encoding.

func diffSamples(a, b []Sample) string {
	if len(a) != len(b) {
		return fmt.Sprintf("%d samples, want %d", len(a), len(b))
	}
	for i := range a {
		if a[i].T != b[i].T || math.Float64bits(a[i].V) != math.Float64bits(b[i].V) {
			return fmt.Sprintf("sample %d = (%d, %#x), want (%d, %#x)", i, a[i].T, math.Float64bits(a[i].V), b[i].T, math.Float64bits(b[i].V))
		}
	}
	return ""
}

func histBytes(h Histogram) []byte {
	b, err := appendHistogram(nil, h)
	if err != nil {
		return []byte("invalid")
	}
	return b
}

func diffHists(a, b []Histogram) string {
	if len(a) != len(b) {
		return fmt.Sprintf("%d histograms, want %d", len(a), len(b))
	}
	for i := range a {
		if a[i].T != b[i].T || !bytes.Equal(histBytes(a[i]), histBytes(b[i])) {
			return fmt.Sprintf("histogram %d at %d differs from want at %d", i, a[i].T, b[i].T)
		}
		if (a[i].H == nil) != (b[i].H == nil) {
			return fmt.Sprintf("histogram %d kind differs", i)
		}
	}
	return ""
}

func diffExemplars(a, b []Exemplar) string {
	if len(a) != len(b) {
		return fmt.Sprintf("%d exemplars, want %d", len(a), len(b))
	}
	for i := range a {
		if a[i].T != b[i].T || math.Float64bits(a[i].V) != math.Float64bits(b[i].V) || !labels.Equal(a[i].Labels, b[i].Labels) {
			return fmt.Sprintf("exemplar %d = %v@%d, want %v@%d", i, a[i].Labels, a[i].T, b[i].Labels, b[i].T)
		}
	}
	return ""
}

func diffSeries(got, want []Series) string {
	if len(got) != len(want) {
		var g, w []string
		for _, s := range got {
			g = append(g, s.Labels.String())
		}
		for _, s := range want {
			w = append(w, s.Labels.String())
		}
		return fmt.Sprintf("%d series, want %d\ngot  %s\nwant %s", len(got), len(want), strings.Join(g, " "), strings.Join(w, " "))
	}
	for i := range got {
		if !labels.Equal(got[i].Labels, want[i].Labels) {
			return fmt.Sprintf("series %d is %s, want %s", i, got[i].Labels, want[i].Labels)
		}
		for _, d := range []string{diffSamples(got[i].Samples, want[i].Samples), diffHists(got[i].Histograms, want[i].Histograms),
			diffExemplars(got[i].Exemplars, want[i].Exemplars)} {
			if d != "" {
				return fmt.Sprintf("series %s: %s", got[i].Labels, d)
			}
		}
	}
	return ""
}

func diffBatch(got, want Batch) string {
	if d := diffSeries(got.Series, want.Series); d != "" {
		return d
	}
	if !slices.Equal(got.Metadata, want.Metadata) {
		return fmt.Sprintf("metadata %v, want %v", got.Metadata, want.Metadata)
	}
	return ""
}

// specialBits are float bit patterns that must survive unchanged.
var specialBits = []uint64{
	0x7ff0000000000002, // stale marker
	0x7ff8000000000001, // Prometheus NaN
	0x7ff8000000000000, // Go NaN
	0xfff8000000000000, // negative quiet NaN
	0x7ff0000000000001, // signalling NaN
	0x7fffffffffffffff, 0xffffffffffffffff,
	0x7ff0000000000000, 0xfff0000000000000, // ±Inf
	0x8000000000000000, 0x0000000000000000, // -0, +0
	0x0000000000000001, 0x800fffffffffffff, // subnormals
	0x7fefffffffffffff, 0xffefffffffffffff, // ±MaxFloat64
	math.Float64bits(1 << 53), math.Float64bits(-(1 << 53)), math.Float64bits(1<<53 + 2), math.Float64bits(1 << 62),
	math.Float64bits(0.5), math.Float64bits(-1), math.Float64bits(42),
}

var tsExtremes = []int64{math.MinInt64, math.MinInt64 + 1, -1, 0, 1, math.MaxInt64 - 1, math.MaxInt64, 1_700_000_000_000}

// randValue draws integers, fractions and specials.
func randValue(r *rand.Rand) float64 {
	switch r.IntN(7) {
	case 4:
		return float64(r.Int64N(10_000_000)-5_000_000) / []float64{10, 100, 1000}[r.IntN(3)]
	case 5:
		return float64(r.Int64N(1<<30)) * 4096
	case 6:
		return -float64(r.Int64N(1 << 20))
	case 0:
		return float64(r.Int64N(1<<40) - 1<<39)
	case 1:
		return r.Float64() * 1e6
	case 2:
		return math.Float64frombits(specialBits[r.IntN(len(specialBits))])
	}
	return math.Float64frombits(r.Uint64())
}

// randHistogram draws every shape: integer or float, schemas -4..8 and -53
// with custom values, zero bucket, spans on both sides, any reset hint.
func randHistogram(r *rand.Rand, t int64) Histogram {
	schemas := []int32{-4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, -53}
	schema := schemas[r.IntN(len(schemas))]
	spans := func() []histogram.Span {
		var s []histogram.Span
		for range r.IntN(3) {
			s = append(s, histogram.Span{Offset: int32(r.IntN(20) - 10), Length: uint32(r.IntN(4))})
		}
		return s
	}
	count := func(s []histogram.Span) int {
		n := 0
		for _, x := range s {
			n += int(x.Length)
		}
		return n
	}
	pos, neg := spans(), spans()
	var custom []float64
	if schema == -53 {
		neg = nil
		for k := range count(pos) + 1 {
			custom = append(custom, float64(k)*0.25)
		}
		if r.IntN(4) == 0 {
			custom = append(custom, math.Inf(1))
		}
	}
	hint := histogram.CounterResetHint(r.IntN(4))
	if r.IntN(2) == 0 {
		h := &histogram.Histogram{CounterResetHint: hint, Schema: schema, ZeroThreshold: 1e-3 * float64(r.IntN(3)),
			ZeroCount: r.Uint64N(10), Count: r.Uint64(), Sum: randValue(r), PositiveSpans: pos, NegativeSpans: neg, CustomValues: custom}
		for range count(pos) {
			h.PositiveBuckets = append(h.PositiveBuckets, r.Int64()>>uint(r.IntN(64)))
		}
		for range count(neg) {
			h.NegativeBuckets = append(h.NegativeBuckets, r.Int64N(100)-50)
		}
		return Histogram{T: t, H: h}
	}
	h := &histogram.FloatHistogram{CounterResetHint: hint, Schema: schema, ZeroThreshold: math.Float64frombits(specialBits[r.IntN(len(specialBits))]),
		ZeroCount: randValue(r), Count: randValue(r), Sum: randValue(r), PositiveSpans: pos, NegativeSpans: neg, CustomValues: custom}
	for range count(pos) {
		h.PositiveBuckets = append(h.PositiveBuckets, randValue(r))
	}
	for range count(neg) {
		h.NegativeBuckets = append(h.NegativeBuckets, randValue(r))
	}
	return Histogram{T: t, FH: h}
}

// randLabels draws from a small space so series repeat across batches;
// "__meta" exercises the escaped label column.
func randLabels(r *rand.Rand) labels.Labels {
	pairs := []string{"__name__", []string{"up", "http_requests_total", "a", "z_metric", ""}[r.IntN(5)]}
	if pairs[1] == "" {
		pairs = pairs[:0]
	}
	for _, n := range []string{"instance", "job", "le", "__meta", "Zone"} {
		if r.IntN(3) > 0 {
			pairs = append(pairs, n, []string{"x", "y", "host-1:9100", "ünïcödé", "a b"}[r.IntN(5)])
		}
	}
	return labels.FromStrings(pairs...)
}

// randBatches draws n batches; about a fifth of batches repeat an earlier
// one (a sender's retry, whose samples are exact duplicates).
func randBatches(r *rand.Rand, n int) []Batch {
	var out []Batch
	for i := 0; i < n; i++ {
		if i > 0 && r.IntN(5) == 0 {
			out = append(out, out[r.IntN(len(out))])
			continue
		}
		var b Batch
		for range r.IntN(6) {
			s := Series{Labels: randLabels(r)}
			t := int64(r.IntN(1000)) * 1000
			if r.IntN(10) == 0 {
				t = tsExtremes[r.IntN(len(tsExtremes))]
			}
			for range r.IntN(8) {
				s.Samples = append(s.Samples, Sample{T: t, V: randValue(r)})
				t += int64(r.IntN(3)) * 15000
			}
			if r.IntN(4) == 0 {
				for range r.IntN(3) + 1 {
					s.Histograms = append(s.Histograms, randHistogram(r, int64(r.IntN(100000))))
				}
			}
			if r.IntN(5) == 0 {
				s.Exemplars = append(s.Exemplars, Exemplar{Labels: labels.FromStrings("trace_id", fmt.Sprint(r.IntN(5))), T: int64(r.IntN(100000)), V: randValue(r)})
			}
			b.Series = append(b.Series, s)
		}
		if r.IntN(3) == 0 {
			b.Metadata = append(b.Metadata, Metadata{MetricFamily: "up", Type: "gauge", Help: []string{"h1", "h2"}[r.IntN(2)], Unit: ""})
		}
		out = append(out, b)
	}
	return out
}

// expected computes, independently of the collector, what a read of all
// batches must return: series sorted by (metric name, labels), samples by
// (T, bits) with exact duplicates removed, and likewise histograms and
// exemplars; then filtered by q.
func expected(batches []Batch, q Query) []Series {
	type acc struct {
		s    Series
		seen map[[2]uint64]bool
		hs   map[string]bool
		es   map[string]bool
	}
	m := map[string]*acc{}
	for _, b := range batches {
		for _, s := range b.Series {
			k := s.Labels.String()
			a := m[k]
			if a == nil {
				a = &acc{s: Series{Labels: s.Labels}, seen: map[[2]uint64]bool{}, hs: map[string]bool{}, es: map[string]bool{}}
				m[k] = a
			}
			for _, x := range s.Samples {
				key := [2]uint64{uint64(x.T), math.Float64bits(x.V)}
				if !a.seen[key] {
					a.seen[key] = true
					a.s.Samples = append(a.s.Samples, x)
				}
			}
			for _, h := range s.Histograms {
				key := fmt.Sprint(h.T) + string(histBytes(h))
				if !a.hs[key] {
					a.hs[key] = true
					a.s.Histograms = append(a.s.Histograms, h)
				}
			}
			for _, e := range s.Exemplars {
				key := fmt.Sprint(e.T, math.Float64bits(e.V), e.Labels.String())
				if !a.es[key] {
					a.es[key] = true
					a.s.Exemplars = append(a.s.Exemplars, e)
				}
			}
		}
	}
	var out []Series
	for _, a := range m {
		s := a.s
		matched := true
		for _, mt := range q.Matchers {
			matched = matched && mt.Matches(s.Labels.Get(mt.Name))
		}
		if !matched {
			continue
		}
		in := func(t int64) bool { return t >= q.MinT && t <= q.MaxT }
		var r Series
		r.Labels = s.Labels
		for _, x := range s.Samples {
			if in(x.T) {
				r.Samples = append(r.Samples, x)
			}
		}
		for _, x := range s.Histograms {
			if in(x.T) {
				r.Histograms = append(r.Histograms, x)
			}
		}
		for _, x := range s.Exemplars {
			if in(x.T) {
				r.Exemplars = append(r.Exemplars, x)
			}
		}
		slices.SortFunc(r.Samples, func(a, b Sample) int {
			if a.T != b.T {
				return cmpInt(a.T, b.T)
			}
			return cmpU(math.Float64bits(a.V), math.Float64bits(b.V))
		})
		slices.SortStableFunc(r.Histograms, func(a, b Histogram) int {
			if a.T != b.T {
				return cmpInt(a.T, b.T)
			}
			return bytes.Compare(histBytes(a), histBytes(b))
		})
		slices.SortFunc(r.Exemplars, func(a, b Exemplar) int {
			if a.T != b.T {
				return cmpInt(a.T, b.T)
			}
			if c := cmpU(math.Float64bits(a.V), math.Float64bits(b.V)); c != 0 {
				return c
			}
			return labels.Compare(a.Labels, b.Labels)
		})
		if len(r.Samples)+len(r.Histograms)+len(r.Exemplars) > 0 {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Series) int { return compareSeries(a.Labels, b.Labels) })
	return out
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func writeFile(path string, b []byte) error  { return os.WriteFile(path, b, 0o600) }
func openFile(path string) (*os.File, error) { return os.Open(path) }
