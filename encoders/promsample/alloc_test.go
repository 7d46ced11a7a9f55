package promsample

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"
)

// The write allocator recycles arrow-go's buffers within a segment write;
// a buffer handed out while still in use would corrupt the segment, so
// segments written with it and with Go's allocator must be identical, over
// random batches (histograms, exemplars, extreme timestamps) and over
// larger rwload- and node_exporter-shaped sets cut into many row groups.
func TestWriteAllocatorWritesWhatGoAllocatorWrites(t *testing.T) {
	type input struct {
		name    string
		batches []Batch
		rgRows  int
	}
	var inputs []input
	for seed := uint64(0); seed < 20; seed++ {
		r := rand.New(rand.NewPCG(seed, 5))
		inputs = append(inputs, input{"random", randBatches(r, 1+r.IntN(40)), []int{0, 2, 9}[seed%3]})
	}
	rw := defaultRW()
	rw.Series, rw.Samples, rw.SpecialEvery = 3000, 40, 97
	inputs = append(inputs,
		input{"rwload", rw.build().requests, 0},
		input{"rwload small groups", rw.build().requests, 4096},
		input{"node", nodeSet(20, 30).requests, 2048})
	for _, in := range inputs {
		var segs [2][]byte
		for i, goAlloc := range []bool{true, false} {
			c := newPackingCollector()
			for j := range in.batches {
				c.add(&in.batches[j])
			}
			series, meta := c.finish()
			e := &Encoder{Opts: Options{RowGroupRows: in.rgRows}, goAlloc: goAlloc}
			data, _, err := e.write(c, series, meta, 0)
			if err != nil {
				t.Fatalf("%s: %v", in.name, err)
			}
			segs[i] = data
		}
		if !bytes.Equal(segs[0], segs[1]) {
			t.Fatalf("%s: the write allocator's segment differs (%d vs %d bytes)", in.name, len(segs[1]), len(segs[0]))
		}
	}
}

func TestWriteAllocatorSemantics(t *testing.T) {
	a := newWriteAllocator()
	aligned := func(b []byte) bool { return uintptr(unsafe.Pointer(unsafe.SliceData(b)))%allocAlign == 0 }

	b := a.Allocate(5000)
	if len(b) != 5000 || !aligned(b) {
		t.Fatalf("Allocate(5000): len %d, aligned %v", len(b), aligned(b))
	}
	for i := range b {
		b[i] = 0xff
	}
	a.Free(b)
	a.Free(b) // a second Free is ignored
	c := a.Allocate(6000)
	if unsafe.SliceData(c) != unsafe.SliceData(b) {
		t.Fatal("a freed buffer of the same class was not reused")
	}
	if d := a.Allocate(6000); unsafe.SliceData(d) == unsafe.SliceData(c) {
		t.Fatal("a buffer freed twice was handed out twice, or a live one again")
	}
	if i := bytes.IndexFunc(c, func(r rune) bool { return r != 0 }); i >= 0 {
		t.Fatalf("a reused buffer is not zeroed at %d", i)
	}

	// Grown within its class: same memory, contents kept, tail zeroed.
	for i := range c {
		c[i] = 7
	}
	c = c[:100] // as arrow-go shrinks
	for i := range c[:cap(c)] {
		c[:cap(c)][i] = 9
	}
	g := a.Reallocate(8000, c)
	if unsafe.SliceData(g) != unsafe.SliceData(c) || len(g) != 8000 {
		t.Fatal("growth within the class moved the buffer")
	}
	if g[99] != 9 || g[100] != 0 || g[7999] != 0 {
		t.Fatalf("grown buffer: [99]=%d [100]=%d [7999]=%d, want 9 0 0", g[99], g[100], g[7999])
	}
	// Grown past its class: copied, the old one freed for reuse.
	h := a.Reallocate(20000, g)
	if len(h) != 20000 || h[99] != 9 || h[100] != 0 || !aligned(h) {
		t.Fatal("growth past the class lost the contents")
	}
	if k := a.Allocate(8192); unsafe.SliceData(k) != unsafe.SliceData(g) {
		t.Fatal("the buffer left behind by a growth was not freed")
	}

	// Small buffers are Go's, aligned and untracked.
	s := a.Allocate(100)
	if len(s) != 100 || !aligned(s) {
		t.Fatalf("Allocate(100): len %d, aligned %v", len(s), aligned(s))
	}
	a.Free(s)
	if len(a.live) != 3 { // d, h, k
		t.Fatalf("%d buffers tracked, want 3", len(a.live))
	}
}

// EncodeConsuming writes the segment Encode writes, and leaves each row
// with no Data (and its TS); Encode leaves its rows alone.
func TestEncodeConsumingWritesWhatEncodeWrites(t *testing.T) {
	rw := defaultRW()
	rw.Series, rw.Samples = 500, 30
	streams, _, err := toRows(rw.build().requests, DefaultStreamBuckets)
	if err != nil {
		t.Fatal(err)
	}
	e := &Encoder{}
	for stream, rows := range streams {
		want, err := e.Encode(stream, rows)
		if err != nil {
			t.Fatal(err)
		}
		consumed := slices.Clone(rows)
		got, err := e.EncodeConsuming(stream, consumed)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes, want.Bytes) || got.Rows != want.Rows || got.FirstTS != want.FirstTS || got.LastTS != want.LastTS {
			t.Fatalf("stream %s: EncodeConsuming wrote a different segment", stream)
		}
		for i := range rows {
			if rows[i].Data == nil {
				t.Fatalf("stream %s: Encode consumed row %d", stream, i)
			}
			if consumed[i].Data != nil || consumed[i].TS != rows[i].TS || consumed[i].Stream != rows[i].Stream {
				t.Fatalf("stream %s row %d: %+v after EncodeConsuming", stream, i, consumed[i])
			}
		}
	}
}

// An Encoder keeps its column buffers between writes; a write after others
// (other label columns, nulls, histograms, row group sizes) must write what
// a fresh Encoder writes.
func TestAReusedEncoderWritesWhatAFreshOneWrites(t *testing.T) {
	var inputs [][]Batch
	for seed := uint64(0); seed < 12; seed++ {
		r := rand.New(rand.NewPCG(seed, 9))
		inputs = append(inputs, randBatches(r, 1+r.IntN(40)))
	}
	rw := defaultRW()
	rw.Series, rw.Samples = 2000, 30
	inputs = append(inputs, rw.build().requests, nodeSet(10, 20).requests)
	shared := &Encoder{}
	for round := range 2 {
		for i, batches := range inputs {
			encode := func(e *Encoder) []byte {
				c := newPackingCollector()
				for j := range batches {
					c.add(&batches[j])
				}
				series, meta := c.finish()
				data, _, err := e.write(c, series, meta, 0)
				if err != nil {
					t.Fatalf("input %d: %v", i, err)
				}
				return data
			}
			if !bytes.Equal(encode(shared), encode(&Encoder{})) {
				t.Fatalf("round %d, input %d: the reused encoder wrote a different segment", round, i)
			}
		}
	}
}
