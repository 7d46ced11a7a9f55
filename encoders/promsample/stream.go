package promsample

import (
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// DefaultStreamBuckets is the number of sample streams a source's series are
// spread over when the receiver is not configured otherwise.
//
// Every remote-write request becomes one row per stream it touches, and
// SQLite's cost per commit grows with the streams a commit touches (issue 3,
// measured: 1 stream 2,407 k samples/s and 33 B written per sample; 4: 2,199
// k and 41 B; 16: 1,341 k and 79 B). A read of one series costs the bytes of
// every segment of its stream in the time range, so it falls as 1/buckets.
// 8 sits between the measured 4 and 16 (interpolated, not measured: about
// 1.8 M samples/s and ~55 B written per sample; still tens of times what one
// Prometheus sends: 1 M active series at a 15 s interval is 67 k samples/s),
// and a one-series query reads an eighth of a source's data. Measured here
// by BenchmarkBuckets on the node_exporter set (~150 metric names): rows per
// request equal the bucket count, wal bytes per sample grow 12.5 (1) / 13.0
// (4) / 13.7 (8) / 14.8 (16), and the bytes a one-series read fetches fall
// 1.50 MB / 210 KB / 92 KB / 30 KB. Going to 16
// would halve read bytes again for ~25% less write headroom and nearly
// double write amplification; 4 would double read bytes for ~20% more write
// headroom. Because series are routed by metric name, a source with fewer
// metric names than buckets simply leaves buckets empty.
const DefaultStreamBuckets = 8

// MaxStreamBuckets bounds the bucket count (two hex digits in the name).
const MaxStreamBuckets = 256

// SampleStreamPrefix starts the name of every stream this package writes;
// a reader that does not know a source's bucket count reads every stream
// with this prefix.
const SampleStreamPrefix = "samples/"

// StreamFor returns the stream that holds every series of metricName (its
// __name__ value) when a source's series are spread over buckets streams:
// "samples/" followed by two lowercase hex digits, e.g. "samples/03". The
// bucket is xxhash64(metricName) mod buckets, so all series of one metric,
// and its metadata, live in one stream, and a query with a __name__
// equality matcher reads only that stream. buckets outside
// [1, MaxStreamBuckets] is treated as DefaultStreamBuckets. Changing the
// bucket count of a live source moves metrics between streams; readers
// must then read every SampleStreamPrefix stream (see StreamsFor).
func StreamFor(metricName string, buckets int) string {
	if buckets < 1 || buckets > MaxStreamBuckets {
		buckets = DefaultStreamBuckets
	}
	return streamName(int(xxhash.Sum64String(metricName) % uint64(buckets)))
}

// StreamsFor lists every stream name of a source with buckets buckets, in
// bucket order.
func StreamsFor(buckets int) []string {
	if buckets < 1 || buckets > MaxStreamBuckets {
		buckets = DefaultStreamBuckets
	}
	out := make([]string, buckets)
	for i := range out {
		out[i] = streamName(i)
	}
	return out
}

func streamName(bucket int) string {
	s := strconv.FormatInt(int64(bucket), 16)
	if len(s) == 1 {
		s = "0" + s
	}
	return SampleStreamPrefix + s
}

// StreamBatch is one stream's share of a request.
type StreamBatch struct {
	Stream string
	Batch  Batch
}

// SplitBatch splits one request's data into per-stream batches by metric
// name (series by their __name__ label, metadata by MetricFamily), in
// bucket order, skipping empty streams. Series without a __name__ go to the
// stream of the empty name. The returned batches share Series values (and
// their slices) with b.
func SplitBatch(b *Batch, buckets int) []StreamBatch {
	if buckets < 1 || buckets > MaxStreamBuckets {
		buckets = DefaultStreamBuckets
	}
	parts := make([]Batch, buckets)
	for _, s := range b.Series {
		i := xxhash.Sum64String(s.Labels.Get("__name__")) % uint64(buckets)
		parts[i].Series = append(parts[i].Series, s)
	}
	for _, m := range b.Metadata {
		i := xxhash.Sum64String(m.MetricFamily) % uint64(buckets)
		parts[i].Metadata = append(parts[i].Metadata, m)
	}
	var out []StreamBatch
	for i, p := range parts {
		if len(p.Series) > 0 || len(p.Metadata) > 0 {
			out = append(out, StreamBatch{Stream: streamName(i), Batch: p})
		}
	}
	return out
}
