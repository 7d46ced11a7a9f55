package promsample

import (
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
)

// The data model the receiver decodes remote-write requests into and the row
// codec stores. Timestamps here are sample timestamps: int64 Unix
// milliseconds, as Prometheus sends them. (A row's archive ts is something
// else: the receipt time in Unix nanoseconds, assigned by the archive writer.)

// Sample is one float sample. V keeps its exact bits: stale markers
// (0x7ff0000000000002) and every other NaN payload must round-trip.
type Sample struct {
	T int64 // Unix milliseconds
	V float64
}

// Histogram is one native histogram sample: exactly one of H and FH is set.
type Histogram struct {
	T  int64 // Unix milliseconds
	H  *histogram.Histogram
	FH *histogram.FloatHistogram
}

// Exemplar is one exemplar of a series.
type Exemplar struct {
	Labels labels.Labels
	T      int64 // Unix milliseconds; 0 when the sender gave none
	V      float64
}

// Series is one series of a request with everything the request carried
// for it.
type Series struct {
	Labels     labels.Labels // sorted, valid; includes __name__
	Samples    []Sample
	Histograms []Histogram
	Exemplars  []Exemplar
}

// MetricType is the metadata type of a metric family, spelled as in the
// Prometheus HTTP API ("counter", "gauge", "histogram", "gaugehistogram",
// "summary", "info", "stateset", "unknown").
type MetricType string

// Metadata describes one metric family.
type Metadata struct {
	MetricFamily string
	Type         MetricType
	Help         string
	Unit         string
}

// Batch is one request's data for one (source, stream): the unit a row
// holds. Every row decodes by itself: it carries the label sets of its
// series.
type Batch struct {
	Series   []Series
	Metadata []Metadata
}
