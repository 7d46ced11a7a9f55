package promread

import (
	"bytes"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/storage/remote"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

func newServer(t testing.TB, f *fixture, opts Options) (*API, *httptest.Server) {
	t.Helper()
	api, err := NewAPI(f.a, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	return api, srv
}

func postRead(t testing.TB, url string, req *prompb.ReadRequest) *http.Response {
	t.Helper()
	raw, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	hr, _ := http.NewRequest(http.MethodPost, url+"/api/v1/read", bytes.NewReader(snappy.Encode(nil, raw)))
	hr.Header.Set("Content-Encoding", "snappy")
	hr.Header.Set("Content-Type", "application/x-protobuf")
	hr.Header.Set("X-Prometheus-Remote-Read-Version", "0.1.0")
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func pbMatchers(ms ...*labels.Matcher) []*prompb.LabelMatcher {
	var out []*prompb.LabelMatcher
	for _, m := range ms {
		t := map[labels.MatchType]prompb.LabelMatcher_Type{labels.MatchEqual: prompb.LabelMatcher_EQ, labels.MatchNotEqual: prompb.LabelMatcher_NEQ,
			labels.MatchRegexp: prompb.LabelMatcher_RE, labels.MatchNotRegexp: prompb.LabelMatcher_NRE}[m.Type]
		out = append(out, &prompb.LabelMatcher{Type: t, Name: m.Name, Value: m.Value})
	}
	return out
}

type readCase struct {
	mint, maxt int64
	ms         []*labels.Matcher
}

var readCases = []readCase{
	{math.MinInt64 / 2, math.MaxInt64 / 2, []*labels.Matcher{mustMatcher(labels.MatchRegexp, "__name__", ".+")}},
	{0, 3600_000, []*labels.Matcher{mustMatcher(labels.MatchEqual, "__name__", "temperature")}},
	{1000_000, 5000_000, []*labels.Matcher{mustMatcher(labels.MatchEqual, "job", "api"), mustMatcher(labels.MatchNotEqual, "env", "dev")}},
	{0, 7300_000, []*labels.Matcher{mustMatcher(labels.MatchEqual, "__name__", "rpc_duration_seconds")}},
	{0, 10, []*labels.Matcher{mustMatcher(labels.MatchEqual, "__name__", "nothing")}},
}

func TestRemoteReadSamples(t *testing.T) {
	f := newFixture(t)
	want := standardData(f)
	_, srv := newServer(t, f, Options{})
	checkRemoteReadSamples(t, srv.URL, want)
}

// TestRemoteReadSamplesParallel: the same answers when every question is
// decoded and encoded on four goroutines in runs of a few series, with the
// cache (packed pieces) and without (decoded pieces).
func TestRemoteReadSamplesParallel(t *testing.T) {
	for _, cacheBytes := range []int64{-1, 0} {
		f := newFixture(t)
		want := standardData(f)
		api, srv := newServer(t, f, Options{CacheBytes: cacheBytes})
		api.s.par = parallelism{workers: 4, runSamples: 7}
		checkRemoteReadSamples(t, srv.URL, want)
	}
}

func checkRemoteReadSamples(t *testing.T, url string, want expected) {
	t.Helper()
	req := &prompb.ReadRequest{AcceptedResponseTypes: []prompb.ReadRequest_ResponseType{prompb.ReadRequest_SAMPLES}}
	for _, c := range readCases {
		req.Queries = append(req.Queries, &prompb.Query{StartTimestampMs: c.mint, EndTimestampMs: c.maxt, Matchers: pbMatchers(c.ms...)})
	}
	resp := postRead(t, url, req)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "snappy" || resp.Header.Get("Content-Type") != "application/x-protobuf" {
		t.Fatalf("status %d headers %v: %s", resp.StatusCode, resp.Header, body)
	}
	raw, err := snappy.Decode(nil, body)
	if err != nil {
		t.Fatal(err)
	}
	var rr prompb.ReadResponse
	if err := rr.Unmarshal(raw); err != nil {
		t.Fatal(err)
	}
	if len(rr.Results) != len(readCases) {
		t.Fatalf("%d results, want %d", len(rr.Results), len(readCases))
	}
	for i, c := range readCases {
		var got []*series
		for _, ts := range rr.Results[i].Timeseries {
			var sb labels.ScratchBuilder
			s := &series{lbls: ts.ToLabels(&sb, nil)}
			for _, p := range ts.Samples {
				s.floats = append(s.floats, promsample.Sample{T: p.Timestamp, V: p.Value})
			}
			for _, h := range ts.Histograms {
				if h.IsFloatHistogram() {
					s.hists = append(s.hists, promsample.Histogram{T: h.Timestamp, FH: h.ToFloatHistogram()})
				} else {
					s.hists = append(s.hists, promsample.Histogram{T: h.Timestamp, H: h.ToIntHistogram()})
				}
			}
			got = append(got, s)
		}
		equalSeries(t, "query "+string(rune('0'+i)), want.selectModel(c.mint, c.maxt, c.ms...), got)
	}
	// The stale marker survived bit-exactly (equalSeries compares bits);
	// make sure the data set really has one.
	found := false
	for _, s := range want {
		for _, p := range s.floats {
			found = found || math.Float64bits(p.V) == math.Float64bits(staleNaN)
		}
	}
	if !found {
		t.Fatal("the data set holds no stale marker")
	}
}

func TestRemoteReadStreamed(t *testing.T) {
	f := newFixture(t)
	want := standardData(f)
	_, srv := newServer(t, f, Options{MaxBytesInFrame: 4096})
	req := &prompb.ReadRequest{AcceptedResponseTypes: []prompb.ReadRequest_ResponseType{prompb.ReadRequest_STREAMED_XOR_CHUNKS, prompb.ReadRequest_SAMPLES}}
	for _, c := range readCases {
		req.Queries = append(req.Queries, &prompb.Query{StartTimestampMs: c.mint, EndTimestampMs: c.maxt, Matchers: pbMatchers(c.ms...)})
	}
	resp := postRead(t, srv.URL, req)
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse" {
		t.Fatalf("status %d content type %q", resp.StatusCode, ct)
	}
	if ce := resp.Header.Get("Content-Encoding"); ce != "" {
		t.Fatalf("content encoding %q, want none", ce)
	}
	// Decode with Prometheus's own reader (it checks the CRC32C and size).
	cr := remote.NewChunkedReader(resp.Body, 4096, nil)
	got := make([][]*series, len(readCases))
	frames := 0
	for {
		var res prompb.ChunkedReadResponse
		err := cr.NextProto(&res)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("frame %d: %v", frames, err)
		}
		frames++
		if len(res.ChunkedSeries) != 1 {
			t.Fatalf("frame holds %d series", len(res.ChunkedSeries))
		}
		qi := res.QueryIndex
		cs := res.ChunkedSeries[0]
		var sb labels.ScratchBuilder
		lbls := cs.ToLabels(&sb, nil)
		var s *series
		if n := len(got[qi]); n > 0 && labels.Equal(got[qi][n-1].lbls, lbls) {
			s = got[qi][n-1] // a series continued in the next frame
		} else {
			if n > 0 && labels.Compare(got[qi][n-1].lbls, lbls) >= 0 {
				t.Fatalf("query %d: series %s after %s: not sorted or split", qi, lbls, got[qi][n-1].lbls)
			}
			s = &series{lbls: lbls}
			got[qi] = append(got[qi], s)
		}
		for _, c := range cs.Chunks {
			chk, err := chunkenc.FromData(chunkenc.Encoding(c.Type), c.Data)
			if err != nil {
				t.Fatal(err)
			}
			if c.Type == prompb.Chunk_XOR && chk.NumSamples() > 120 {
				t.Fatalf("XOR chunk of %d samples", chk.NumSamples())
			}
			it := chk.Iterator(nil)
			for typ := it.Next(); typ != chunkenc.ValNone; typ = it.Next() {
				switch typ {
				case chunkenc.ValFloat:
					tt, v := it.At()
					s.floats = append(s.floats, promsample.Sample{T: tt, V: v})
				case chunkenc.ValHistogram:
					tt, h := it.AtHistogram(nil)
					h.CounterResetHint = 0
					s.hists = append(s.hists, promsample.Histogram{T: tt, H: h})
				case chunkenc.ValFloatHistogram:
					tt, h := it.AtFloatHistogram(nil)
					h.CounterResetHint = 0
					s.hists = append(s.hists, promsample.Histogram{T: tt, FH: h})
				}
			}
			if c.MinTimeMs != s.firstTSOf(chk) {
				t.Fatalf("chunk min time %d, first sample %d", c.MinTimeMs, s.firstTSOf(chk))
			}
		}
	}
	if frames < 3 {
		t.Fatalf("only %d frames", frames)
	}
	for i, c := range readCases {
		equalSeries(t, "streamed query", want.selectModel(c.mint, c.maxt, c.ms...), got[i])
	}
}

func (s *series) firstTSOf(chk chunkenc.Chunk) int64 {
	it := chk.Iterator(nil)
	it.Next()
	return it.AtT()
}

func TestRemoteReadLimitsAndErrors(t *testing.T) {
	f := newFixture(t)
	standardData(f)
	api, srv := newServer(t, f, Options{MaxSamples: 100, Timeout: 200 * 1e6})
	all := []*prompb.Query{{StartTimestampMs: 0, EndTimestampMs: 1 << 50, Matchers: pbMatchers(mustMatcher(labels.MatchRegexp, "__name__", ".+"))}}
	for _, rt := range []prompb.ReadRequest_ResponseType{prompb.ReadRequest_SAMPLES, prompb.ReadRequest_STREAMED_XOR_CHUNKS} {
		resp := postRead(t, srv.URL, &prompb.ReadRequest{Queries: all, AcceptedResponseTypes: []prompb.ReadRequest_ResponseType{rt}})
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(body), "exceeded sample limit (100)") {
			t.Fatalf("%v: status %d body %q", rt, resp.StatusCode, body)
		}
	}
	// A bad regexp is the client's fault: 400.
	resp := postRead(t, srv.URL, &prompb.ReadRequest{Queries: []*prompb.Query{{Matchers: []*prompb.LabelMatcher{{Type: prompb.LabelMatcher_RE, Name: "a", Value: "("}}}}})
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad regexp: status %d", resp.StatusCode)
	}
	// Not snappy: 400.
	hr, _ := http.Post(srv.URL+"/api/v1/read", "application/x-protobuf", strings.NewReader("garbage!"))
	hr.Body.Close()
	if hr.StatusCode != http.StatusBadRequest {
		t.Fatalf("garbage body: status %d", hr.StatusCode)
	}
	// Every slot taken: the request waits out its timeout and gets 503.
	for range cap(api.slots) {
		api.slots <- struct{}{}
	}
	resp = postRead(t, srv.URL, &prompb.ReadRequest{Queries: all})
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "too many concurrent queries") {
		t.Fatalf("overloaded: status %d body %q", resp.StatusCode, body)
	}
	for range cap(api.slots) {
		<-api.slots
	}
}
