package promread

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
)

// The SAMPLES answer, a prompb.ReadResponse, is written straight from the
// series to protobuf bytes: building prompb.TimeSeries first costs a
// 48-byte prompb.Sample (with its unrecognized-field slice) per sample and
// a second pass through gogo's marshaller. The bytes are what gogo writes
// for the same message, field for field, with one difference: a sample
// whose value is -0.0 keeps its value field (gogo's "Value != 0" drops it,
// turning it into +0.0), so every float's bits reach the client.
//
//	ReadResponse  { repeated QueryResult results = 1; }
//	QueryResult   { repeated TimeSeries timeseries = 1; }
//	TimeSeries    { repeated Label labels = 1; repeated Sample samples = 2;
//	                repeated Exemplar exemplars = 3; repeated Histogram histograms = 4; }
//	Label         { string name = 1; string value = 2; }
//	Sample        { double value = 1; int64 timestamp = 2; }

const (
	tagField1Bytes  = 1<<3 | 2 // field 1, length-delimited
	tagField2Bytes  = 2<<3 | 2
	tagField4Bytes  = 4<<3 | 2
	tagSampleValue  = 1<<3 | 1 // field 1, fixed64
	tagSampleTstamp = 2<<3 | 0 // field 2, varint
)

func sizeVarint(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

// sizeField is the bytes of a length-delimited field of n bytes.
func sizeField(n int) int { return 1 + sizeVarint(uint64(n)) + n }

func sampleSize(t int64, v float64) int {
	n := 0
	if math.Float64bits(v) != 0 {
		n += 9
	}
	if t != 0 {
		n += 1 + sizeVarint(uint64(t))
	}
	return n
}

func labelSize(l labels.Label) int {
	n := 0
	if len(l.Name) > 0 {
		n += sizeField(len(l.Name))
	}
	if len(l.Value) > 0 {
		n += sizeField(len(l.Value))
	}
	return n
}

// samplesEncoder sizes and writes one ReadResponse.
type samplesEncoder struct {
	results [][]*series
	hists   [][]prompb.Histogram // per series of all results, in order
	tsSize  []int                // per series: the TimeSeries message's size
	qrSize  []int                // per result: the QueryResult message's size
}

// size computes every message's size and returns the whole response's.
func (e *samplesEncoder) size() int {
	e.tsSize, e.qrSize, e.hists = e.tsSize[:0], e.qrSize[:0], e.hists[:0]
	total := 0
	for _, res := range e.results {
		qr := 0
		for _, sr := range res {
			n := 0
			sr.lbls.Range(func(l labels.Label) { n += sizeField(labelSize(l)) })
			for _, s := range sr.floats {
				n += sizeField(sampleSize(s.T, s.V))
			}
			var hs []prompb.Histogram
			for _, h := range sr.hists {
				var ph prompb.Histogram
				if h.H != nil {
					ph = prompb.FromIntHistogram(h.T, h.H)
				} else {
					ph = prompb.FromFloatHistogram(h.T, h.FH)
				}
				n += sizeField(ph.Size())
				hs = append(hs, ph)
			}
			e.hists = append(e.hists, hs)
			e.tsSize = append(e.tsSize, n)
			qr += sizeField(n)
		}
		e.qrSize = append(e.qrSize, qr)
		total += sizeField(qr)
	}
	return total
}

// encode writes the response into b, which must be exactly size() bytes.
func (e *samplesEncoder) encode(b []byte) error {
	i, k := 0, 0
	putTag := func(tag byte, n int) {
		b[i] = tag
		i++
		i += binary.PutUvarint(b[i:], uint64(n))
	}
	putString := func(tag byte, s string) {
		if len(s) == 0 {
			return
		}
		putTag(tag, len(s))
		i += copy(b[i:], s)
	}
	for r, res := range e.results {
		putTag(tagField1Bytes, e.qrSize[r])
		for _, sr := range res {
			putTag(tagField1Bytes, e.tsSize[k])
			sr.lbls.Range(func(l labels.Label) {
				putTag(tagField1Bytes, labelSize(l))
				putString(tagField1Bytes, l.Name)
				putString(tagField2Bytes, l.Value)
			})
			for _, s := range sr.floats {
				putTag(tagField2Bytes, sampleSize(s.T, s.V))
				if vb := math.Float64bits(s.V); vb != 0 {
					b[i] = tagSampleValue
					binary.LittleEndian.PutUint64(b[i+1:], vb)
					i += 9
				}
				if s.T != 0 {
					b[i] = tagSampleTstamp
					i++
					i += binary.PutUvarint(b[i:], uint64(s.T))
				}
			}
			for _, h := range e.hists[k] {
				n := h.Size()
				putTag(tagField4Bytes, n)
				if _, err := h.MarshalToSizedBuffer(b[i : i+n]); err != nil {
					return fmt.Errorf("histogram: %w", err)
				}
				i += n
			}
			k++
		}
	}
	if i != len(b) {
		return fmt.Errorf("read response: wrote %d bytes of %d", i, len(b))
	}
	return nil
}
