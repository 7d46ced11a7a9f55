package forward

import (
	"encoding/binary"
	"math"
	"math/bits"
	"slices"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// The wire encoders: a request as remote-write 1.0 (prometheus.WriteRequest)
// or 2.0 (io.prometheus.write.v2.Request) protobuf, written by hand into a
// buffer the shard reuses. Two reasons not to build the gogo structs and
// Marshal them: a batch is then one allocation-free pass, and a float's
// bits always go out. The generated marshaller omits a double equal to 0,
// which -0 is, so the receiver decodes +0; here the value field is written
// whenever its bits are not all zero, and a receiver that reads it keeps
// -0 (proto3 decoders accept a default value written explicitly). Native
// histograms go through the generated types (prompb.FromIntHistogram and
// writev2's), which are few and whose marshaller is exact for them.

// request is one batch as a shard sends it: each series once, its data
// from every piece of the batch in order.
type request struct {
	series []reqSeries
	// meta is what a remote-write 1.0 request carries as
	// WriteRequest.metadata (2.0 carries it per series).
	meta                          []promsample.Metadata
	samples, histograms, exemplar int
}

type reqSeries struct {
	s *seriesState // its labels (immutable)
	// meta is the series' metadata as of its first piece (nil: none).
	meta       *promsample.Metadata
	samples    []promsample.Sample
	histograms []promsample.Histogram
	exemplars  []promsample.Exemplar
}

func (r *request) reset() {
	clear(r.series)
	r.series = r.series[:0]
	r.meta = r.meta[:0]
	r.samples, r.histograms, r.exemplar = 0, 0, 0
}

// items is the number of samples, histograms and exemplars r carries.
func (r *request) items() int { return r.samples + r.histograms + r.exemplar }

// Protobuf wire types.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
)

func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

func tagLen(field int) int { return uvarintLen(uint64(field) << 3) }

func appendTag(b []byte, field, wire int) []byte {
	return binary.AppendUvarint(b, uint64(field)<<3|uint64(wire))
}

// bytesFieldLen is the size of a length-delimited field of n bytes.
func bytesFieldLen(field, n int) int { return tagLen(field) + uvarintLen(uint64(n)) + n }

func appendBytesHeader(b []byte, field, n int) []byte {
	return binary.AppendUvarint(appendTag(b, field, wireBytes), uint64(n))
}

func appendStringField(b []byte, field int, s string) []byte {
	return append(appendBytesHeader(b, field, len(s)), s...)
}

// A double field is written whenever its bits are not all zero: -0 goes
// out (see above); +0 is proto3's default and may be omitted.
func doubleFieldLen(field int, v float64) int {
	if math.Float64bits(v) == 0 {
		return 0
	}
	return tagLen(field) + 8
}

func appendDoubleField(b []byte, field int, v float64) []byte {
	if math.Float64bits(v) == 0 {
		return b
	}
	return binary.LittleEndian.AppendUint64(appendTag(b, field, wireFixed64), math.Float64bits(v))
}

// int64 fields are plain varints of the two's complement (a negative one
// takes ten bytes), as protobuf's int64.
func int64FieldLen(field int, v int64) int {
	if v == 0 {
		return 0
	}
	return tagLen(field) + uvarintLen(uint64(v))
}

func appendInt64Field(b []byte, field int, v int64) []byte {
	if v == 0 {
		return b
	}
	return binary.AppendUvarint(appendTag(b, field, wireVarint), uint64(v))
}

// ---- remote-write 1.0 ----

// prometheus.WriteRequest: timeseries = 1, metadata = 3.
// TimeSeries: labels = 1, samples = 2, exemplars = 3, histograms = 4.
// Label: name = 1, value = 2. Sample: value = 1, timestamp = 2.
// Exemplar: labels = 1, value = 2, timestamp = 3.
// MetricMetadata: type = 1, metric_family_name = 2, help = 4, unit = 5.

func labelLen(name, value string) int {
	n := bytesFieldLen(1, len(name))
	if value != "" {
		n += bytesFieldLen(2, len(value))
	}
	return n
}

func appendLabel(b []byte, field int, name, value string) []byte {
	b = appendBytesHeader(b, field, labelLen(name, value))
	b = appendStringField(b, 1, name)
	if value != "" {
		b = appendStringField(b, 2, value)
	}
	return b
}

func labelsLen(field int, ls labels.Labels) int {
	n := 0
	ls.Range(func(l labels.Label) { n += bytesFieldLen(field, labelLen(l.Name, l.Value)) })
	return n
}

func appendLabels(b []byte, field int, ls labels.Labels) []byte {
	ls.Range(func(l labels.Label) { b = appendLabel(b, field, l.Name, l.Value) })
	return b
}

func sampleLen(s promsample.Sample) int {
	return doubleFieldLen(1, s.V) + int64FieldLen(2, s.T)
}

// Samples are most of a request, so they have a loop of their own: a
// Sample message is at most 9 + 11 bytes, so its field is a one-byte tag,
// a one-byte length, and the message (see appendDoubleField and
// appendInt64Field for what is omitted).
const (
	tagSampleField = 2<<3 | wireBytes   // TimeSeries.samples
	tagSampleValue = 1<<3 | wireFixed64 // Sample.value
	tagSampleTS    = 2<<3 | wireVarint  // Sample.timestamp
)

func samplesV1Len(ss []promsample.Sample) int {
	n := 0
	for _, smp := range ss {
		n += 2 + sampleLen(smp)
	}
	return n
}

func appendSamplesV1(dst []byte, ss []promsample.Sample) []byte {
	for _, smp := range ss {
		dst = append(dst, tagSampleField, byte(sampleLen(smp)))
		if v := math.Float64bits(smp.V); v != 0 {
			dst = binary.LittleEndian.AppendUint64(append(dst, tagSampleValue), v)
		}
		if smp.T != 0 {
			dst = binary.AppendUvarint(append(dst, tagSampleTS), uint64(smp.T))
		}
	}
	return dst
}

func exemplarV1Len(e promsample.Exemplar) int {
	return labelsLen(1, e.Labels) + doubleFieldLen(2, e.V) + int64FieldLen(3, e.T)
}

// rw1Encoder encodes remote-write 1.0 requests, reusing its scratch.
type rw1Encoder struct {
	hists []prompb.Histogram
	sizes []int
}

// encode appends r as a prometheus.WriteRequest to dst.
func (e *rw1Encoder) encode(dst []byte, r *request) []byte {
	for i := range r.series {
		rs := &r.series[i]
		e.hists = e.hists[:0]
		for _, h := range rs.histograms {
			e.hists = append(e.hists, histogramV1(h))
		}
		n := len(rs.s.rw1Labels) + samplesV1Len(rs.samples)
		for _, ex := range rs.exemplars {
			n += bytesFieldLen(3, exemplarV1Len(ex))
		}
		e.sizes = e.sizes[:0]
		for j := range e.hists {
			sz := e.hists[j].Size()
			e.sizes = append(e.sizes, sz)
			n += bytesFieldLen(4, sz)
		}
		dst = slices.Grow(dst, bytesFieldLen(1, n))
		dst = appendBytesHeader(dst, 1, n)
		dst = append(dst, rs.s.rw1Labels...)
		dst = appendSamplesV1(dst, rs.samples)
		for _, ex := range rs.exemplars {
			dst = appendBytesHeader(dst, 3, exemplarV1Len(ex))
			dst = appendLabels(dst, 1, ex.Labels)
			dst = appendDoubleField(dst, 2, ex.V)
			dst = appendInt64Field(dst, 3, ex.T)
		}
		for j := range e.hists {
			dst = appendBytesHeader(dst, 4, e.sizes[j])
			dst = appendMarshaled(dst, &e.hists[j], e.sizes[j])
		}
	}
	for _, m := range r.meta {
		t := int64(metricTypeV1(m.Type))
		n := int64FieldLen(1, t) + bytesFieldLen(2, len(m.MetricFamily))
		if m.Help != "" {
			n += bytesFieldLen(4, len(m.Help))
		}
		if m.Unit != "" {
			n += bytesFieldLen(5, len(m.Unit))
		}
		dst = appendBytesHeader(dst, 3, n)
		dst = appendInt64Field(dst, 1, t)
		dst = appendStringField(dst, 2, m.MetricFamily)
		if m.Help != "" {
			dst = appendStringField(dst, 4, m.Help)
		}
		if m.Unit != "" {
			dst = appendStringField(dst, 5, m.Unit)
		}
	}
	clear(e.hists)
	return dst
}

// marshaler is a gogo-generated message.
type marshaler interface {
	MarshalToSizedBuffer([]byte) (int, error)
}

// appendMarshaled appends m, whose Size is size, to dst.
func appendMarshaled(dst []byte, m marshaler, size int) []byte {
	at := len(dst)
	dst = append(dst, make([]byte, size)...)
	// The generated code writes backwards from the end of the slice it
	// is given and cannot fail for a message of its own Size.
	m.MarshalToSizedBuffer(dst[at:])
	return dst
}

func histogramV1(h promsample.Histogram) prompb.Histogram {
	if h.FH != nil {
		return prompb.FromFloatHistogram(h.T, h.FH)
	}
	return prompb.FromIntHistogram(h.T, h.H)
}

func metricTypeV1(t promsample.MetricType) prompb.MetricMetadata_MetricType {
	switch t {
	case "counter":
		return prompb.MetricMetadata_COUNTER
	case "gauge":
		return prompb.MetricMetadata_GAUGE
	case "histogram":
		return prompb.MetricMetadata_HISTOGRAM
	case "gaugehistogram":
		return prompb.MetricMetadata_GAUGEHISTOGRAM
	case "summary":
		return prompb.MetricMetadata_SUMMARY
	case "info":
		return prompb.MetricMetadata_INFO
	case "stateset":
		return prompb.MetricMetadata_STATESET
	}
	return prompb.MetricMetadata_UNKNOWN
}

func metricTypeV2(t promsample.MetricType) writev2.Metadata_MetricType {
	switch t {
	case "counter":
		return writev2.Metadata_METRIC_TYPE_COUNTER
	case "gauge":
		return writev2.Metadata_METRIC_TYPE_GAUGE
	case "histogram":
		return writev2.Metadata_METRIC_TYPE_HISTOGRAM
	case "gaugehistogram":
		return writev2.Metadata_METRIC_TYPE_GAUGEHISTOGRAM
	case "summary":
		return writev2.Metadata_METRIC_TYPE_SUMMARY
	case "info":
		return writev2.Metadata_METRIC_TYPE_INFO
	case "stateset":
		return writev2.Metadata_METRIC_TYPE_STATESET
	}
	return writev2.Metadata_METRIC_TYPE_UNSPECIFIED
}

// ---- remote-write 2.0 ----

// io.prometheus.write.v2.Request: symbols = 4, timeseries = 5. Fields may
// come in any order, so the symbol table is written after the series that
// fill it. TimeSeries: labels_refs = 1 (packed), samples = 2, histograms
// = 3, exemplars = 4, metadata = 5. Sample: value = 1, timestamp = 2.
// Exemplar: labels_refs = 1, value = 2, timestamp = 3. Metadata: type = 1,
// help_ref = 3, unit_ref = 4. A TimeSeries holds samples or histograms,
// never both: a series with both goes out as two.

// rw2Encoder encodes remote-write 2.0 requests, reusing its scratch.
type rw2Encoder struct {
	syms  map[string]uint32
	order []string
	refs  []uint32
	exRef [][]uint32
	hists []writev2.Histogram
	sizes []int
}

func (e *rw2Encoder) sym(s string) uint32 {
	if id, ok := e.syms[s]; ok {
		return id
	}
	id := uint32(len(e.order))
	e.syms[s] = id
	e.order = append(e.order, s)
	return id
}

func (e *rw2Encoder) labelRefs(dst []uint32, ls labels.Labels) []uint32 {
	ls.Range(func(l labels.Label) { dst = append(dst, e.sym(l.Name), e.sym(l.Value)) })
	return dst
}

func packedLen(refs []uint32) int {
	n := 0
	for _, r := range refs {
		n += uvarintLen(uint64(r))
	}
	return n
}

func appendPacked(b []byte, field int, refs []uint32) []byte {
	if len(refs) == 0 {
		return b
	}
	b = appendBytesHeader(b, field, packedLen(refs))
	for _, r := range refs {
		b = binary.AppendUvarint(b, uint64(r))
	}
	return b
}

func packedFieldLen(field int, refs []uint32) int {
	if len(refs) == 0 {
		return 0
	}
	return bytesFieldLen(field, packedLen(refs))
}

// encode appends r as an io.prometheus.write.v2.Request to dst.
func (e *rw2Encoder) encode(dst []byte, r *request) []byte {
	if e.syms == nil {
		e.syms = map[string]uint32{}
	}
	clear(e.syms)
	e.order = e.order[:0]
	e.sym("") // symbols[0] MUST be ""
	for i := range r.series {
		rs := &r.series[i]
		e.refs = e.labelRefs(e.refs[:0], rs.s.lbls)
		var mt int64
		var help, unit uint32
		if m := rs.meta; m != nil {
			mt = int64(metricTypeV2(m.Type))
			if m.Help != "" {
				help = e.sym(m.Help)
			}
			if m.Unit != "" {
				unit = e.sym(m.Unit)
			}
		}
		metaLen := int64FieldLen(1, mt) + int64FieldLen(3, int64(help)) + int64FieldLen(4, int64(unit))
		for len(e.exRef) < len(rs.exemplars) {
			e.exRef = append(e.exRef, nil)
		}
		exLen := 0
		for j, ex := range rs.exemplars {
			e.exRef[j] = e.labelRefs(e.exRef[j][:0], ex.Labels)
			exLen += bytesFieldLen(4, packedFieldLen(1, e.exRef[j])+doubleFieldLen(2, ex.V)+int64FieldLen(3, ex.T))
		}
		head := packedFieldLen(1, e.refs)
		if metaLen > 0 {
			head += bytesFieldLen(5, metaLen)
		}
		writeMeta := func(b []byte) []byte {
			if metaLen == 0 {
				return b
			}
			b = appendBytesHeader(b, 5, metaLen)
			b = appendInt64Field(b, 1, mt)
			b = appendInt64Field(b, 3, int64(help))
			return appendInt64Field(b, 4, int64(unit))
		}
		writeExemplars := func(b []byte) []byte {
			for j, ex := range rs.exemplars {
				b = appendBytesHeader(b, 4, packedFieldLen(1, e.exRef[j])+doubleFieldLen(2, ex.V)+int64FieldLen(3, ex.T))
				b = appendPacked(b, 1, e.exRef[j])
				b = appendDoubleField(b, 2, ex.V)
				b = appendInt64Field(b, 3, ex.T)
			}
			return b
		}
		// Exemplars ride with the floats, else with the histograms, else
		// alone.
		exWithFloats := len(rs.samples) > 0 || len(rs.histograms) == 0
		if len(rs.samples) > 0 || len(rs.histograms) == 0 {
			n := head + samplesV1Len(rs.samples)
			if exWithFloats {
				n += exLen
			}
			dst = appendBytesHeader(dst, 5, n)
			dst = appendPacked(dst, 1, e.refs)
			dst = appendSamplesV1(dst, rs.samples) // the same Sample, the same field
			if exWithFloats {
				dst = writeExemplars(dst)
			}
			dst = writeMeta(dst)
		}
		if len(rs.histograms) > 0 {
			e.hists, e.sizes = e.hists[:0], e.sizes[:0]
			n := head
			for _, h := range rs.histograms {
				hm := histogramV2(h)
				e.hists = append(e.hists, hm)
				sz := hm.Size()
				e.sizes = append(e.sizes, sz)
				n += bytesFieldLen(3, sz)
			}
			if !exWithFloats {
				n += exLen
			}
			dst = appendBytesHeader(dst, 5, n)
			dst = appendPacked(dst, 1, e.refs)
			for j := range e.hists {
				dst = appendBytesHeader(dst, 3, e.sizes[j])
				dst = appendMarshaled(dst, &e.hists[j], e.sizes[j])
			}
			if !exWithFloats {
				dst = writeExemplars(dst)
			}
			dst = writeMeta(dst)
			clear(e.hists)
		}
	}
	for _, s := range e.order {
		dst = appendStringField(dst, 4, s)
	}
	return dst
}

func histogramV2(h promsample.Histogram) writev2.Histogram {
	if h.FH != nil {
		return writev2.FromFloatHistogram(0, h.T, h.FH)
	}
	return writev2.FromIntHistogram(0, h.T, h.H)
}
