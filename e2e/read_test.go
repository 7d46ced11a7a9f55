package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gogo/protobuf/proto"
	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"
)

// promqlCases are evaluated by Prometheus 2.42 (over its own TSDB) and by
// dendro-receiver (over the archive Prometheus remote-wrote), instant and
// over a range, and must agree.
//
// dendro-receiver evaluates with the promql engine of Prometheus 3.x (the
// Go module it builds with), which differs from 2.42's in two edge cases:
// range selectors are left-open, and rate/increase extrapolate differently
// when a series starts inside the window. The windows below therefore lie
// wholly inside the series' lifetime; the remote-reading Prometheus (2.42's
// own engine over dendro's data) is compared everywhere.
var promqlCases = []string{
	`e2e_requests_total`,
	`rate(e2e_requests_total[10s])`,
	`irate(e2e_requests_total[10s])`,
	`increase(e2e_requests_total[10s])`,
	`sum by (code) (rate(e2e_requests_total[10s]))`,
	`avg by (room) (e2e_temperature_celsius)`,
	`max by (job) (up)`,
	`avg_over_time(e2e_temperature_celsius[10s])`,
	`min_over_time(e2e_temperature_celsius[10s])`,
	`max_over_time(e2e_temperature_celsius[10s])`,
	`sum_over_time(e2e_bytes_total[10s])`,
	`count_over_time(e2e_edge_values[10s])`,
	`stddev_over_time(e2e_temperature_celsius[10s])`,
	`quantile_over_time(0.9, e2e_temperature_celsius[10s])`,
	`last_over_time(e2e_edge_values[10s])`,
	`histogram_quantile(0.9, rate(e2e_latency_seconds_bucket[10s]))`,
	`histogram_quantile(0.5, sum by (le) (rate(e2e_latency_seconds_bucket[10s])))`,
	`topk(1, e2e_temperature_celsius)`,
	`bottomk(1, rate(e2e_requests_total[10s]))`,
	`absent(e2e_no_such_metric)`,
	`absent(up{job="exporter"})`,
	`label_replace(up, "host", "$1", "instance", "(.*):.*")`,
	`e2e_requests_total offset 10s`,
	`max_over_time(rate(e2e_requests_total[5s])[10s:2s])`,
	`{__name__=~"e2e_.*_total"}`,
	`e2e_requests_total{code!="500"}`,
	`e2e_temperature_celsius{room=~"l.*"}`,
	`e2e_temperature_celsius{room!~"c.*"}`,
	`e2e_ephemeral`,
	`count_over_time(e2e_ephemeral[20s])`,
	`e2e_edge_values`,
	`delta(e2e_temperature_celsius[10s])`,
	`deriv(e2e_temperature_celsius[10s])`,
	`resets(e2e_requests_total[20s])`,
	`changes(e2e_temperature_celsius[20s])`,
	`sum(up)`,
	`count by (job) ({job=~"prom.*|exp.*"})`,
}

// apiResult is a /api/v1/query(_range) answer reduced to comparable form:
// series key -> [(t, value)].
type apiResult map[string][][2]string

func queryAPI(ctx context.Context, base, path string, params url.Values) (apiResult, error) {
	code, body, err := httpGet(ctx, base+path+"?"+params.Encode())
	if err != nil {
		return nil, err
	}
	if code != 200 {
		return nil, fmt.Errorf("%s %s: %d %s", path, params.Get("query"), code, body)
	}
	var resp struct {
		Status string
		Data   struct {
			ResultType string
			Result     json.RawMessage
		}
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("%s: %w: %s", path, err, body)
	}
	out := apiResult{}
	switch resp.Data.ResultType {
	case "vector":
		var v []struct {
			Metric map[string]string
			Value  [2]json.RawMessage
		}
		if err := json.Unmarshal(resp.Data.Result, &v); err != nil {
			return nil, err
		}
		for _, s := range v {
			out[metricKey(s.Metric)] = append(out[metricKey(s.Metric)], point(s.Value))
		}
	case "matrix":
		var m []struct {
			Metric map[string]string
			Values [][2]json.RawMessage
		}
		if err := json.Unmarshal(resp.Data.Result, &m); err != nil {
			return nil, err
		}
		for _, s := range m {
			for _, p := range s.Values {
				out[metricKey(s.Metric)] = append(out[metricKey(s.Metric)], point(p))
			}
		}
	case "scalar":
		var p [2]json.RawMessage
		if err := json.Unmarshal(resp.Data.Result, &p); err != nil {
			return nil, err
		}
		out["scalar"] = [][2]string{point(p)}
	default:
		return nil, fmt.Errorf("result type %q", resp.Data.ResultType)
	}
	return out, nil
}

func point(p [2]json.RawMessage) [2]string {
	var v string
	json.Unmarshal(p[1], &v)
	return [2]string{string(p[0]), v}
}

func metricKey(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q,", k, m[k])
	}
	return b.String()
}

// sameFloat is equality within 1e-9 relative, NaN equal to NaN.
func sameFloat(a, b string) bool {
	x, err1 := strconv.ParseFloat(a, 64)
	y, err2 := strconv.ParseFloat(b, 64)
	if err1 != nil || err2 != nil {
		return a == b
	}
	switch {
	case math.IsNaN(x) || math.IsNaN(y):
		return math.IsNaN(x) && math.IsNaN(y)
	case math.IsInf(x, 0) || math.IsInf(y, 0):
		return x == y
	}
	return x == y || math.Abs(x-y) <= 1e-9*math.Max(math.Abs(x), math.Abs(y))
}

// diffResults says how got differs from want, or "".
func diffResults(want, got apiResult) string {
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			return fmt.Sprintf("series %s missing", k)
		}
		if len(g) != len(w) {
			return fmt.Sprintf("series %s: %d points, want %d", k, len(g), len(w))
		}
		for i := range w {
			if g[i][0] != w[i][0] || !sameFloat(g[i][1], w[i][1]) {
				return fmt.Sprintf("series %s point %d: %v, want %v", k, i, g[i], w[i])
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			return fmt.Sprintf("extra series %s", k)
		}
	}
	return ""
}

// remoteRead posts one SAMPLES remote-read query and returns series key ->
// "t:bits" samples.
func remoteRead(ctx context.Context, base string, start, end int64, matchers ...*prompb.LabelMatcher) (map[string][]string, error) {
	req := &prompb.ReadRequest{Queries: []*prompb.Query{{StartTimestampMs: start, EndTimestampMs: end, Matchers: matchers}},
		AcceptedResponseTypes: []prompb.ReadRequest_ResponseType{prompb.ReadRequest_SAMPLES}}
	raw, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	hreq, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/read", bytes.NewReader(snappy.Encode(nil, raw)))
	hreq.Header.Set("Content-Type", "application/x-protobuf")
	hreq.Header.Set("Content-Encoding", "snappy")
	hreq.Header.Set("X-Prometheus-Remote-Read-Version", "0.1.0")
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("remote read: %s %s", resp.Status, body)
	}
	dec, err := snappy.Decode(nil, body)
	if err != nil {
		return nil, err
	}
	var rr prompb.ReadResponse
	if err := proto.Unmarshal(dec, &rr); err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, ts := range rr.Results[0].Timeseries {
		m := map[string]string{}
		for _, l := range ts.Labels {
			m[l.Name] = l.Value
		}
		for _, s := range ts.Samples {
			out[metricKey(m)] = append(out[metricKey(m)], fmt.Sprintf("%d:%x", s.Timestamp, math.Float64bits(s.Value)))
		}
	}
	return out, nil
}

// TestReadingBackAgreesWithPrometheus: Prometheus 2.42 scrapes and
// remote-writes to dendro-receiver; then dendro-receiver's query API
// answers PromQL as Prometheus does over its own TSDB, its remote-read
// returns the samples Prometheus's own remote-read returns, and a second
// Prometheus that only remote-reads from dendro-receiver answers PromQL the
// same way too.
func TestReadingBackAgreesWithPrometheus(t *testing.T) {
	s := setup(t, "--seal.max-rows=6")
	s.waitScrapes(t, 40) // windows reach back at most 30 s: every one starts after the series did
	began := time.Now()
	s.compareWithPrometheus(t, 60*time.Second) // every sample up to began-5s is in the archive
	ctx := context.Background()
	// Every window boundary of the instant and range queries below lies at
	// `at` plus whole seconds. Prometheus 3's engine (dendro's) treats a
	// range's left boundary as open, 2.42's as closed, so a sample exactly
	// on a boundary is a difference between engines, not between stores.
	// Scrape timestamps are aligned to a per-target offset, or raw
	// milliseconds when a loaded machine delays a scrape past the 2 ms
	// tolerance; choose the millisecond of `at` farthest from all of them.
	residues := map[int64]bool{}
	for _, sel := range selectors {
		raw, err := s.prom.rawSamples(ctx, sel, began)
		if err != nil {
			t.Fatal(err)
		}
		for _, ss := range raw {
			for _, x := range ss {
				residues[((x.T%1000)+1000)%1000] = true
			}
		}
	}
	at := began.Add(-6 * time.Second).Truncate(time.Second).Add(time.Duration(boundaryFreeOffset(residues)) * time.Millisecond)
	dendroURL := "http://" + s.d.addr
	reader := startPrometheusWith(t, requireTool(t, "prometheus", "prometheus"), s.logDir,
		func(addr string) string { return readerConfig(addr, s.d.addr) })

	for _, expr := range promqlCases {
		instant := url.Values{"query": {expr}, "time": {unixSeconds(at)}}
		ranged := url.Values{"query": {expr}, "start": {unixSeconds(at.Add(-10 * time.Second))},
			"end": {unixSeconds(at)}, "step": {"2"}}
		// A subquery's inner steps are multiples of its resolution since
		// the epoch, whatever `at` is: its windows start on whole seconds.
		engineSensitive := epochAligned[expr] && residues[0]
		for _, q := range []struct {
			path   string
			params url.Values
		}{{"/api/v1/query", instant}, {"/api/v1/query_range", ranged}} {
			want, err := queryAPI(ctx, s.prom.url, q.path, q.params)
			if err != nil {
				t.Fatal(err)
			}
			got, err := queryAPI(ctx, dendroURL, q.path, q.params)
			if err != nil {
				t.Errorf("dendro-receiver: %v", err)
				continue
			}
			if d := diffResults(want, got); d != "" {
				if engineSensitive {
					t.Logf("%s %s: not compared with 2.42's engine (a sample lies on a whole second, where its inner windows start): %s", q.path, expr, d)
				} else {
					t.Errorf("%s %s: dendro-receiver differs from Prometheus: %s", q.path, expr, d)
				}
			}
			viaRead, err := queryAPI(ctx, reader.url, q.path, q.params)
			if err != nil {
				t.Errorf("remote-reading Prometheus: %v", err)
				continue
			}
			if d := diffResults(want, viaRead); d != "" {
				t.Errorf("%s %s: a Prometheus reading through dendro-receiver differs: %s", q.path, expr, d)
			}
		}
	}

	// Remote-read, compared with Prometheus's own for the same matchers.
	start, end := at.Add(-time.Hour).UnixMilli(), at.UnixMilli()
	for _, ms := range [][]*prompb.LabelMatcher{
		{{Type: prompb.LabelMatcher_EQ, Name: "job", Value: "exporter"}},
		{{Type: prompb.LabelMatcher_RE, Name: "__name__", Value: "e2e_(requests|latency).*"}},
		{{Type: prompb.LabelMatcher_EQ, Name: "__name__", Value: "up"}, {Type: prompb.LabelMatcher_NEQ, Name: "job", Value: "nope"}},
		{{Type: prompb.LabelMatcher_EQ, Name: "__name__", Value: "e2e_edge_values"}, {Type: prompb.LabelMatcher_NRE, Name: "case", Value: "t.*"}},
	} {
		want, err := remoteRead(ctx, s.prom.url, start, end, ms...)
		if err != nil {
			t.Fatal(err)
		}
		got, err := remoteRead(ctx, dendroURL, start, end, ms...)
		if err != nil {
			t.Fatalf("dendro-receiver: %v", err)
		}
		if len(want) == 0 {
			t.Fatalf("Prometheus's remote-read returned nothing for %v", ms)
		}
		for k, w := range want {
			g := got[k]
			// dendro keeps stale markers Prometheus's remote-read also returns;
			// compare exactly.
			if strings.Join(g, " ") != strings.Join(w, " ") {
				t.Errorf("remote-read %v series %s: dendro %d samples, Prometheus %d (first difference at %s)",
					ms, k, len(g), len(w), firstDiff(g, w))
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("remote-read %v: dendro returned extra series %s", ms, k)
			}
		}
	}
	t.Logf("%d PromQL expressions agreed, instant and range, at %s; remote-read agreed for 4 matcher sets",
		len(promqlCases), at.Format(time.RFC3339))
}

// epochAligned are the promqlCases whose inner evaluation times do not
// move with the query's time (subqueries).
var epochAligned = map[string]bool{`max_over_time(rate(e2e_requests_total[5s])[10s:2s])`: true}

// boundaryFreeOffset returns the millisecond within a second farthest
// (circularly) from every residue in taken.
func boundaryFreeOffset(taken map[int64]bool) int64 {
	best, bestDist := int64(500), int64(-1)
	for o := int64(0); o < 1000; o++ {
		dist := int64(1000)
		for r := range taken {
			d := (o - r + 1000) % 1000
			dist = min(dist, d, 1000-d)
		}
		if dist > bestDist {
			best, bestDist = o, dist
		}
	}
	return best
}

// unixSeconds formats t as the API's decimal seconds, to the millisecond.
func unixSeconds(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}

func firstDiff(a, b []string) string {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return fmt.Sprintf("index %d: %s vs %s", i, a[i], b[i])
		}
	}
	return fmt.Sprintf("length %d vs %d", len(a), len(b))
}

func TestBoundaryFreeOffset(t *testing.T) {
	for _, c := range []struct {
		taken []int64
		want  int64
	}{
		{nil, 0},                 // nothing taken: any offset; the first wins
		{[]int64{0}, 500},        // opposite a whole second
		{[]int64{0, 500}, 250},   // the first of the two widest gaps
		{[]int64{100, 200}, 650}, // middle of the wide gap, wrapping past 0
		{[]int64{999, 1}, 500},
	} {
		taken := map[int64]bool{}
		for _, r := range c.taken {
			taken[r] = true
		}
		if got := boundaryFreeOffset(taken); got != c.want {
			t.Errorf("boundaryFreeOffset(%v) = %d, want %d", c.taken, got, c.want)
		}
	}
}
