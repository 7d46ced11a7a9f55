package seriesindex

import (
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// BenchmarkMemory adds series rwload-shaped label sets and reports the
// index's heap per series.
func BenchmarkMemory(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			sets := make([]labels.Labels, n)
			for i := range sets {
				sets[i] = seriesN(i)
			}
			b.ResetTimer()
			var per float64
			for range b.N {
				runtime.GC()
				var m0, m1 runtime.MemStats
				runtime.ReadMemStats(&m0)
				x := New()
				loc := x.Loc(1, "s")
				for i, ls := range sets {
					r, _ := x.Add(ls)
					x.Observe(r, loc, int64(i), int64(i), int64(i))
				}
				runtime.GC()
				runtime.ReadMemStats(&m1)
				per = float64(m1.HeapAlloc-m0.HeapAlloc) / float64(n)
				runtime.KeepAlive(x)
			}
			b.ReportMetric(per, "B/series")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/add")
		})
	}
}

// BenchmarkFind is the ingest path's probe for a known series.
func BenchmarkFind(b *testing.B) {
	const n = 1_000_000
	x := New()
	sets := make([]labels.Labels, n)
	hashes := make([]uint64, n)
	for i := range sets {
		sets[i] = seriesN(i)
		x.Add(sets[i])
		hashes[i] = promsample.SeriesHash(sets[i])
	}
	b.ResetTimer()
	for i := range b.N {
		k := (i * 7919) % n
		if x.Find(hashes[k], func(r Ref) bool { return x.Equal(r, sets[k]) }) == 0 {
			b.Fatal("not found")
		}
	}
}

// BenchmarkSelect answers the read questions of issue 14 at 1 M series.
func BenchmarkSelect(b *testing.B) {
	const n = 1_000_000
	x := New()
	loc := x.Loc(1, "s")
	for i := range n {
		r, _ := x.Add(seriesN(i))
		x.Observe(r, loc, 0, 1000, 0)
	}
	cases := []struct {
		name string
		ms   []*labels.Matcher
	}{
		{"one-series", []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "temperature_celsius"),
			labels.MustNewMatcher(labels.MatchEqual, "instance", "host-0042:9100"), labels.MustNewMatcher(labels.MatchEqual, "id", "1234")}},
		{"id=99", []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "temperature_celsius"),
			labels.MustNewMatcher(labels.MatchEqual, "id", "99")}},
		{"metric", []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "http_requests_total")}},
		{"name-regex", []*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, "__name__", "http_.*|queue_.*")}},
		{"not-equal", []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "queue_depth"),
			labels.MustNewMatcher(labels.MatchNotEqual, "job", "api")}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var got int
			for range b.N {
				got = len(x.Select(c.ms, 0, 1000))
			}
			b.ReportMetric(float64(got), "series")
		})
	}
	b.Run("label-values-instance", func(b *testing.B) {
		for range b.N {
			if len(x.LabelValues("instance", nil, 0, 1000)) != 100 {
				b.Fatal("values")
			}
		}
	})
	b.Run("label-names", func(b *testing.B) {
		for range b.N {
			x.LabelNames(nil, 0, 1000)
		}
	})
}

// BenchmarkFindCached is BenchmarkFind over a request's worth of series
// (2,000, in cache): the probe and the label comparison without the
// cache misses of a million-series index, as the decoder of a sender
// that repeats its series sees it.
func BenchmarkFindCached(b *testing.B) {
	const n = 2000
	x := New()
	sets := make([]labels.Labels, n)
	hashes := make([]uint64, n)
	for i := range sets {
		sets[i] = seriesN(i * 499)
		x.Add(sets[i])
		hashes[i] = promsample.SeriesHash(sets[i])
	}
	b.ResetTimer()
	for i := range b.N {
		k := i % n
		if x.Find(hashes[k], func(r Ref) bool { return x.Equal(r, sets[k]) }) == 0 {
			b.Fatal("not found")
		}
	}
}

// BenchmarkAddParallel adds new series from four goroutines at once, as
// four remote-write handlers do while a million series arrive.
func BenchmarkAddParallel(b *testing.B) {
	sets := make([]labels.Labels, parallelAdds)
	for i := range sets {
		sets[i] = seriesN(i)
	}
	benchParallelAdds(b, func(x *Index, i int) bool {
		_, added := x.Add(sets[i])
		return added
	})
}

// BenchmarkAddLabelsParallel is BenchmarkAddParallel through AddLabels,
// as the remote-write decoders add series: the labels as slices, with
// their hash.
func BenchmarkAddLabelsParallel(b *testing.B) {
	sets := make([][]Label, parallelAdds)
	hashes := make([]uint64, parallelAdds)
	for i := range sets {
		ls := seriesN(i)
		ls.Range(func(l labels.Label) { sets[i] = append(sets[i], Label{Name: l.Name, Value: l.Value}) })
		hashes[i] = promsample.SeriesHash(ls)
	}
	benchParallelAdds(b, func(x *Index, i int) bool {
		_, added := x.AddLabels(sets[i], hashes[i])
		return added
	})
}

// parallelAdds is the series the parallel add benchmarks add.
const parallelAdds = 1_000_000

// benchParallelAdds adds series 0 to parallelAdds-1 to a new index from
// four goroutines (series sharded i % 4), add saying whether series i was
// added, and reports the wall time per series.
func benchParallelAdds(b *testing.B, add func(x *Index, i int) bool) {
	const adders = 4
	b.ResetTimer()
	for range b.N {
		x := New()
		var wg sync.WaitGroup
		for g := range adders {
			wg.Go(func() {
				for i := g; i < parallelAdds; i += adders {
					if !add(x, i) {
						b.Error("not added")
						return
					}
				}
			})
		}
		wg.Wait()
		if x.Len() != parallelAdds {
			b.Fatalf("%d series, want %d", x.Len(), parallelAdds)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*parallelAdds), "ns/add")
}
