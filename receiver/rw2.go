package receiver

import (
	"fmt"
	"unicode/utf8"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

// v2Decoder decodes an io.prometheus.write.v2.Request with its gogo decoder
// (which copies every string, so nothing aliases the message), then
// resolves the symbol table and validates. Pooled by the Decoder: the
// writev2.Request's outer slices and the builders are reused; nothing
// reachable from a returned Request is.
type v2Decoder struct {
	msg    writev2.Request
	sl     *seriesLabels
	el     *exemplarLabels
	x      *seriesindex.Index // the Decoder's; shared
	wire   []wireLabel        // scratch: a series' labels, resolved
	hasher promsample.SeriesHasher
}

func newV2Decoder(x *seriesindex.Index) *v2Decoder {
	return &v2Decoder{sl: newSeriesLabels(), el: newExemplarLabels(), x: x}
}

func (v *v2Decoder) decode(msg []byte) (*Request, error) {
	// A 1.0 WriteRequest decodes as an empty 2.0 Request (its fields 1 and
	// 3 are reserved in 2.0): refuse it rather than report success.
	if err := topLevelFields(msg, func(num int32) error {
		if num >= 1 && num <= 3 {
			return &InvalidError{Series: -1, Reason: "body holds a prometheus.WriteRequest but Content-Type says io.prometheus.write.v2.Request"}
		}
		return nil
	}); err != nil {
		return nil, err
	}

	m := &v.msg
	m.Symbols, m.Timeseries, m.XXX_unrecognized = m.Symbols[:0], m.Timeseries[:0], nil
	defer func() {
		clear(m.Symbols)
		clear(m.Timeseries)
		m.XXX_unrecognized = nil
	}()
	if err := m.Unmarshal(msg); err != nil {
		return nil, malformed("io.prometheus.write.v2.Request", err)
	}
	syms := m.Symbols
	if len(syms) > 0 && syms[0] != "" {
		return nil, &InvalidError{Series: -1, Reason: "symbols[0] must be the empty string"}
	}

	req := &Request{Protocol: ProtocolV2, Series: make([]Series, 0, len(m.Timeseries))}
	var metaIndex map[string]struct{}
	var prev seriesindex.Ref
	for i := range m.Timeseries {
		ts := &m.Timeseries[i]
		s, err := v.series(i, ts, syms, prev)
		if err != nil {
			return nil, err
		}
		if prev != 0 {
			v.x.SetNext(prev, s.Ref)
		}
		prev = s.Ref
		req.Series = append(req.Series, s)
		req.Counts.Samples += len(s.Samples)
		req.Counts.Histograms += len(s.Histograms)
		req.Counts.Exemplars += len(s.Exemplars)

		md, ok, err := metadataV2(i, ts, syms, v.x.Value(s.Ref, labels.MetricName))
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if metaIndex == nil {
			metaIndex = make(map[string]struct{})
		}
		if _, seen := metaIndex[md.MetricFamily]; !seen {
			metaIndex[md.MetricFamily] = struct{}{}
			req.Metadata = append(req.Metadata, md)
		}
	}
	return req, nil
}

// topLevelFields calls f with the number of every top-level field of msg.
func topLevelFields(msg []byte, f func(num int32) error) error {
	for b := msg; len(b) > 0; {
		num, typ, rest, err := field(b)
		if err != nil {
			return malformed("io.prometheus.write.v2.Request", err)
		}
		if err := f(num); err != nil {
			return err
		}
		if b, err = skip(typ, rest); err != nil {
			return malformed("io.prometheus.write.v2.Request", err)
		}
	}
	return nil
}

func symbol(syms []string, ref uint32) (string, bool) {
	if uint64(ref) >= uint64(len(syms)) {
		return "", false
	}
	return syms[ref], true
}

func (v *v2Decoder) series(idx int, ts *writev2.TimeSeries, syms []string, prev seriesindex.Ref) (Series, error) {
	var s Series
	refs := ts.LabelsRefs
	if len(refs)%2 != 0 {
		return s, invalid(idx, "labels_refs has odd length %d", len(refs))
	}
	v.wire = v.wire[:0]
	for j := 0; j < len(refs); j += 2 {
		name, ok1 := symbol(syms, refs[j])
		value, ok2 := symbol(syms, refs[j+1])
		if !ok1 || !ok2 {
			return s, invalid(idx, "labels_refs [%d, %d] outside the symbol table (%d symbols)", refs[j], refs[j+1], len(syms))
		}
		v.wire = append(v.wire, wireLabel{Name: name, Value: value})
	}
	// A known series' labels were validated when the index took them
	// (under 2.0's rules or stricter ones).
	ref, hash, hashed := knownSeries(v.x, prev, v.wire, false, &v.hasher)
	if s.Ref = ref; s.Ref == 0 {
		v.sl.reset(model.UTF8Validation)
		for _, l := range v.wire {
			if r := v.sl.add(l.Name, l.Value); r != "" {
				return s, invalid(idx, "%s", r)
			}
		}
		ls, r := v.sl.set()
		if r != "" {
			return s, invalid(idx, "%s", r)
		}
		s.Ref, _ = v.x.AddLabels(ls, v.sl.hash(v.wire, hash, hashed, &v.hasher))
		v.x.SetValidated(s.Ref, false)
	}
	clear(v.wire)

	switch {
	case len(ts.Samples) > 0 && len(ts.Histograms) > 0:
		return s, invalid(idx, "series has both samples and histograms")
	case len(ts.Samples) == 0 && len(ts.Histograms) == 0 && len(ts.Exemplars) == 0:
		return s, invalid(idx, "series has no samples, histograms or exemplars")
	}
	if len(ts.Samples) > 0 {
		s.Samples = make([]promsample.Sample, len(ts.Samples))
		for j, x := range ts.Samples {
			// StartTimestamp has no place in promsample yet: dropped.
			s.Samples[j] = promsample.Sample{T: x.Timestamp, V: x.Value}
		}
	}
	if len(ts.Histograms) > 0 {
		s.Histograms = make([]promsample.Histogram, len(ts.Histograms))
		for j := range ts.Histograms {
			h, r := histogramV2(&ts.Histograms[j])
			if r != "" {
				return s, invalid(idx, "%s", r)
			}
			s.Histograms[j] = h
		}
	}
	if len(ts.Exemplars) > 0 {
		s.Exemplars = make([]promsample.Exemplar, len(ts.Exemplars))
		for j := range ts.Exemplars {
			e := &ts.Exemplars[j]
			els, r := v.exemplarLabels(e.LabelsRefs, syms)
			if r != "" {
				return s, invalid(idx, "%s", r)
			}
			s.Exemplars[j] = promsample.Exemplar{Labels: els, T: e.Timestamp, V: e.Value}
		}
	}
	return s, nil
}

func (v *v2Decoder) exemplarLabels(refs []uint32, syms []string) (labels.Labels, string) {
	if len(refs)%2 != 0 {
		return labels.EmptyLabels(), fmt.Sprintf("exemplar: labels_refs has odd length %d", len(refs))
	}
	v.el.reset(model.UTF8Validation)
	for j := 0; j < len(refs); j += 2 {
		name, ok1 := symbol(syms, refs[j])
		value, ok2 := symbol(syms, refs[j+1])
		if !ok1 || !ok2 {
			return labels.EmptyLabels(), fmt.Sprintf("exemplar: labels_refs [%d, %d] outside the symbol table (%d symbols)", refs[j], refs[j+1], len(syms))
		}
		if r := v.el.add(name, value); r != "" {
			return labels.EmptyLabels(), r
		}
	}
	return v.el.labels()
}

// metadataV2 converts a series' metadata; ok is false when it carries
// nothing (type unspecified, no help, no unit). 2.0 has no family name: the
// series' metric name stands for it (for a classic histogram that is e.g.
// foo_bucket, where 1.0 would say foo).
func metadataV2(idx int, ts *writev2.TimeSeries, syms []string, metric string) (promsample.Metadata, bool, error) {
	md := ts.Metadata
	help, ok1 := symbol(syms, md.HelpRef)
	unit, ok2 := symbol(syms, md.UnitRef)
	switch {
	case !ok1 || !ok2:
		return promsample.Metadata{}, false, invalid(idx, "metadata help_ref %d or unit_ref %d outside the symbol table (%d symbols)", md.HelpRef, md.UnitRef, len(syms))
	case !utf8.ValidString(help):
		return promsample.Metadata{}, false, invalid(idx, "invalid UTF-8 in metadata help")
	case !utf8.ValidString(unit):
		return promsample.Metadata{}, false, invalid(idx, "invalid UTF-8 in metadata unit")
	case md.Type == writev2.Metadata_METRIC_TYPE_UNSPECIFIED && help == "" && unit == "":
		return promsample.Metadata{}, false, nil
	}
	return promsample.Metadata{
		MetricFamily: metric,
		Type:         promsample.MetricType(metricType(int32(md.Type))),
		Help:         help,
		Unit:         unit,
	}, true, nil
}
