package receiver

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/golang/snappy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

// v1Fixture is a request exercising every element kind, and what it must
// decode to.
func v1Fixture() (*prompb.WriteRequest, []promsample.Series, []promsample.Metadata) {
	var samples []prompb.Sample
	var want []promsample.Sample
	for i, v := range specialFloats {
		ts := int64(i)*15000 - 30000 // negative timestamps too
		samples = append(samples, prompb.Sample{Timestamp: ts, Value: v})
		want = append(want, promsample.Sample{T: ts, V: v})
	}
	ih, fh, nh := testIntHistogram(), testFloatHistogram(), testNHCB()
	exemplarV := math.Float64frombits(0x7ff8000000000bad)
	wr := &prompb.WriteRequest{
		Timeseries: []prompb.TimeSeries{
			{Labels: lbl("__name__", "up", "job", "a"), Samples: samples},
			{Labels: lbl("__name__", "rpc_seconds", "instance", "x:1", "job", "b"), Histograms: []prompb.Histogram{
				prompb.FromIntHistogram(1000, ih), prompb.FromFloatHistogram(2000, fh), prompb.FromIntHistogram(3000, nh),
			}},
			{Labels: lbl("__name__", "rpc_seconds_bucket", "le", "1"), Exemplars: []prompb.Exemplar{
				{Labels: lbl("trace_id", "abc", "span_id", "d"), Value: exemplarV, Timestamp: 4000},
			}},
			{Labels: lbl("__name__", "with_empty", "a", "", "b", "2"), Samples: []prompb.Sample{{Timestamp: 5, Value: 1}}},
			{Labels: lbl("__name__", "labels_only")}, // nothing to store: dropped
		},
		Metadata: []prompb.MetricMetadata{
			{Type: prompb.MetricMetadata_COUNTER, MetricFamilyName: "http_requests", Help: "Requests.", Unit: ""},
			{Type: prompb.MetricMetadata_HISTOGRAM, MetricFamilyName: "rpc_seconds", Help: "RPC latency, ünïcode.", Unit: "seconds"},
		},
	}
	series := []promsample.Series{
		{Labels: labels.FromStrings("__name__", "up", "job", "a"), Samples: want},
		{Labels: labels.FromStrings("__name__", "rpc_seconds", "instance", "x:1", "job", "b"), Histograms: []promsample.Histogram{
			{T: 1000, H: ih}, {T: 2000, FH: fh}, {T: 3000, H: nh},
		}},
		{Labels: labels.FromStrings("__name__", "rpc_seconds_bucket", "le", "1"), Exemplars: []promsample.Exemplar{
			{Labels: labels.FromStrings("span_id", "d", "trace_id", "abc"), V: exemplarV, T: 4000},
		}},
		{Labels: labels.FromStrings("__name__", "with_empty", "b", "2"), Samples: []promsample.Sample{{T: 5, V: 1}}},
	}
	meta := []promsample.Metadata{
		{MetricFamily: "http_requests", Type: "counter", Help: "Requests."},
		{MetricFamily: "rpc_seconds", Type: "histogram", Help: "RPC latency, ünïcode.", Unit: "seconds"},
	}
	return wr, series, meta
}

func TestRoundTripV1(t *testing.T) {
	wr, want, wantMeta := v1Fixture()
	sink := &fakeSink{}
	srv, reg := newServer(t, sink, Options{})
	a := post(t, srv.URL+"/api/v1/write", bytes.NewReader(encodeV1(t, wr)), v1Headers())
	if a.code != http.StatusNoContent {
		t.Fatalf("code %d %q", a.code, a.body)
	}
	if a.header.Get(HeaderSamplesWritten) != "" {
		t.Errorf("1.0 answer carries %s", HeaderSamplesWritten)
	}
	if sink.source != DefaultSource {
		t.Errorf("source %q", sink.source)
	}
	if d := diffSeries(sink.series, want); d != "" {
		t.Fatal(d)
	}
	if fmt.Sprint(sink.meta) != fmt.Sprint(wantMeta) {
		t.Errorf("metadata %+v, want %+v", sink.meta, wantMeta)
	}
	if got := counterValue(t, reg, "dendro_receiver_written_total", "sample"); got != float64(len(specialFloats)+1) {
		t.Errorf("written samples metric %v", got)
	}
}

func TestRoundTripV2(t *testing.T) {
	_, want, _ := v1Fixture()
	want = want[:3] // 2.0 forbids empty label values; series 3 is 1.0-only
	// A UTF-8 label name, allowed by 2.0.
	want = append(want, promsample.Series{
		Labels:  labels.FromStrings("__name__", "ütf8.metric", "service.name", "api"),
		Samples: []promsample.Sample{{T: 7, V: math.Float64frombits(0x7ff0000000000002)}},
	})

	st := writev2.NewSymbolTable()
	var buf []uint32
	req := &writev2.Request{}
	for i, s := range want {
		ts := writev2.TimeSeries{LabelsRefs: append([]uint32(nil), st.SymbolizeLabels(s.Labels, buf)...)}
		for _, x := range s.Samples {
			ts.Samples = append(ts.Samples, writev2.Sample{Value: x.V, Timestamp: x.T, StartTimestamp: 1})
		}
		for _, h := range s.Histograms {
			if h.H != nil {
				ts.Histograms = append(ts.Histograms, writev2.FromIntHistogram(0, h.T, h.H))
			} else {
				ts.Histograms = append(ts.Histograms, writev2.FromFloatHistogram(0, h.T, h.FH))
			}
		}
		for _, e := range s.Exemplars {
			ts.Exemplars = append(ts.Exemplars, writev2.Exemplar{LabelsRefs: st.SymbolizeLabels(e.Labels, nil), Value: e.V, Timestamp: e.T})
		}
		if i == 1 {
			ts.Metadata = writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_HISTOGRAM, HelpRef: st.Symbolize("RPC latency."), UnitRef: st.Symbolize("seconds")}
		}
		req.Timeseries = append(req.Timeseries, ts)
	}
	// A second entry for series 1 with other metadata: first wins.
	dup := req.Timeseries[1]
	dup.Metadata = writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_GAUGE}
	req.Timeseries = append(req.Timeseries, dup)
	want = append(want, want[1])
	req.Symbols = st.Symbols()

	sink := &fakeSink{}
	srv, _ := newServer(t, sink, Options{})
	hdr := v2Headers()
	hdr["X-Scope-OrgID"] = "tenant-1"
	a := post(t, srv.URL+"/api/v1/write", bytes.NewReader(encodeV2(t, req)), hdr)
	if a.code != http.StatusNoContent {
		t.Fatalf("code %d %q", a.code, a.body)
	}
	if d := diffSeries(sink.series, want); d != "" {
		t.Fatal(d)
	}
	if sink.source != "tenant-1" {
		t.Errorf("source %q", sink.source)
	}
	wantMeta := []promsample.Metadata{{MetricFamily: "rpc_seconds", Type: "histogram", Help: "RPC latency.", Unit: "seconds"}}
	if fmt.Sprint(sink.meta) != fmt.Sprint(wantMeta) {
		t.Errorf("metadata %+v, want %+v", sink.meta, wantMeta)
	}
	c := countsOf(want)
	for h, n := range map[string]int{HeaderSamplesWritten: c.Samples, HeaderHistogramsWritten: c.Histograms, HeaderExemplarsWritten: c.Exemplars} {
		if got := a.header.Get(h); got != fmt.Sprint(n) {
			t.Errorf("%s: %q, want %d", h, got, n)
		}
	}
}

// TestHistogramSchemaReduced: a reserved exponential schema above 8 is
// reduced to 8, as Prometheus does.
func TestHistogramSchemaReduced(t *testing.T) {
	h := testIntHistogram()
	h.Schema = 10
	wr := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{Labels: lbl("__name__", "h"), Histograms: []prompb.Histogram{prompb.FromIntHistogram(1, h)}}}}
	d, _ := NewDecoder(Options{})
	req, err := d.Decode(ProtocolV1, encodeV1(t, wr))
	if err != nil {
		t.Fatal(err)
	}
	if got := req.Series[0].Histograms[0].H; got.Schema != 8 || got.Count != h.Count {
		t.Errorf("schema %d count %d", got.Schema, got.Count)
	}
}

func TestUTF8NamesV1Option(t *testing.T) {
	wr := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{Labels: lbl("__name__", "a.b", "ß", "1"), Samples: []prompb.Sample{{Value: 1}}}}}
	strict, _ := NewDecoder(Options{})
	if _, err := strict.Decode(ProtocolV1, encodeV1(t, wr)); !errors.Is(err, ErrInvalid) {
		t.Errorf("strict: %v, want invalid", err)
	}
	loose, _ := NewDecoder(Options{AllowUTF8NamesV1: true})
	if _, err := loose.Decode(ProtocolV1, encodeV1(t, wr)); err != nil {
		t.Errorf("utf8: %v", err)
	}
}

func v1Body(t testing.TB, ts ...prompb.TimeSeries) []byte {
	return encodeV1(t, &prompb.WriteRequest{Timeseries: ts})
}

func rawV2(t testing.TB, syms []string, ts ...writev2.TimeSeries) []byte {
	return encodeV2(t, &writev2.Request{Symbols: syms, Timeseries: ts})
}

func withHeader(h map[string]string, k, v string) map[string]string {
	h[k] = v
	return h
}

// TestBadInput: each class of bad request gets its status and never reaches
// the Sink.
func TestBadInput(t *testing.T) {
	one := []prompb.Sample{{Timestamp: 1, Value: 1}}
	badHist := testIntHistogram()
	badHist.Count = 99
	badNHCB := testNHCB()
	badNHCB.CustomValues = []float64{2, 1, 3}
	v2ok := writev2.TimeSeries{LabelsRefs: []uint32{1, 2}, Samples: []writev2.Sample{{Value: 1, Timestamp: 1}}}
	syms := []string{"", "__name__", "m"}
	tiny := snappy.Encode(nil, []byte{0x0a, 0x00}) // a valid request of one empty series

	cases := []struct {
		name   string
		body   []byte
		hdr    map[string]string
		method string
		code   int
		inBody string
	}{
		{name: "unsorted labels", body: v1Body(t, prompb.TimeSeries{Labels: lbl("__name__", "m", "b", "1", "a", "2"), Samples: one}), code: 400, inBody: "not sorted"},
		{name: "duplicate label", body: v1Body(t, prompb.TimeSeries{Labels: lbl("__name__", "m", "a", "1", "a", "2"), Samples: one}), code: 400, inBody: "duplicate"},
		{name: "empty label name", body: v1Body(t, prompb.TimeSeries{Labels: lbl("", "x", "__name__", "m"), Samples: one}), code: 400, inBody: "empty label name"},
		{name: "invalid label name 1.0", body: v1Body(t, prompb.TimeSeries{Labels: lbl("__name__", "m", "a-b", "1"), Samples: one}), code: 400, inBody: "invalid label name"},
		{name: "invalid metric name 1.0", body: v1Body(t, prompb.TimeSeries{Labels: lbl("__name__", "1m"), Samples: one}), code: 400, inBody: "invalid metric name"},
		{name: "invalid UTF-8 value", body: v1Body(t, prompb.TimeSeries{Labels: lbl("__name__", "m", "a", "\xff"), Samples: one}), code: 400, inBody: "UTF-8"},
		{name: "no labels", body: v1Body(t, prompb.TimeSeries{Samples: one}), code: 400, inBody: "no labels"},
		{name: "missing __name__", body: v1Body(t, prompb.TimeSeries{Labels: lbl("job", "x"), Samples: one}), code: 400, inBody: "__name__"},
		{name: "empty __name__", body: v1Body(t, prompb.TimeSeries{Labels: lbl("__name__", "", "job", "x"), Samples: one}), code: 400, inBody: "__name__"},
		{name: "invalid histogram", body: v1Body(t, prompb.TimeSeries{Labels: lbl("__name__", "m"), Histograms: []prompb.Histogram{prompb.FromIntHistogram(1, badHist)}}), code: 400, inBody: "histogram"},
		{name: "invalid NHCB", body: v1Body(t, prompb.TimeSeries{Labels: lbl("__name__", "m"), Histograms: []prompb.Histogram{prompb.FromIntHistogram(1, badNHCB)}}), code: 400, inBody: "custom"},
		{name: "invalid metadata", body: encodeV1(t, &prompb.WriteRequest{Metadata: []prompb.MetricMetadata{{MetricFamilyName: ""}}}), code: 400, inBody: "metadata"},
		{name: "v2 body as v1", body: rawV2(t, syms, v2ok), code: 400, inBody: "io.prometheus.write.v2.Request"},
		{name: "v1 body as v2", body: v1Body(t, prompb.TimeSeries{Labels: lbl("__name__", "m"), Samples: one}), hdr: v2Headers(), code: 400, inBody: "prometheus.WriteRequest"},
		{name: "v2 ref out of range", body: rawV2(t, syms, writev2.TimeSeries{LabelsRefs: []uint32{1, 7}, Samples: v2ok.Samples}), hdr: v2Headers(), code: 400, inBody: "symbol table"},
		{name: "v2 odd refs", body: rawV2(t, syms, writev2.TimeSeries{LabelsRefs: []uint32{1, 2, 1}, Samples: v2ok.Samples}), hdr: v2Headers(), code: 400, inBody: "odd"},
		{name: "v2 symbols[0] not empty", body: rawV2(t, []string{"x", "__name__", "m"}, v2ok), hdr: v2Headers(), code: 400, inBody: "symbols[0]"},
		{name: "v2 samples and histograms", body: rawV2(t, syms, writev2.TimeSeries{LabelsRefs: []uint32{1, 2}, Samples: v2ok.Samples, Histograms: []writev2.Histogram{writev2.FromIntHistogram(0, 1, testIntHistogram())}}), hdr: v2Headers(), code: 400, inBody: "both"},
		{name: "v2 empty series", body: rawV2(t, syms, writev2.TimeSeries{LabelsRefs: []uint32{1, 2}}), hdr: v2Headers(), code: 400, inBody: "no samples"},
		{name: "v2 exemplar ref out of range", body: rawV2(t, syms, writev2.TimeSeries{LabelsRefs: []uint32{1, 2}, Samples: v2ok.Samples, Exemplars: []writev2.Exemplar{{LabelsRefs: []uint32{9, 9}}}}), hdr: v2Headers(), code: 400, inBody: "exemplar"},
		{name: "v2 metadata ref out of range", body: rawV2(t, syms, writev2.TimeSeries{LabelsRefs: []uint32{1, 2}, Samples: v2ok.Samples, Metadata: writev2.Metadata{HelpRef: 42}}), hdr: v2Headers(), code: 400, inBody: "help_ref"},
		{name: "corrupt snappy", body: []byte{0xff, 0xff, 0xff, 0x01, 0x00, 0x01}, code: 400, inBody: "snappy"},
		{name: "uncompressed protobuf", body: mustMarshal(t, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{Labels: lbl("__name__", "m"), Samples: one}}}), code: 400},
		{name: "framed snappy", body: framed(t, []byte{0x0a, 0x00}), code: 400},
		{name: "truncated protobuf", body: snappy.Encode(nil, []byte{0x0a, 0x05, 0x0a}), code: 400, inBody: "malformed"},
		{name: "empty body", body: nil, code: 400, inBody: "empty"},
		{name: "bad source space", body: tiny, hdr: withHeader(v1Headers(), "X-Scope-OrgID", "a b"), code: 400, inBody: "source"},
		{name: "bad source long", body: tiny, hdr: withHeader(v1Headers(), "X-Scope-OrgID", strings.Repeat("a", 129)), code: 400, inBody: "source"},
		{name: "content-type json", body: tiny, hdr: withHeader(v1Headers(), "Content-Type", "application/json"), code: 415},
		{name: "unknown proto", body: tiny, hdr: withHeader(v1Headers(), "Content-Type", "application/x-protobuf;proto=io.prometheus.write.v3.Request"), code: 415},
		{name: "no content-type", body: tiny, hdr: withHeader(v1Headers(), "Content-Type", ""), code: 415},
		{name: "gzip", body: tiny, hdr: withHeader(v1Headers(), "Content-Encoding", "gzip"), code: 415},
		{name: "GET", method: http.MethodGet, code: 405},
		{name: "PUT", method: http.MethodPut, body: tiny, code: 405},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sink := &fakeSink{}
			srv, reg := newServer(t, sink, Options{})
			hdr := c.hdr
			if hdr == nil {
				hdr = v1Headers()
			}
			method := c.method
			if method == "" {
				method = http.MethodPost
			}
			req, _ := http.NewRequest(method, srv.URL+"/api/v1/write", bytes.NewReader(c.body))
			for k, v := range hdr {
				if v != "" {
					req.Header.Set(k, v)
				}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			_, _ = b.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.code {
				t.Fatalf("code %d (%q), want %d", resp.StatusCode, b.String(), c.code)
			}
			if !strings.Contains(b.String(), c.inBody) {
				t.Errorf("body %q lacks %q", b.String(), c.inBody)
			}
			if strings.Count(strings.TrimSuffix(b.String(), "\n"), "\n") != 0 {
				t.Errorf("reason is not one line: %q", b.String())
			}
			if n := sink.calls.Load(); n != 0 {
				t.Errorf("sink called %d times", n)
			}
			if c.code == 405 && resp.Header.Get("Allow") != http.MethodPost {
				t.Errorf("Allow %q", resp.Header.Get("Allow"))
			}
			if resp.Header.Get("Retry-After") != "" {
				t.Errorf("Retry-After on a %d", c.code)
			}
			// 2.0 answers carry the Written headers once negotiated.
			if hdr["Content-Type"] == contentTypeV2 && c.code != 415 && c.code != 405 {
				if resp.Header.Get(HeaderSamplesWritten) != "0" {
					t.Errorf("%s %q", HeaderSamplesWritten, resp.Header.Get(HeaderSamplesWritten))
				}
			}
			if n := metricSeries(t, reg, "dendro_receiver_requests_refused_total"); n != 1 {
				t.Errorf("refused metric series %d", n)
			}
		})
	}
}

func mustMarshal(t testing.TB, wr *prompb.WriteRequest) []byte {
	b, err := wr.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func framed(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	w := snappy.NewBufferedWriter(&buf)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestTooLarge: 413 for a body over the compressed limit, announced or
// chunked, and for a snappy bomb; none reaches the Sink.
func TestTooLarge(t *testing.T) {
	sink := &fakeSink{}
	srv, _ := newServer(t, sink, Options{MaxCompressedBytes: 1 << 10, MaxDecodedBytes: 1 << 20})
	big := bytes.Repeat([]byte{0xaa}, 4<<10)
	for name, body := range map[string]any{
		"content-length": bytes.NewReader(big),
		"chunked":        chunked{bytes.NewReader(big)},
		"bomb":           bytes.NewReader(snappyBomb(1 << 30)),
	} {
		t.Run(name, func(t *testing.T) {
			var r = body.(interface{ Read([]byte) (int, error) })
			a := post(t, srv.URL, r, v2Headers())
			if a.code != http.StatusRequestEntityTooLarge {
				t.Fatalf("code %d %q", a.code, a.body)
			}
			if a.header.Get(HeaderSamplesWritten) != "0" {
				t.Errorf("2.0 headers missing on 413")
			}
		})
	}
	if sink.calls.Load() != 0 {
		t.Errorf("sink called")
	}
}

// snappyBomb is a few bytes declaring n decoded bytes.
func snappyBomb(n uint64) []byte {
	b := binaryUvarint(n)
	return append(b, 0x00, 0x61) // a 1-byte literal, then nothing: corrupt, but only decoding would notice
}

func binaryUvarint(x uint64) []byte {
	var b []byte
	for x >= 0x80 {
		b = append(b, byte(x)|0x80)
		x >>= 7
	}
	return append(b, byte(x))
}

// TestSnappyBombCostsNothing: a bomb is refused without allocating what it
// declares, over the limit (413) or under it but impossible for its size
// (400).
func TestSnappyBombCostsNothing(t *testing.T) {
	d, err := NewDecoder(Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		declared uint64
		want     error
	}{
		{1 << 30, ErrTooLarge},        // over the 256 MiB default
		{200 << 20, ErrMalformed},     // under it, but 200 MiB from 6 bytes is impossible
		{1<<32 - 1, ErrTooLarge},      // the snappy maximum
		{1 << 40, ErrMalformed},       // beyond what a snappy block can declare
		{DefaultMaxDecodedBytes, nil}, // checked below
	} {
		if c.want == nil {
			continue
		}
		body := snappyBomb(c.declared)
		var err error
		allocs := testing.AllocsPerRun(10, func() { _, err = d.Decode(ProtocolV1, body) })
		if !errors.Is(err, c.want) {
			t.Errorf("declared %d: %v, want %v", c.declared, err, c.want)
		}
		// The error itself allocates a little; a bomb would allocate one
		// buffer of the declared size. Count bytes too.
		bytesPer := allocBytes(func() { _, _ = d.Decode(ProtocolV1, body) })
		if allocs > 8 || bytesPer > 4096 {
			t.Errorf("declared %d: %v allocs, %d bytes per refusal", c.declared, allocs, bytesPer)
		}
	}
}

// TestReadBodyBounded: an oversize chunked body is refused after reading at
// most the limit + 1 bytes.
func TestReadBodyBounded(t *testing.T) {
	const limit = 1000
	h, err := NewHandler(&fakeSink{}, Options{MaxCompressedBytes: limit})
	if err != nil {
		t.Fatal(err)
	}
	cr := &countingReader{r: bytes.NewReader(make([]byte, 1<<20))}
	r, _ := http.NewRequest(http.MethodPost, "/", cr)
	r.ContentLength = -1
	_, err = h.readBody(r)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err %v", err)
	}
	if cr.n > limit+1 {
		t.Errorf("read %d bytes, limit %d", cr.n, limit)
	}
	// Announced too large: nothing read at all.
	cr = &countingReader{r: bytes.NewReader(make([]byte, 2000))}
	r, _ = http.NewRequest(http.MethodPost, "/", cr)
	r.ContentLength = 2000
	if _, err = h.readBody(r); !errors.Is(err, ErrTooLarge) || cr.n != 0 {
		t.Errorf("err %v, read %d", err, cr.n)
	}
}

// TestSinkErrors: the Sink's errors map to their statuses, 2.0 headers and
// Retry-After included; the answer is never 2xx unless the Sink returned nil
// with everything written.
func TestSinkErrors(t *testing.T) {
	body := rawV2(t, []string{"", "__name__", "m"}, writev2.TimeSeries{LabelsRefs: []uint32{1, 2}, Samples: []writev2.Sample{{Value: 1, Timestamp: 1}, {Value: 2, Timestamp: 2}}})
	for _, c := range []struct {
		name       string
		written    Counts
		err        error
		code       int
		retryAfter string
	}{
		{"ok", Counts{Samples: 2}, nil, 204, ""},
		{"unavailable", Counts{}, fmt.Errorf("writer queue full: %w", ErrUnavailable), 503, "5"},
		{"deadline", Counts{}, context.DeadlineExceeded, 503, "5"},
		{"disk full", Counts{}, ErrDiskFull, 507, "5"},
		{"rejected", Counts{}, fmt.Errorf("label too long: %w", ErrRejected), 400, ""},
		{"unknown", Counts{}, errors.New("boom\nsecond line"), 500, ""},
		{"partial", Counts{Samples: 1}, nil, 500, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			sink := &fakeSink{write: func(context.Context, string, []promsample.Series, []promsample.Metadata) (Counts, error) {
				return c.written, c.err
			}}
			srv, _ := newServer(t, sink, Options{})
			a := post(t, srv.URL, bytes.NewReader(body), v2Headers())
			if a.code != c.code {
				t.Fatalf("code %d %q, want %d", a.code, a.body, c.code)
			}
			if got := a.header.Get("Retry-After"); got != c.retryAfter {
				t.Errorf("Retry-After %q, want %q", got, c.retryAfter)
			}
			if got := a.header.Get(HeaderSamplesWritten); got != fmt.Sprint(c.written.Samples) {
				t.Errorf("%s %q", HeaderSamplesWritten, got)
			}
			if strings.Count(strings.TrimSuffix(a.body, "\n"), "\n") != 0 {
				t.Errorf("reason is not one line: %q", a.body)
			}
		})
	}
}

func TestEmptyRequestSkipsSink(t *testing.T) {
	sink := &fakeSink{}
	srv, _ := newServer(t, sink, Options{})
	a := post(t, srv.URL, bytes.NewReader(snappy.Encode(nil, nil)), v1Headers())
	if a.code != 204 || sink.calls.Load() != 0 {
		t.Errorf("code %d, calls %d", a.code, sink.calls.Load())
	}
}

func TestContentTypeVariants(t *testing.T) {
	for ct, want := range map[string]Protocol{
		"application/x-protobuf":                                                  ProtocolV1,
		"application/x-protobuf;proto=prometheus.WriteRequest":                    ProtocolV1,
		"Application/X-Protobuf; proto=prometheus.WriteRequest":                   ProtocolV1,
		"application/x-protobuf;proto=io.prometheus.write.v2.Request":             ProtocolV2,
		"application/x-protobuf; proto=io.prometheus.write.v2.Request":            ProtocolV2,
		"application/x-protobuf; charset=x; proto=io.prometheus.write.v2.Request": ProtocolV2,
		"application/x-protobuf;proto=\"io.prometheus.write.v2.Request\"":         ProtocolV2,
	} {
		h := http.Header{}
		h.Set("Content-Type", ct)
		if got, err := negotiate(h); got != want || err != nil {
			t.Errorf("%q: %v %v, want %v", ct, got, err, want)
		}
	}
	h := http.Header{}
	h.Set("Content-Type", contentTypeV1)
	h.Set("Content-Encoding", "SNAPPY")
	if _, err := negotiate(h); err != nil {
		t.Errorf("SNAPPY: %v", err)
	}
}

func TestStatus(t *testing.T) {
	for _, c := range []struct {
		err       error
		code      int
		retryable bool
	}{
		{nil, 204, false},
		{ErrMethodNotAllowed, 405, false},
		{fmt.Errorf("x: %w", ErrUnsupportedMediaType), 415, false},
		{fmt.Errorf("x: %w", ErrTooLarge), 413, false},
		{ErrEmptyBody, 400, false},
		{fmt.Errorf("x: %w", ErrMalformed), 400, false},
		{&InvalidError{Series: 3, Reason: "r"}, 400, false},
		{ErrInvalid, 400, false},
		{fmt.Errorf("x: %w", ErrBadSource), 400, false},
		{fmt.Errorf("x: %w", ErrRejected), 400, false},
		{fmt.Errorf("x: %w", ErrUnavailable), 503, true},
		{fmt.Errorf("x: %w", ErrDiskFull), 507, true},
		{context.DeadlineExceeded, 503, true},
		{fmt.Errorf("x: %w", context.Canceled), 503, true},
		{ErrIncompleteWrite, 500, false},
		{errors.New("other"), 500, false},
		// Joined: the first class in classify's order wins; a permanent
		// refusal beats a retryable one only if listed first there.
		{errors.Join(ErrRejected, ErrUnavailable), 400, false},
	} {
		code, retry := Status(c.err)
		if code != c.code || retry != c.retryable {
			t.Errorf("%v: %d %v, want %d %v", c.err, code, retry, c.code, c.retryable)
		}
		if cl := classify(c.err); c.err != nil && cl.reason == "" {
			t.Errorf("%v: no reason", c.err)
		}
	}
}

func TestOptionsValidated(t *testing.T) {
	for _, o := range []Options{
		{MaxCompressedBytes: -1},
		{MaxDecodedBytes: 1 << 33},
		{RetryAfter: -1},
		{SourceHeader: "Bad Header"},
	} {
		if _, err := NewDecoder(o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	if _, err := NewHandler(nil, Options{}); err == nil {
		t.Error("nil sink accepted")
	}
}

func TestInvalidErrorAs(t *testing.T) {
	d, _ := NewDecoder(Options{})
	_, err := d.Decode(ProtocolV1, v1Body(t,
		prompb.TimeSeries{Labels: lbl("__name__", "ok"), Samples: []prompb.Sample{{Value: 1}}},
		prompb.TimeSeries{Labels: lbl("__name__", "m", "z", "1", "a", "1"), Samples: []prompb.Sample{{Value: 1}}}))
	ie, ok := errors.AsType[*InvalidError](err)
	if !ok || ie.Series != 1 {
		t.Fatalf("%v", err)
	}
}

// counterValue sums the samples of metric name whose labels include the
// given label value.
func counterValue(t *testing.T, reg *prometheus.Registry, name, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetValue() == value {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// allocBytes returns the bytes f allocates (averaged over a few runs).
func allocBytes(f func()) uint64 {
	const runs = 5
	f()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / runs
}

// metricSeries counts the series of metric name.
func metricSeries(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

// TestNegativeZeroOnTheWire: a -0 that is encoded (gogo senders cannot: they
// omit values == 0) decodes as -0, in both protocols.
func TestNegativeZeroOnTheWire(t *testing.T) {
	negZero := math.Copysign(0, -1)
	sampleMsg := func(ts int64) []byte {
		b := []byte{0x09} // field 1, fixed64
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(negZero))
		b = append(b, 0x10) // field 2, varint
		return append(b, binaryUvarint(uint64(ts))...)
	}
	lenField := func(num byte, payload []byte) []byte {
		b := append([]byte{num<<3 | 2}, binaryUvarint(uint64(len(payload)))...)
		return append(b, payload...)
	}
	// 1.0: TimeSeries{labels: {__name__: m}, samples: [-0 @ 5]}.
	lab := append(lenField(1, []byte("__name__")), lenField(2, []byte("m"))...)
	ts := append(lenField(1, lab), lenField(2, sampleMsg(5))...)
	v1 := lenField(1, ts)
	// 2.0: symbols ["", "__name__", "m"], TimeSeries{labels_refs: [1, 2], samples: [-0 @ 5]}.
	v2 := append(lenField(4, nil), lenField(4, []byte("__name__"))...)
	v2 = append(v2, lenField(4, []byte("m"))...)
	v2 = append(v2, lenField(5, append(lenField(1, []byte{1, 2}), lenField(2, sampleMsg(5))...))...)

	d, _ := NewDecoder(Options{})
	for p, msg := range map[Protocol][]byte{ProtocolV1: v1, ProtocolV2: v2} {
		req, err := d.Decode(p, snappy.Encode(nil, msg))
		if err != nil {
			t.Fatalf("%v: %v", p, err)
		}
		if got := req.Series[0].Samples[0]; got.T != 5 || math.Float64bits(got.V) != math.Float64bits(negZero) {
			t.Errorf("%v: %v (%#x)", p, got, math.Float64bits(got.V))
		}
	}
}

// TestKnownSeries: a series the index knows decodes to what a full decode
// returns, and the fast path never hides a label that follows the leading
// labels, nor lets an invalid or differently validated set through.
func TestKnownSeries(t *testing.T) {
	d, _ := NewDecoder(Options{})
	one := []prompb.Sample{{Timestamp: 1, Value: 1}}
	wr, want, _ := v1Fixture()
	body := encodeV1(t, wr)
	for i := range 3 { // unknown, then known
		req, err := d.Decode(ProtocolV1, body)
		if err != nil {
			t.Fatal(err)
		}
		if diff := diffSeries(labelled(d.Series(), req.Series), want); diff != "" {
			t.Fatalf("round %d: %s", i, diff)
		}
	}
	// {__name__="m"} is known after the first series; the second has the
	// same leading labels and a label after its samples.
	lab := append(lenFieldT(1, append(lenFieldT(1, []byte("__name__")), lenFieldT(2, []byte("m"))...)), []byte{}...)
	smp, _ := (&prompb.Sample{Timestamp: 1, Value: 1}).Marshal()
	late := append(append(append([]byte{}, lab...), lenFieldT(2, smp)...), lenFieldT(1, append(lenFieldT(1, []byte("z")), lenFieldT(2, []byte("1"))...))...)
	msg := append(lenFieldT(1, append(append([]byte{}, lab...), lenFieldT(2, smp)...)), lenFieldT(1, late)...)
	for range 2 {
		req, err := d.Decode(ProtocolV1, snappy.Encode(nil, msg))
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Series().Labels(req.Series[1].Ref); !labels.Equal(got, labels.FromStrings("__name__", "m", "z", "1")) {
			t.Fatalf("late label lost: %v", got)
		}
	}
	// Invalid label sets never enter the index.
	n := d.Series().Len()
	bad := v1Body(t, prompb.TimeSeries{Labels: lbl("__name__", "m", "a", "1", "a", "2"), Samples: one})
	for range 2 {
		if _, err := d.Decode(ProtocolV1, bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("err %v", err)
		}
	}
	if d.Series().Len() != n {
		t.Fatalf("an invalid set was added to the index")
	}
	// A set that 2.0 accepted (UTF-8 names) is validated again under the
	// 1.0 rules, and refused.
	utf := labels.FromStrings("__name__", "a.b", "ß", "1")
	st := writev2.NewSymbolTable()
	v2 := &writev2.Request{Timeseries: []writev2.TimeSeries{{LabelsRefs: st.SymbolizeLabels(utf, nil), Samples: []writev2.Sample{{Value: 1, Timestamp: 1}}}}}
	v2.Symbols = st.Symbols()
	v2msg, err := v2.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Decode(ProtocolV2, snappy.Encode(nil, v2msg)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Decode(ProtocolV1, v1Body(t, prompb.TimeSeries{Labels: lbl("__name__", "a.b", "ß", "1"), Samples: one})); !errors.Is(err, ErrInvalid) {
		t.Fatalf("1.0 accepted a UTF-8 name 2.0 had validated: %v", err)
	}
}

// TestKnownSeriesPrediction: the series that followed one last time is
// predicted for the next request, and a prediction never stands in for
// another label set.
func TestKnownSeriesPrediction(t *testing.T) {
	one := []prompb.Sample{{Timestamp: 1, Value: 1}}
	series := func(names ...string) *prompb.WriteRequest {
		wr := &prompb.WriteRequest{}
		for _, n := range names {
			wr.Timeseries = append(wr.Timeseries, prompb.TimeSeries{Labels: lbl("__name__", n, "job", "j"), Samples: one})
		}
		return wr
	}
	x := seriesindex.New()
	v := newV1Decoder(&slabPool{}, x)
	decode := func(wr *prompb.WriteRequest) []labels.Labels {
		t.Helper()
		msg, err := wr.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		req, err := v.decode(msg, false)
		if err != nil {
			t.Fatal(err)
		}
		var out []labels.Labels
		for _, s := range req.Series {
			out = append(out, x.Labels(s.Ref))
		}
		return out
	}
	decode(series("a", "b", "c", "d"))
	ref := func(name string) seriesindex.Ref { return x.Get(labels.FromStrings("__name__", name, "job", "j")) }
	for _, p := range [][2]string{{"a", "b"}, {"b", "c"}, {"c", "d"}} {
		if x.Next(ref(p[0])) != ref(p[1]) {
			t.Fatalf("%s does not predict %s", p[0], p[1])
		}
	}
	// Another successor, and one whose labels merely start with the
	// predicted one's (one more label): both decode exactly.
	wr := series("a", "x")
	wr.Timeseries = append(wr.Timeseries, prompb.TimeSeries{Labels: lbl("__name__", "b", "job", "j", "z", "1"), Samples: one})
	wr.Timeseries = append(wr.Timeseries, prompb.TimeSeries{Labels: lbl("__name__", "c", "job", "j"), Samples: one})
	got := decode(wr)
	want := []labels.Labels{
		labels.FromStrings("__name__", "a", "job", "j"),
		labels.FromStrings("__name__", "x", "job", "j"),
		labels.FromStrings("__name__", "b", "job", "j", "z", "1"),
		labels.FromStrings("__name__", "c", "job", "j"),
	}
	for i := range want {
		if !labels.Equal(got[i], want[i]) {
			t.Errorf("series %d: %v, want %v", i, got[i], want[i])
		}
	}
	if x.Next(ref("a")) != ref("x") {
		t.Error("the prediction did not follow the new successor")
	}
}

func lenFieldT(num byte, payload []byte) []byte {
	b := append([]byte{num<<3 | 2}, binaryUvarint(uint64(len(payload)))...)
	return append(b, payload...)
}

// TestRefusalLogs: every refusal is logged at debug with its reason; the
// warn line is rate-limited.
func TestRefusalLogs(t *testing.T) {
	var buf syncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, _ := newServer(t, &fakeSink{}, Options{Logger: logger})
	body := v1Body(t, prompb.TimeSeries{Labels: lbl("job", "x"), Samples: []prompb.Sample{{Value: 1}}})
	for range 3 {
		if a := post(t, srv.URL, bytes.NewReader(body), v1Headers()); a.code != 400 {
			t.Fatalf("code %d", a.code)
		}
	}
	out := buf.String()
	if n := strings.Count(out, "level=DEBUG"); n != 3 {
		t.Errorf("%d debug lines:\n%s", n, out)
	}
	if n := strings.Count(out, "level=WARN"); n != 1 {
		t.Errorf("%d warn lines:\n%s", n, out)
	}
	if !strings.Contains(out, "missing __name__") || !strings.Contains(out, "reason=invalid") {
		t.Errorf("reason missing:\n%s", out)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDecoderAcrossRequestShapes: a decoder sizes its slabs from the last
// message it decoded; requests of very different densities in turn must
// each decode exactly.
func TestDecoderAcrossRequestShapes(t *testing.T) {
	d, _ := NewDecoder(Options{})
	shapes := []struct{ series, per int }{{1, 1000}, {1000, 1}, {3, 5000}, {2000, 4}, {1, 1}, {500, 40}}
	for round := range 2 {
		for _, sh := range shapes {
			wr := benchRequestV1(sh.series, sh.per)
			var want []promsample.Series
			for _, ts := range wr.Timeseries {
				sb := labels.NewScratchBuilder(len(ts.Labels))
				for _, l := range ts.Labels {
					sb.Add(l.Name, l.Value)
				}
				sb.Sort()
				s := promsample.Series{Labels: sb.Labels()}
				for _, x := range ts.Samples {
					s.Samples = append(s.Samples, promsample.Sample{T: x.Timestamp, V: x.Value})
				}
				want = append(want, s)
			}
			req, err := d.Decode(ProtocolV1, encodeV1(t, wr))
			if err != nil {
				t.Fatalf("round %d, %d x %d: %v", round, sh.series, sh.per, err)
			}
			if diff := diffSeries(labelled(d.Series(), req.Series), want); diff != "" {
				t.Fatalf("round %d, %d x %d: %s", round, sh.series, sh.per, diff)
			}
			if req.Counts.Samples != sh.series*sh.per {
				t.Fatalf("round %d, %d x %d: counted %d samples", round, sh.series, sh.per, req.Counts.Samples)
			}
			d.Recycle(req) // the next shape may reuse (and outgrow) its slab
		}
	}
}

// TestRecycleNeverAliasesALiveRequest: only recycled memory is reused. A
// request kept (not recycled) stays intact through later decodes, two
// requests alive at once never share samples, and recycling twice does not
// hand one slab out twice.
func TestRecycleNeverAliasesALiveRequest(t *testing.T) {
	d, _ := NewDecoder(Options{})
	decode := func(series, per int) (*Request, []promsample.Series) {
		t.Helper()
		wr := benchRequestV1(series, per)
		req, err := d.Decode(ProtocolV1, encodeV1(t, wr))
		if err != nil {
			t.Fatal(err)
		}
		return req, labelled(d.Series(), req.Series)
	}
	kept, keptWant := decode(50, 4)
	for i := range 20 {
		a, _ := decode(100+i, 4)
		d.Recycle(a)
		d.Recycle(a) // a no-op: a's slab is in the pool once
		b, bWant := decode(100+i, 4)
		c, cWant := decode(100+i, 4)
		if &b.Series[0].Samples[0] == &c.Series[0].Samples[0] {
			t.Fatalf("round %d: two live requests share their samples", i)
		}
		if diff := diffSeries(labelled(d.Series(), b.Series), bWant); diff != "" {
			t.Fatalf("round %d: b changed: %s", i, diff)
		}
		if diff := diffSeries(labelled(d.Series(), c.Series), cWant); diff != "" {
			t.Fatalf("round %d: c changed: %s", i, diff)
		}
		d.Recycle(b)
		d.Recycle(c)
	}
	if diff := diffSeries(labelled(d.Series(), kept.Series), keptWant); diff != "" {
		t.Fatalf("a request never recycled was overwritten: %s", diff)
	}
	if d.Recycle(nil); kept.Series == nil {
		t.Fatal("Recycle(nil) touched another request")
	}
}

// TestNewSeriesAreFoundByTheirLabels: a new series is indexed under the
// hash of its labels as the index holds them, however the wire had them
// (an empty value dropped, a label after the samples, both at once: the
// label count is then the wire's), so that the next request finds it and
// adds nothing.
func TestNewSeriesAreFoundByTheirLabels(t *testing.T) {
	label := func(name, value string) []byte {
		b := lenFieldT(1, []byte(name))
		if value != "" {
			b = append(b, lenFieldT(2, []byte(value))...)
		}
		return lenFieldT(1, b)
	}
	smp, _ := (&prompb.Sample{Timestamp: 1, Value: 1}).Marshal()
	series := func(parts ...[]byte) []byte { return lenFieldT(1, bytes.Join(parts, nil)) }
	v2 := func(ls ...string) []byte {
		st := writev2.NewSymbolTable()
		var refs []uint32
		for i := 0; i < len(ls); i += 2 {
			refs = append(refs, st.Symbolize(ls[i]), st.Symbolize(ls[i+1]))
		}
		r := &writev2.Request{Timeseries: []writev2.TimeSeries{{LabelsRefs: refs, Samples: []writev2.Sample{{Value: 1, Timestamp: 1}}}}}
		r.Symbols = st.Symbols()
		b, err := r.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name  string
		proto Protocol
		msg   []byte
		want  labels.Labels
	}{
		{"as senders write them", ProtocolV1, series(label("__name__", "m"), label("a", "1"), lenFieldT(2, smp)),
			labels.FromStrings("__name__", "m", "a", "1")},
		{"an empty value", ProtocolV1, series(label("__name__", "m"), label("a", ""), label("b", "1"), lenFieldT(2, smp)),
			labels.FromStrings("__name__", "m", "b", "1")},
		{"a label after the samples", ProtocolV1, series(label("__name__", "m"), lenFieldT(2, smp), label("z", "1")),
			labels.FromStrings("__name__", "m", "z", "1")},
		{"an empty value and a label after the samples", ProtocolV1, series(label("__name__", "m"), label("a", ""), lenFieldT(2, smp), label("z", "1")),
			labels.FromStrings("__name__", "m", "z", "1")},
		{"2.0 as senders write them", ProtocolV2, v2("__name__", "m", "a", "1"), labels.FromStrings("__name__", "m", "a", "1")},
		{"2.0 with an empty value", ProtocolV2, v2("__name__", "m", "a", "", "b", "1"), labels.FromStrings("__name__", "m", "b", "1")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := NewDecoder(Options{})
			var first seriesindex.Ref
			for round := range 2 {
				req, err := d.Decode(tc.proto, snappy.Encode(nil, tc.msg))
				if err != nil {
					t.Fatal(err)
				}
				if len(req.Series) != 1 {
					t.Fatalf("round %d: %d series", round, len(req.Series))
				}
				ref := req.Series[0].Ref
				if got := d.Series().Labels(ref); !labels.Equal(got, tc.want) {
					t.Fatalf("round %d: labels %v, want %v", round, got, tc.want)
				}
				if got := d.Series().Get(tc.want); got != ref {
					t.Fatalf("round %d: the index finds %v by its labels, the request has %v", round, got, ref)
				}
				if round == 0 {
					first = ref
				} else if ref != first || d.Series().Len() != 1 {
					t.Fatalf("added again: %v then %v, %d series", first, ref, d.Series().Len())
				}
			}
		})
	}
}
