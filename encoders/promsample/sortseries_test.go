package promsample

import (
	"bytes"
	"cmp"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/prometheus/model/labels"
)

// sortedByName returns sets in the order a segment's series are in:
// metric name, then labels.Compare. sortSeries must give exactly it.
func sortedByName(sets []labels.Labels) []labels.Labels {
	out := slices.Clone(sets)
	slices.SortFunc(out, func(a, b labels.Labels) int {
		return cmp.Or(strings.Compare(a.Get(labels.MetricName), b.Get(labels.MetricName)), labels.Compare(a, b))
	})
	return out
}

// collected returns a finished collector of one sample for each label set,
// and its series.
func collected(sets []labels.Labels) (*collector, []*seriesData) {
	c := newPackingCollector()
	for _, ls := range sets {
		c.add(&Batch{Series: []Series{{Labels: ls, Samples: []Sample{{T: 1, V: 1}}}}})
	}
	series, _ := c.finish()
	return c, series
}

func TestSortSeriesIsNameThenLabels(t *testing.T) {
	cases := []struct {
		name   string
		series []labels.Labels
	}{
		{"one label set is a prefix of another", []labels.Labels{
			labels.FromStrings("__name__", "m", "a", "1", "b", "2"),
			labels.FromStrings("__name__", "m", "a", "1"),
		}},
		{"a value is a prefix of another", []labels.Labels{
			labels.FromStrings("__name__", "m", "id", "10"),
			labels.FromStrings("__name__", "m", "id", "1"),
			labels.FromStrings("__name__", "m", "id", "1\x00"),
			labels.FromStrings("__name__", "m", "id", "09"),
		}},
		{"a label name sorts before __name__", []labels.Labels{
			labels.FromStrings("__name__", "b", "A", "z"),
			labels.FromStrings("__name__", "a", "A", "zz"),
			labels.FromStrings("__name__", "a", "A", "y"),
		}},
		{"a name equal to a value elsewhere", []labels.Labels{
			labels.FromStrings("__name__", "job", "job", "__name__"),
			labels.FromStrings("__name__", "job", "instance", "job"),
			labels.FromStrings("__name__", "instance", "job", "job"),
		}},
		{"names differ where values are equal", []labels.Labels{
			labels.FromStrings("__name__", "m", "b", "x"),
			labels.FromStrings("__name__", "m", "a", "x"),
			labels.FromStrings("__name__", "m", "a", "x", "c", ""+"v"),
		}},
		{"utf-8 and bytes above ascii", []labels.Labels{
			labels.FromStrings("__name__", "m", "é", "1"),
			labels.FromStrings("__name__", "m", "e", "\xff"),
			labels.FromStrings("__name__", "m", "e", "ü"),
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkSortSeries(t, tc.series)
		})
	}
}

func TestSortSeriesRandomLabelSets(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	alphabet := []string{"", "a", "b", "aa", "ab", "a\x00", "B", "_", "zz", "1", "10", "2"}
	names := []string{"A", "a", "b", "ba", "c", "id", "instance", "job", "zone"}
	for round := 0; round < 200; round++ {
		n := 1 + rng.IntN(60)
		if round%20 == 0 {
			n = radixSortMin + rng.IntN(1000) // sorted by radix
		}
		seen := map[string]bool{}
		var sets []labels.Labels
		for len(sets) < n {
			b := labels.NewScratchBuilder(0)
			b.Add("__name__", "m"+alphabet[1+rng.IntN(len(alphabet)-1)])
			for _, name := range names {
				if rng.IntN(2) == 0 {
					continue
				}
				v := alphabet[1+rng.IntN(len(alphabet)-1)] + alphabet[rng.IntN(len(alphabet))]
				b.Add(name, v)
			}
			b.Sort()
			ls := b.Labels()
			if seen[ls.String()] {
				continue
			}
			seen[ls.String()] = true
			sets = append(sets, ls)
		}
		checkSortSeries(t, sets)
	}
}

// Strings that share their first 8, 16 or more bytes, end inside a
// shared run or at its edge, or hold zero bytes there (sortStrings reads
// eight bytes at a time), and series with and without a name, or with a
// label before it (sortByKeys skips the name's value only when it is
// every series' second; keys that tie leave the order to the labels),
// in sets sorted by comparison and in sets large enough for the radix
// sort.
func TestSortSeriesLongSharedPrefixes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	stems := []string{"", "/kubepod", "/kubepods/burstabl", "/kubepods/burstable/pod", "/kubepods/burstable/pod\x00\x00",
		"12345678", "1234567", "123456789", "12345678\x00", "\x00\x00\x00\x00\x00\x00\x00\x00"}
	for round := 0; round < 300; round++ {
		n := 1 + rng.IntN(120)
		if round%30 == 0 {
			n = radixSortMin + rng.IntN(2000) // sorted by radix
		}
		unnamed := rng.IntN(4) == 0
		before := rng.IntN(4) == 0
		seen := map[string]bool{}
		var sets []labels.Labels
		for len(sets) < n {
			b := labels.NewScratchBuilder(0)
			if !unnamed || rng.IntN(2) == 0 {
				b.Add("__name__", stems[1+rng.IntN(len(stems)-1)]+strconv.Itoa(rng.IntN(3)))
			}
			if before {
				b.Add("A", stems[rng.IntN(len(stems))]+"x")
			}
			b.Add("container", []string{"app", "sidecar"}[rng.IntN(2)])
			b.Add("id", stems[rng.IntN(len(stems))]+stems[rng.IntN(len(stems))]+strconv.Itoa(rng.IntN(50)))
			// More positions that vary than a key holds: keys tie.
			for l := range 8 {
				b.Add("l"+strconv.Itoa(l), strconv.Itoa(rng.IntN(2)))
			}
			if rng.IntN(3) == 0 {
				b.Add("zone", stems[rng.IntN(len(stems))])
			}
			b.Sort()
			ls := b.Labels()
			if ls.IsEmpty() || seen[ls.String()] {
				continue
			}
			seen[ls.String()] = true
			sets = append(sets, ls)
		}
		checkSortSeries(t, sets)
	}
}

func checkSortSeries(t *testing.T, sets []labels.Labels) {
	t.Helper()
	c, series := collected(sets)
	want := sortedByName(sets)
	got := c.output(series)
	if len(got) != len(want) {
		t.Fatalf("%d series, want %d", len(got), len(want))
	}
	for i := range want {
		if !labels.Equal(got[i].Labels, want[i]) {
			var g, w []string
			for i := range got {
				g, w = append(g, got[i].Labels.String()), append(w, want[i].String())
			}
			t.Fatalf("order differs at %d:\n got %q\nwant %q", i, g, w)
		}
	}
}

// freshSeriesTable builds the series table of sets (in segment order, one
// row each) by numbering their strings afresh.
func freshSeriesTable(sets []labels.Labels) *SeriesTable {
	ids := map[string]uint32{}
	for _, ls := range sets {
		ls.Range(func(l labels.Label) { ids[l.Name], ids[l.Value] = 0, 0 })
	}
	t := &SeriesTable{off: []uint32{0}}
	for s := range ids {
		t.Symbols = append(t.Symbols, s)
	}
	slices.Sort(t.Symbols)
	for i, s := range t.Symbols {
		ids[s] = uint32(i)
	}
	for _, ls := range sets {
		ls.Range(func(l labels.Label) { t.pairs = append(t.pairs, ids[l.Name], ids[l.Value]) })
		t.off = append(t.off, uint32(len(t.pairs)))
		t.Rows = append(t.Rows, 1)
		t.Hashes = append(t.Hashes, SeriesHash(ls))
	}
	return t
}

// The series table built from the collector's ranks is the one numbering
// the strings afresh gives.
func TestSeriesTableFromTheSortsRanks(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	var sets []labels.Labels
	for i := 0; i < 500; i++ {
		sets = append(sets, labels.FromStrings("__name__", []string{"a", "b_total", "up"}[rng.IntN(3)],
			"id", strconv.Itoa(i*7%500), "instance", "host-"+strconv.Itoa(i%7), "job", []string{"api", "db"}[i%2]))
	}
	c, series := collected(sets)
	got, want := newSeriesTable(series, c.symbols), freshSeriesTable(sortedByName(sets))
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("series table from the sort's ranks differs:\n got %+v\nwant %+v", got, want)
	}
	if len(want.Rows) != len(sets) || len(want.Symbols) == 0 {
		t.Fatalf("table of %d series, %d symbols; want %d series", len(want.Rows), len(want.Symbols), len(sets))
	}
}

// Label sets whose ids hash alike are still told apart, and each is found
// again, however many share a hash, across the index's growths, or in a
// table reserved for them all, which then does not grow.
func TestCollectorSeriesOfCollidingHashes(t *testing.T) {
	for _, reserve := range []int{0, 100, 3000} {
		c := newCollector()
		c.index.reserve(reserve)
		reserved := len(c.index.slots)
		var ids [][]uint32
		var got []*seriesData
		seen := map[*seriesData]bool{}
		hash := func(i int) uint64 {
			switch i % 3 {
			case 0:
				return 42 // one tag for a third of them
			case 1:
				return 7<<32 | uint64(i) // another tag, other low bits
			}
			return xxhash.Sum64(idBytes(ids[i]))
		}
		for i := range 3000 { // a few growths of the index (1024 slots first)
			ids = append(ids, []uint32{c.syms.id("__name__"), c.syms.id("m"), c.syms.id("id"), c.syms.id(strconv.Itoa(i))})
			sd := c.seriesOfHashed(ids[i], hash(i))
			if seen[sd] {
				t.Fatalf("reserve %d: label set %d got the series of another", reserve, i)
			}
			seen[sd] = true
			got = append(got, sd)
		}
		if reserve >= 3000 && len(c.index.slots) != reserved {
			t.Fatalf("reserved %d slots for %d series, grew to %d", reserved, reserve, len(c.index.slots))
		}
		for i := range ids {
			if sd := c.seriesOfHashed(ids[i], hash(i)); sd != got[i] {
				t.Fatalf("reserve %d: label set %d: a second lookup found another series", reserve, i)
			}
		}
		series, _ := c.finish()
		if len(series) != len(ids) {
			t.Fatalf("reserve %d: %d series, want %d", reserve, len(series), len(ids))
		}
	}
}

// A slab of series is whole pages: an allocation above 32 KiB is rounded
// up to them, and a seal holds hundreds of slabs.
func TestSeriesSlabIsWholePages(t *testing.T) {
	if size := unsafe.Sizeof(seriesData{}) * seriesSlab; size%8192 != 0 {
		t.Fatalf("a slab of %d series is %d bytes, %d into its last page", seriesSlab, size, size%8192)
	}
}

// BenchmarkSortSeries: sortSeries alone, on a seal's worth of one stream
// at a million series (200 k series, sealLabels, in a shuffled order).
func BenchmarkSortSeries(b *testing.B) {
	const n = 200_000
	order := rand.New(rand.NewPCG(1, 2)).Perm(n)
	sets := make([]labels.Labels, n)
	for i, j := range order {
		sets[i] = sealLabels(j)
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		c := newPackingCollector()
		for _, ls := range sets {
			c.add(&Batch{Series: []Series{{Labels: ls, Samples: []Sample{{T: 1, V: 1}}}}})
		}
		out := make([]*seriesData, 0, c.count)
		for i := range c.count {
			out = append(out, &c.slabs[i/seriesSlab][i%seriesSlab])
		}
		b.StartTimer()
		sortSeries(out, c.syms.strs)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/series")
}

// An encoder remembers each stream's series count at its last seal, to
// size the next seal's index; a stream it has not sealed has none, and a
// seal gives the same segment whatever the hint.
func TestEncoderSizesEachStreamsNextSeal(t *testing.T) {
	rows := rowsOf(t, randBatches(rand.New(rand.NewPCG(5, 6)), 40))
	var fresh, e Encoder
	want, err := fresh.Encode("a", rows)
	if err != nil {
		t.Fatal(err)
	}
	c := newPackingCollector()
	if _, err := fresh.collectRows(newRowCollector(c), rows, false); err != nil {
		t.Fatal(err)
	}
	n := c.count // the series the collector's index held
	if n < 10 {
		t.Fatalf("%d series collected", n)
	}
	for round := range 2 {
		got, err := e.Encode("a", rows)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes, want.Bytes) {
			t.Fatalf("round %d: the segment differs from a fresh encoder's", round)
		}
		if h := e.sizeHint("a", -1); h != n {
			t.Fatalf("round %d: hint %d for stream a, want its %d series", round, h, n)
		}
	}
	if h := e.sizeHint("b", -1); h != 0 {
		t.Fatalf("hint %d for a stream never sealed", h)
	}
}
