package promread

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

// dirOf builds the directory of a segment whose series have hashes hs,
// with a table of its own (no cache to share one through).
func dirOf(hs []uint64) *segDir {
	t := &promsample.SeriesTable{Rows: make([]uint32, len(hs)), Hashes: hs}
	return (&store{cache: newCache(0)}).newDir(&promsample.Index{Table: t}, true)
}

// TestSegDirLookup: every series of a table is found at its position, a
// hash it does not hold is not, at sizes around the table's growth steps
// and with hashes crowded into few slots.
func TestSegDirLookup(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 6, 7, 8, 13, 100, 4096, 170_000} {
		for _, crowd := range []bool{false, true} {
			if crowd && n > 4096 {
				continue // one probe chain of n: quadratic, as it must be
			}
			t.Run(fmt.Sprintf("%d/crowded=%v", n, crowd), func(t *testing.T) {
				hs := make([]uint64, n)
				held := map[uint64]int{}
				for i := range hs {
					for {
						h := r.Uint64()
						if crowd {
							h &^= 0xffff // the same low bits: one probe chain
						}
						if _, ok := held[h]; !ok {
							hs[i], held[h] = h, i
							break
						}
					}
				}
				d := dirOf(slices.Clone(hs))
				if d.table.dups != nil {
					t.Fatalf("dups %v in distinct hashes", d.table.dups)
				}
				for h, i := range held {
					if got := d.lookup(h); got != i {
						t.Fatalf("lookup(%x) = %d, want %d", h, got, i)
					}
				}
				for range 1000 {
					h := r.Uint64()
					if _, ok := held[h]; ok {
						continue
					}
					if got := d.lookup(h); got != -1 {
						t.Fatalf("lookup of an absent hash = %d", got)
					}
				}
				if len(d.table.slots) < n+n/4 || d.bytes < int64(len(d.table.slots))*4+int64(n)*12 {
					t.Fatalf("%d slots, %d bytes for %d series", len(d.table.slots), d.bytes, n)
				}
			})
		}
	}
}

// TestSegDirSharedHash: series of a segment that share a hash are read
// whole (-2 from lookup, whole from find), by a question of a few series
// and by one of many; the others are found where they are.
func TestSegDirSharedHash(t *testing.T) {
	x := seriesindex.New()
	var refs []seriesindex.Ref
	var hs []uint64
	for i := range 40 {
		ref, _ := x.Add(labels.FromStrings("__name__", "m", "id", fmt.Sprint(i)))
		refs = append(refs, ref)
		hs = append(hs, x.Hash(ref))
	}
	// The segment: the 40 series, then another series with series 3's hash.
	d := dirOf(append(slices.Clone(hs), hs[3]))
	if got := d.lookup(hs[3]); got != -2 {
		t.Fatalf("lookup of a shared hash = %d, want -2", got)
	}
	if got := d.lookup(hs[4]); got != 4 {
		t.Fatalf("lookup = %d, want 4", got)
	}
	for _, ask := range [][]seriesindex.Ref{{refs[3], refs[4]}, refs} {
		qs := make([]qref, len(ask))
		for i, r := range ask {
			qs[i] = qref{r, int32(i)}
		}
		ws, whole := d.find(x, qs)
		if len(whole) != 1 || whole[0].ref != refs[3] || ask[whole[0].slot] != refs[3] {
			t.Fatalf("asking %d series: read whole %v, want [%v]", len(ask), whole, refs[3])
		}
		if len(ws) != len(ask)-1 {
			t.Fatalf("asking %d series: found %d", len(ask), len(ws))
		}
		for k, w := range ws {
			if i := slices.Index(refs, w.ref); i != w.ord || ask[w.slot] != w.ref {
				t.Fatalf("series %d (slot %d) found at %d", i, w.slot, w.ord)
			}
			if k > 0 && ws[k-1].ord >= w.ord {
				t.Fatalf("found out of order: %v", ws)
			}
		}
	}
}

// The directories of segments with equal series tables share one
// hashTable, held once in the cache and counted there, not in each
// directory; a segment whose table differs gets its own. Answers are
// read through the shared table.
func TestSegDirsShareEqualTables(t *testing.T) {
	f := newFixture(t)
	model := expected{}
	seal := func(from int64, n int) {
		var b promsample.Batch
		for i := range n {
			lbl := ls("__name__", "m", "id", fmt.Sprint(i))
			sm := floats(from, from+9_000, 1000, func(t int64) float64 { return float64(t) + float64(i) })
			b.Series = append(b.Series, promsample.Series{Labels: lbl, Samples: sm})
			model.add(lbl, sm, nil)
		}
		f.write("s", b)
		f.seal("s")
	}
	seal(0, 500)       // the same 500 series,
	seal(100_000, 500) // in the same order,
	seal(200_000, 500) // three times;
	seal(300_000, 501) // then one more series
	q, err := NewQueryable(f.a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"7", "499", "500"} {
		ms := []*labels.Matcher{mustMatcher(labels.MatchEqual, "__name__", "m"), mustMatcher(labels.MatchEqual, "id", id)}
		equalSeries(t, "id="+id, model.selectModel(0, 1_000_000, ms...), selectAll(t, q, ms...))
	}
	var dirs []*segDir
	q.s.cache.mu.Lock()
	for k, i := range q.s.cache.items {
		if k.kind == kindDir {
			dirs = append(dirs, q.s.cache.ents[i].value.(*segDir))
		}
	}
	q.s.cache.mu.Unlock()
	if len(dirs) != 4 {
		t.Fatalf("%d directories cached, want 4", len(dirs))
	}
	tables := map[*hashTable]int{}
	for _, d := range dirs {
		tables[d.table]++
		if own := int64(256 + 500*4); d.bytes > own+int64(len(d.x.PageSums))*64+8 {
			t.Fatalf("a directory of %d series counts %d bytes: its table's too", d.x.Table.Len(), d.bytes)
		}
	}
	if len(tables) != 2 || entries(q.s.cache, kindTable) != 2 {
		t.Fatalf("%d hash tables among the directories, %d cached; want 2 (3 segments share one), 2", len(tables), entries(q.s.cache, kindTable))
	}
	for tb, n := range tables {
		if want := map[int]int{500: 3, 501: 1}[len(tb.hashes)]; n != want {
			t.Fatalf("the table of %d series has %d directories, want %d", len(tb.hashes), n, want)
		}
	}
}

// A shared hashTable stays in the cache as long as any directory using it
// does: whatever the LRU lets go to make room, it never keeps a directory
// whose table it dropped (that would hold the table's memory uncounted,
// and build a second copy for the next equal table). The cache here has
// room for the table, one directory and one other entry, less a byte, so
// every store of another entry evicts exactly one: the least recently
// used, which must be a directory before its table.
func TestSharedTablesOutliveTheirDirectories(t *testing.T) {
	const n = 100
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = uint64(i)*0x9e3779b97f4a7c15 + 7
	}
	dirFor := func(s *store) *segDir {
		tab := &promsample.SeriesTable{Rows: make([]uint32, n), Hashes: slices.Clone(hs)}
		return s.newDir(&promsample.Index{Table: tab}, true)
	}
	probe := dirFor(&store{cache: newCache(0)}) // its table is its own: sizes
	tb, db := probe.table.bytes, probe.bytes-probe.table.bytes
	other := tb + db // an entry as large as both, at most half the cache
	s := &store{cache: newCache(tb + db + other + 3*128 - 1)}
	check := func(what string) {
		t.Helper()
		s.cache.mu.Lock()
		defer s.cache.mu.Unlock()
		for _, i := range s.cache.items {
			if d, ok := s.cache.ents[i].value.(*segDir); ok {
				if _, held := s.cache.items[d.table.key]; !held {
					t.Fatalf("%s: a directory is cached without its shared table", what)
				}
			}
		}
	}
	for step := range 20 {
		id := segmentID{stream: "s", seq: int64(step)}
		d := dirFor(s)
		if d.bytes != db {
			t.Fatalf("step %d: the directory counts %d bytes, want %d (its table stored apart)", step, d.bytes, db)
		}
		s.putDir(id, d, true)
		s.cache.put(cacheKey{kind: kindPage, off: int64(2 * step)}, []byte{}, other)
		check(fmt.Sprintf("step %d, a directory stored", step))
		// The directory built again (the cache let it go), asked again,
		// then another entry stored.
		s.putDir(id, dirFor(s), true)
		if _, ok := s.cachedDir(id); !ok {
			t.Fatalf("step %d: the directory just stored is not cached", step)
		}
		s.cache.put(cacheKey{kind: kindPage, off: int64(2*step + 1)}, []byte{}, other)
		check(fmt.Sprintf("step %d, a directory asked again", step))
	}
}
