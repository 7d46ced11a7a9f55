package seriesindex

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
)

// checkBig verifies a bigList's invariants and that it holds exactly want
// (sorted).
func checkBig(t *testing.T, b *bigList, want []Ref) {
	t.Helper()
	if got := b.appendTo(nil); !slices.Equal(got, want) && len(got)+len(want) > 0 {
		t.Fatalf("holds %d Refs, want %d", len(got), len(want))
	}
	if b.n != len(want) {
		t.Fatalf("n = %d, want %d", b.n, len(want))
	}
	for i := range b.ctrs {
		c := &b.ctrs[i]
		if i > 0 && b.ctrs[i-1].key >= c.key {
			t.Fatalf("containers out of key order")
		}
		n := len(c.arr)
		if c.bits != nil {
			if c.arr != nil {
				t.Fatal("a container is both array and bitmap")
			}
			n = 0
			for _, w := range c.bits {
				n += bits.OnesCount64(w)
			}
			if n <= arrayMax/2 {
				t.Fatalf("a bitmap of %d Refs", n)
			}
		} else if n > arrayMax || !slices.IsSorted(c.arr) {
			t.Fatalf("array of %d, sorted %v", n, slices.IsSorted(c.arr))
		}
		if n == 0 || uint32(n) != c.n {
			t.Fatalf("container of %d Refs counts %d", n, c.n)
		}
	}
}

// A bigList holds what a sorted set holds through appends, out-of-order
// additions (reused Refs), removals, and array/bitmap conversions both
// ways; filter, orInto and any answer as the set does.
func TestBigListModel(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for round := range 6 {
		model := map[Ref]bool{}
		var b *bigList
		var seed []Ref
		for v := Ref(1); v < 700; v++ {
			seed = append(seed, v)
			model[v] = true
		}
		b = newBig(seed)
		next := Ref(700)
		for op := range 40000 {
			switch k := r.IntN(10); {
			case k < 6: // a fresh Ref, some gaps, sometimes dense
				next += Ref(1 + r.IntN(1+round*3))
				b.add(next)
				model[next] = true
			case k < 8: // a reused Ref, anywhere below
				v := Ref(1 + r.IntN(int(next)))
				b.add(v)
				model[v] = true
			case k == 8 && op%50 == 0: // thin a key to 1/64: bitmaps become arrays
				base := Ref(r.IntN(int(next>>16)+1)) << 16
				for v := base; v < base+1<<16; v++ {
					if v%64 != 0 && model[v] {
						b.remove(v)
						delete(model, v)
					}
				}
			default: // remove a run, emptying containers at times
				v := Ref(1 + r.IntN(int(next)))
				for i := range Ref(1 + r.IntN(3000)) {
					if b.remove(v+i) != model[v+i] {
						t.Fatalf("round %d op %d: remove(%d) disagrees", round, op, v+i)
					}
					delete(model, v+i)
				}
			}
			if op%4000 != 0 {
				continue
			}
			want := make([]Ref, 0, len(model))
			for v := range model {
				want = append(want, v)
			}
			slices.Sort(want)
			checkBig(t, b, want)
			var probe []Ref
			for v := Ref(1); v <= next+70000; v += Ref(1 + r.IntN(7)) {
				probe = append(probe, v)
			}
			var inter []Ref
			for _, v := range probe {
				if model[v] {
					inter = append(inter, v)
				}
			}
			if got := b.filter(probe[:0], probe); !slices.Equal(got, inter) {
				t.Fatalf("round %d op %d: filter kept %d, want %d", round, op, len(got), len(inter))
			}
			bm := newBitmap(next)
			b.orInto(bm)
			if got := bm.appendTo(nil); !slices.Equal(got, want) {
				t.Fatalf("round %d op %d: orInto set %d, want %d", round, op, len(got), len(want))
			}
			if len(want) > 0 {
				last := want[len(want)-1]
				var seen []Ref
				if !b.any(func(v Ref) bool { seen = append(seen, v); return v == last }) || !slices.Equal(seen, want) {
					t.Fatalf("round %d op %d: any visited %d of %d", round, op, len(seen), len(want))
				}
			}
		}
	}
}

// Postings over long lists (bitmap and array containers across several
// keys) answer what a scan answers, through removals and reused Refs.
func TestPostingsLongLists(t *testing.T) {
	if testing.Short() {
		t.Skip("140k series")
	}
	const n = 140_000
	x := New()
	all := map[Ref]labels.Labels{}
	loc := x.Loc(1, "s")
	add := func(i int) {
		ls := seriesN(i)
		r, _ := x.Add(ls)
		x.Observe(r, loc, 0, 10, 0)
		all[r] = ls
	}
	for i := range n {
		add(i)
	}
	rnd := rand.New(rand.NewPCG(11, 12))
	queries := [][]*labels.Matcher{
		{labels.MustNewMatcher(labels.MatchEqual, "env", "bench")},
		{labels.MustNewMatcher(labels.MatchEqual, "__name__", "queue_depth"), labels.MustNewMatcher(labels.MatchNotEqual, "job", "api")},
		{labels.MustNewMatcher(labels.MatchRegexp, "__name__", "http_.*|queue_.*"), labels.MustNewMatcher(labels.MatchEqual, "zone", "zone-1")},
		{labels.MustNewMatcher(labels.MatchEqual, "instance", "host-0042:9100"), labels.MustNewMatcher(labels.MatchEqual, "id", "123")},
		{labels.MustNewMatcher(labels.MatchEqual, "job", "db"), labels.MustNewMatcher(labels.MatchEqual, "zone", "zone-2")},
	}
	check := func(stage string) {
		qs := slices.Clone(queries)
		for range 8 {
			qs = append(qs, []*labels.Matcher{randMatcher(rnd), randMatcher(rnd)})
		}
		for _, ms := range qs {
			want := bruteForce(x, all, ms, 0, 10)
			if got := x.Select(ms, 0, 10); !slices.Equal(got, want) {
				t.Fatalf("%s: Select(%v): %d series, want %d", stage, ms, len(got), len(want))
			}
		}
		if got := x.LabelValues("instance", nil, 0, 10); len(got) != 100 {
			t.Fatalf("%s: %d instances", stage, len(got))
		}
	}
	check("added")
	// Remove whole ranges (emptying containers, bitmaps becoming arrays)
	// and a scatter.
	var gone []Ref
	for r := range all {
		if (r > 40_000 && r < 100_000) || rnd.IntN(5) == 0 {
			gone = append(gone, r)
		}
	}
	x.Remove(gone)
	for _, r := range gone {
		delete(all, r)
	}
	check("removed")
	x.mu.Lock()
	for i := range x.free {
		x.free[i].at = time.Now().Add(-ReuseAfter)
	}
	x.mu.Unlock()
	for i := n; i < n+60_000; i++ {
		add(i)
	}
	check("reused")
}

// Readers answer from consistent lists while writers add series (lists
// turning long, containers growing and converting) and remove some:
// every answer is sorted and holds only matching series.
func TestPostingsConcurrent(t *testing.T) {
	x := New()
	const n, writers = 40_000, 3
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += writers {
				r, _ := x.Add(seriesN(i))
				if i%997 == 0 {
					x.Remove([]Ref{r})
				}
			}
		}()
	}
	done := make(chan struct{})
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			ms := []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "job", "api")}
			envs := []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "env", "bench"), labels.MustNewMatcher(labels.MatchNotEqual, "zone", "zone-1")}
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				got := x.Postings(ms)
				if !slices.IsSorted(got) {
					errs <- fmt.Errorf("unsorted answer of %d", len(got))
					return
				}
				for _, r := range got {
					if x.Value(r, "job") != "api" {
						errs <- fmt.Errorf("series %d is not job=api", r)
						return
					}
				}
				if got := x.Postings(envs); !slices.IsSorted(got) {
					errs <- fmt.Errorf("unsorted answer of %d", len(got))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	want := 0
	for i := range n {
		if i%997 != 0 && (i%100)%3 == 0 {
			want++
		}
	}
	if got := x.Postings([]*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "job", "api")}); len(got) != want {
		t.Fatalf("job=api: %d series, want %d", len(got), want)
	}
}
