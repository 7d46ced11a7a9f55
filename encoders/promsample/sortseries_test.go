package promsample

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
)

// compareByName is the order a segment's series are in: metric name, then
// labels.Compare. sortSeries must give exactly it.
func compareByName(a, b *seriesData) int {
	if c := strings.Compare(a.name, b.name); c != 0 {
		return c
	}
	return labels.Compare(a.lbls, b.lbls)
}

func seriesFor(ls labels.Labels) *seriesData {
	return &seriesData{lbls: ls, name: ls.Get(labels.MetricName)}
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

func checkSortSeries(t *testing.T, sets []labels.Labels) {
	t.Helper()
	var got, want []*seriesData
	for _, ls := range sets {
		got = append(got, seriesFor(ls))
		want = append(want, seriesFor(ls))
	}
	sortSeries(got)
	slices.SortFunc(want, compareByName)
	for i := range want {
		if !labels.Equal(got[i].lbls, want[i].lbls) {
			var g, w []string
			for i := range got {
				g, w = append(g, got[i].lbls.String()), append(w, want[i].lbls.String())
			}
			t.Fatalf("order differs at %d:\n got %q\nwant %q", i, g, w)
		}
	}
}

// The series table built from the sort's ranks is the one numbering the
// strings afresh gives.
func TestSeriesTableFromTheSortsRanks(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	var sets []labels.Labels
	for i := 0; i < 500; i++ {
		sets = append(sets, labels.FromStrings("__name__", []string{"a", "b_total", "up"}[rng.IntN(3)],
			"id", strconv.Itoa(i*7%500), "instance", "host-"+strconv.Itoa(i%7), "job", []string{"api", "db"}[i%2]))
	}
	var ranked, fresh []*seriesData
	for _, ls := range sets {
		sd := seriesFor(ls)
		sd.samples = []Sample{{T: 1, V: 1}}
		ranked = append(ranked, sd)
	}
	symbols := sortSeries(ranked)
	for _, sd := range ranked {
		fresh = append(fresh, &seriesData{lbls: sd.lbls, name: sd.name, samples: sd.samples})
	}
	got, want := newSeriesTable(ranked, symbols), newSeriesTable(fresh, nil)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("series table from the sort's ranks differs:\n got %+v\nwant %+v", got, want)
	}
	if len(want.Rows) != len(sets) || len(want.Symbols) == 0 {
		t.Fatalf("table of %d series, %d symbols; want %d series", len(want.Rows), len(want.Symbols), len(sets))
	}
}
