package promsample

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkPackedSamples packs and unpacks float random walks (the
// temperature_celsius shape: every value has 6-8 significant bytes).
func BenchmarkPackedSamples(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	in := make([]Sample, 1<<16)
	v := 20.0
	for i := range in {
		v += r.NormFloat64() * 0.25
		in[i] = Sample{T: int64(i) * 15_000, V: v}
	}
	var out []Sample
	b.ReportAllocs()
	for b.Loop() {
		var a packArena
		var p packedSamples
		for _, s := range in {
			p.add(&a, s.T, s.V)
		}
		out = p.unpack(&a, out[:0])
	}
	if len(out) != len(in) || out[len(out)-1] != in[len(in)-1] {
		b.Fatalf("round trip: %d samples, last %v", len(out), out[len(out)-1])
	}
	b.ReportMetric(float64(b.N)*float64(len(in))/b.Elapsed().Seconds(), "samples/s")
}
