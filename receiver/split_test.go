package receiver

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

// The receiver's split must route exactly as promsample.SplitBatch does:
// readers find a metric's series by that rule.
func TestSplitAgreesWithSplitBatch(t *testing.T) {
	var series []promsample.Series
	var meta []promsample.Metadata
	for i := 0; i < 300; i++ {
		// Runs of one name (split hashes a name once per run), names
		// that come back after others, and series with no name.
		name := fmt.Sprintf("metric_%d", (i/3)%37)
		ls := labels.FromStrings(labels.MetricName, name, "i", fmt.Sprint(i))
		if i%41 == 7 || i%41 == 8 {
			ls = labels.FromStrings("i", fmt.Sprint(i))
		}
		series = append(series, promsample.Series{
			Labels:  ls,
			Samples: []promsample.Sample{{T: int64(i), V: float64(i)}},
		})
		if i%5 == 0 {
			meta = append(meta, promsample.Metadata{MetricFamily: name, Type: "counter"})
		}
	}
	x := seriesindex.New()
	rs := unlabelled(x, series)
	var sc rowScratch
	for _, buckets := range []int{1, 3, 8, 8, 16, 256} { // 8 twice: reused scratch
		for _, m := range [][]promsample.Metadata{nil, meta} {
			want := promsample.SplitBatch(&promsample.Batch{Series: series, Metadata: m}, buckets)
			sc.split(x, rs, m, buckets)
			var got []promsample.StreamBatch
			names := promsample.StreamsFor(buckets)
			for b := 0; b < buckets; b++ {
				var batch promsample.Batch
				for _, i := range sc.order[sc.count[b]:sc.count[b+1]] {
					batch.Series = append(batch.Series, series[i])
				}
				if len(sc.meta[b]) > 0 {
					batch.Metadata = append([]promsample.Metadata(nil), sc.meta[b]...)
				}
				if len(batch.Series) > 0 || len(batch.Metadata) > 0 {
					got = append(got, promsample.StreamBatch{Stream: names[b], Batch: batch})
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("buckets %d, %d metadata: split differs from SplitBatch:\n got %d streams\nwant %d streams", buckets, len(m), len(got), len(want))
			}
			sc.release()
		}
	}
}
