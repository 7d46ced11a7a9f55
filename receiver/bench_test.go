package receiver

import (
	"fmt"
	"testing"

	"github.com/golang/snappy"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/prompb"
)

// benchRequestV1 builds a 1.0 request of 2,000 float samples: series ×
// perSeries, with labels shaped like a node_exporter scrape (rwload's shape).
func benchRequestV1(series, perSeries int) *prompb.WriteRequest {
	wr := &prompb.WriteRequest{}
	for i := range series {
		ts := prompb.TimeSeries{Labels: lbl(
			"__name__", fmt.Sprintf("node_metric_%d", i%50),
			"cpu", fmt.Sprint(i%8),
			"instance", fmt.Sprintf("host-%d:9100", i/400),
			"job", "node",
			"mode", fmt.Sprintf("mode%d", i%7),
			"series", fmt.Sprint(i),
		)}
		for j := range perSeries {
			ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: 1700000000000 + int64(j)*5000, Value: float64(i*j) * 1.25})
		}
		wr.Timeseries = append(wr.Timeseries, ts)
	}
	return wr
}

// BenchmarkDecodeV1 measures decode+validate (snappy included) of a
// 2,000-sample 1.0 request, in the batch shape (500 series × 4) and the
// steady-state shape (2,000 series × 1).
func BenchmarkDecodeV1(b *testing.B) {
	for _, shape := range []struct{ series, per int }{{500, 4}, {2000, 1}} {
		body := encodeV1(b, benchRequestV1(shape.series, shape.per))
		const samples = 2000
		b.Run(fmt.Sprintf("series=%d", shape.series), func(b *testing.B) {
			d, err := NewDecoder(Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				req, err := d.Decode(ProtocolV1, body)
				if err != nil || req.Counts.Samples != samples {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*samples)/b.Elapsed().Seconds(), "samples/s")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*samples), "ns/sample")
		})
	}
}

// BenchmarkDecodeV1Cold is BenchmarkDecodeV1 with an empty label cache for
// every request (a new Decoder each time): the first request of a sender, or
// one whose series all changed.
func BenchmarkDecodeV1Cold(b *testing.B) {
	for _, shape := range []struct{ series, per int }{{500, 4}, {2000, 1}} {
		body := encodeV1(b, benchRequestV1(shape.series, shape.per))
		b.Run(fmt.Sprintf("series=%d", shape.series), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				d, _ := NewDecoder(Options{})
				if _, err := d.Decode(ProtocolV1, body); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*2000)/b.Elapsed().Seconds(), "samples/s")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*2000), "ns/sample")
		})
	}
}

// BenchmarkDecodeV1Gogo is the reference: gogo's prompb decoder plus the
// same validation, for comparison with BenchmarkDecodeV1.
func BenchmarkDecodeV1Gogo(b *testing.B) {
	body := encodeV1(b, benchRequestV1(500, 4))
	b.ReportAllocs()
	for b.Loop() {
		msg, err := snappy.Decode(nil, body)
		if err != nil {
			b.Fatal(err)
		}
		var wr prompb.WriteRequest
		if err := wr.Unmarshal(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := refV1(&wr, model.LegacyValidation); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*2000)/b.Elapsed().Seconds(), "samples/s")
}
