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
		ws, whole := d.find(x, ask)
		if !slices.Equal(whole, []seriesindex.Ref{refs[3]}) {
			t.Fatalf("asking %d series: read whole %v, want [%v]", len(ask), whole, refs[3])
		}
		if len(ws) != len(ask)-1 {
			t.Fatalf("asking %d series: found %d", len(ask), len(ws))
		}
		for _, w := range ws {
			if i := slices.Index(refs, w.ref); i != w.ord {
				t.Fatalf("series %d found at %d", i, w.ord)
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
	for k, e := range q.s.cache.items {
		if k.kind == kindDir {
			dirs = append(dirs, e.Value.(*cacheEntry).value.(*segDir))
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
