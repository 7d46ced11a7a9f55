package seriesindex

import (
	"math"
	"math/rand/v2"
	"testing"
)

// A RefMap answers as a map emptied at every Reset would: across tasks of
// every size (growing it, and past what it keeps), with Refs that collide
// in its slots, values set again, and across the wrap of its generation
// counter; the zero value is ready.
func TestRefMapIsAMapPerTask(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var m RefMap
	if _, ok := m.Get(1); ok || m.Len() != 0 {
		t.Fatal("the zero RefMap has an entry")
	}
	for task := range 300 {
		if task == 150 {
			m.gen = math.MaxUint32 - 3 // the next Resets wrap
		}
		if task > 0 {
			m.Reset()
		}
		want := map[Ref]uint32{}
		n := rng.IntN(400)
		switch task % 50 {
		case 7:
			n = 3 * maxKeptRefSlots
		case 8:
			n = 0
		}
		for range n {
			r := Ref(1 + rng.Uint32N(uint32(2*n+16)))
			if task%3 == 0 {
				r <<= 12 // Refs alike in their low bits
			}
			v, ok := want[r]
			if got, found := m.Get(r); found != ok || (ok && got != v) {
				t.Fatalf("task %d, ref %d: got %d %v, want %d %v", task, r, got, found, v, ok)
			}
			want[r] = rng.Uint32()
			m.Set(r, want[r])
		}
		for r, v := range want {
			if got, ok := m.Get(r); !ok || got != v {
				t.Fatalf("task %d, ref %d: got %d %v, want %d", task, r, got, ok, v)
			}
		}
		if m.Len() != len(want) {
			t.Fatalf("task %d: %d entries, want %d", task, m.Len(), len(want))
		}
		if task%50 == 7 {
			if m.Reset(); m.slots != nil {
				t.Fatalf("task %d: a table of %d entries is kept", task, len(want))
			}
		}
	}
}
