package promsample

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The table answers as a map cleared at every row would: across rows of
// every size (growing it, and past what it keeps), with keys that collide
// in its slots, and across the wrap of its generation counter.
func TestSymRowIsAMapPerRow(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var tab symRow
	for row := range 400 {
		if row == 200 {
			tab.gen = math.MaxUint32 - 3 // the next resets wrap
		}
		tab.reset()
		want := map[uint32]uint32{}
		n := rng.IntN(300)
		switch row % 50 {
		case 7:
			n = 3 * maxKeptSymSlots // a row larger than the table kept
		case 8:
			n = 0
		}
		for range n {
			key := rng.Uint32N(uint32(2*n + 16))
			if row%3 == 0 {
				key <<= 12 // keys alike in their low bits
			}
			s := tab.slot(key)
			v, ok := want[key]
			if found := s.gen == tab.gen; found != ok || (ok && s.val != v) {
				t.Fatalf("row %d, key %d: found %v (%d), want %v (%d)", row, key, found, s.val, ok, v)
			}
			if !ok {
				want[key] = uint32(len(want))
				tab.set(s, key, want[key])
			}
		}
		if tab.n != len(want) {
			t.Fatalf("row %d: %d entries, want %d", row, tab.n, len(want))
		}
		if len(tab.slots) > 0 && 2*tab.n > len(tab.slots) {
			t.Fatalf("row %d: %d entries in %d slots", row, tab.n, len(tab.slots))
		}
		if row%50 == 7 {
			if len(tab.slots) <= maxKeptSymSlots {
				t.Fatalf("row %d: %d entries in %d slots, want more than %d", row, tab.n, len(tab.slots), maxKeptSymSlots)
			}
			if tab.reset(); tab.slots != nil {
				t.Fatalf("row %d: the next row keeps %d slots", row, len(tab.slots))
			}
		}
	}
}
