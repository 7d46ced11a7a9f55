package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// A latencyQuery is one read whose latency the benchmark measures: the
// first ask after a restart, then warm. Each knows the answer's shape the
// data set implies and refuses any other, so a fast wrong answer is not a
// figure.
type latencyQuery struct {
	name string // row label
	// api is the Prometheus HTTP API path and parameters; raw, if set
	// instead, is a raw read (remote-read, or export for VictoriaMetrics).
	api    string
	params url.Values
	raw    *rawQuery
	check  func(body []byte, raw []rawSeries) error
}

// queryWindowMs is how far back from the data's last sample the range
// queries and raw reads look: one hour, a dashboard's default.
const queryWindowMs = int64(time.Hour / time.Millisecond)

// latencyQueries are the reads measured over d, in the order they are
// first asked after a restart.
func latencyQueries(d Dataset) []latencyQuery {
	end := d.MaxMs()
	start := max(d.StartMs, end-queryWindowMs)
	// A series in every scale: instance 42 (or the last), id 5 (or the
	// last id whose block of series is complete).
	inst := min(42, d.Sources-1)
	id := min(5, max(0, d.Series/(len(metrics)*d.Sources)-1))
	sec := func(ms int64) string { return msToSeconds(ms) }
	inWindow := 0
	for j := range d.Samples {
		if t := d.Timestamp(j); t >= start && t <= end {
			inWindow++
		}
	}
	const (
		cpu   = 1 // node_cpu_seconds_total: fractional counters
		queue = 3 // queue_depth
		temp  = 4 // temperature_celsius
	)
	oneSeries := []matcher{{"__name__", metrics[cpu].name}, {"instance", instanceName(inst)}, {"id", strconv.Itoa(id)}}
	wantTemp := d.SeriesWith(temp, func(_, i int) bool { return i == id })
	wantZone := d.SeriesWith(queue, func(in, _ int) bool { return in%4 == 2 })
	wantMetric := d.SeriesWith(cpu, func(int, int) bool { return true })
	return []latencyQuery{
		{
			name: "label values (instance)", api: "/api/v1/label/instance/values",
			params: url.Values{"start": {sec(d.StartMs)}, "end": {sec(end)}},
			check:  wantStrings(min(d.Sources, d.Series)),
		},
		{
			name: fmt.Sprintf(`series temperature_celsius{id="%d"}`, id), api: "/api/v1/series",
			params: url.Values{"match[]": {fmt.Sprintf(`temperature_celsius{id="%d"}`, id)}, "start": {sec(d.StartMs)}, "end": {sec(end)}},
			check:  wantObjects(wantTemp),
		},
		{
			name: "query_range one series rate, 1 h", api: "/api/v1/query_range",
			params: url.Values{"query": {"rate(" + metrics[cpu].name + selector(oneSeries[1:]) + "[5m])"},
				"start": {sec(start)}, "end": {sec(end)}, "step": {"15"}},
			check: wantMatrix(1),
		},
		{
			// A selective selector on a label other than instance: the
			// one temperature series of this id on every instance.
			name: fmt.Sprintf(`query_range temperature_celsius{id="%d"}, 1 h`, id), api: "/api/v1/query_range",
			params: url.Values{"query": {fmt.Sprintf(`temperature_celsius{id="%d"}`, id)},
				"start": {sec(start)}, "end": {sec(end)}, "step": {"15"}},
			check: wantMatrix(wantTemp),
		},
		{
			name: `query count(queue_depth{zone="zone-2"})`, api: "/api/v1/query",
			params: url.Values{"query": {`count(queue_depth{zone="zone-2"})`}, "time": {sec(end)}},
			check:  wantScalarVector(float64(wantZone)),
		},
		{
			name: "query_range sum by (job) (rate[5m]), 1 h", api: "/api/v1/query_range",
			params: url.Values{"query": {"sum by (job) (rate(http_requests_total[5m]))"},
				"start": {sec(start)}, "end": {sec(end)}, "step": {"60"}},
			check: wantMatrix(min(len(jobs), d.Sources)),
		},
		{
			name:  "raw read one series, 1 h",
			raw:   &rawQuery{matchers: oneSeries, startMs: start, endMs: end},
			check: wantRaw(1, inWindow),
		},
		{
			name:  "raw read whole metric, 1 h",
			raw:   &rawQuery{matchers: oneSeries[:1], startMs: start, endMs: end},
			check: wantRaw(wantMetric, inWindow),
		},
	}
}

// ReadResult is one latency query's figures in one run.
type ReadResult struct {
	Name    string  `json:"name"`
	FirstMs float64 `json:"first_ms"` // the first ask after the restart
	P50Ms   float64 `json:"warm_p50_ms"`
	P99Ms   float64 `json:"warm_p99_ms"`
	Warm    int     `json:"warm_n"`
	Error   string  `json:"error,omitempty"`
}

// WarmPolicy bounds the warm repetitions of each query: at most Max; no
// more once Budget has passed and Min were done, or once Cap has passed
// and one was done (a query of many seconds gets fewer).
type WarmPolicy struct {
	Min, Max int
	Budget   time.Duration
	Cap      time.Duration
}

// measureReads asks each query once, in order, then each warm. nocache
// adds VictoriaMetrics's nocache=1 to the query API calls, which turns off
// its rollup result cache: a repeated query_range would otherwise be
// answered from a cache of results no other server keeps.
func measureReads(ctx context.Context, client *http.Client, base string, rd rawReader, qs []latencyQuery, nocache bool, w WarmPolicy) []ReadResult {
	ask := func(q latencyQuery) (time.Duration, error) {
		t0 := time.Now()
		if q.raw != nil {
			found, _, err := rd.read(ctx, *q.raw)
			d := time.Since(t0)
			if err != nil {
				return d, err
			}
			return d, q.check(nil, found)
		}
		p := url.Values{}
		for k, v := range q.params {
			p[k] = v
		}
		if nocache && (q.api == "/api/v1/query" || q.api == "/api/v1/query_range") {
			p.Set("nocache", "1")
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+q.api+"?"+p.Encode(), nil)
		if err != nil {
			return 0, err
		}
		body, err := do(client, req)
		d := time.Since(t0)
		if err != nil {
			return d, err
		}
		return d, q.check(body, nil)
	}
	out := make([]ReadResult, len(qs))
	for k, q := range qs {
		out[k].Name = q.name
		d, err := ask(q)
		out[k].FirstMs = ms(d)
		if err != nil {
			out[k].Error = "first ask: " + err.Error()
		}
	}
	for k, q := range qs {
		if out[k].Error != "" {
			continue
		}
		var lat []time.Duration
		t0 := time.Now()
		for n := 0; n < w.Max; n = len(lat) {
			if el := time.Since(t0); n >= w.Min && el >= w.Budget || n >= 1 && el >= w.Cap {
				break
			}
			d, err := ask(q)
			if err != nil {
				out[k].Error = "warm: " + err.Error()
				break
			}
			lat = append(lat, d)
		}
		out[k].Warm = len(lat)
		out[k].P50Ms, out[k].P99Ms = quantileMs(lat, 0.5), quantileMs(lat, 0.99)
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func wantStrings(n int) func([]byte, []rawSeries) error {
	return func(body []byte, _ []rawSeries) error {
		var data []string
		if err := decodeJSON(body, &data); err != nil {
			return err
		}
		if len(data) != n {
			return fmt.Errorf("bench: %d values, want %d", len(data), n)
		}
		return nil
	}
}

func wantObjects(n int) func([]byte, []rawSeries) error {
	return func(body []byte, _ []rawSeries) error {
		var data []map[string]string
		if err := decodeJSON(body, &data); err != nil {
			return err
		}
		if len(data) != n {
			return fmt.Errorf("bench: %d series, want %d", len(data), n)
		}
		return nil
	}
}

func wantMatrix(n int) func([]byte, []rawSeries) error {
	return func(body []byte, _ []rawSeries) error {
		var data struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Values [][2]any `json:"values"`
			} `json:"result"`
		}
		if err := decodeJSON(body, &data); err != nil {
			return err
		}
		if data.ResultType != "matrix" || len(data.Result) != n {
			return fmt.Errorf("bench: %s of %d series, want matrix of %d", data.ResultType, len(data.Result), n)
		}
		for _, r := range data.Result {
			if len(r.Values) == 0 {
				return fmt.Errorf("bench: a series without points")
			}
		}
		return nil
	}
}

func wantScalarVector(v float64) func([]byte, []rawSeries) error {
	return func(body []byte, _ []rawSeries) error {
		var data struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		}
		if err := decodeJSON(body, &data); err != nil {
			return err
		}
		if data.ResultType != "vector" || len(data.Result) != 1 {
			return fmt.Errorf("bench: %s of %d elements, want a vector of 1", data.ResultType, len(data.Result))
		}
		s, _ := data.Result[0].Value[1].(string)
		if got, err := strconv.ParseFloat(s, 64); err != nil || got != v {
			return fmt.Errorf("bench: value %q, want %v", s, v)
		}
		return nil
	}
}

func wantRaw(series, perSeries int) func([]byte, []rawSeries) error {
	return func(_ []byte, found []rawSeries) error {
		if len(found) != series {
			return fmt.Errorf("bench: %d series, want %d", len(found), series)
		}
		for _, s := range found {
			if len(s.ts) != perSeries {
				return fmt.Errorf("bench: %s: %d samples, want %d", labelString(s.labels), len(s.ts), perSeries)
			}
		}
		return nil
	}
}
