package receiver

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/golang/snappy"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

// refRequest is what the reference decoder returns.
type refRequest struct {
	Series   []promsample.Series
	Metadata []promsample.Metadata
	Counts   Counts
}

// refV1 is the reference 1.0 path: gogo's decoder (prompb), then the same
// validation rules applied to its output. FuzzDecodeV1 checks the hand-written
// wire decoder against it.
func refV1(wr *prompb.WriteRequest, scheme model.ValidationScheme) (*refRequest, error) {
	req := &refRequest{}
	sl, el := newSeriesLabels(), newExemplarLabels()
	for i, ts := range wr.Timeseries {
		sl.reset(scheme)
		for _, l := range ts.Labels {
			if r := sl.add(l.Name, l.Value); r != "" {
				return nil, invalid(i, "%s", r)
			}
		}
		var s promsample.Series
		for _, x := range ts.Samples {
			s.Samples = append(s.Samples, promsample.Sample{T: x.Timestamp, V: x.Value})
		}
		for _, e := range ts.Exemplars {
			el.reset(scheme)
			var r string
			for _, l := range e.Labels {
				if r = el.add(l.Name, l.Value); r != "" {
					break
				}
			}
			var ls labels.Labels
			if r == "" {
				ls, r = el.labels()
			}
			if r != "" {
				return nil, invalid(i, "%s", r)
			}
			s.Exemplars = append(s.Exemplars, promsample.Exemplar{Labels: ls, T: e.Timestamp, V: e.Value})
		}
		for j := range ts.Histograms {
			h, r := histogramV1(&ts.Histograms[j])
			if r != "" {
				return nil, invalid(i, "%s", r)
			}
			s.Histograms = append(s.Histograms, h)
		}
		set, r := sl.set()
		if r != "" {
			return nil, invalid(i, "%s", r)
		}
		b := labels.NewScratchBuilder(len(set))
		for _, l := range set {
			b.Add(l.Name, l.Value)
		}
		ls := b.Labels()
		if len(s.Samples)+len(s.Histograms)+len(s.Exemplars) == 0 {
			continue
		}
		s.Labels = ls
		req.Series = append(req.Series, s)
	}
	for _, m := range wr.Metadata {
		if !scheme.IsValidMetricName(m.MetricFamilyName) {
			return nil, &InvalidError{Metadata: true, Reason: "family"}
		}
		req.Metadata = append(req.Metadata, promsample.Metadata{
			MetricFamily: m.MetricFamilyName, Type: promsample.MetricType(metricType(int32(m.Type))), Help: m.Help, Unit: m.Unit,
		})
	}
	req.Counts = countsOf(req.Series)
	return req, nil
}

func fuzzSeedsV1(f *testing.F) {
	wr, _, _ := v1Fixture()
	for _, w := range []*prompb.WriteRequest{
		wr,
		{Timeseries: []prompb.TimeSeries{{Labels: lbl("__name__", "m", "b", "1", "a", "2"), Samples: []prompb.Sample{{Value: 1}}}}},
		{Timeseries: []prompb.TimeSeries{{Labels: lbl("__name__", "m"), Histograms: []prompb.Histogram{prompb.FromIntHistogram(1, testNHCB())}}}},
		{Metadata: []prompb.MetricMetadata{{Type: 9, MetricFamilyName: "x", Help: "h"}}},
	} {
		b, err := w.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x02, 0x0a, 0x00})
	f.Add([]byte{0x0b, 0x0c}) // a group
}

// FuzzDecodeV1: never panics, and agrees with the gogo decoder: refuses as
// malformed exactly what gogo refuses, and otherwise returns the same series
// (bit-exact) or the same validity verdict.
func FuzzDecodeV1(f *testing.F) {
	fuzzSeedsV1(f)
	d, err := NewDecoder(Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		// Also as a (mostly corrupt) snappy body: must not panic.
		_, _ = d.Decode(ProtocolV1, msg)

		got, err := d.Decode(ProtocolV1, snappy.Encode(nil, msg))
		if len(msg) == 0 {
			// snappy of nothing is one byte: a valid empty request.
			if err != nil || len(got.Series) != 0 {
				t.Fatalf("empty message: %v", err)
			}
			return
		}
		var wr prompb.WriteRequest
		if refErr := wr.Unmarshal(msg); refErr != nil {
			if err == nil {
				t.Fatalf("accepted what gogo refuses (%v)", refErr)
			}
			return
		}
		if errors.Is(err, ErrMalformed) {
			t.Fatalf("refused what gogo accepts: %v", err)
		}
		if ie, ok := errors.AsType[*InvalidError](err); ok && ie.Series == -1 {
			return // a 2.0 body: gogo skips its fields, we refuse it
		}
		want, wantErr := refV1(&wr, model.LegacyValidation)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("verdicts differ: got %v, reference %v", err, wantErr)
		}
		if err != nil {
			return
		}
		if d := diffSeries(labelled(d.Series(), got.Series), want.Series); d != "" {
			t.Fatal(d)
		}
		if fmt.Sprint(got.Metadata) != fmt.Sprint(want.Metadata) || got.Counts != want.Counts {
			t.Fatalf("metadata or counts differ: %+v %+v / %+v %+v", got.Metadata, got.Counts, want.Metadata, want.Counts)
		}
		checkInvariants(t, d.Series(), got)
	})
}

// FuzzDecodeV2: never panics; what it accepts satisfies the Request
// invariants.
func FuzzDecodeV2(f *testing.F) {
	st := writev2.NewSymbolTable()
	req := &writev2.Request{Timeseries: []writev2.TimeSeries{
		{LabelsRefs: st.SymbolizeLabels(labels.FromStrings("__name__", "m", "job", "j"), nil),
			Samples:   []writev2.Sample{{Value: math.Float64frombits(0x7ff0000000000002), Timestamp: 1}},
			Exemplars: []writev2.Exemplar{{LabelsRefs: st.SymbolizeLabels(labels.FromStrings("trace_id", "t"), nil), Value: 1, Timestamp: 1}},
			Metadata:  writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_COUNTER, HelpRef: st.Symbolize("help")}},
		{LabelsRefs: st.SymbolizeLabels(labels.FromStrings("__name__", "h"), nil),
			Histograms: []writev2.Histogram{writev2.FromIntHistogram(0, 1, testIntHistogram()), writev2.FromFloatHistogram(0, 2, testFloatHistogram()), writev2.FromIntHistogram(0, 3, testNHCB())}},
	}}
	req.Symbols = st.Symbols()
	b, err := req.Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte{0x22, 0x00, 0x2a, 0x02, 0x0a, 0x00})
	d, err := NewDecoder(Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		_, _ = d.Decode(ProtocolV2, msg)
		got, err := d.Decode(ProtocolV2, snappy.Encode(nil, msg))
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrInvalid) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		checkInvariants(t, d.Series(), got)
	})
}

// checkInvariants checks what a Request promises.
func checkInvariants(t *testing.T, x *seriesindex.Index, r *Request) {
	t.Helper()
	series := labelled(x, r.Series)
	for i, s := range series {
		if s.Labels.Get(labels.MetricName) == "" || !s.Labels.IsValid(model.UTF8Validation) {
			t.Fatalf("series %d: labels %v", i, s.Labels)
		}
		if _, dup := s.Labels.HasDuplicateLabelNames(); dup {
			t.Fatalf("series %d: duplicate in %v", i, s.Labels)
		}
		if len(s.Samples)+len(s.Histograms)+len(s.Exemplars) == 0 {
			t.Fatalf("series %d empty", i)
		}
		for _, h := range s.Histograms {
			if (h.H == nil) == (h.FH == nil) {
				t.Fatalf("series %d: histogram with H and FH both set or unset", i)
			}
		}
	}
	if c := countsOf(series); c != r.Counts {
		t.Fatalf("counts %+v, series hold %+v", r.Counts, c)
	}
}

// FuzzShortLabel: where shortLabel decodes a Label, label decodes it to the
// same name and value.
func FuzzShortLabel(f *testing.F) {
	for _, l := range []prompb.Label{{Name: "__name__", Value: "up"}, {Name: "a", Value: ""}, {Name: "", Value: "v"},
		{Name: "job", Value: strings.Repeat("x", 127)}, {Name: "job", Value: strings.Repeat("x", 128)}} {
		b, err := l.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x12, 0x01, 'v', 0x0a, 0x01, 'n'}) // value first
	f.Add([]byte{0x0a, 0x01, 'n', 0x12, 0x01, 'v', 0x12, 0x01, 'w'})
	f.Fuzz(func(t *testing.T, b []byte) {
		name, value, short := shortLabel(b)
		if !short {
			return
		}
		n, v, err := label(b)
		if err != nil || n != name || v != value {
			t.Fatalf("shortLabel %q %q, label %q %q %v", name, value, n, v, err)
		}
	})
}
