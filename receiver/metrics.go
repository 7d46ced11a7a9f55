package receiver

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of a Handler. Element counters:
//
//   - received: elements of requests that decoded and validated (handed to
//     the Sink);
//   - written: elements the Sink reported committed (2xx answered);
//   - rejected{reason}: elements of valid requests the Sink refused.
//
// A request refused before it decoded (bad method, type, size, body or
// series) has no trustworthy element count: it shows in
// requests_refused_total{reason} only.
type metrics struct {
	requests  *prometheus.CounterVec   // protocol, code
	refused   *prometheus.CounterVec   // reason
	received  *prometheus.CounterVec   // kind
	written   *prometheus.CounterVec   // kind
	rejected  *prometheus.CounterVec   // kind, reason
	duration  *prometheus.HistogramVec // protocol
	sizeBytes *prometheus.HistogramVec // stage: compressed | decoded
}

const (
	kindSample    = "sample"
	kindHistogram = "histogram"
	kindExemplar  = "exemplar"
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "dendro", "receiver"
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "requests_total",
			Help: "Remote-write requests answered, by protocol and HTTP status code.",
		}, []string{"protocol", "code"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "requests_refused_total",
			Help: "Remote-write requests answered with an error, by reason.",
		}, []string{"reason"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "received_total",
			Help: "Samples, histograms and exemplars of valid requests, handed to the archive.",
		}, []string{"kind"}),
		written: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "written_total",
			Help: "Samples, histograms and exemplars committed and acknowledged.",
		}, []string{"kind"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "rejected_total",
			Help: "Samples, histograms and exemplars of valid requests that were not committed, by reason.",
		}, []string{"kind", "reason"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "request_duration_seconds",
			Help:                           "Time from request start to answer, commit included.",
			Buckets:                        []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
			NativeHistogramBucketFactor:    1.1,
			NativeHistogramMaxBucketNumber: 100,
		}, []string{"protocol"}),
		sizeBytes: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "request_size_bytes",
			Help:    "Request body size, as sent (compressed) and after snappy (decoded).",
			Buckets: prometheus.ExponentialBuckets(256, 4, 11), // 256 B .. 256 MiB
		}, []string{"stage"}),
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.requests, m.refused, m.received, m.written, m.rejected, m.duration, m.sizeBytes} {
		errs = append(errs, reg.Register(c))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) addCounts(v *prometheus.CounterVec, c Counts, extra ...string) {
	add := func(kind string, n int) {
		if n > 0 {
			v.WithLabelValues(append([]string{kind}, extra...)...).Add(float64(n))
		}
	}
	add(kindSample, c.Samples)
	add(kindHistogram, c.Histograms)
	add(kindExemplar, c.Exemplars)
}
