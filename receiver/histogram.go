package receiver

import (
	"fmt"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// Native histograms are converted with the prompb/writev2 helpers, then
// normalized and validated as Prometheus's receiver does
// (storage/remote/write_handler.go): an exponential schema in the reserved
// range above 8 (9..52) is reduced to 8, then Validate must pass. Custom
// buckets (schema -53, NHCB) are validated with their CustomValues.

func histogramV1(h *prompb.Histogram) (promsample.Histogram, string) {
	if h.IsFloatHistogram() {
		fh := h.ToFloatHistogram()
		return promsample.Histogram{T: h.Timestamp, FH: fh}, checkFloatHistogram(fh)
	}
	ih := h.ToIntHistogram()
	return promsample.Histogram{T: h.Timestamp, H: ih}, checkIntHistogram(ih)
}

func histogramV2(h *writev2.Histogram) (promsample.Histogram, string) {
	if h.IsFloatHistogram() {
		fh := h.ToFloatHistogram()
		return promsample.Histogram{T: h.Timestamp, FH: fh}, checkFloatHistogram(fh)
	}
	ih := h.ToIntHistogram()
	return promsample.Histogram{T: h.Timestamp, H: ih}, checkIntHistogram(ih)
}

func reducible(schema int32) bool {
	return histogram.IsExponentialSchemaReserved(schema) && schema > histogram.ExponentialSchemaMax
}

func checkIntHistogram(h *histogram.Histogram) string {
	return checkHistogram(&h.Schema, h.Validate, func() error { return h.ReduceResolution(histogram.ExponentialSchemaMax) })
}

func checkFloatHistogram(h *histogram.FloatHistogram) string {
	return checkHistogram(&h.Schema, h.Validate, func() error { return h.ReduceResolution(histogram.ExponentialSchemaMax) })
}

// checkHistogram validates one histogram of either kind through its
// schema field, Validate and ReduceResolution to ExponentialSchemaMax.
func checkHistogram(schema *int32, validate, reduce func() error) string {
	if reducible(*schema) {
		// ReduceResolution trusts spans and buckets to agree; validate the
		// structure at the largest real schema first so bad input cannot
		// make it index out of range.
		s := *schema
		*schema = histogram.ExponentialSchemaMax
		if err := validate(); err != nil {
			return fmt.Sprintf("invalid native histogram: %v", err)
		}
		*schema = s
		if err := reduce(); err != nil {
			return fmt.Sprintf("invalid native histogram: %v", err)
		}
	}
	if err := validate(); err != nil {
		return fmt.Sprintf("invalid native histogram: %v", err)
	}
	return ""
}
