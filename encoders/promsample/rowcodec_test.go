package promsample

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
)

func TestBatchRoundTrip(t *testing.T) {
	lbl := labels.FromStrings("__name__", "m", "job", "j")
	var specials []Sample
	for i, b := range specialBits {
		specials = append(specials, Sample{T: int64(i), V: math.Float64frombits(b)})
	}
	var extremes []Sample
	for i, ts := range tsExtremes {
		extremes = append(extremes, Sample{T: ts, V: float64(i)})
	}
	var shapes []Histogram
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		shapes = append(shapes, randHistogram(r, tsExtremes[i%len(tsExtremes)]))
	}
	shapes = append(shapes,
		Histogram{T: 5, H: &histogram.Histogram{Schema: -53, PositiveSpans: []histogram.Span{{Offset: 0, Length: 2}},
			PositiveBuckets: []int64{3, -1}, CustomValues: []float64{0.1, 1, math.Inf(1)}, Count: 5, Sum: 2.5, CounterResetHint: histogram.GaugeType}},
		Histogram{T: 6, FH: &histogram.FloatHistogram{Schema: 8, ZeroThreshold: 1e-128, ZeroCount: 0.5,
			NegativeSpans: []histogram.Span{{Offset: -2147483648, Length: 4294967295}}, CounterResetHint: histogram.CounterReset}},
	)
	cases := []struct {
		name string
		b    Batch
	}{
		{"empty", Batch{}},
		{"no samples", Batch{Series: []Series{{Labels: lbl}}}},
		{"specials", Batch{Series: []Series{{Labels: lbl, Samples: specials}}}},
		{"int64 extremes", Batch{Series: []Series{{Labels: lbl, Samples: extremes}, {Labels: labels.FromStrings("a", "b"), Samples: extremes}}}},
		{"histograms", Batch{Series: []Series{{Labels: lbl, Histograms: shapes}}}},
		{"exemplars and metadata", Batch{
			Series: []Series{{Labels: lbl, Samples: []Sample{{T: 1, V: 2}}, Exemplars: []Exemplar{
				{Labels: labels.FromStrings("trace_id", "abc"), T: 0, V: math.Float64frombits(0x7ff0000000000002)},
				{Labels: labels.EmptyLabels(), T: math.MinInt64, V: -0.0}}}},
			Metadata: []Metadata{{MetricFamily: "m", Type: "counter", Help: "Help with ünïcode\n", Unit: "seconds"}, {}},
		}},
		{"empty label value and names", Batch{Series: []Series{{Labels: labels.FromStrings("", "", "x", ""), Samples: []Sample{{T: -5, V: 1}}}}}},
	}
	var enc BatchEncoder
	var dec BatchDecoder
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			row, err := enc.Append(nil, &tc.b)
			if err != nil {
				t.Fatal(err)
			}
			got, err := dec.Decode(row)
			if err != nil {
				t.Fatal(err)
			}
			if d := diffBatch(got, tc.b); d != "" {
				t.Fatal(d)
			}
			// The package-level functions agree with the reusable ones.
			row2, err := EncodeBatch(&tc.b)
			if err != nil {
				t.Fatal(err)
			}
			if string(row2) != string(row) {
				t.Fatal("EncodeBatch differs from BatchEncoder.Append")
			}
		})
	}
}

func TestEncodeBatchRefusesBadHistogram(t *testing.T) {
	b := Batch{Series: []Series{{Labels: labels.FromStrings("a", "b"), Histograms: []Histogram{{T: 1}}}}}
	if _, err := EncodeBatch(&b); !errors.Is(err, ErrInvalidBatch) {
		t.Fatalf("err = %v, want ErrInvalidBatch", err)
	}
}

func TestDecodeBatchErrors(t *testing.T) {
	good, err := EncodeBatch(&Batch{Series: []Series{{Labels: labels.FromStrings("a", "b"), Samples: []Sample{{T: 1, V: 1.5}}}}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		row  []byte
		want error
	}{
		{"empty", nil, ErrCorruptRow},
		{"version", []byte{9, 0}, ErrUnsupportedVersion},
		{"truncated", good[:len(good)-2], ErrCorruptRow},
		{"huge claim", []byte{rowFormatV1, 0xff, 0xff, 0xff, 0xff, 0x0f}, ErrTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeBatch(tc.row); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func FuzzDecodeBatch(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, b := range randBatches(r, 20) {
		row, err := EncodeBatch(&b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(row)
	}
	f.Add([]byte{rowFormatV1})
	f.Fuzz(func(t *testing.T, row []byte) {
		b, err := DecodeBatch(row)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to something that decodes the same.
		row2, err := EncodeBatch(&b)
		if err != nil {
			// A decoded batch is always encodable.
			t.Fatalf("re-encode: %v", err)
		}
		b2, err := DecodeBatch(row2)
		if err != nil {
			t.Fatalf("decode of re-encoded: %v", err)
		}
		if d := diffBatch(b2, b); d != "" {
			t.Fatal(d)
		}
	})
}
