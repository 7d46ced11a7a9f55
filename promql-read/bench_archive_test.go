package promread

import (
	"bytes"
	"context"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// The benchmarks below run over a real archive named by
// DENDRO_BENCH_ARCHIVE, e.g. the one `rwload write --series 10000
// --samples 1440 --step-ms 5000` leaves behind (issue 5's data set: 8
// streams, sealed segments and a live tail as the receiver left them).
// They skip without it. They ask what rwload readbench asks, over loopback
// HTTP in SAMPLES mode: one series by __name__ and two more labels (or
// every label when it has fewer) over a random 15-minute window, and every
// series of one metric over a random 15-minute window; both with
// promql-read's default cache (DefaultCacheBytes; cmd/dendro-receiver
// sizes it from --memory.limit, 353 MiB on a 24 GiB host), warmed by one
// pass first.

type archiveBench struct {
	a          *archive.Archive
	series     []labels.Labels
	names      []string
	mint, maxt int64
}

var (
	archiveBenchOnce sync.Once
	archiveBenchFix  *archiveBench
)

func openBenchArchive(b *testing.B) *archiveBench {
	path := os.Getenv("DENDRO_BENCH_ARCHIVE")
	if path == "" {
		b.Skip("DENDRO_BENCH_ARCHIVE is not set")
	}
	archiveBenchOnce.Do(func() { archiveBenchFix = loadBenchArchive(b, path) })
	if archiveBenchFix == nil {
		b.Fatal("the benchmark archive did not load")
	}
	return archiveBenchFix
}

// loadBenchArchive opens the archive for the process and lists its series.
func loadBenchArchive(b *testing.B, path string) *archiveBench {
	a, err := archive.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	q, err := NewQueryable(a, Options{CacheBytes: -1})
	if err != nil {
		b.Fatal(err)
	}
	ab := &archiveBench{a: a}
	got, err := q.s.selectSeries(context.Background(), selectParams{mint: -1 << 62, maxt: 1 << 62, labelsOnly: true,
		matchers: []*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, labels.MetricName, ".+")}})
	if err != nil {
		b.Fatal(err)
	}
	seen := map[string]bool{}
	for _, sr := range got {
		ab.series = append(ab.series, sr.lbls)
		if n := sr.lbls.Get(labels.MetricName); !seen[n] {
			seen[n] = true
			ab.names = append(ab.names, n)
		}
	}
	// The time span, from one series read whole.
	one, err := q.s.selectSeries(context.Background(), selectParams{mint: -1 << 62, maxt: 1 << 62, matchers: equalities(ab.series[0])})
	if err != nil || len(one) != 1 || len(one[0].floats) == 0 {
		b.Fatalf("series 0: %v", err)
	}
	ab.mint, ab.maxt = one[0].floats[0].T, one[0].floats[len(one[0].floats)-1].T
	return ab
}

// equalities picks __name__, instance and id as equality matchers (what
// readbench asks), or every label of a series that lacks those two.
func equalities(ls labels.Labels) []*labels.Matcher {
	ms := []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, labels.MetricName, ls.Get(labels.MetricName))}
	if ls.Has("instance") && ls.Has("id") {
		return append(ms, labels.MustNewMatcher(labels.MatchEqual, "instance", ls.Get("instance")),
			labels.MustNewMatcher(labels.MatchEqual, "id", ls.Get("id")))
	}
	ls.Range(func(l labels.Label) {
		if l.Name != labels.MetricName {
			ms = append(ms, labels.MustNewMatcher(labels.MatchEqual, l.Name, l.Value))
		}
	})
	return ms
}

func (ab *archiveBench) window(rng *rand.Rand) (int64, int64) {
	const span = 15 * 60_000
	start := ab.mint + rng.Int63n(max(1, ab.maxt-ab.mint-span))
	return start, start + span
}

// samplesRead posts a SAMPLES read and counts the samples of the answer.
func samplesRead(b *testing.B, url string, req *prompb.ReadRequest) int {
	resp := postRead(b, url, req)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("status %d: %v %s", resp.StatusCode, err, body)
	}
	raw, err := snappy.Decode(nil, body)
	if err != nil {
		b.Fatal(err)
	}
	var rr prompb.ReadResponse
	if err := rr.Unmarshal(raw); err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, r := range rr.Results {
		for _, ts := range r.Timeseries {
			n += len(ts.Samples)
		}
	}
	return n
}

func BenchmarkArchiveOneSeries15m(b *testing.B) {
	ab := openBenchArchive(b)
	api, err := NewAPI(ab.a, Options{})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()
	rng := rand.New(rand.NewSource(1))
	ask := func() int {
		mint, maxt := ab.window(rng)
		ms := equalities(ab.series[rng.Intn(len(ab.series))])
		return samplesRead(b, srv.URL, &prompb.ReadRequest{Queries: []*prompb.Query{{StartTimestampMs: mint, EndTimestampMs: maxt, Matchers: pbMatchers(ms...)}}})
	}
	for range 200 {
		ask() // warm the cache as readbench's earlier queries would
	}
	var lat []time.Duration
	misses, pageMisses := api.q.CacheStats().Misses, api.q.PageCacheStats().Misses
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		if ask() == 0 {
			b.Fatal("empty answer")
		}
		lat = append(lat, time.Since(t0))
	}
	b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
	st := api.q.CacheStats()
	b.ReportMetric(float64(st.Bytes)/(1<<20), "cache-MiB")
	b.ReportMetric(float64(st.Misses-misses)/float64(b.N), "misses/op")
	pst := api.q.PageCacheStats()
	b.ReportMetric(float64(pst.Bytes)/(1<<20), "pages-MiB")
	b.ReportMetric(float64(pst.Misses-pageMisses)/float64(b.N), "page-misses/op")
}

func BenchmarkArchiveWholeMetric15m(b *testing.B) {
	ab := openBenchArchive(b)
	api, err := NewAPI(ab.a, Options{})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()
	rng := rand.New(rand.NewSource(1))
	ask := func() int {
		mint, maxt := ab.window(rng)
		name := ab.names[rng.Intn(len(ab.names))]
		return samplesRead(b, srv.URL, &prompb.ReadRequest{Queries: []*prompb.Query{{StartTimestampMs: mint, EndTimestampMs: maxt,
			Matchers: pbMatchers(labels.MustNewMatcher(labels.MatchEqual, labels.MetricName, name))}}})
	}
	for _, name := range ab.names { // warm: every metric over all time
		samplesRead(b, srv.URL, &prompb.ReadRequest{Queries: []*prompb.Query{{StartTimestampMs: ab.mint, EndTimestampMs: ab.maxt,
			Matchers: pbMatchers(labels.MustNewMatcher(labels.MatchEqual, labels.MetricName, name))}}})
	}
	var samples int
	var total time.Duration
	misses := api.q.CacheStats().Misses
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		samples += ask()
		total += time.Since(t0)
	}
	b.ReportMetric(float64(samples)/total.Seconds(), "samples/s")
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/op")
	st := api.q.CacheStats()
	b.ReportMetric(float64(st.Bytes)/(1<<20), "cache-MiB")
	b.ReportMetric(float64(st.Misses-misses)/float64(b.N), "misses/op")
}

// discardWriter is an http.ResponseWriter that keeps nothing: the server's
// side of an answer, without a client's decoding or a recorder's copies.
type discardWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header {
	if w.h == nil {
		w.h = http.Header{}
	}
	return w.h
}
func (w *discardWriter) WriteHeader(s int)           { w.status = s }
func (w *discardWriter) Write(b []byte) (int, error) { w.n += len(b); return len(b), nil }

// BenchmarkArchiveWholeMetricServer15m is BenchmarkArchiveWholeMetric15m's
// question answered by the handler alone: the time a client waits for
// the first byte, less the network.
func BenchmarkArchiveWholeMetricServer15m(b *testing.B) {
	ab := openBenchArchive(b)
	api, err := NewAPI(ab.a, Options{})
	if err != nil {
		b.Fatal(err)
	}
	h := api.Handler()
	ask := func(mint, maxt int64, name string) {
		req := &prompb.ReadRequest{Queries: []*prompb.Query{{StartTimestampMs: mint, EndTimestampMs: maxt,
			Matchers: pbMatchers(labels.MustNewMatcher(labels.MatchEqual, labels.MetricName, name))}}}
		raw, err := req.Marshal()
		if err != nil {
			b.Fatal(err)
		}
		w := &discardWriter{}
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/api/v1/read", bytes.NewReader(snappy.Encode(nil, raw))))
		if w.status != http.StatusOK || w.n == 0 {
			b.Fatalf("status %d, %d bytes", w.status, w.n)
		}
	}
	for _, name := range ab.names { // warm: every metric over all time
		ask(ab.mint, ab.maxt, name)
	}
	rng := rand.New(rand.NewSource(1))
	b.ReportAllocs()
	for b.Loop() {
		mint, maxt := ab.window(rng)
		ask(mint, maxt, ab.names[rng.Intn(len(ab.names))])
	}
}

// BenchmarkArchiveFirstOneSeries1h measures the first questions after a
// restart: each iteration opens the archive anew (fresh connections, an
// empty cache), warms it as the server does before it reports ready
// (Warm, WarmEngine), then asks the handler a one-series rate over the
// last hour of data (the repository benchmark's question) for a series
// picked at random, then for a second one, then the first again. Run it
// with -benchtime Nx: an iteration costs a whole warm-up.
func BenchmarkArchiveFirstOneSeries1h(b *testing.B) {
	ab := openBenchArchive(b)
	rng := rand.New(rand.NewSource(1))
	ask := func(h http.Handler, ls labels.Labels) time.Duration {
		var sel []string
		for _, m := range equalities(ls)[1:] {
			sel = append(sel, m.String())
		}
		q := url.Values{"query": {"rate(" + ls.Get(labels.MetricName) + "{" + strings.Join(sel, ",") + "}[5m])"},
			"start": {strconv.FormatInt(ab.maxt/1000-3600, 10)}, "end": {strconv.FormatInt(ab.maxt/1000, 10)}, "step": {"15"}}
		w := &discardWriter{}
		t0 := time.Now()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/api/v1/query_range?"+q.Encode(), nil))
		d := time.Since(t0)
		if w.status != http.StatusOK || w.n == 0 {
			b.Fatalf("status %d, %d bytes", w.status, w.n)
		}
		return d
	}
	var first, second, again []time.Duration
	for b.Loop() {
		a, err := archive.Open(ab.a.Path())
		if err != nil {
			b.Fatal(err)
		}
		h := warmHandler(b, a)
		one, two := ab.series[rng.Intn(len(ab.series))], ab.series[rng.Intn(len(ab.series))]
		first = append(first, ask(h, one))
		second = append(second, ask(h, two))
		again = append(again, ask(h, one))
		if err := a.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(percentile(first, 0.5).Microseconds())/1000, "first-p50-ms")
	b.ReportMetric(float64(percentile(second, 0.5).Microseconds())/1000, "second-p50-ms")
	b.ReportMetric(float64(percentile(again, 0.5).Microseconds())/1000, "again-p50-ms")
}

// BenchmarkArchiveSelector1h asks what a dashboard's selective panel
// does: `temperature_celsius{id="N"}` (or the first metric with an id
// label) over the archive's last hour, a new id each time, so that every
// question reads its series from the segments (one of each instance: a
// run of series in each segment of every stream) and keeps them, with
// one warmed handler as a server holds it.
func BenchmarkArchiveSelector1h(b *testing.B) {
	ab := openBenchArchive(b)
	metric, ids := "", []string{}
	seen := map[string]bool{}
	for _, ls := range ab.series {
		if !ls.Has("id") || (metric != "" && ls.Get(labels.MetricName) != metric) {
			continue
		}
		if metric == "" && ls.Get(labels.MetricName) != "temperature_celsius" && ab.hasMetric("temperature_celsius") {
			continue
		}
		metric = ls.Get(labels.MetricName)
		if id := ls.Get("id"); !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		b.Skip("no series with an id label")
	}
	h := warmHandler(b, ab.a)
	var took []time.Duration
	i := 0
	for b.Loop() {
		q := url.Values{"query": {metric + `{id="` + ids[i%len(ids)] + `"}`},
			"start": {strconv.FormatInt(ab.maxt/1000-3600, 10)}, "end": {strconv.FormatInt(ab.maxt/1000, 10)}, "step": {"15"}}
		i++
		w := &discardWriter{}
		t0 := time.Now()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/api/v1/query_range?"+q.Encode(), nil))
		took = append(took, time.Since(t0))
		if w.status != http.StatusOK || w.n == 0 {
			b.Fatalf("status %d, %d bytes", w.status, w.n)
		}
	}
	b.ReportMetric(float64(percentile(took, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(took, 0.9).Microseconds())/1000, "p90-ms")
}

// warmHandler is a's HTTP API warmed as a server warms it before ready.
func warmHandler(b *testing.B, a *archive.Archive) http.Handler {
	ctx := context.Background()
	api, err := NewAPI(a, Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := api.Queryable().Warm(ctx); err != nil {
		b.Fatal(err)
	}
	if err := api.WarmEngine(ctx); err != nil {
		b.Fatal(err)
	}
	return api.Handler()
}

func (ab *archiveBench) hasMetric(name string) bool {
	return slices.Contains(ab.names, name)
}
