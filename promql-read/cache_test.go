package promread

import (
	"math/rand/v2"
	"testing"
)

// TestSegNamesNeverReuseANumber: a segment keeps its number while the map
// holds it, two segments never share one, and a number once given is never
// given again, also after the map starts over (a stale cache entry must
// never be found under another segment's name).
func TestSegNamesNeverReuseANumber(t *testing.T) {
	var n segNames
	id := func(seq int64) segmentID {
		return segmentID{path: "a.db", source: 1, stream: "samples/00", seq: seq, rows: 10, size: 100}
	}
	first := n.of(id(0))
	if first == 0 {
		t.Fatal("segment 0 got number 0, which names no segment")
	}
	if again := n.of(id(0)); again != first {
		t.Fatalf("segment 0 is %d, then %d", first, again)
	}
	merged := id(0)
	merged.rows, merged.size = 20, 180 // a compaction's segment that took seq 0
	if m := n.of(merged); m == first {
		t.Fatalf("a merged segment with seq 0 got the number of the segment it replaced (%d)", m)
	}
	seen := map[segNo]segmentID{first: id(0)}
	last := first
	for seq := int64(1); seq <= maxSegNames+1; seq++ {
		no := n.of(id(seq))
		if other, dup := seen[no]; dup {
			t.Fatalf("segment %d got number %d, segment %d's", seq, no, other.seq)
		}
		if no <= last {
			t.Fatalf("segment %d got number %d, not above the last given (%d)", seq, no, last)
		}
		seen[no], last = id(seq), no
	}
	// The map started over on the way: segment 0 is numbered anew.
	if again := n.of(id(0)); again == first || again <= last {
		t.Fatalf("after the map started over segment 0 is %d (was %d, last given %d)", again, first, last)
	}
	if len(n.nos) > maxSegNames {
		t.Fatalf("the map holds %d segments, more than %d", len(n.nos), maxSegNames)
	}
}

// lruModel is the cache's contract written the plain way: entries in
// recency order, most recent first.
type lruModel struct {
	max, bytes int64
	ents       []lruModelEntry
}

type lruModelEntry struct {
	k    cacheKey
	v    any
	size int64
}

func (m *lruModel) find(k cacheKey) int {
	for i, e := range m.ents {
		if e.k == k {
			return i
		}
	}
	return -1
}

func (m *lruModel) front(i int) {
	e := m.ents[i]
	m.ents = append(m.ents[:i], m.ents[i+1:]...)
	m.ents = append([]lruModelEntry{e}, m.ents...)
}

func (m *lruModel) get(k cacheKey) (any, bool) {
	i := m.find(k)
	if i < 0 {
		return nil, false
	}
	m.front(i)
	return m.ents[0].v, true
}

func (m *lruModel) store(k cacheKey, v any, size int64, evict bool) bool {
	if m.max <= 0 || size > m.max/2 {
		return false
	}
	size += 128
	i := m.find(k)
	grow := size
	if i >= 0 {
		grow -= m.ents[i].size
	}
	if !evict && m.bytes+grow > m.max {
		return false
	}
	if i >= 0 {
		m.ents[i].v, m.ents[i].size = v, size
		m.front(i)
	} else {
		m.ents = append([]lruModelEntry{{k, v, size}}, m.ents...)
	}
	m.bytes += grow
	for m.bytes > m.max && len(m.ents) > 0 {
		last := m.ents[len(m.ents)-1]
		m.ents = m.ents[:len(m.ents)-1]
		m.bytes -= last.size
	}
	return true
}

func (m *lruModel) remove(k cacheKey) {
	if i := m.find(k); i >= 0 {
		m.bytes -= m.ents[i].size
		m.ents = append(m.ents[:i], m.ents[i+1:]...)
	}
}

// TestCacheAgreesWithAPlainLRU runs random gets, puts, puts if free,
// touches and removes on the cache and on lruModel, and compares every
// answer, the bytes held and the order entries leave in.
func TestCacheAgreesWithAPlainLRU(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxBytes int64
		keys     int
		sizes    int64
	}{
		{"roomy", 64 << 10, 40, 300},
		{"tight", 2 << 10, 60, 400},
		{"one fits", 600, 10, 250},
		{"off", 0, 10, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.keys)))
			c := newCache(tc.maxBytes)
			m := &lruModel{max: tc.maxBytes}
			key := func() cacheKey {
				n := rng.IntN(tc.keys)
				return cacheKey{seg: segNo(n % 3), kind: uint8(n % 2), off: int64(n)}
			}
			for op := range 20_000 {
				k := key()
				switch r := rng.IntN(10); {
				case r < 4:
					v, ok := c.get(k)
					mv, mok := m.get(k)
					if ok != mok || v != mv {
						t.Fatalf("op %d: get %v = %v %v, want %v %v", op, k, v, ok, mv, mok)
					}
				case r < 7:
					v, size := op, rng.Int64N(tc.sizes)
					c.put(k, v, size)
					m.store(k, v, size, true)
				case r < 8:
					v, size := op, rng.Int64N(tc.sizes)
					if ok, mok := c.putIfFree(k, v, size), m.store(k, v, size, false); ok != mok {
						t.Fatalf("op %d: putIfFree %v = %v, want %v", op, k, ok, mok)
					}
				case r < 9:
					c.touch(k)
					if i := m.find(k); i >= 0 {
						m.front(i)
					}
				default:
					c.remove(k)
					m.remove(k)
				}
				if st := c.stats(); st.Bytes != m.bytes || st.Entries != len(m.ents) {
					t.Fatalf("op %d: %d bytes in %d entries, want %d in %d", op, st.Bytes, st.Entries, m.bytes, len(m.ents))
				}
			}
			sameOrder(t, c, m)
			// Slots are reused: the slice holds no more than the most
			// entries ever held at once, plus the sentinel.
			if tc.maxBytes > 0 && len(c.ents) > tc.keys+1 {
				t.Fatalf("%d slots for at most %d keys", len(c.ents), tc.keys)
			}
		})
	}
}

// sameOrder checks that c's recency list, least recent first (the order
// of eviction), is m's.
func sameOrder(t *testing.T, c *cache, m *lruModel) {
	t.Helper()
	var order []cacheKey
	for i := c.ents[0].prev; i != 0; i = c.ents[i].prev {
		order = append(order, c.ents[i].key)
	}
	if len(order) != len(m.ents) {
		t.Fatalf("the recency list has %d entries, want %d", len(order), len(m.ents))
	}
	for i, k := range order {
		if want := m.ents[len(m.ents)-1-i].k; k != want {
			t.Fatalf("entry %d from the back is %v, want %v", i, k, want)
		}
	}
}

// TestCacheShrinksAfterABurst: a burst of small entries grows the slice;
// once three quarters of its slots are free it shrinks, and the cache
// still agrees with lruModel, before and after.
func TestCacheShrinksAfterABurst(t *testing.T) {
	c := newCache(1 << 20)
	m := &lruModel{max: 1 << 20}
	const burst = 4000
	for n := range burst {
		k := cacheKey{seg: 1, kind: kindSeries, off: int64(n)}
		c.put(k, n, 8)
		m.store(k, n, 8, true)
	}
	grown := len(c.ents)
	if grown < burst {
		t.Fatalf("%d slots after %d puts", grown, burst)
	}
	rng := rand.New(rand.NewPCG(2, 3))
	for _, n := range rng.Perm(burst)[:burst-500] {
		k := cacheKey{seg: 1, kind: kindSeries, off: int64(n)}
		c.remove(k)
		m.remove(k)
		if got, want := c.stats(), len(m.ents); got.Entries != want || got.Bytes != m.bytes {
			t.Fatalf("after removing %v: %d entries, %d bytes; want %d, %d", k, got.Entries, got.Bytes, want, m.bytes)
		}
	}
	if len(c.ents) > grown/2 {
		t.Fatalf("%d slots hold %d entries: the slice did not shrink from %d", len(c.ents), len(c.items), grown)
	}
	sameOrder(t, c, m)
	for n := range burst {
		k := cacheKey{seg: 1, kind: kindSeries, off: int64(n)}
		v, ok := c.get(k)
		mv, mok := m.get(k)
		if ok != mok || v != mv {
			t.Fatalf("get %v = %v %v, want %v %v", k, v, ok, mv, mok)
		}
		if n%7 == 0 {
			c.put(k, -n, 16)
			m.store(k, -n, 16, true)
		}
	}
	sameOrder(t, c, m)
}
