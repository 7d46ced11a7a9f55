package promread

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// TestReadRacingSeal: one goroutine appends (one sample per series per
// request) and seals every few requests while another reads in a loop.
// Every read must hold every sample acknowledged before it started, each
// exactly once and in order: a seal landing mid-read neither hides rows
// (new segment unseen, watermark applied) nor shows them twice. It runs
// with the cache disabled (every read decodes segments and tail) and on.
func TestReadRacingSeal(t *testing.T) {
	for _, cacheBytes := range []int64{-1, 64 << 20} {
		f := newFixture(t)
		q, err := NewQueryable(f.a, Options{CacheBytes: cacheBytes})
		if err != nil {
			t.Fatal(err)
		}
		const n = 300
		lbls := []labels.Labels{ls("__name__", "seam", "k", "a"), ls("__name__", "seam", "k", "b"), ls("__name__", "other", "k", "c")}
		var acked atomic.Int64 // samples 0..acked-1 are committed
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int64(0); i < n; i++ {
				var b promsample.Batch
				for _, l := range lbls {
					b.Series = append(b.Series, promsample.Series{Labels: l, Samples: []promsample.Sample{{T: i * 1000, V: float64(i)}}})
				}
				f.write("s", b)
				acked.Store(i + 1)
				if i%7 == 3 {
					f.seal("s")
				}
			}
		}()
		reads := 0
		for {
			before := acked.Load()
			var st selectStats
			got, err := q.s.selectSeries(context.Background(), selectParams{mint: math.MinInt64, maxt: math.MaxInt64,
				matchers: []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "seam")}, stats: &st})
			if err != nil {
				t.Fatal(err)
			}
			reads++
			// Each sample was written once, so the segments and the tail
			// together must hold it once: the seam repeats nothing even
			// before de-duplication.
			total := 0
			for _, s := range got {
				total += len(s.floats)
			}
			if st.rawSamples != total {
				t.Fatalf("read %d: the pieces held %d samples for %d distinct: the seam repeated rows", reads, st.rawSamples, total)
			}
			if before > 0 && len(got) != 2 {
				t.Fatalf("read %d: %d series", reads, len(got))
			}
			for _, s := range got {
				if int64(len(s.floats)) < before {
					t.Fatalf("read %d: %s has %d samples, %d were acknowledged before the read", reads, s.lbls, len(s.floats), before)
				}
				for k, p := range s.floats {
					if p.T != int64(k)*1000 || p.V != float64(k) {
						t.Fatalf("read %d: %s sample %d is %v: lost or repeated", reads, s.lbls, k, p)
					}
				}
			}
			if before == n {
				break
			}
		}
		wg.Wait()
		t.Logf("cache %d: %d reads raced %d appends and %d seals", cacheBytes, reads, n, n/7)
	}
}
