package receiver

import (
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/prompb"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

// v1Decoder decodes a prompb.WriteRequest straight from the wire into a
// Request, validating as it goes. Labels and samples, the hot path, are read
// by hand (no per-label string, one slab per request for samples);
// histograms, exemplar values and metadata, rarer, go through the gogo
// decoders of their sub-messages. Pooled by the Decoder: only the scratch
// builders are reused, never the slices handed out.
type v1Decoder struct {
	sl    *seriesLabels
	el    *exemplarLabels
	x     *seriesindex.Index // the Decoder's; shared
	slabs *slabPool          // the Decoder's, shared by its v1Decoders
	msg   []byte             // snappy output, reused (see msgBuf)

	scheme model.ValidationScheme
	req    *Request
	// Slabs of the request, sliced per series at the end (appends may move
	// them, so series keep offsets until then).
	samples []promsample.Sample
	hists   []promsample.Histogram
	exs     []promsample.Exemplar
	offs    []seriesOffsets
	// prev is the request's last series so far (0 at its start): the
	// index predicts the next one from it (seriesindex.Index.Next).
	prev   seriesindex.Ref
	wire   []wireLabel // scratch: a series' label fields
	hasher promsample.SeriesHasher
	// wireHash is the SeriesHash of wire when wireHashed (knownSeries):
	// the hash of a new series whose labels are exactly wire.
	wireHash   uint64
	wireHashed bool
	// wireOK: every label field of the leading run parsed, so wire is
	// the series' labels up to the first other field.
	wireOK bool

	// Series and samples per KiB of the last message decoded (see sizes).
	seriesPerKiB, samplesPerKiB float64
}

type seriesOffsets struct{ s0, s1, h0, h1, e0, e1 int }

func newV1Decoder(slabs *slabPool, x *seriesindex.Index) *v1Decoder {
	return &v1Decoder{sl: newSeriesLabels(), el: newExemplarLabels(), slabs: slabs, x: x}
}

// msgBuf returns a buffer of at least n bytes for a decoded message. The
// buffer is kept for the next message, with 1/8 headroom so that requests of
// about the same size reuse it, unless it exceeds maxPooledBuf.
func (v *v1Decoder) msgBuf(n int) []byte {
	if cap(v.msg) >= n {
		return v.msg[:n]
	}
	b := make([]byte, n, n+n/8)
	if cap(b) <= maxPooledBuf {
		v.msg = b
	} else {
		v.msg = nil
	}
	return b
}

func (v *v1Decoder) decode(msg []byte, utf8Names bool) (*Request, error) {
	v.scheme = model.LegacyValidation
	if utf8Names {
		v.scheme = model.UTF8Validation
	}
	nSeries, nSamples := v.sizes(msg)
	sl := v.slabs.get(nSeries, nSamples)
	v.req = &Request{Protocol: ProtocolV1, Series: sl.series, slab: sl}
	v.samples, v.hists, v.exs, v.offs = sl.samples, nil, nil, v.offs[:0]
	v.prev = 0
	defer func() {
		v.req, v.samples, v.hists, v.exs, v.prev = nil, nil, nil, nil, 0
		clear(v.wire) // strings alias the message
	}()

	idx, midx := 0, 0 // series and metadata index in wire order, for reasons
	for b := msg; len(b) > 0; {
		num, typ, rest, err := field(b)
		if err != nil {
			return nil, malformed("WriteRequest", err)
		}
		switch {
		case num == 1 && typ == wireBytes: // timeseries
			var ts []byte
			if ts, b, err = bytesField(rest); err != nil {
				return nil, malformed("WriteRequest.timeseries", err)
			}
			if err := v.series(idx, ts); err != nil {
				return nil, err
			}
			idx++
		case num == 3 && typ == wireBytes: // metadata
			var mb []byte
			if mb, b, err = bytesField(rest); err != nil {
				return nil, malformed("WriteRequest.metadata", err)
			}
			if err := v.metadata(midx, mb); err != nil {
				return nil, err
			}
			midx++
		case num == 1 || num == 3:
			return nil, malformed("WriteRequest", wrongType("WriteRequest", num, typ))
		case (num == 4 || num == 5) && typ == wireBytes:
			// symbols and timeseries of io.prometheus.write.v2.Request:
			// unknown to 1.0, a 1.0 decoder would skip them and report
			// success for a request it silently dropped.
			return nil, &InvalidError{Series: -1, Reason: "body holds an io.prometheus.write.v2.Request but Content-Type says prometheus.WriteRequest"}
		default:
			if b, err = skip(typ, rest); err != nil {
				return nil, malformed("WriteRequest", err)
			}
		}
	}

	if len(msg) > 0 {
		v.seriesPerKiB = float64(len(v.req.Series)) * 1024 / float64(len(msg))
		v.samplesPerKiB = float64(len(v.samples)) * 1024 / float64(len(msg))
	}
	req := v.req
	// The slab keeps what the appends grew to, for the next request.
	sl.series, sl.samples = req.Series, v.samples
	for i, o := range v.offs {
		s := &req.Series[i]
		s.Samples = v.samples[o.s0:o.s1:o.s1]
		s.Histograms = v.hists[o.h0:o.h1:o.h1]
		s.Exemplars = v.exs[o.e0:o.e1:o.e1]
		if o.s0 == o.s1 {
			s.Samples = nil
		}
		if o.h0 == o.h1 {
			s.Histograms = nil
		}
		if o.e0 == o.e1 {
			s.Exemplars = nil
		}
	}
	req.Counts = Counts{Samples: len(v.samples), Histograms: len(v.hists), Exemplars: len(v.exs)}
	return req, nil
}

// sizes returns the capacities of a message's series and sample slabs.
// Growing them by appends was a fifth of the decode time, and counting
// them exactly in a skip-only pass a twentieth of the server's CPU; so
// after its first message a decoder estimates them from the density of the
// last one (a sender's requests look alike), with 1/8 headroom. A wrong
// guess costs one growth, or spare capacity for the request's lifetime.
func (v *v1Decoder) sizes(msg []byte) (series, samples int) {
	if v.seriesPerKiB == 0 && v.samplesPerKiB == 0 {
		return countV1(msg)
	}
	kib := float64(len(msg)) / 1024
	// A TimeSeries or Sample field takes at least 2 bytes on the wire: no
	// estimate exceeds what the message could hold.
	series = min(int(v.seriesPerKiB*kib*1.125)+1, len(msg)/2+1)
	samples = min(int(v.samplesPerKiB*kib*1.125)+1, len(msg)/2+1)
	return series, samples
}

// countV1 counts the TimeSeries of a WriteRequest and their samples,
// stopping quietly at the first malformed byte (the decode reports it).
func countV1(msg []byte) (series, samples int) {
	for b := msg; len(b) > 0; {
		num, typ, rest, err := field(b)
		if err != nil {
			return series, samples
		}
		if num != 1 || typ != wireBytes {
			if b, err = skip(typ, rest); err != nil {
				return series, samples
			}
			continue
		}
		var ts []byte
		if ts, b, err = bytesField(rest); err != nil {
			return series, samples
		}
		series++
		for len(ts) > 0 {
			num, typ, rest, err := field(ts)
			if err != nil {
				break
			}
			if num == 2 && typ == wireBytes {
				samples++
			}
			if ts, err = skip(typ, rest); err != nil {
				break
			}
		}
	}
	return series, samples
}

func malformed(msg string, err error) error {
	return fmt.Errorf("%w: %s: %v", ErrMalformed, msg, err)
}

// errLateLabels: a label field after the leading label fields; the series
// is decoded again, validating all of its labels.
var errLateLabels = errors.New("label after the label prefix")

// series decodes TimeSeries number idx.
//
// The label fields a sender writes first, contiguous (Prometheus always
// does), name a series the index may know: the same labels always decode
// to the same valid set, so a series found by them (the one that followed
// the previous series last time, or by hash) skips parsing into labels,
// validating and building them. In the steady state (the same series every
// scrape) that is most of the decode time. Otherwise every label is
// validated and the set added to the index.
func (v *v1Decoder) series(idx int, b []byte) error {
	o := seriesOffsets{s0: len(v.samples), h0: len(v.hists), e0: len(v.exs)}
	n, ref := v.known(b)
	if ref != 0 {
		err := v.seriesFields(idx, b[n:], o, ref)
		if err != errLateLabels {
			v.follow(ref, err)
			return err
		}
		v.samples, v.hists, v.exs = v.samples[:o.s0], v.hists[:o.h0], v.exs[:o.e0]
	}
	v.sl.reset(v.scheme)
	if !v.wireOK {
		return v.seriesFields(idx, b, o, 0)
	}
	// The leading labels are parsed already (wire): they are validated
	// from it, and only the fields after them are read (a new series'
	// labels were parsed twice, the second time through the general path).
	for _, l := range v.wire {
		if r := v.sl.add(l.Name, l.Value); r != "" {
			return invalid(idx, "%s", r)
		}
	}
	return v.seriesFields(idx, b[n:], o, 0)
}

// known reads the leading run of well-formed label fields of a
// TimeSeries b (Prometheus writes every label before any other field) and
// returns its length in bytes and the known series they name, or 0. One
// pass: the run's extent and its labels are read together. A label field
// whose Label does not parse still belongs to the run, but no series is
// known by it.
func (v *v1Decoder) known(b []byte) (n int, ref seriesindex.Ref) {
	v.wire, v.wireHashed, v.wireOK = v.wire[:0], false, false
	ok := true
	for rest := b; len(rest) > 0; {
		// What every sender writes: a Label field under 128 bytes holding
		// a name, then a value, each under 128 bytes (shortLabel). Read
		// here without the general path's calls: they were a third of a
		// known series' decode.
		if len(rest) >= 2 && rest[0] == labelKey && rest[1] < 0x80 && int(rest[1])+2 <= len(rest) {
			if name, value, short := shortLabel(rest[2 : 2+int(rest[1])]); short {
				rest = rest[2+int(rest[1]):]
				n = len(b) - len(rest)
				v.wire = append(v.wire, wireLabel{Name: name, Value: value})
				continue
			}
		}
		num, typ, r, err := field(rest)
		if err != nil || num != 1 || typ != wireBytes {
			break
		}
		var sub []byte
		if sub, rest, err = bytesField(r); err != nil {
			break
		}
		n = len(b) - len(rest)
		if !ok {
			continue
		}
		name, value, err := label(sub)
		if err != nil {
			ok = false
			continue
		}
		v.wire = append(v.wire, wireLabel{Name: name, Value: value})
	}
	if !ok {
		return n, 0
	}
	v.wireOK = true
	ref, v.wireHash, v.wireHashed = knownSeries(v.x, v.prev, v.wire, v.scheme == model.LegacyValidation, &v.hasher)
	return n, ref
}

// follow records ref as the request's series after v.prev.
func (v *v1Decoder) follow(ref seriesindex.Ref, err error) {
	if err != nil || ref == 0 {
		return
	}
	if v.prev != 0 {
		v.x.SetNext(v.prev, ref)
	}
	v.prev = ref
}

// seriesFields decodes the fields of a TimeSeries. With ref, b follows the
// label prefix and ref names its (known, valid) labels; otherwise v.sl
// holds the labels validated before b (none, when b is the whole
// TimeSeries; the label prefix, when b follows it), the labels in b are
// validated too, and the series is found in, or added to, the index.
func (v *v1Decoder) seriesFields(idx int, b []byte, o seriesOffsets, ref seriesindex.Ref) error {
	known := ref != 0
	for len(b) > 0 {
		num, typ, rest, err := field(b)
		if err != nil {
			return malformed("TimeSeries", err)
		}
		if num >= 1 && num <= 4 && typ != wireBytes {
			return malformed("TimeSeries", wrongType("TimeSeries", num, typ))
		}
		var sub []byte
		switch num {
		case 1, 2, 3, 4:
			if sub, b, err = bytesField(rest); err != nil {
				return malformed("TimeSeries", err)
			}
		default:
			if b, err = skip(typ, rest); err != nil {
				return malformed("TimeSeries", err)
			}
			continue
		}
		switch num {
		case 1: // labels
			if known {
				return errLateLabels
			}
			name, value, err := label(sub)
			if err != nil {
				return malformed("Label", err)
			}
			if r := v.sl.add(name, value); r != "" {
				return invalid(idx, "%s", r)
			}
		case 2: // samples
			s, err := sample(sub)
			if err != nil {
				return malformed("Sample", err)
			}
			v.samples = append(v.samples, s)
		case 3: // exemplars
			e, err := v.exemplar(sub)
			if err != nil {
				return err
			}
			if e.reason != "" {
				return invalid(idx, "%s", e.reason)
			}
			v.exs = append(v.exs, e.Exemplar)
		case 4: // histograms
			var h prompb.Histogram
			if err := h.Unmarshal(sub); err != nil {
				return malformed("Histogram", err)
			}
			ph, r := histogramV1(&h)
			if r != "" {
				return invalid(idx, "%s", r)
			}
			v.hists = append(v.hists, ph)
		}
	}
	o.s1, o.h1, o.e1 = len(v.samples), len(v.hists), len(v.exs)
	empty := o.s0 == o.s1 && o.h0 == o.h1 && o.e0 == o.e1
	if !known {
		ls, r := v.sl.set()
		if r != "" {
			return invalid(idx, "%s", r)
		}
		if empty {
			return nil // nothing to store; labels were still validated
		}
		// v.wire is still this series' leading labels (known ran first).
		ref, _ = v.x.AddLabels(ls, v.sl.hash(v.wire, v.wireHash, v.wireHashed, &v.hasher))
		v.x.SetValidated(ref, v.scheme == model.LegacyValidation)
		v.follow(ref, nil)
	}
	if empty {
		return nil
	}
	v.req.Series = append(v.req.Series, Series{Ref: ref})
	v.offs = append(v.offs, o)
	return nil
}

// labelKey is the key of TimeSeries.labels and of Label.name (field 1,
// length-delimited); labelValueKey that of Label.value (field 2).
const (
	labelKey      = 1<<3 | wireBytes
	labelValueKey = 2<<3 | wireBytes
)

// shortLabel decodes a Label b written as senders write it: its name,
// then its value, each once and under 128 bytes, nothing else. Anything
// else (an empty value left out, fields reordered, repeated or unknown,
// long strings) is not short, and label decodes it; where both decode b,
// they agree.
func shortLabel(b []byte) (name, value string, short bool) {
	if len(b) < 4 || b[0] != labelKey || b[1] >= 0x80 {
		return "", "", false
	}
	nl := int(b[1])
	if 4+nl > len(b) || b[2+nl] != labelValueKey || b[3+nl] >= 0x80 || 4+nl+int(b[3+nl]) != len(b) {
		return "", "", false
	}
	return yolo(b[2 : 2+nl]), yolo(b[4+nl:]), true
}

// label decodes a Label; the strings alias b.
func label(b []byte) (name, value string, err error) {
	for len(b) > 0 {
		num, typ, rest, err := field(b)
		if err != nil {
			return "", "", err
		}
		switch {
		case (num == 1 || num == 2) && typ == wireBytes:
			var s []byte
			if s, b, err = bytesField(rest); err != nil {
				return "", "", err
			}
			if num == 1 {
				name = yolo(s)
			} else {
				value = yolo(s)
			}
		case num == 1 || num == 2:
			return "", "", wrongType("Label", num, typ)
		default:
			if b, err = skip(typ, rest); err != nil {
				return "", "", err
			}
		}
	}
	return name, value, nil
}

// sample decodes a Sample, keeping the value's bits.
func sample(b []byte) (promsample.Sample, error) {
	var s promsample.Sample
	for len(b) > 0 {
		num, typ, rest, err := field(b)
		if err != nil {
			return s, err
		}
		switch {
		case num == 1 && typ == wireFixed64:
			var bits uint64
			if bits, b, err = fixed64(rest); err != nil {
				return s, err
			}
			s.V = math.Float64frombits(bits)
		case num == 2 && typ == wireVarint:
			t, n, err := varint(rest)
			if err != nil {
				return s, err
			}
			s.T, b = int64(t), rest[n:]
		case num == 1 || num == 2:
			return s, wrongType("Sample", num, typ)
		default:
			if b, err = skip(typ, rest); err != nil {
				return s, err
			}
		}
	}
	return s, nil
}

type exemplarResult struct {
	promsample.Exemplar
	reason string
}

// exemplar decodes an Exemplar; a validation failure is in reason.
func (v *v1Decoder) exemplar(b []byte) (exemplarResult, error) {
	var e exemplarResult
	v.el.reset(v.scheme)
	for len(b) > 0 {
		num, typ, rest, err := field(b)
		if err != nil {
			return e, malformed("Exemplar", err)
		}
		switch {
		case num == 1 && typ == wireBytes:
			var sub []byte
			if sub, b, err = bytesField(rest); err != nil {
				return e, malformed("Exemplar", err)
			}
			name, value, err := label(sub)
			if err != nil {
				return e, malformed("Exemplar.labels", err)
			}
			if r := v.el.add(name, value); r != "" && e.reason == "" {
				e.reason = r
			}
		case num == 2 && typ == wireFixed64:
			var bits uint64
			if bits, b, err = fixed64(rest); err != nil {
				return e, malformed("Exemplar", err)
			}
			e.V = math.Float64frombits(bits)
		case num == 3 && typ == wireVarint:
			t, n, err := varint(rest)
			if err != nil {
				return e, malformed("Exemplar", err)
			}
			e.T, b = int64(t), rest[n:]
		case num >= 1 && num <= 3:
			return e, malformed("Exemplar", wrongType("Exemplar", num, typ))
		default:
			if b, err = skip(typ, rest); err != nil {
				return e, malformed("Exemplar", err)
			}
		}
	}
	if e.reason == "" {
		e.Labels, e.reason = v.el.labels()
	}
	return e, nil
}

// metadata decodes WriteRequest.metadata entry idx.
func (v *v1Decoder) metadata(idx int, b []byte) error {
	var m prompb.MetricMetadata
	if err := m.Unmarshal(b); err != nil {
		return malformed("MetricMetadata", err)
	}
	bad := func(format string, args ...any) error {
		return &InvalidError{Series: idx, Metadata: true, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case !v.scheme.IsValidMetricName(m.MetricFamilyName):
		return bad("invalid metric family name %q", clip(m.MetricFamilyName))
	case !utf8.ValidString(m.Help):
		return bad("invalid UTF-8 in help of %q", clip(m.MetricFamilyName))
	case !utf8.ValidString(m.Unit):
		return bad("invalid UTF-8 in unit of %q", clip(m.MetricFamilyName))
	}
	v.req.Metadata = append(v.req.Metadata, promsample.Metadata{
		MetricFamily: m.MetricFamilyName,
		Type:         promsample.MetricType(metricType(int32(m.Type))),
		Help:         m.Help,
		Unit:         m.Unit,
	})
	return nil
}
