package promread

import (
	"math"
	"strconv"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
)

// The JSON encodings below reproduce Prometheus's (util/jsonutil and
// web/api/v1's codecs) byte for byte: values are strings, timestamps are
// seconds with at most three decimals.

// appendTimestamp writes Unix ms t as seconds, the
// fraction zero-padded to three digits, exactly as
// jsonutil.MarshalTimestamp does (1500 ms -> "1.500"; 1000 ms -> "1").
func appendTimestamp(b []byte, t int64) []byte {
	if t < 0 {
		b = append(b, '-')
		t = -t
	}
	b = strconv.AppendInt(b, t/1000, 10)
	if f := t % 1000; f != 0 {
		b = append(b, '.')
		if f < 100 {
			b = append(b, '0')
		}
		if f < 10 {
			b = append(b, '0')
		}
		b = strconv.AppendInt(b, f, 10)
	}
	return b
}

// appendFloat writes a value as Prometheus does: quoted, 'e' notation below
// 1e-6 or from 1e21, "NaN", "+Inf", "-Inf".
func appendFloat(b []byte, f float64) []byte {
	b = append(b, '"')
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	return append(b, '"')
}

func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			b = append(b, '\\', 'u', '0', '0', "0123456789abcdef"[c>>4], "0123456789abcdef"[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

func appendLabels(b []byte, ls labels.Labels) []byte {
	b = append(b, '{')
	first := true
	ls.Range(func(l labels.Label) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendJSONString(b, l.Name)
		b = append(b, ':')
		b = appendJSONString(b, l.Value)
	})
	return append(b, '}')
}

func appendHistogram(b []byte, h *histogram.FloatHistogram) []byte {
	b = append(b, `{"count":`...)
	b = appendFloat(b, h.Count)
	b = append(b, `,"sum":`...)
	b = appendFloat(b, h.Sum)
	found := false
	it := h.AllBucketIterator()
	for it.Next() {
		bk := it.At()
		if bk.Count == 0 {
			continue
		}
		if !found {
			b = append(b, `,"buckets":[`...)
		} else {
			b = append(b, ',')
		}
		found = true
		bounds := 2
		switch {
		case bk.LowerInclusive && bk.UpperInclusive:
			bounds = 3
		case bk.LowerInclusive:
			bounds = 1
		case bk.UpperInclusive:
			bounds = 0
		}
		b = append(b, '[')
		b = strconv.AppendInt(b, int64(bounds), 10)
		b = append(b, ',')
		b = appendFloat(b, bk.Lower)
		b = append(b, ',')
		b = appendFloat(b, bk.Upper)
		b = append(b, ',')
		b = appendFloat(b, bk.Count)
		b = append(b, ']')
	}
	if found {
		b = append(b, ']')
	}
	return append(b, '}')
}

func appendPoint(b []byte, t int64, v float64) []byte {
	b = append(b, '[')
	b = appendTimestamp(b, t)
	b = append(b, ',')
	b = appendFloat(b, v)
	return append(b, ']')
}

func appendHPoint(b []byte, t int64, h *histogram.FloatHistogram) []byte {
	b = append(b, '[')
	b = appendTimestamp(b, t)
	b = append(b, ',')
	b = appendHistogram(b, h)
	return append(b, ']')
}

// appendResult writes {"resultType":...,"result":...}.
func appendResult(b []byte, v parser.Value) []byte {
	b = append(b, `{"resultType":"`...)
	b = append(b, v.Type()...)
	b = append(b, `","result":`...)
	switch r := v.(type) {
	case promql.Vector:
		b = append(b, '[')
		for i, s := range r {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"metric":`...)
			b = appendLabels(b, s.Metric)
			if s.H != nil {
				b = append(b, `,"histogram":`...)
				b = appendHPoint(b, s.T, s.H)
			} else {
				b = append(b, `,"value":`...)
				b = appendPoint(b, s.T, s.F)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	case promql.Matrix:
		b = append(b, '[')
		for i, s := range r {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"metric":`...)
			b = appendLabels(b, s.Metric)
			if len(s.Floats) > 0 {
				b = append(b, `,"values":[`...)
				for k, p := range s.Floats {
					if k > 0 {
						b = append(b, ',')
					}
					b = appendPoint(b, p.T, p.F)
				}
				b = append(b, ']')
			}
			if len(s.Histograms) > 0 {
				b = append(b, `,"histograms":[`...)
				for k, p := range s.Histograms {
					if k > 0 {
						b = append(b, ',')
					}
					b = appendHPoint(b, p.T, p.H)
				}
				b = append(b, ']')
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	case promql.Scalar:
		b = appendPoint(b, r.T, r.V)
	case promql.String:
		b = append(b, '[')
		b = appendTimestamp(b, r.T)
		b = append(b, ',')
		b = appendJSONString(b, r.V)
		b = append(b, ']')
	default:
		b = append(b, "null"...)
	}
	return append(b, '}')
}
