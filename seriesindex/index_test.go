package seriesindex

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// seriesN returns an rwload-shaped label set: series i of n over 100
// instances and 6 metrics.
func seriesN(i int) labels.Labels {
	metrics := [...]string{"http_requests_total", "node_cpu_seconds_total", "process_resident_memory_bytes", "queue_depth", "temperature_celsius", "build_info"}
	inst := i % 100
	return labels.FromStrings(
		"__name__", metrics[(i/100)%6],
		"env", "bench",
		"id", fmt.Sprint(i/600),
		"instance", fmt.Sprintf("host-%04d:9100", inst),
		"job", [...]string{"api", "node", "db"}[inst%3],
		"zone", fmt.Sprintf("zone-%d", inst%4),
	)
}

func TestAddGetLabels(t *testing.T) {
	x := New()
	var refs []Ref
	for i := range 3000 {
		r, added := x.Add(seriesN(i))
		if !added || r == 0 {
			t.Fatalf("series %d: ref %d added %v", i, r, added)
		}
		refs = append(refs, r)
	}
	for i, r := range refs {
		ls := seriesN(i)
		if got, added := x.Add(ls); got != r || added {
			t.Fatalf("re-adding series %d: %d %v, want %d false", i, got, added, r)
		}
		if got := x.Get(ls); got != r {
			t.Fatalf("Get series %d = %d, want %d", i, got, r)
		}
		if got := x.Labels(r); !labels.Equal(got, ls) {
			t.Fatalf("Labels(%d) = %v, want %v", r, got, ls)
		}
		if !x.Equal(r, ls) || x.Equal(r, seriesN(i+1)) {
			t.Fatalf("Equal(%d) wrong", r)
		}
		if x.Hash(r) != promsample.SeriesHash(ls) {
			t.Fatalf("Hash(%d) is not SeriesHash", r)
		}
		if got := x.Value(r, "instance"); got != ls.Get("instance") {
			t.Fatalf("Value = %q", got)
		}
	}
	if x.Len() != 3000 || x.Get(labels.FromStrings("a", "b")) != 0 {
		t.Fatalf("Len %d, or a stranger found", x.Len())
	}
}

// AddLabels and Add are one operation: a set added either way is found by
// the other and by Get, with the same labels, hash and postings.
func TestAddLabelsIsAdd(t *testing.T) {
	x := New()
	slice := func(ls labels.Labels) (out []Label) {
		ls.Range(func(l labels.Label) { out = append(out, Label{Name: l.Name, Value: l.Value}) })
		return out
	}
	for i := range 2000 {
		ls := seriesN(i)
		var r Ref
		var added bool
		if i%2 == 0 {
			r, added = x.AddLabels(slice(ls), promsample.SeriesHash(ls))
		} else {
			r, added = x.Add(ls)
		}
		if !added || r == 0 {
			t.Fatalf("series %d: ref %d added %v", i, r, added)
		}
		if got, again := x.Add(ls); got != r || again {
			t.Fatalf("series %d: Add after %d gives %d %v", i, r, got, again)
		}
		if got, again := x.AddLabels(slice(ls), promsample.SeriesHash(ls)); got != r || again {
			t.Fatalf("series %d: AddLabels after %d gives %d %v", i, r, got, again)
		}
		if x.Get(ls) != r || !labels.Equal(x.Labels(r), ls) || x.Hash(r) != promsample.SeriesHash(ls) {
			t.Fatalf("series %d: Get %d, labels %v, hash %x", i, x.Get(ls), x.Labels(r), x.Hash(r))
		}
		x.Observe(r, x.Loc(1, "s"), 1, 1, 1) // data, for Select
	}
	m := labels.MustNewMatcher(labels.MatchEqual, "instance", seriesN(7).Get("instance"))
	want := 0
	for i := range 2000 {
		if m.Matches(seriesN(i).Get("instance")) {
			want++
		}
	}
	if got := len(x.Select([]*labels.Matcher{m}, math.MinInt64, math.MaxInt64)); got != want || x.Len() != 2000 {
		t.Fatalf("postings select %d of %d, index holds %d", got, want, x.Len())
	}
}

// Many goroutines adding overlapping label sets get one Ref per set.
func TestAddConcurrent(t *testing.T) {
	x := New()
	const n, workers = 5000, 8
	got := make([][]Ref, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				k := (i*7 + w*131) % n
				r, _ := x.Add(seriesN(k))
				if got[w] == nil {
					got[w] = make([]Ref, n)
				}
				got[w][k] = r
			}
		}()
	}
	wg.Wait()
	for w := 1; w < workers; w++ {
		if !slices.Equal(got[w], got[0]) {
			t.Fatalf("worker %d saw other refs", w)
		}
	}
	if x.Len() != n {
		t.Fatalf("Len = %d, want %d", x.Len(), n)
	}
}

// A hash shared by two series keeps both findable.
func TestHashTableCollision(t *testing.T) {
	var ht hashTable
	s := ht.shard(42)
	s.mu.Lock()
	for r := Ref(1); r <= 100; r++ {
		s.insertLocked(42, r)
		s.insertLocked(uint64(r)<<20|42, r+1000)
	}
	s.removeLocked(42, 50)
	s.mu.Unlock()
	for r := Ref(1); r <= 100; r++ {
		got := ht.find(42, func(c Ref) bool { return c == r })
		if want := r; r == 50 {
			if got != 0 {
				t.Fatalf("removed ref found")
			}
		} else if got != want {
			t.Fatalf("find(%d) = %d", r, got)
		}
	}
}

// randMatcher draws a matcher of any type on any label, including absent
// labels, empty values and __name__ regexes.
func randMatcher(r *rand.Rand) *labels.Matcher {
	names := []string{"__name__", "env", "id", "instance", "job", "zone", "absent"}
	name := names[r.IntN(len(names))]
	vals := map[string][]string{
		"__name__": {"http_requests_total", "queue_depth", "nope", "http_.*", ".*_total", "queue_depth|build_info"},
		"env":      {"bench", "", "b.*", "other"},
		"id":       {"0", "1", "12", "1.", "", ".+"},
		"instance": {"host-0007:9100", "host-00.*", "", ".*9100"},
		"job":      {"api", "db", "api|db", "", "n.*"},
		"zone":     {"zone-1", "zone-[12]", ""},
		"absent":   {"", "x", ".*", ".+"},
	}[name]
	v := vals[r.IntN(len(vals))]
	types := []labels.MatchType{labels.MatchEqual, labels.MatchNotEqual, labels.MatchRegexp, labels.MatchNotRegexp}
	return labels.MustNewMatcher(types[r.IntN(len(types))], name, v)
}

func bruteForce(x *Index, all map[Ref]labels.Labels, ms []*labels.Matcher, mint, maxt int64) []Ref {
	var out []Ref
	for r, ls := range all {
		ok := x.inRange(r, mint, maxt)
		for _, m := range ms {
			ok = ok && m.Matches(ls.Get(m.Name))
		}
		if ok {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// Select, LabelValues and LabelNames answer what a scan of every series
// answers, for random matchers and ranges, after additions and removals.
func TestSelectMatchesBruteForce(t *testing.T) {
	x := New()
	all := map[Ref]labels.Labels{}
	r := rand.New(rand.NewPCG(1, 2))
	add := func(i int) {
		ls := seriesN(i)
		ref, _ := x.Add(ls)
		all[ref] = ls
		lo := int64(r.IntN(1000))
		x.Observe(ref, x.Loc(1, "samples/00"), lo, lo+int64(r.IntN(500)), int64(i))
	}
	for i := range 2400 {
		add(i)
	}
	// An added series without data is invisible.
	ghost, _ := x.Add(labels.FromStrings("__name__", "ghost", "job", "api"))
	check := func(round int) {
		for q := range 300 {
			ms := []*labels.Matcher{randMatcher(r)}
			if r.IntN(2) == 0 {
				ms = append(ms, randMatcher(r))
			}
			mint, maxt := int64(math.MinInt64), int64(math.MaxInt64)
			if q%3 == 0 {
				mint = int64(r.IntN(1500))
				maxt = mint + int64(r.IntN(300))
			}
			want := bruteForce(x, all, ms, mint, maxt)
			got := x.Select(ms, mint, maxt)
			if !slices.Equal(got, want) {
				t.Fatalf("round %d: Select(%v, %d, %d): %d series, want %d", round, ms, mint, maxt, len(got), len(want))
			}
			if slices.Contains(got, ghost) {
				t.Fatal("a series without data was selected")
			}
			for _, name := range []string{"instance", "job", "__name__", "absent"} {
				wantV := map[string]struct{}{}
				for _, ref := range want {
					if v := all[ref].Get(name); v != "" {
						wantV[v] = struct{}{}
					}
				}
				gotV := x.LabelValues(name, ms, mint, maxt)
				if len(gotV) != len(wantV) || !slices.IsSorted(gotV) {
					t.Fatalf("LabelValues(%s, %v): %d values, want %d", name, ms, len(gotV), len(wantV))
				}
				for _, v := range gotV {
					if _, ok := wantV[v]; !ok {
						t.Fatalf("LabelValues(%s, %v) has %q", name, ms, v)
					}
				}
			}
			names := x.LabelNames(ms, mint, maxt)
			wantN := map[string]struct{}{}
			for _, ref := range want {
				all[ref].Range(func(l labels.Label) { wantN[l.Name] = struct{}{} })
			}
			if len(names) != len(wantN) {
				t.Fatalf("LabelNames(%v) = %v, want %d names", ms, names, len(wantN))
			}
		}
		// No matchers: every value with data in range.
		gotV := x.LabelValues("instance", nil, 0, 100)
		wantV := map[string]struct{}{}
		for ref, ls := range all {
			if x.inRange(ref, 0, 100) {
				wantV[ls.Get("instance")] = struct{}{}
			}
		}
		if len(gotV) != len(wantV) {
			t.Fatalf("LabelValues(instance) = %d values, want %d", len(gotV), len(wantV))
		}
	}
	check(0)
	// Remove a third, add new ones (reusing refs), check again.
	var gone []Ref
	for ref := range all {
		if r.IntN(3) == 0 {
			gone = append(gone, ref)
		}
	}
	x.Remove(gone)
	for _, ref := range gone {
		if x.Get(all[ref]) != 0 {
			t.Fatalf("removed series %v still found", all[ref])
		}
		delete(all, ref)
	}
	for i := 2400; i < 3000; i++ {
		add(i)
	}
	if x.Len() != len(all)+1 {
		t.Fatalf("Len = %d, want %d", x.Len(), len(all)+1)
	}
	check(1)
}

func TestObserveAndLocs(t *testing.T) {
	x := New()
	r, _ := x.Add(seriesN(1))
	if _, _, ok := x.Span(r); ok || x.FirstLoc(r) != 0 {
		t.Fatal("a new series has a span or a location")
	}
	a, b := x.Loc(1, "samples/00"), x.Loc(2, "samples/00")
	if a == b || x.Loc(1, "samples/00") != a || x.LocInfo(b) != (LocInfo{2, "samples/00"}) {
		t.Fatal("Loc ids wrong")
	}
	x.Observe(r, a, 10, 20, 100)
	x.Observe(r, a, 5, 15, 50)
	x.Observe(r, b, 30, 30, 70)
	if lo, hi, ok := x.Span(r); !ok || lo != 5 || hi != 30 {
		t.Fatalf("Span = %d %d %v", lo, hi, ok)
	}
	if x.LastReceived(r) != 100 {
		t.Fatalf("LastReceived = %d", x.LastReceived(r))
	}
	if got := x.Locs(r); !slices.Equal(got, []Loc{a, b}) || !x.MultiLoc(r) {
		t.Fatalf("Locs = %v", got)
	}
}

func TestIdleClearsIngestState(t *testing.T) {
	x := New()
	r1, _ := x.Add(seriesN(1))
	r2, _ := x.Add(seriesN(2))
	t0 := x.start.Add(time.Hour)
	x.Touch(r1, t0)
	x.Touch(r2, t0.Add(9*time.Minute))
	x.SetAnchor(r1, 7)
	x.SetAnchor(r2, 8)
	x.SetNext(r1, r2)
	if n := x.Idle(t0.Add(10*time.Minute), 5*time.Minute); n != 1 {
		t.Fatalf("Idle = %d, want 1", n)
	}
	if x.Anchor(r1) != 0 || x.Next(r1) != 0 || x.Anchor(r2) != 8 {
		t.Fatal("Idle cleared the wrong series")
	}
	if x.Get(seriesN(1)) != r1 {
		t.Fatal("an idle series left the index")
	}
}

func TestValidatedFlags(t *testing.T) {
	x := New()
	r, _ := x.Add(seriesN(3))
	if x.Validated(r, false) || x.Validated(r, true) {
		t.Fatal("new series validated")
	}
	x.SetValidated(r, false)
	if !x.Validated(r, false) || x.Validated(r, true) {
		t.Fatal("utf-8 validation counted as legacy")
	}
	x.SetValidated(r, true)
	if !x.Validated(r, true) {
		t.Fatal("legacy validation lost")
	}
}

// Collect names the series of a location with no data received since a
// cut and no ingest state; Remove keeps their Refs unused for ReuseAfter.
func TestCollectAndReuse(t *testing.T) {
	x := New()
	loc, other := x.Loc(1, "a"), x.Loc(1, "b")
	old, _ := x.Add(seriesN(1))
	x.Observe(old, loc, 0, 10, 100)
	fresh, _ := x.Add(seriesN(2))
	x.Observe(fresh, loc, 0, 10, 300)
	written, _ := x.Add(seriesN(3))
	x.Observe(written, loc, 0, 10, 100)
	x.SetAnchor(written, 5)
	elsewhere, _ := x.Add(seriesN(4))
	x.Observe(elsewhere, other, 0, 10, 100)
	if got := x.Collect(loc, 200); !slices.Equal(got, []Ref{old}) {
		t.Fatalf("Collect = %v, want [%d]", got, old)
	}
	x.Remove([]Ref{old})
	if r, _ := x.Add(seriesN(5)); r == old {
		t.Fatal("a removed Ref was reused at once")
	}
	if got := x.Labels(old); !labels.Equal(got, seriesN(1)) {
		t.Fatalf("a removed series' labels changed: %v", got)
	}
}

// The table finds every inserted (hash, ref) and no removed one, through
// growth, tombs and reinsertion, when tags collide (hashes equal in their
// low 32 bits) and when whole hashes do; a probe's caller confirms the
// full hash, as Index.Find does.
func TestHashTableProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var ht hashTable
	hashOf := map[Ref]uint64{}
	next := Ref(1)
	var live []Ref
	for op := range 60000 {
		if len(live) == 0 || r.IntN(3) != 0 {
			var h uint64
			switch k := r.IntN(10); {
			case k == 0 && len(live) > 0: // the same hash as a live series
				h = hashOf[live[r.IntN(len(live))]]
			case k == 1 && len(live) > 0: // the same tag, another hash
				h = hashOf[live[r.IntN(len(live))]] ^ uint64(1+r.IntN(1<<20))<<32
			default:
				h = r.Uint64()
			}
			ref := next
			next++
			s := ht.shard(h)
			s.mu.Lock()
			s.insertLocked(h, ref)
			s.mu.Unlock()
			hashOf[ref] = h
			live = append(live, ref)
		} else {
			i := r.IntN(len(live))
			ref := live[i]
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
			s := ht.shard(hashOf[ref])
			s.mu.Lock()
			ok := s.removeLocked(hashOf[ref], ref)
			s.mu.Unlock()
			if !ok {
				t.Fatalf("op %d: remove of %d failed", op, ref)
			}
		}
		if op%1000 != 0 {
			continue
		}
		isLive := map[Ref]bool{}
		for _, ref := range live {
			isLive[ref] = true
			h := hashOf[ref]
			if got := ht.find(h, func(c Ref) bool { return hashOf[c] == h && c == ref }); got != ref {
				t.Fatalf("op %d: find(%#x) = %d, want %d", op, h, got, ref)
			}
		}
		for ref, h := range hashOf {
			if !isLive[ref] && ht.find(h, func(c Ref) bool { return c == ref }) != 0 {
				t.Fatalf("op %d: removed %d found", op, ref)
			}
		}
		var used int
		for i := range ht.shards {
			s := &ht.shards[i]
			used += s.used
			if len(s.slots) > 0 && (s.used+s.tombs)*10 > len(s.slots)*7 {
				t.Fatalf("op %d: shard %d over 70%% full: %d used, %d tombs of %d", op, i, s.used, s.tombs, len(s.slots))
			}
		}
		if used != len(live) {
			t.Fatalf("op %d: %d slots used, %d live", op, used, len(live))
		}
	}
}

// Equal and EqualLabels accept exactly the series' labels (EqualLabels in
// their order), whatever the other set's length.
func TestEqualLabels(t *testing.T) {
	x := New()
	ls := seriesN(12345)
	r, _ := x.Add(ls)
	var wire []Label
	ls.Range(func(l labels.Label) { wire = append(wire, Label{l.Name, l.Value}) })
	swapped := slices.Clone(wire)
	swapped[1], swapped[2] = swapped[2], swapped[1]
	changed := slices.Clone(wire)
	changed[2].Value += "x"
	cases := []struct {
		name string
		ls   []Label
		want bool
	}{
		{"same", wire, true},
		{"prefix", wire[:5], false},
		{"longer", append(slices.Clone(wire), Label{"zz", "1"}), false},
		{"empty", nil, false},
		{"out of order", swapped, false},
		{"other value", changed, false},
	}
	for _, c := range cases {
		if got := x.EqualLabels(r, c.ls); got != c.want {
			t.Errorf("EqualLabels(%s) = %v", c.name, got)
		}
		var b labels.Builder
		for _, l := range c.ls {
			b.Set(l.Name, l.Value)
		}
		// Equal takes sorted sets: out of order is the same set there.
		want := c.want || c.name == "out of order"
		if got := x.Equal(r, b.Labels()); got != want {
			t.Errorf("Equal(%s) = %v", c.name, got)
		}
	}
	y := New() // an empty set first: the arena has no chunk
	empty, _ := y.Add(labels.EmptyLabels())
	if !y.EqualLabels(empty, nil) || !y.Equal(empty, labels.EmptyLabels()) || y.Equal(empty, ls) || y.Get(labels.EmptyLabels()) != empty {
		t.Error("the empty label set in a new index")
	}
	empty, _ = x.Add(labels.EmptyLabels())
	if !x.EqualLabels(empty, nil) || !x.Equal(empty, labels.EmptyLabels()) || x.Equal(empty, ls) {
		t.Error("the empty label set")
	}
}

// Stats().Bytes estimates the heap the index holds within a fifth, for
// a new index and a grown one.
func TestStatsBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("heap measurement")
	}
	for _, n := range []int{20_000, 150_000} {
		sets := make([]labels.Labels, n)
		for i := range sets {
			sets[i] = seriesN(i)
		}
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		x := New()
		for _, ls := range sets {
			x.Add(ls)
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		heap := float64(m1.HeapAlloc - m0.HeapAlloc)
		est := float64(x.Stats().Bytes)
		t.Logf("%d series: Stats %.0f B/series, heap %.0f", n, est/float64(n), heap/float64(n))
		if est < heap*0.8 || est > heap*1.2 {
			t.Errorf("%d series: Stats().Bytes %.0f, heap %.0f", n, est, heap)
		}
		runtime.KeepAlive(x)
		runtime.KeepAlive(sets)
	}
}
