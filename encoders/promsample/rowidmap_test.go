package promsample

import (
	"math"
	"math/rand/v2"
	"testing"
)

// A RowIDMap answers as a map emptied at every Reset would: across rows
// of every size (growing it, and past what it keeps), with keys that
// collide in its slots, values set again, and across the wrap of its
// generation counter; the zero value is ready.
func TestRowIDMapIsAMapPerRow(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var m RowIDMap
	if _, ok := m.Get(1); ok || m.Len() != 0 {
		t.Fatal("the zero RowIDMap has an entry")
	}
	for row := range 300 {
		if row == 150 {
			m.gen = math.MaxUint32 - 3 // the next Resets wrap
		}
		if row > 0 {
			m.Reset()
		}
		want := map[uint32]uint32{}
		n := rng.IntN(400)
		switch row % 50 {
		case 7:
			n = 3 * maxKeptRowIDSlots
		case 8:
			n = 0
		}
		for range n {
			key := rng.Uint32N(uint32(2*n + 16))
			if row%3 == 0 {
				key <<= 12 // keys alike in their low bits
			}
			v, ok := want[key]
			if got, found := m.Get(key); found != ok || (ok && got != v) {
				t.Fatalf("row %d, key %d: got %d %v, want %d %v", row, key, got, found, v, ok)
			}
			want[key] = rng.Uint32()
			m.Set(key, want[key])
		}
		for key, v := range want {
			if got, ok := m.Get(key); !ok || got != v {
				t.Fatalf("row %d, key %d: got %d %v, want %d", row, key, got, ok, v)
			}
		}
		if m.Len() != len(want) {
			t.Fatalf("row %d: %d entries, want %d", row, m.Len(), len(want))
		}
		if row%50 == 7 {
			if m.Reset(); m.slots != nil {
				t.Fatalf("row %d: a table of %d entries is kept", row, len(want))
			}
		}
	}
}
