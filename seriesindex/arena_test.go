package seriesindex

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
)

// The encoding reads back what was written, for ids of every uvarint
// length, and a reader never reads past its labels.
func TestPairsRoundTrip(t *testing.T) {
	edges := []uint32{0, 1, 127, 128, 300, 16383, 16384, 1<<21 - 1, 1 << 21, 1<<28 - 1, 1 << 28, math.MaxUint32}
	r := rand.New(rand.NewPCG(3, 4))
	for round := range 2000 {
		n := r.IntN(12)
		pairs := make([]uint32, 2*n)
		for i := range pairs {
			if r.IntN(2) == 0 {
				pairs[i] = edges[r.IntN(len(edges))]
			} else {
				pairs[i] = r.Uint32() >> r.IntN(32)
			}
		}
		enc := appendPairs(nil, pairs)
		if got := skipLen(enc, n); got != len(enc) {
			t.Fatalf("round %d: skipLen = %d, want %d", round, got, len(enc))
		}
		// What follows the labels in the arena must not be read.
		p := Pairs{b: append(slices.Clone(enc), 0x81, 0x01, 7), n: n}
		var got []uint32
		for p.Len() > 0 {
			a, b := p.Next()
			got = append(got, a, b)
		}
		if !slices.Equal(got, pairs) && !(len(got) == 0 && len(pairs) == 0) {
			t.Fatalf("round %d: read %v, wrote %v", round, got, pairs)
		}
		if a, b := p.Next(); a != 0 || b != 0 {
			t.Fatalf("round %d: past the end read (%d, %d)", round, a, b)
		}
	}
}

// Space from the arena never overlaps, never moves, and a released space
// is handed out again for the same length.
func TestArenaAlloc(t *testing.T) {
	var a arena
	a.init()
	type got struct {
		off  uint64
		data []byte
	}
	var all []got
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 20000 {
		n := 1 + r.IntN(40)
		switch {
		case i%5000 == 17:
			n = 3*arenaChunk + 5 // spans several chunk numbers
		case i%3000 == 11:
			n = arenaChunk // exactly one
		}
		off, b := a.alloc(n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("alloc(%d): len %d cap %d", n, len(b), cap(b))
		}
		data := make([]byte, n)
		for k := range data {
			data[k] = byte(i + k)
		}
		copy(b, data)
		all = append(all, got{off, data})
	}
	for i, g := range all {
		if !bytes.Equal(a.at(g.off)[:len(g.data)], g.data) {
			t.Fatalf("allocation %d at %#x was overwritten or moved", i, g.off)
		}
	}
	end := a.end
	a.release(all[10].off, len(all[10].data))
	if off, _ := a.alloc(len(all[10].data) + 1); off == all[10].off {
		t.Fatal("a released space was handed out for another length")
	}
	if off, _ := a.alloc(len(all[10].data)); off != all[10].off {
		t.Fatalf("released space not reused: got %#x, want %#x", off, all[10].off)
	}
	if a.freeBytes != 0 || a.end == end {
		t.Fatalf("free bytes %d, end %#x (was %#x)", a.freeBytes, a.end, end)
	}
}

// An entry holds no pointer: the chunks are noscan memory, and stay so.
func TestEntryHasNoPointers(t *testing.T) {
	var check func(reflect.Type) bool
	check = func(ty reflect.Type) bool {
		switch ty.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.String, reflect.Interface, reflect.Chan, reflect.Func, reflect.UnsafePointer:
			return false
		case reflect.Struct:
			for i := range ty.NumField() {
				if !check(ty.Field(i).Type) {
					t.Errorf("field %s.%s holds a pointer", ty.Name(), ty.Field(i).Name)
					return false
				}
			}
		case reflect.Array:
			return check(ty.Elem())
		}
		return true
	}
	check(reflect.TypeFor[entry]())
	if entrySize != 64 {
		t.Errorf("entry is %d bytes, want 64", entrySize)
	}
}

// age makes every removed Ref reusable now.
func (x *Index) age() {
	x.mu.Lock()
	for i := range x.free {
		x.free[i].at = time.Now().Add(-ReuseAfter)
	}
	x.mu.Unlock()
}

// A removed series keeps its labels until its Ref is reused; then its pair
// space serves the new series when the lengths match, and FindPairs and
// Equal see the new labels only.
func TestReuseRecyclesPairs(t *testing.T) {
	x := New()
	var refs []Ref
	for i := range 100 {
		r, _ := x.Add(seriesN(i))
		refs = append(refs, r)
	}
	gone := refs[10:20]
	x.Remove(gone)
	for i, r := range gone {
		if !labels.Equal(x.Labels(r), seriesN(10+i)) {
			t.Fatalf("removed %d lost its labels before reuse", r)
		}
	}
	x.age()
	end := x.arena.end
	reused := map[Ref]bool{}
	for i := 10; i < 20; i++ {
		// seriesN(i+600) differs from seriesN(i) only in its id value,
		// a new symbol: its encoding may be as long.
		ls := seriesN(i + 600)
		r, added := x.Add(ls)
		if !added {
			t.Fatalf("series %d not added", i+600)
		}
		reused[r] = true
		if !labels.Equal(x.Labels(r), ls) || x.Get(ls) != r {
			t.Fatalf("reused %d: labels %v, want %v", r, x.Labels(r), ls)
		}
	}
	for _, r := range gone {
		if !reused[r] {
			t.Fatalf("ref %d not reused", r)
		}
	}
	if x.arena.end != end || x.arena.freeBytes != 0 {
		t.Fatalf("arena grew %d bytes with %d free: released pair space not reused", x.arena.end-end, x.arena.freeBytes)
	}
	for i := 10; i < 20; i++ {
		if x.Get(seriesN(i)) != 0 {
			t.Fatalf("removed series %d found", i)
		}
	}
	for i, r := range refs[20:] {
		if !labels.Equal(x.Labels(r), seriesN(20+i)) {
			t.Fatalf("series %d changed", r)
		}
	}
}

// FindPairs finds a series by its symbol ids, and only an exact match.
func TestFindPairs(t *testing.T) {
	x := New()
	for i := range 1000 {
		x.Add(seriesN(i))
	}
	for i := range 1000 {
		ls := seriesN(i)
		r := x.Get(ls)
		var pairs []uint32
		for p := x.Pairs(r); p.Len() > 0; {
			n, v := p.Next()
			pairs = append(pairs, n, v)
		}
		if len(pairs) != 12 {
			t.Fatalf("Pairs(%d) read %d ids", r, len(pairs))
		}
		h := x.Hash(r)
		if got := x.FindPairs(h, pairs); got != r {
			t.Fatalf("FindPairs = %d, want %d", got, r)
		}
		if x.FindPairs(h, pairs[:10]) != 0 || x.FindPairs(h, pairs[:11]) != 0 {
			t.Fatal("FindPairs accepted a prefix")
		}
		pairs[11]++
		if x.FindPairs(h, pairs) != 0 {
			t.Fatal("FindPairs accepted another value")
		}
	}
}

// Offsets past 4 GiB name their own bytes: the arena's end only grows
// (space is reused by exact length), so a long-lived index with churn of
// varied label sets passes any 32-bit limit. The chunks below the end
// share one buffer here, so the test needs no 4 GiB.
func TestArenaPastFourGiB(t *testing.T) {
	var a arena
	a.init()
	shared := make([]byte, arenaChunk)
	low := make([][]byte, 1<<(32-arenaBits))
	for i := range low {
		low[i] = shared
	}
	a.chunks.Store(&low)
	a.end = 1 << 32
	off, b := a.alloc(3)
	if off != 1<<32 {
		t.Fatalf("alloc at the end 4 GiB: offset %#x, want %#x", off, uint64(1)<<32)
	}
	copy(b, "abc")
	if got := string(a.at(off)[:3]); got != "abc" {
		t.Fatalf("at(%#x) = %q, want the bytes written there", off, got)
	}
	if shared[0] != 0 {
		t.Fatal("a write past 4 GiB landed in the first chunk")
	}
}

// A series' encoding starts with its count of labels, any count.
func TestLabelCountPrefix(t *testing.T) {
	for _, n := range []int{0, 1, 6, 127, 128, 300} {
		pairs := make([]uint32, 2*n)
		for i := range pairs {
			pairs[i] = uint32(i * 37)
		}
		enc := appendLabels(nil, pairs)
		rest, got := labelsAt(enc)
		if got != n || skipLen(rest, got) != len(rest) || encodedLen(append(enc, 0x7f)) != len(enc) {
			t.Fatalf("%d labels: read a count of %d, %d bytes of pairs of %d", n, got, skipLen(rest, got), len(rest))
		}
	}
}
