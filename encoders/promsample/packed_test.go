package promsample

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
)

func TestPackedSamplesRoundTripBitExact(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	cases := map[string][]Sample{"empty": nil}
	var ext []Sample
	for i, ts := range tsExtremes {
		ext = append(ext, Sample{T: ts, V: math.Float64frombits(specialBits[i%len(specialBits)])})
	}
	cases["extreme timestamps and special values"] = ext
	var steady []Sample
	for i := range 1000 {
		steady = append(steady, Sample{T: 1_700_000_000_000 + int64(i)*15_000, V: float64(i / 7)})
	}
	cases["steady counter"] = steady
	var random []Sample
	for range 5000 {
		random = append(random, Sample{T: r.Int64() - r.Int64(), V: randValue(r)})
	}
	cases["random"] = random
	for _, bits := range specialBits {
		cases["constant special"] = append(cases["constant special"], Sample{T: 5, V: math.Float64frombits(bits)}, Sample{T: 6, V: math.Float64frombits(bits)})
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			// Two series written in turn share one arena: their chunks
			// interleave in its slabs and must not overlap.
			var a packArena
			var p, q packedSamples
			for _, s := range in {
				p.add(&a, s.T, s.V)
				q.add(&a, -s.T, -s.V)
			}
			var want []Sample
			for _, s := range in {
				want = append(want, Sample{T: -s.T, V: -s.V})
			}
			if diff := diffSamples(q.unpack(&a, nil), want); diff != "" {
				t.Fatalf("the other series: %s", diff)
			}
			if int(p.n) != len(in) {
				t.Fatalf("n = %d, want %d", p.n, len(in))
			}
			got := p.unpack(&a, []Sample{{T: 1, V: 2}})
			if d := diffSamples(got[1:], in); d != "" || got[0] != (Sample{T: 1, V: 2}) {
				t.Fatalf("unpack: %s (prefix %v)", d, got[0])
			}
			// A steady scrape of a counter: one byte of timestamp and a
			// few of value, against 16 in a []Sample.
			size := packedBytes(&a, &p)
			if name == "steady counter" && size > 4*len(in) {
				t.Errorf("packed %d steady samples into %d bytes, want at most 4 each", len(in), size)
			}
		})
	}
}

func TestPackedSamplesOrderedAndSpan(t *testing.T) {
	for _, c := range []struct {
		ts       []int64
		ordered  bool
		min, max int64
	}{
		{[]int64{1, 2, 3}, true, 1, 3},
		{[]int64{math.MinInt64, math.MaxInt64}, true, math.MinInt64, math.MaxInt64},
		{[]int64{3, 2}, false, 2, 3},
		{[]int64{1, 1}, false, 1, 1}, // a retried sample: not canonical until deduplicated
		{[]int64{5}, true, 5, 5},
	} {
		var a packArena
		var p packedSamples
		for _, ts := range c.ts {
			p.add(&a, ts, 1)
		}
		if lo, hi := p.span(&a); p.ordered != c.ordered || lo != c.min || hi != c.max {
			t.Errorf("%v: ordered %v [%d, %d], want %v [%d, %d]", c.ts, p.ordered, lo, hi, c.ordered, c.min, c.max)
		}
	}
}

// The packing collector is how Encode and Merge hold samples; it must not
// change a segment by a byte, whatever order the samples arrive in.
func TestPackingCollectorWritesWhatAPlainOneWrites(t *testing.T) {
	for seed := uint64(0); seed < 30; seed++ {
		r := rand.New(rand.NewPCG(seed, 3))
		batches := randBatches(r, 1+r.IntN(20))
		var segs [2][]byte
		for i, c := range []*collector{newCollector(), newPackingCollector()} {
			for j := range batches {
				c.add(&batches[j])
			}
			series, meta := c.finish()
			data, _, err := (&Encoder{Opts: Options{RowGroupRows: []int{0, 2, 9}[seed%3]}}).write(c, series, meta, 0)
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			segs[i] = data
		}
		if !bytes.Equal(segs[0], segs[1]) {
			t.Fatalf("seed %d: packed collector wrote a different segment (%d vs %d bytes)", seed, len(segs[1]), len(segs[0]))
		}
	}
}

// packedBytes returns the bytes of the chunks p took, following their links.
func packedBytes(a *packArena, p *packedSamples) int {
	if p.n == 0 {
		return 0
	}
	size := 0
	addr := p.first
	for l := uint8(0); ; l++ {
		size += packChunkSize(l)
		if addr == p.cur {
			return size
		}
		addr = binary.LittleEndian.Uint32(a.bytes(addr, packChunkSize(l)))
	}
}

// A seal's series of a few samples takes one chunk; a longer one takes
// chunks of growing size, each filled before the next is cut.
func TestPackedSamplesChunks(t *testing.T) {
	for _, c := range []struct {
		samples, chunks int
	}{
		{1, 1}, {4, 1}, {16, 2}, {200, 5}, {2000, 11}, // 32, 32, 32+64, ... +512, ... +6*1024 bytes
	} {
		var a packArena
		var p packedSamples
		var in []Sample
		for i := range c.samples {
			s := Sample{T: 1_700_000_000_000 + int64(i)*15_000 + int64(i*7%21), V: float64(1_000_000 + i*37 + i%5)}
			in = append(in, s)
			p.add(&a, s.T, s.V)
		}
		if d := diffSamples(p.unpack(&a, nil), in); d != "" {
			t.Fatalf("%d samples: %s", c.samples, d)
		}
		chunks := 1
		for addr := p.first; addr != p.cur; chunks++ {
			addr = binary.LittleEndian.Uint32(a.bytes(addr, packChunkSize(uint8(chunks-1))))
		}
		if chunks != c.chunks {
			t.Errorf("%d samples in %d chunks (%d bytes), want %d", c.samples, chunks, packedBytes(&a, &p), c.chunks)
		}
	}
}

// An arena that cannot address another chunk drops the sample and says
// so; the encoder then fails instead of writing a segment without it.
func TestPackArenaFull(t *testing.T) {
	c := newPackingCollector()
	c.arena.slabs = make([][]byte, maxPackSlabs) // every address in use
	c.arena.used = packSlab
	c.add(&Batch{Series: []Series{{Labels: labels.FromStrings("__name__", "m"), Samples: []Sample{{T: 1, V: 1}}}}})
	if c.arena.err == nil {
		t.Fatal("a full arena took a chunk")
	}
	series, meta := c.finish()
	if _, _, err := (&Encoder{}).write(c, series, meta, 0); err == nil {
		t.Fatal("a segment was written without the dropped sample")
	}
}
