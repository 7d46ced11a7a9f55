package promread

import (
	"context"
	"fmt"
	"math/rand"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// TestAgainstReferenceReader compares the query path (pruning, caches,
// merging) with promsample.ReadArchive, the reference reader that reads
// everything, over random matchers and ranges, cold and warm.
func TestAgainstReferenceReader(t *testing.T) {
	f := newFixture(t)
	standardData(f)
	rng := rand.New(rand.NewSource(7))
	names := []string{"http_requests_total", "temperature", "late_metric", "latency_seconds", "rpc_duration_seconds", "nope"}
	values := map[string][]string{"env": {"prod", "dev", ""}, "instance": {"i0", "i1", "i3"}, "job": {"api", "batch"}, "room": {"a", "b", ""}}
	for _, cacheBytes := range []int64{-1, 0, 4096} { // none, default, tiny (constant eviction)
		q, _ := NewQueryable(f.a, Options{CacheBytes: cacheBytes})
		for i := 0; i < 300; i++ {
			var ms []*labels.Matcher
			switch rng.Intn(3) {
			case 0:
				ms = append(ms, mustMatcher(labels.MatchEqual, "__name__", names[rng.Intn(len(names))]))
			case 1:
				ms = append(ms, mustMatcher(labels.MatchRegexp, "__name__", names[rng.Intn(len(names))]+"|"+names[rng.Intn(len(names))]))
			case 2:
				ms = append(ms, mustMatcher(labels.MatchRegexp, "__name__", ".*e.*"))
			}
			for k, vs := range values {
				if rng.Intn(3) == 0 {
					ms = append(ms, mustMatcher([]labels.MatchType{labels.MatchEqual, labels.MatchNotEqual, labels.MatchRegexp, labels.MatchNotRegexp}[rng.Intn(4)], k, vs[rng.Intn(len(vs))]))
				}
			}
			mint := int64(rng.Intn(8000)) * 1000
			maxt := mint + int64(rng.Intn(4000))*1000
			ref, err := promsample.ReadArchive(context.Background(), f.a, promsample.Query{MinT: mint, MaxT: maxt, Matchers: ms})
			if err != nil {
				t.Fatal(err)
			}
			var want []*series
			for _, s := range ref {
				if len(s.Samples)+len(s.Histograms) > 0 {
					want = append(want, &series{lbls: s.Labels, floats: s.Samples, hists: s.Histograms})
				}
			}
			querier, _ := q.Querier(mint, maxt)
			got := readAll(t, querier.Select(context.Background(), true, nil, ms...))
			equalSeries(t, fmt.Sprintf("cache %d, %v [%d, %d]", cacheBytes, ms, mint, maxt), want, got)
		}
	}
}
