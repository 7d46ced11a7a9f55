package promread

import (
	"math"
	"math/rand"
	"testing"

	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// randomChunkSamples draws up to 120 samples whose deltas of deltas fall in
// every bucket of the format (0, 14, 17, 20 and 64 bits) and whose values
// take every XOR path (same, reused window, new window, 64 significant
// bits), special floats included.
func randomChunkSamples(rng *rand.Rand, n int) []promsample.Sample {
	out := make([]promsample.Sample, 0, n)
	t := rng.Int63n(1<<40) - 1<<39
	delta := int64(rng.Intn(20_000))
	v := rng.Float64()
	for i := 0; i < n; i++ {
		out = append(out, promsample.Sample{T: t, V: v})
		switch rng.Intn(7) {
		case 0: // dod 0
		case 1:
			delta += int64(rng.Intn(1<<13)) - 1<<12
		case 2:
			delta += int64(rng.Intn(1<<16)) - 1<<15
		case 3:
			delta += int64(rng.Intn(1<<19)) - 1<<18
		case 4:
			delta += int64(rng.Intn(1<<40)) - 1<<39
		case 5: // the bucket edges
			delta += []int64{-8191, 8192, -65535, 65536, -524287, 524288, -8192, -65536, -524288}[rng.Intn(9)]
		default:
			delta += int64(rng.Intn(3)) - 1
		}
		if delta < 0 {
			delta = 0 // keep time non-decreasing; equal timestamps allowed
		}
		t += delta
		switch rng.Intn(6) {
		case 0: // same value
		case 1:
			v = math.Float64frombits(specialFloats[rng.Intn(len(specialFloats))])
		case 2:
			v = math.Float64frombits(rng.Uint64())
		case 3:
			v = math.Float64frombits(math.Float64bits(v) ^ 1) // one low bit
		case 4:
			v = math.Float64frombits(math.Float64bits(v) ^ 1<<63) // the sign bit only
		default:
			v += float64(rng.Intn(100))
		}
	}
	return out
}

func xorChunk(t testing.TB, in []promsample.Sample) []byte {
	t.Helper()
	c := chunkenc.NewXORChunk()
	app, err := c.Appender()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range in {
		app.Append(0, s.T, s.V)
	}
	return c.Bytes()
}

// chunkencDecode is the reference: Prometheus's own iterator.
func chunkencDecode(t testing.TB, b []byte, mint, maxt int64) []promsample.Sample {
	t.Helper()
	c, err := chunkenc.FromData(chunkenc.EncXOR, b)
	if err != nil {
		t.Fatal(err)
	}
	var out []promsample.Sample
	it := c.Iterator(nil)
	for it.Next() == chunkenc.ValFloat {
		ts, v := it.At()
		if ts >= mint && ts <= maxt {
			out = append(out, promsample.Sample{T: ts, V: v})
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDecodeXORMatchesChunkenc(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	for round := 0; round < 3000; round++ {
		in := randomChunkSamples(rng, 1+rng.Intn(120))
		b := xorChunk(t, in)
		got, err := decodeXOR(b, math.MinInt64, math.MaxInt64, true, nil)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		sameBits(t, "whole", got, in)
		want := chunkencDecode(t, b, math.MinInt64, math.MaxInt64)
		sameBits(t, "chunkenc", got, want)
		// A sub-range, its ends on and between samples.
		lo, hi := in[rng.Intn(len(in))].T+int64(rng.Intn(3))-1, in[rng.Intn(len(in))].T+int64(rng.Intn(3))-1
		got, err = decodeXOR(b, lo, hi, false, got[:0])
		if err != nil {
			t.Fatal(err)
		}
		sameBits(t, "range", got, chunkencDecode(t, b, lo, hi))
	}
}

// TestDecodeXORRefusesCorruptChunks: truncated or random bytes give an
// error or samples, never a panic or a read past the slice.
func TestDecodeXORRefusesCorruptChunks(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for round := 0; round < 2000; round++ {
		b := xorChunk(t, randomChunkSamples(rng, 1+rng.Intn(120)))
		cut := b[:rng.Intn(len(b)+1)]
		if _, err := decodeXOR(cut, math.MinInt64, math.MaxInt64, true, nil); err == nil && len(cut) < len(b)-1 {
			// A chunk cut inside its last byte may still hold every
			// sample; one cut earlier cannot.
			t.Fatalf("round %d: %d of %d bytes decoded without error", round, len(cut), len(b))
		}
		junk := make([]byte, rng.Intn(64))
		rng.Read(junk)
		decodeXOR(junk, math.MinInt64, math.MaxInt64, rng.Intn(2) == 0, nil)
	}
}

func FuzzDecodeXOR(f *testing.F) {
	rng := rand.New(rand.NewSource(5))
	for range 8 {
		f.Add(xorChunk(f, randomChunkSamples(rng, 1+rng.Intn(120))))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeXOR(b, math.MinInt64, math.MaxInt64, true, nil)
		if err != nil {
			return
		}
		c, cerr := chunkenc.FromData(chunkenc.EncXOR, b)
		if cerr != nil {
			return
		}
		var want []promsample.Sample
		it := c.Iterator(nil)
		for it.Next() == chunkenc.ValFloat {
			ts, v := it.At()
			want = append(want, promsample.Sample{T: ts, V: v})
		}
		if it.Err() != nil {
			return // chunkenc gives up where this decoder did not: both fine
		}
		sameBits(t, "fuzz", got, want)
	})
}

func BenchmarkDecodeXOR(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	var chunks [][]byte
	for range 64 {
		// Scrape-like: a fixed step with a little jitter, a counter.
		in := make([]promsample.Sample, 120)
		t, v := int64(1_700_000_000_000), 0.0
		for i := range in {
			in[i] = promsample.Sample{T: t, V: v}
			t += 5000 + int64(rng.Intn(3)) - 1
			v += float64(rng.Intn(50))
		}
		chunks = append(chunks, xorChunk(b, in))
	}
	dst := make([]promsample.Sample, 0, 120)
	b.Run("dendro", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			dst, _ = decodeXOR(chunks[i%len(chunks)], math.MinInt64, math.MaxInt64, true, dst[:0])
		}
	})
	b.Run("chunkenc", func(b *testing.B) {
		var c chunkenc.XORChunk
		var it chunkenc.Iterator
		for i := 0; b.Loop(); i++ {
			c.Reset(chunks[i%len(chunks)])
			it = c.Iterator(it)
			dst = dst[:0]
			for it.Next() == chunkenc.ValFloat {
				t, v := it.At()
				dst = append(dst, promsample.Sample{T: t, V: v})
			}
		}
	})
}
