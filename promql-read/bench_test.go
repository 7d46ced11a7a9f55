package promread

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"os"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/storage/remote"
	"github.com/prometheus/prometheus/util/teststorage"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// The benchmark archive mirrors rwload's readbench shape: 10,000 series
// over 6 metrics (~1,667 series each), 15 s steps for 1 h (240 samples per
// series, 2.4 M samples), written 2,000 series x 4 samples per request,
// sealed every 30 requests, the last requests left live.
const (
	benchSeries  = 10_000
	benchSamples = 240
	benchStepMs  = 15_000
)

var benchMetrics = []string{"http_requests_total", "process_cpu_seconds_total", "node_memory_bytes", "rpc_latency_seconds", "queue_depth", "errors_total"}

func benchLabels(i int) labels.Labels {
	return labels.FromStrings("__name__", benchMetrics[i%len(benchMetrics)], "instance", fmt.Sprintf("host-%d", (i/len(benchMetrics))%100), "id", fmt.Sprint(i))
}

var (
	benchOnce sync.Once
	benchFix  *fixture
	benchDir  string

	benchTSDBOnce sync.Once
	benchTSDB     *teststorage.TestStorage
)

// benchReference loads the same data into Prometheus's own TSDB (head
// block, in memory), to put figures beside Prometheus's.
func benchReference(b *testing.B) storage.Queryable {
	benchTSDBOnce.Do(func() {
		db, err := teststorage.NewWithError()
		if err != nil {
			b.Fatal(err)
		}
		for j0 := 0; j0 < benchSamples; j0 += 4 {
			app := db.Appender(context.Background())
			for i := 0; i < benchSeries; i++ {
				for _, p := range floats(int64(j0)*benchStepMs, int64(j0+3)*benchStepMs, benchStepMs, func(t int64) float64 { return float64(t/1000 + int64(i)) }) {
					if _, err := app.Append(0, benchLabels(i), p.T, p.V); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := app.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		benchTSDB = db
	})
	return benchTSDB
}

type tbShim struct{ testing.TB }

func (tbShim) Cleanup(func()) {} // the fixture lives for the process

func benchFixture(b *testing.B) *fixture {
	benchOnce.Do(func() {
		dir, err := os.MkdirTemp("", "promread-bench")
		if err != nil {
			b.Fatal(err)
		}
		benchDir = dir
		start := time.Now()
		f := newFixtureAt(tbShim{b}, dir)
		req := 0
		for j0 := 0; j0 < benchSamples; j0 += 4 {
			for s0 := 0; s0 < benchSeries; s0 += 2000 {
				var bt promsample.Batch
				for i := s0; i < s0+2000; i++ {
					bt.Series = append(bt.Series, promsample.Series{Labels: benchLabels(i),
						Samples: floats(int64(j0)*benchStepMs, int64(j0+3)*benchStepMs, benchStepMs, func(t int64) float64 { return float64(t/1000 + int64(i)) })})
				}
				f.write("bench", bt)
				req++
				if req%30 == 0 && j0 < benchSamples-16 {
					f.seal("bench")
				}
			}
		}
		b.Logf("wrote %d series x %d samples in %v", benchSeries, benchSamples, time.Since(start))
		benchFix = f
	})
	return benchFix
}

func TestMain(m *testing.M) {
	code := m.Run()
	if benchFix != nil {
		benchFix.a.Close()
		benchFix.w.Close()
	}
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
	if benchTSDB != nil {
		benchTSDB.Close()
	}
	os.Exit(code)
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p)]
}

// BenchmarkRemoteReadOneSeries15m: one series over a random 15-minute
// window, over loopback HTTP in SAMPLES mode (what readbench measures).
func BenchmarkRemoteReadOneSeries15m(b *testing.B) {
	f := benchFixture(b)
	for _, cfg := range benchCacheConfigs {
		b.Run(cfg.name, func(b *testing.B) {
			_, srv := newServer(b, f, Options{CacheBytes: cfg.bytes})
			rng := rand.New(rand.NewSource(1))
			var lat []time.Duration
			for b.Loop() {
				i := rng.Intn(benchSeries)
				start := int64(rng.Intn(benchSamples-60)) * benchStepMs
				l := benchLabels(i)
				req := &prompb.ReadRequest{Queries: []*prompb.Query{{StartTimestampMs: start, EndTimestampMs: start + 15*60_000, Matchers: pbMatchers(
					mustMatcher(labels.MatchEqual, "__name__", l.Get("__name__")), mustMatcher(labels.MatchEqual, "instance", l.Get("instance")), mustMatcher(labels.MatchEqual, "id", l.Get("id")))}}}
				t0 := time.Now()
				resp := postRead(b, srv.URL, req)
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				lat = append(lat, time.Since(t0))
				if resp.StatusCode != 200 || len(body) < 100 {
					b.Fatalf("status %d, %d bytes", resp.StatusCode, len(body))
				}
			}
			b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
		})
	}
}

// benchCacheConfigs: the default cache (warm after first touches) and none
// (every question decodes its segments).
var benchCacheConfigs = []struct {
	name  string
	bytes int64
}{{"cache", 0}, {"nocache", -1}}

// BenchmarkSelectOneSeries15m is the same question through the Queryable,
// without HTTP, beside Prometheus's TSDB holding the same data.
func BenchmarkSelectOneSeries15m(b *testing.B) {
	f := benchFixture(b)
	q, _ := NewQueryable(f.a, Options{})
	for _, c := range []struct {
		name string
		q    storage.Queryable
	}{{"dendro", q}, {"prometheus-tsdb", benchReference(b)}} {
		b.Run(c.name, func(b *testing.B) {
			rng := rand.New(rand.NewSource(1))
			var lat []time.Duration
			b.ReportAllocs()
			for b.Loop() {
				i := rng.Intn(benchSeries)
				start := int64(rng.Intn(benchSamples-60)) * benchStepMs
				l := benchLabels(i)
				t0 := time.Now()
				querier, _ := c.q.Querier(start, start+15*60_000)
				got := readAll(b, querier.Select(context.Background(), true, nil, mustMatcher(labels.MatchEqual, "__name__", l.Get("__name__")),
					mustMatcher(labels.MatchEqual, "instance", l.Get("instance")), mustMatcher(labels.MatchEqual, "id", l.Get("id"))))
				querier.Close()
				lat = append(lat, time.Since(t0))
				if len(got) != 1 || len(got[0].floats) != 61 {
					b.Fatalf("got %d series", len(got))
				}
			}
			b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1000, "p50-ms")
		})
	}
}

// BenchmarkRemoteReadWholeMetric: every series of one metric over the whole
// hour, streamed (what Prometheus's remote_read asks for), decoded with
// Prometheus's ChunkedReader.
func BenchmarkRemoteReadWholeMetric(b *testing.B) {
	f := benchFixture(b)
	for _, cfg := range benchCacheConfigs {
		b.Run(cfg.name, func(b *testing.B) {
			_, srv := newServer(b, f, Options{CacheBytes: cfg.bytes})
			var samples int64
			var lat []time.Duration
			k := 0
			for b.Loop() {
				name := benchMetrics[k%len(benchMetrics)]
				k++
				req := &prompb.ReadRequest{Queries: []*prompb.Query{{StartTimestampMs: 0, EndTimestampMs: benchSamples * benchStepMs,
					Matchers: pbMatchers(mustMatcher(labels.MatchEqual, "__name__", name))}},
					AcceptedResponseTypes: []prompb.ReadRequest_ResponseType{prompb.ReadRequest_STREAMED_XOR_CHUNKS}}
				t0 := time.Now()
				resp := postRead(b, srv.URL, req)
				cr := remote.NewChunkedReader(resp.Body, 1<<20, nil)
				n := 0
				for {
					var res prompb.ChunkedReadResponse
					if err := cr.NextProto(&res); err == io.EOF {
						break
					} else if err != nil {
						b.Fatal(err)
					}
					n += len(res.ChunkedSeries)
				}
				resp.Body.Close()
				lat = append(lat, time.Since(t0))
				if n < benchSeries/len(benchMetrics) {
					b.Fatalf("%d series frames", n)
				}
				samples += int64(benchSeries / len(benchMetrics) * benchSamples)
			}
			var total time.Duration
			for _, d := range lat {
				total += d
			}
			b.ReportMetric(float64(samples)/total.Seconds(), "samples/s")
			b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1000, "p50-ms")
		})
	}
}

// BenchmarkQueryRange: Grafana-style panels over the hour, through the same
// engine over the archive and over Prometheus's TSDB.
func BenchmarkQueryRange(b *testing.B) {
	f := benchFixture(b)
	api, err := NewAPI(f.a, Options{})
	if err != nil {
		b.Fatal(err)
	}
	ref := benchReference(b)
	ctx := context.Background()
	for _, e := range []string{`sum by (instance) (rate(http_requests_total[5m]))`, `rate(http_requests_total{id="6"}[5m])`} {
		for _, c := range []struct {
			name string
			q    storage.Queryable
		}{{"dendro", api.q}, {"prometheus-tsdb", ref}} {
			b.Run(c.name+"/"+e, func(b *testing.B) {
				var lat []time.Duration
				for b.Loop() {
					t0 := time.Now()
					q, err := api.engine.NewRangeQuery(ctx, c.q, nil, e, time.Unix(0, 0), time.Unix(3600, 0), 15*time.Second)
					if err != nil {
						b.Fatal(err)
					}
					res := q.Exec(ctx)
					if res.Err != nil {
						b.Fatal(res.Err)
					}
					q.Close()
					lat = append(lat, time.Since(t0))
				}
				b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1000, "p50-ms")
			})
		}
	}
}
