package receiver

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// seriesLabels validates the labels of one series as they arrive in wire
// order and keeps the normalized set (set):
//
//   - at least one label, and a non-empty __name__ that is a valid metric
//     name under the scheme (Legacy: the 1.0 spec's regular expression;
//     UTF8: any non-empty valid UTF-8);
//   - names non-empty and valid under the scheme, values valid UTF-8;
//   - names strictly increasing (byte order): equal is a duplicate, smaller is
//     unsorted. Both specs say MUST for sorted and unique;
//   - a label with an empty value is dropped, after the order check (in the
//     Prometheus data model an empty value is the same as no label; the spec
//     says senders MUST NOT send one, Prometheus never does).
//
// The set's strings alias the decode buffer, as the strings added do: the
// series index copies what it keeps (seriesindex.Index.AddLabels).
// Reasons are formatted (copied) before the buffer is reused.
type seriesLabels struct {
	ls     []wireLabel // the labels with a value, in order
	scheme model.ValidationScheme
	prev   string
	n      int // labels added, empty values included
	metric bool
}

func newSeriesLabels() *seriesLabels {
	return &seriesLabels{ls: make([]wireLabel, 0, 16)}
}

func (s *seriesLabels) reset(scheme model.ValidationScheme) {
	clear(s.ls) // no strings of the last request kept alive
	s.ls = s.ls[:0]
	s.scheme = scheme
	s.prev = ""
	s.n = 0
	s.metric = false
}

// add checks one label and returns a reason, or "" when it is valid.
func (s *seriesLabels) add(name, value string) string {
	if r := checkLabel(s.scheme, name, value); r != "" {
		return r
	}
	if s.n > 0 {
		switch c := strings.Compare(name, s.prev); {
		case c == 0:
			return fmt.Sprintf("duplicate label name %q", clip(name))
		case c < 0:
			return fmt.Sprintf("labels not sorted: %q after %q", clip(name), clip(s.prev))
		}
	}
	if name == labels.MetricName && value != "" {
		if !s.scheme.IsValidMetricName(value) {
			return fmt.Sprintf("invalid metric name %q", clip(value))
		}
		s.metric = true
	}
	s.prev = name
	s.n++
	if value != "" {
		s.ls = append(s.ls, wireLabel{Name: name, Value: value})
	}
	return ""
}

// set returns the series' labels (sorted by name, names distinct, no empty
// value), or a reason.
func (s *seriesLabels) set() ([]wireLabel, string) {
	switch {
	case s.n == 0:
		return nil, "series has no labels"
	case !s.metric:
		return nil, "missing __name__ label"
	}
	return s.ls, ""
}

// hash returns the SeriesHash of the labels added: wire, the hash of wire
// (every label on the wire, empty values included), when the labels added
// are exactly wire's, else one computed with h.
func (s *seriesLabels) hash(wire []wireLabel, wireHash uint64, wireHashed bool, h *promsample.SeriesHasher) uint64 {
	// n counts every label added, so equal lengths with none dropped mean
	// the same labels: wire is the leading run of label fields, and they
	// were added first, in order.
	if wireHashed && s.n == len(wire) && len(s.ls) == s.n {
		return wireHash
	}
	h.Reset()
	for _, l := range s.ls {
		h.Add(l.Name, l.Value)
	}
	return h.Sum()
}

// checkLabel checks one name and value, order aside.
func checkLabel(scheme model.ValidationScheme, name, value string) string {
	if name == "" {
		return "empty label name"
	}
	if !scheme.IsValidLabelName(name) {
		return fmt.Sprintf("invalid label name %q", clip(name))
	}
	if !utf8.ValidString(value) {
		return fmt.Sprintf("invalid UTF-8 in value of label %q", clip(name))
	}
	return ""
}

// exemplarLabels builds the labels of an exemplar: names and values are
// checked as for series, empty values dropped, but the order is normalized
// (sorted) rather than enforced, and no __name__ is needed. Duplicates are
// refused.
type exemplarLabels struct {
	b      labels.ScratchBuilder
	scheme model.ValidationScheme
}

func newExemplarLabels() *exemplarLabels {
	e := &exemplarLabels{b: labels.NewScratchBuilder(4)}
	e.b.SetUnsafeAdd(true)
	return e
}

func (e *exemplarLabels) reset(scheme model.ValidationScheme) {
	e.b.Reset()
	e.scheme = scheme
}

func (e *exemplarLabels) add(name, value string) string {
	if r := checkLabel(e.scheme, name, value); r != "" {
		return "exemplar: " + r
	}
	if value != "" {
		e.b.Add(name, value)
	}
	return ""
}

func (e *exemplarLabels) labels() (labels.Labels, string) {
	e.b.Sort()
	ls := e.b.Labels()
	if name, dup := ls.HasDuplicateLabelNames(); dup {
		return labels.EmptyLabels(), fmt.Sprintf("exemplar: duplicate label name %q", clip(name))
	}
	return ls, ""
}

// clip bounds a client-supplied string quoted into a reason.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// metricType maps the 1.0 and 2.0 metadata type enums (identical numbering:
// 0 unknown/unspecified, 1 counter ... 7 stateset) to the Prometheus HTTP API
// spelling. Unknown numbers (a newer sender) become "unknown".
func metricType(t int32) string {
	switch t {
	case 1:
		return string(model.MetricTypeCounter)
	case 2:
		return string(model.MetricTypeGauge)
	case 3:
		return string(model.MetricTypeHistogram)
	case 4:
		return string(model.MetricTypeGaugeHistogram)
	case 5:
		return string(model.MetricTypeSummary)
	case 6:
		return string(model.MetricTypeInfo)
	case 7:
		return string(model.MetricTypeStateset)
	default:
		return string(model.MetricTypeUnknown)
	}
}
