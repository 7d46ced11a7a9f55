package receiver

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/golang/snappy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

// fakeSink is a Sink built from a function field; it counts calls. It
// hands the function, and keeps, the series with their labels resolved
// through its series index (x, which the Handler shares: see Series).
type fakeSink struct {
	write func(ctx context.Context, source string, series []promsample.Series, meta []promsample.Metadata) (Counts, error)
	calls atomic.Int64

	once sync.Once
	x    *seriesindex.Index

	mu     sync.Mutex
	source string
	series []promsample.Series
	meta   []promsample.Metadata
}

var _ Sink = (*fakeSink)(nil)

// Series makes the Handler resolve labels with the sink's index.
func (f *fakeSink) Series() *seriesindex.Index {
	f.once.Do(func() {
		if f.x == nil {
			f.x = seriesindex.New()
		}
	})
	return f.x
}

func (f *fakeSink) Write(ctx context.Context, source string, rs []Series, meta []promsample.Metadata) (Counts, error) {
	f.calls.Add(1)
	// The Handler reuses series' memory once Write returns (see Sink):
	// keep a copy.
	series := labelled(f.Series(), rs)
	f.mu.Lock()
	f.source, f.series, f.meta = source, series, meta
	f.mu.Unlock()
	if f.write != nil {
		return f.write(ctx, source, series, meta)
	}
	return countsOf(series), nil
}

// labelled resolves a request's series through x, copying their samples.
func labelled(x *seriesindex.Index, rs []Series) []promsample.Series {
	out := make([]promsample.Series, len(rs))
	for i, s := range rs {
		out[i] = promsample.Series{Labels: x.Labels(s.Ref), Samples: slices.Clone(s.Samples), Histograms: s.Histograms, Exemplars: s.Exemplars}
	}
	return out
}

// unlabelled adds the series' labels to x and returns them as a request's.
func unlabelled(x *seriesindex.Index, ss []promsample.Series) []Series {
	out := make([]Series, len(ss))
	for i, s := range ss {
		ref, _ := x.Add(s.Labels)
		out[i] = Series{Ref: ref, Samples: s.Samples, Histograms: s.Histograms, Exemplars: s.Exemplars}
	}
	return out
}

func countsOf(series []promsample.Series) Counts {
	var c Counts
	for _, s := range series {
		c.Samples += len(s.Samples)
		c.Histograms += len(s.Histograms)
		c.Exemplars += len(s.Exemplars)
	}
	return c
}

// newServer starts a loopback server over a Handler writing to sink.
func newServer(t testing.TB, sink Sink, o Options) (*httptest.Server, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	o.Registerer = reg
	h, err := NewHandler(sink, o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, reg
}

type answer struct {
	code   int
	header http.Header
	body   string
}

// post sends body with the given headers ("" values are left out).
func post(t testing.TB, url string, body io.Reader, hdr map[string]string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{code: resp.StatusCode, header: resp.Header, body: string(b)}
}

func v1Headers() map[string]string {
	return map[string]string{"Content-Type": contentTypeV1, "Content-Encoding": "snappy", "X-Prometheus-Remote-Write-Version": "0.1.0"}
}

func v2Headers() map[string]string {
	return map[string]string{"Content-Type": contentTypeV2, "Content-Encoding": "snappy", "X-Prometheus-Remote-Write-Version": "2.0.0"}
}

func encodeV1(t testing.TB, wr *prompb.WriteRequest) []byte {
	t.Helper()
	b, err := wr.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return snappy.Encode(nil, b)
}

func encodeV2(t testing.TB, r *writev2.Request) []byte {
	t.Helper()
	b, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return snappy.Encode(nil, b)
}

// Float values that must keep their bits.
var specialFloats = []float64{
	math.Float64frombits(0x7ff0000000000002), // stale marker
	math.Float64frombits(0x7ff8000000000001), // quiet NaN with payload
	math.Float64frombits(0xfff4000000000abc), // negative signalling NaN with payload
	math.NaN(),
	math.Inf(1),
	math.Inf(-1),
	// -0 is absent: gogo's proto3 marshal omits a value == 0, so prompb and
	// writev2 senders (Prometheus) send -0 as +0. TestNegativeZeroOnTheWire
	// checks the receiver keeps a -0 that is on the wire.
	0,
	math.SmallestNonzeroFloat64,
	math.MaxFloat64,
	-1.5,
}

func lbl(ss ...string) []prompb.Label {
	var out []prompb.Label
	for i := 0; i+1 < len(ss); i += 2 {
		out = append(out, prompb.Label{Name: ss[i], Value: ss[i+1]})
	}
	return out
}

func testIntHistogram() *histogram.Histogram {
	return &histogram.Histogram{
		CounterResetHint: histogram.NotCounterReset,
		Schema:           1,
		ZeroThreshold:    0.001,
		ZeroCount:        2,
		Count:            12,
		Sum:              18.4,
		PositiveSpans:    []histogram.Span{{Offset: 0, Length: 2}, {Offset: 1, Length: 2}},
		PositiveBuckets:  []int64{1, 1, -1, 0},
		NegativeSpans:    []histogram.Span{{Offset: 0, Length: 2}},
		NegativeBuckets:  []int64{2, 1},
	}
}

func testFloatHistogram() *histogram.FloatHistogram {
	return &histogram.FloatHistogram{
		CounterResetHint: histogram.GaugeType,
		Schema:           0,
		ZeroThreshold:    0.01,
		ZeroCount:        1.5,
		Count:            10.5,
		Sum:              math.Float64frombits(0x7ff8000000000001), // NaN sum: count is a lower bound
		PositiveSpans:    []histogram.Span{{Offset: -1, Length: 3}},
		PositiveBuckets:  []float64{1, 2.5, 3},
		NegativeSpans:    []histogram.Span{{Offset: 2, Length: 1}},
		NegativeBuckets:  []float64{2.5},
	}
}

func testNHCB() *histogram.Histogram {
	return &histogram.Histogram{
		Schema:          histogram.CustomBucketsSchema,
		Count:           6,
		Sum:             12.5,
		PositiveSpans:   []histogram.Span{{Offset: 0, Length: 3}},
		PositiveBuckets: []int64{1, 2, -1}, // 1, 3, 2
		CustomValues:    []float64{0.5, 1, 2.5},
	}
}

// eqFloat compares bits, so NaNs and -0 compare exactly.
func eqFloat(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }

func eqFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !eqFloat(a[i], b[i]) {
			return false
		}
	}
	return true
}

func eqSpans(a, b []histogram.Span) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func eqInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// diffHistogram returns "" when the two are bit-identical (nil and empty
// slices are equal).
func diffHistogram(a, b promsample.Histogram) string {
	if a.T != b.T || (a.H == nil) != (b.H == nil) || (a.FH == nil) != (b.FH == nil) {
		return fmt.Sprintf("kind or T differs: %+v vs %+v", a, b)
	}
	if a.H != nil {
		x, y := a.H, b.H
		if x.CounterResetHint != y.CounterResetHint || x.Schema != y.Schema || !eqFloat(x.ZeroThreshold, y.ZeroThreshold) ||
			x.ZeroCount != y.ZeroCount || x.Count != y.Count || !eqFloat(x.Sum, y.Sum) ||
			!eqSpans(x.PositiveSpans, y.PositiveSpans) || !eqSpans(x.NegativeSpans, y.NegativeSpans) ||
			!eqInts(x.PositiveBuckets, y.PositiveBuckets) || !eqInts(x.NegativeBuckets, y.NegativeBuckets) ||
			!eqFloats(x.CustomValues, y.CustomValues) {
			return fmt.Sprintf("int histogram differs:\n %+v\n %+v", x, y)
		}
	}
	if a.FH != nil {
		x, y := a.FH, b.FH
		if x.CounterResetHint != y.CounterResetHint || x.Schema != y.Schema || !eqFloat(x.ZeroThreshold, y.ZeroThreshold) ||
			!eqFloat(x.ZeroCount, y.ZeroCount) || !eqFloat(x.Count, y.Count) || !eqFloat(x.Sum, y.Sum) ||
			!eqSpans(x.PositiveSpans, y.PositiveSpans) || !eqSpans(x.NegativeSpans, y.NegativeSpans) ||
			!eqFloats(x.PositiveBuckets, y.PositiveBuckets) || !eqFloats(x.NegativeBuckets, y.NegativeBuckets) ||
			!eqFloats(x.CustomValues, y.CustomValues) {
			return fmt.Sprintf("float histogram differs:\n %+v\n %+v", x, y)
		}
	}
	return ""
}

// diffSeries returns "" when got equals want bit for bit.
func diffSeries(got, want []promsample.Series) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d series, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if !labels.Equal(g.Labels, w.Labels) {
			return fmt.Sprintf("series %d: labels %v, want %v", i, g.Labels, w.Labels)
		}
		if len(g.Samples) != len(w.Samples) || len(g.Histograms) != len(w.Histograms) || len(g.Exemplars) != len(w.Exemplars) {
			return fmt.Sprintf("series %d: lengths %d/%d/%d, want %d/%d/%d", i,
				len(g.Samples), len(g.Histograms), len(g.Exemplars), len(w.Samples), len(w.Histograms), len(w.Exemplars))
		}
		for j := range w.Samples {
			if g.Samples[j].T != w.Samples[j].T || !eqFloat(g.Samples[j].V, w.Samples[j].V) {
				return fmt.Sprintf("series %d sample %d: %v (%#x), want %v (%#x)", i, j,
					g.Samples[j], math.Float64bits(g.Samples[j].V), w.Samples[j], math.Float64bits(w.Samples[j].V))
			}
		}
		for j := range w.Histograms {
			if d := diffHistogram(g.Histograms[j], w.Histograms[j]); d != "" {
				return fmt.Sprintf("series %d histogram %d: %s", i, j, d)
			}
		}
		for j := range w.Exemplars {
			ge, we := g.Exemplars[j], w.Exemplars[j]
			if ge.T != we.T || !eqFloat(ge.V, we.V) || !labels.Equal(ge.Labels, we.Labels) {
				return fmt.Sprintf("series %d exemplar %d: %+v, want %+v", i, j, ge, we)
			}
		}
	}
	return ""
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// chunked hides a reader's length, so the request is sent chunked
// (ContentLength -1 at the server).
type chunked struct{ r io.Reader }

func (c chunked) Read(p []byte) (int, error) { return c.r.Read(p) }
