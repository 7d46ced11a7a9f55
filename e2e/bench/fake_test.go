package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"
)

// fakeServer is a remote-write receiver in memory that serves the stored
// samples back by remote-read and in VictoriaMetrics's export format,
// over real HTTP on loopback. fault, if set, sees every written sample
// and may change it or drop it: how the tests make a server that loses
// or corrupts data.
type fakeServer struct {
	srv    *httptest.Server
	mu     sync.Mutex
	series map[string]*fakeSeries // by labelString
	// fault is called for every sample written, under mu; it returns
	// the sample to store, or keep false to drop it.
	fault func(labels map[string]string, s prompb.Sample) (out prompb.Sample, keep bool)
	// exportDigits, if > 0, is how many significant digits export
	// prints, as VictoriaMetrics rounds.
	exportDigits int
}

type fakeSeries struct {
	labels  map[string]string
	samples []prompb.Sample
}

func newFakeServer(t *testing.T) *fakeServer {
	t.Helper()
	f := &fakeServer{series: map[string]*fakeSeries{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/write", f.write)
	mux.HandleFunc("POST /api/v1/read", f.read)
	mux.HandleFunc("POST /api/v1/export", f.export)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeServer) write(w http.ResponseWriter, r *http.Request) {
	var wr prompb.WriteRequest
	if err := decodeSnappyProto(r.Body, &wr); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ts := range wr.Timeseries {
		m := labelMap(ts.Labels)
		key := labelString(m)
		s := f.series[key]
		if s == nil {
			s = &fakeSeries{labels: m}
			f.series[key] = s
		}
		for _, smp := range ts.Samples {
			keep := true
			if f.fault != nil {
				smp, keep = f.fault(m, smp)
			}
			if keep {
				s.samples = append(s.samples, smp)
			}
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// matching returns the stored series every equality matcher selects, with
// their samples in [mint, maxt].
func (f *fakeServer) matching(ms []matcher, mint, maxt int64) []fakeSeries {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakeSeries
	for _, s := range f.series {
		ok := true
		for _, m := range ms {
			ok = ok && s.labels[m.name] == m.value
		}
		if !ok {
			continue
		}
		c := fakeSeries{labels: s.labels}
		for _, smp := range s.samples {
			if smp.Timestamp >= mint && smp.Timestamp <= maxt {
				c.samples = append(c.samples, smp)
			}
		}
		out = append(out, c)
	}
	sort.Slice(out, func(a, b int) bool { return labelString(out[a].labels) < labelString(out[b].labels) })
	return out
}

func (f *fakeServer) read(w http.ResponseWriter, r *http.Request) {
	var rr prompb.ReadRequest
	if err := decodeSnappyProto(r.Body, &rr); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var resp prompb.ReadResponse
	for _, q := range rr.Queries {
		var ms []matcher
		for _, m := range q.Matchers {
			if m.Type != prompb.LabelMatcher_EQ {
				http.Error(w, "only equality matchers", http.StatusBadRequest)
				return
			}
			ms = append(ms, matcher{m.Name, m.Value})
		}
		res := &prompb.QueryResult{}
		for _, s := range f.matching(ms, q.StartTimestampMs, q.EndTimestampMs) {
			ts := &prompb.TimeSeries{Samples: s.samples}
			for k, v := range s.labels {
				ts.Labels = append(ts.Labels, prompb.Label{Name: k, Value: v})
			}
			sort.Slice(ts.Labels, func(a, b int) bool { return ts.Labels[a].Name < ts.Labels[b].Name })
			res.Timeseries = append(res.Timeseries, ts)
		}
		resp.Results = append(resp.Results, res)
	}
	b, err := resp.Marshal()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Header().Set("Content-Encoding", "snappy")
	w.Write(snappy.Encode(nil, b))
}

func (f *fakeServer) export(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ms, err := parseSelector(r.Form.Get("match[]"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	sec := func(k string) int64 {
		v, _ := strconv.ParseFloat(r.Form.Get(k), 64)
		return int64(v * 1000)
	}
	for _, s := range f.matching(ms, sec("start"), sec("end")) {
		metric, _ := json.Marshal(s.labels)
		var ts, vs []string
		for _, smp := range s.samples {
			ts = append(ts, strconv.FormatInt(smp.Timestamp, 10))
			digits := -1
			if f.exportDigits > 0 {
				digits = f.exportDigits
			}
			vs = append(vs, strconv.FormatFloat(smp.Value, 'g', digits, 64))
		}
		fmt.Fprintf(w, `{"metric":%s,"values":[%s],"timestamps":[%s]}`+"\n", metric, strings.Join(vs, ","), strings.Join(ts, ","))
	}
}

// parseSelector parses what selector writes: {a="b",c="d"}.
func parseSelector(s string) ([]matcher, error) {
	s = strings.TrimSuffix(strings.TrimPrefix(s, "{"), "}")
	var ms []matcher
	for s != "" {
		name, rest, ok := strings.Cut(s, "=")
		if !ok {
			return nil, fmt.Errorf("bad selector at %q", s)
		}
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return nil, err
		}
		v, _ := strconv.Unquote(q)
		ms = append(ms, matcher{name, v})
		s = strings.TrimPrefix(rest[len(q):], ",")
	}
	return ms, nil
}

func decodeSnappyProto(r io.Reader, m interface{ Unmarshal([]byte) error }) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	raw, err := snappy.Decode(nil, b)
	if err != nil {
		return err
	}
	return m.Unmarshal(raw)
}

// fakeTarget runs a fakeServer as a target: no process, so the /proc
// figures are the test's own, which no test asserts on.
type fakeTarget struct {
	f      *fakeServer
	export bool
	tol    float64
}

var _ target = fakeTarget{}

func (t fakeTarget) Start(context.Context) error                             { return nil }
func (t fakeTarget) Stop(context.Context) error                              { return nil }
func (t fakeTarget) PID() int                                                { return os.Getpid() }
func (t fakeTarget) BaseURL() string                                         { return t.f.srv.URL }
func (t fakeTarget) Flush(context.Context) error                             { return nil }
func (t fakeTarget) DiskBytes(bool) (int64, error)                           { return 0, nil }
func (t fakeTarget) Gauges(context.Context, *http.Client) map[string]float64 { return nil }
func (t fakeTarget) Reader(c *http.Client) (rawReader, string, float64) {
	if t.export {
		return vmExport{client: c, url: t.f.srv.URL + "/api/v1/export"}, "export", t.tol
	}
	return remoteRead{client: c, url: t.f.srv.URL + "/api/v1/read"}, "remote-read", t.tol
}

// testOptions are Options for runs against fakes: an idle wait that ends
// at once whatever the test process does.
func testOptions() Options {
	o := Options{Idle: IdlePolicy{Window: 20 * time.Millisecond, MaxCores: 1e9, Poll: 5 * time.Millisecond, Cap: time.Second}}
	return o.withDefaults()
}
