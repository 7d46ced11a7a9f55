package forward

import (
	"math"
	"testing"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// The hand-written encoders must produce what Prometheus's own generated
// decoders read back, bit for bit, including what the generated encoder
// cannot write (-0).

func testRequest() *request {
	a := newSeriesState(labels.FromStrings("__name__", "up", "job", "a", "instance", "h:1"), 0, 0)
	b := newSeriesState(labels.FromStrings("__name__", "lat_seconds", "job", "a"), 0, 0)
	meta := &promsample.Metadata{MetricFamily: "up", Type: "gauge", Help: "Is it up.", Unit: ""}
	h := &histogram.Histogram{Schema: 1, Count: 5, Sum: -0.0, ZeroThreshold: 0.001, ZeroCount: 1,
		PositiveSpans: []histogram.Span{{Offset: 0, Length: 2}}, PositiveBuckets: []int64{2, 0}}
	fh := &histogram.FloatHistogram{Schema: 0, Count: 3.5, Sum: 7.25, PositiveSpans: []histogram.Span{{Offset: 1, Length: 1}},
		PositiveBuckets: []float64{3.5}}
	r := &request{}
	r.series = []reqSeries{
		{s: a, meta: meta, samples: []promsample.Sample{
			{T: 1000, V: 1}, {T: 2000, V: math.Copysign(0, -1)}, {T: 3000, V: math.Float64frombits(0x7ff0000000000002)},
			{T: -5, V: 0}, {T: 0, V: math.Inf(-1)}, {T: 4000, V: 5e-324},
		}, exemplars: []promsample.Exemplar{{Labels: labels.FromStrings("trace_id", "abc"), T: 3000, V: 0.5}}},
		{s: b, samples: []promsample.Sample{{T: 7, V: 1.5}}, histograms: []promsample.Histogram{{T: 8, H: h}, {T: 9, FH: fh}}},
	}
	r.meta = []promsample.Metadata{*meta}
	r.samples, r.histograms, r.exemplar = 7, 2, 1
	return r
}

func TestRW1RoundTripsBitExact(t *testing.T) {
	r := testRequest()
	var e rw1Encoder
	b := e.encode(nil, r)
	var wr prompb.WriteRequest
	if err := wr.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	if len(wr.Timeseries) != 2 {
		t.Fatalf("%d series", len(wr.Timeseries))
	}
	for i, ts := range wr.Timeseries {
		rs := r.series[i]
		var got labels.ScratchBuilder
		for _, l := range ts.Labels {
			got.Add(l.Name, l.Value)
		}
		if !labels.Equal(got.Labels(), rs.s.lbls) {
			t.Errorf("series %d labels %v, want %v", i, got.Labels(), rs.s.lbls)
		}
		if len(ts.Samples) != len(rs.samples) {
			t.Fatalf("series %d: %d samples, want %d", i, len(ts.Samples), len(rs.samples))
		}
		for j, s := range ts.Samples {
			if s.Timestamp != rs.samples[j].T || math.Float64bits(s.Value) != math.Float64bits(rs.samples[j].V) {
				t.Errorf("series %d sample %d: %d %x, want %d %x", i, j, s.Timestamp, math.Float64bits(s.Value),
					rs.samples[j].T, math.Float64bits(rs.samples[j].V))
			}
		}
		if len(ts.Histograms) != len(rs.histograms) {
			t.Fatalf("series %d: %d histograms", i, len(ts.Histograms))
		}
		for j, h := range ts.Histograms {
			want := rs.histograms[j]
			if h.Timestamp != want.T {
				t.Errorf("histogram ts %d, want %d", h.Timestamp, want.T)
			}
			if want.H != nil && !h.ToIntHistogram().Equals(want.H) {
				t.Errorf("histogram %d: %v, want %v", j, h.ToIntHistogram(), want.H)
			}
			if want.FH != nil && !h.ToFloatHistogram().Equals(want.FH) {
				t.Errorf("float histogram %d: %v, want %v", j, h.ToFloatHistogram(), want.FH)
			}
		}
		if len(ts.Exemplars) != len(rs.exemplars) {
			t.Fatalf("series %d: %d exemplars", i, len(ts.Exemplars))
		}
		for j, ex := range ts.Exemplars {
			if ex.Timestamp != rs.exemplars[j].T || ex.Value != rs.exemplars[j].V || ex.Labels[0].Value != "abc" {
				t.Errorf("exemplar %d: %+v", j, ex)
			}
		}
	}
	if len(wr.Metadata) != 1 || wr.Metadata[0].MetricFamilyName != "up" || wr.Metadata[0].Type != prompb.MetricMetadata_GAUGE ||
		wr.Metadata[0].Help != "Is it up." {
		t.Errorf("metadata %+v", wr.Metadata)
	}
}

func TestRW2RoundTripsBitExact(t *testing.T) {
	r := testRequest()
	var e rw2Encoder
	b := e.encode(nil, r)
	var req writev2.Request
	if err := req.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	if req.Symbols[0] != "" {
		t.Fatalf("symbols[0] = %q", req.Symbols[0])
	}
	// Series b has floats and histograms: two TimeSeries.
	if len(req.Timeseries) != 3 {
		t.Fatalf("%d series", len(req.Timeseries))
	}
	var sb labels.ScratchBuilder
	ls, err := req.Timeseries[0].ToLabels(&sb, req.Symbols)
	if err != nil {
		t.Fatal(err)
	}
	if !labels.Equal(ls, r.series[0].s.lbls) {
		t.Errorf("labels %v", ls)
	}
	for j, s := range req.Timeseries[0].Samples {
		w := r.series[0].samples[j]
		if s.Timestamp != w.T || math.Float64bits(s.Value) != math.Float64bits(w.V) {
			t.Errorf("sample %d: %d %x, want %d %x", j, s.Timestamp, math.Float64bits(s.Value), w.T, math.Float64bits(w.V))
		}
	}
	md, err := req.Timeseries[0].ToMetadata(req.Symbols)
	if err != nil {
		t.Fatal(err)
	}
	if md.Type != "gauge" || md.Help != "Is it up." {
		t.Errorf("metadata %+v", md)
	}
	ex := req.Timeseries[0].Exemplars
	if len(ex) != 1 || ex[0].Timestamp != 3000 || ex[0].Value != 0.5 {
		t.Errorf("exemplars %+v", ex)
	}
	if got := req.Timeseries[1]; len(got.Samples) != 1 || len(got.Histograms) != 0 {
		t.Errorf("floats of b: %+v", got)
	}
	hs := req.Timeseries[2].Histograms
	if len(hs) != 2 || !hs[0].ToIntHistogram().Equals(r.series[1].histograms[0].H) ||
		!hs[1].ToFloatHistogram().Equals(r.series[1].histograms[1].FH) {
		t.Errorf("histograms %+v", hs)
	}
}

func BenchmarkEncodeRW1(b *testing.B) {
	r := &request{}
	for i := range 20 {
		s := &seriesState{lbls: labels.FromStrings("__name__", "node_cpu_seconds_total", "cpu", string(rune('0'+i%10)),
			"instance", "host-0001:9100", "job", "node", "mode", "idle")}
		rs := reqSeries{s: s}
		for j := range 100 {
			rs.samples = append(rs.samples, promsample.Sample{T: 1700000000000 + int64(j)*15000, V: float64(j) * 1.5})
		}
		r.series = append(r.series, rs)
		r.samples += 100
	}
	var e rw1Encoder
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = e.encode(buf[:0], r)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2000, "ns/sample")
}
