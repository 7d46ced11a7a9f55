package promread

import (
	"bytes"
	"math"
	"testing"

	"github.com/prometheus/prometheus/prompb"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// gogoResponse is the ReadResponse built the way gogo's marshaller wants it.
func gogoResponse(results [][]*series) *prompb.ReadResponse {
	resp := &prompb.ReadResponse{}
	for _, res := range results {
		qr := &prompb.QueryResult{}
		for _, sr := range res {
			ts := &prompb.TimeSeries{Labels: prompb.FromLabels(sr.lbls, nil)}
			for _, s := range sr.floats {
				ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: s.T, Value: s.V})
			}
			for _, h := range sr.hists {
				if h.H != nil {
					ts.Histograms = append(ts.Histograms, prompb.FromIntHistogram(h.T, h.H))
				} else {
					ts.Histograms = append(ts.Histograms, prompb.FromFloatHistogram(h.T, h.FH))
				}
			}
			qr.Timeseries = append(qr.Timeseries, ts)
		}
		resp.Results = append(resp.Results, qr)
	}
	return resp
}

func encodeSamples(t *testing.T, results [][]*series) []byte {
	t.Helper()
	enc := samplesEncoder{results: results}
	b := make([]byte, enc.size())
	if err := enc.encode(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSamplesEncoderMatchesGogo(t *testing.T) {
	var fl []promsample.Sample
	for i, bits := range specialFloats {
		if bits == 0x8000000000000000 {
			continue // -0.0: see TestSamplesEncoderKeepsNegativeZero
		}
		fl = append(fl, promsample.Sample{T: int64(i-3) * 1_000_000_007, V: math.Float64frombits(bits)})
	}
	fl = append(fl, promsample.Sample{T: 0, V: 0}, promsample.Sample{T: 1, V: 0}, promsample.Sample{T: 1 << 62, V: 1})
	h := testHistogram(3)
	results := [][]*series{
		{
			{lbls: ls("__name__", "a", "job", "x"), floats: fl},
			{lbls: ls("__name__", "b", "le", "+Inf"), hists: []promsample.Histogram{{T: 5, H: h}, {T: 6, FH: h.ToFloat(nil)}}},
			{lbls: ls("__name__", "c"), floats: fl[:1], hists: []promsample.Histogram{{T: 7, H: h}}},
		},
		{}, // a query with no answer
		{{lbls: ls("__name__", "d", "long", string(bytes.Repeat([]byte("v"), 300)))}},
	}
	got := encodeSamples(t, results)
	want, err := gogoResponse(results).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoded %d bytes, gogo %d; they differ", len(got), len(want))
	}
}

func TestSamplesEncoderKeepsNegativeZero(t *testing.T) {
	fl := []promsample.Sample{{T: 10, V: math.Copysign(0, -1)}, {T: 20, V: 0}, {T: 30, V: math.Float64frombits(0x7ff0000000000002)}}
	raw := encodeSamples(t, [][]*series{{{lbls: ls("__name__", "z"), floats: fl}}})
	var resp prompb.ReadResponse
	if err := resp.Unmarshal(raw); err != nil {
		t.Fatal(err)
	}
	var back []promsample.Sample
	for _, s := range resp.Results[0].Timeseries[0].Samples {
		back = append(back, promsample.Sample{T: s.Timestamp, V: s.Value})
	}
	sameBits(t, "decoded", back, fl)
}
