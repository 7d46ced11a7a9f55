package promread

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// The cache holds decoded series in packed form: each series' float
// samples as Prometheus's Gorilla XOR chunks of at most chunkSamples
// samples, with their time span, all chunks of one entry back to back in
// one byte arena. XOR chunks keep every float's exact bits (stale markers,
// NaN payloads, -0.0, subnormals), take a few bytes per sample instead of
// 16, and hold no pointers for the garbage collector to walk. A range read
// decodes only the chunks that overlap it.

// chunkSamples bounds a chunk, as Prometheus's head does: a range read
// decodes at most that many samples it does not need at each end.
const chunkSamples = 120

// packedChunk is one XOR chunk of an entry: its bytes are
// data[off:end] of the entry's arena, its samples span [minT, maxT].
type packedChunk struct {
	minT, maxT int64
	off, end   uint32
}

// packedSeries is one series of a metricEntry. Its floats are
// chunks[c0:c1] of the entry, in time order. Histograms and exemplars stay
// decoded (they are rare and not worth a second format), out of line:
// extra, when not 0, is 1 + their index in the entry's extras, so a series
// without any costs 32 bytes here.
type packedSeries struct {
	lbls   labels.Labels
	c0, c1 int32
	floats int32 // how many float samples the chunks hold
	extra  int32
}

// seriesExtras are a series' histograms and exemplars, each by T.
type seriesExtras struct {
	hists     []promsample.Histogram
	exemplars []promsample.Exemplar
}

func (e *metricEntry) hists(s *packedSeries) []promsample.Histogram {
	if s.extra == 0 {
		return nil
	}
	return e.extras[s.extra-1].hists
}

func (e *metricEntry) exemplars(s *packedSeries) []promsample.Exemplar {
	if s.extra == 0 {
		return nil
	}
	return e.extras[s.extra-1].exemplars
}

// setExtras records a series' histograms and exemplars, if any.
func (e *metricEntry) setExtras(s *packedSeries, hs []promsample.Histogram, ex []promsample.Exemplar) {
	s.extra = 0
	if len(hs)+len(ex) == 0 {
		return
	}
	e.extras = append(e.extras, seriesExtras{hists: hs, exemplars: ex})
	s.extra = int32(len(e.extras))
}

// packer builds the arena and chunk list of one metricEntry.
type packer struct {
	data    []byte
	chunks  []packedChunk
	c       chunkenc.XORChunk
	scratch []byte
}

// add packs one series' canonical floats (sorted by T; equal timestamps
// allowed) and returns the range of chunks that hold them.
func (p *packer) add(fl []promsample.Sample) (c0, c1 int32, err error) {
	c0 = int32(len(p.chunks))
	for len(fl) > 0 {
		n := min(len(fl), chunkSamples)
		p.scratch = append(p.scratch[:0], 0, 0) // the chunk header: 0 samples
		p.c.Reset(p.scratch)
		app, err := p.c.Appender()
		if err != nil {
			return 0, 0, err
		}
		for _, s := range fl[:n] {
			app.Append(0, s.T, s.V)
		}
		b := p.c.Bytes()
		p.scratch = b // keep the grown buffer for the next chunk
		off := len(p.data)
		if off+len(b) > math.MaxUint32 {
			return 0, 0, fmt.Errorf("packed entry exceeds 4 GiB")
		}
		p.data = append(p.data, b...)
		p.chunks = append(p.chunks, packedChunk{minT: fl[0].T, maxT: fl[n-1].T, off: uint32(off), end: uint32(len(p.data))})
		fl = fl[n:]
	}
	return c0, int32(len(p.chunks)), nil
}

// unpacker decodes chunks (decodeXOR). It holds no state; it remains so
// that callers name where chunks are decoded.
type unpacker struct{}

// floats appends to dst the samples of series s of e in [mint, maxt].
func (u *unpacker) floats(e *metricEntry, s *packedSeries, mint, maxt int64, dst []promsample.Sample) ([]promsample.Sample, error) {
	for _, c := range e.chunks[s.c0:s.c1] {
		if c.maxT < mint {
			continue
		}
		if c.minT > maxt {
			break // chunks are in time order
		}
		var err error
		if dst, err = u.chunk(e, c, mint, maxt, dst); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// chunk appends to dst the samples of one chunk of e in [mint, maxt].
func (u *unpacker) chunk(e *metricEntry, c packedChunk, mint, maxt int64, dst []promsample.Sample) ([]promsample.Sample, error) {
	whole := c.minT >= mint && c.maxT <= maxt
	dst, err := decodeXOR(e.data[c.off:c.end], mint, maxt, whole, dst)
	if err != nil {
		return dst, fmt.Errorf("cached chunk: %w", err)
	}
	return dst, nil
}

// countIn is an upper bound of the floats of s in [mint, maxt]: the
// samples of the chunks that overlap it.
func (e *metricEntry) countIn(s *packedSeries, mint, maxt int64) int {
	n := 0
	for _, c := range e.chunks[s.c0:s.c1] {
		if c.maxT >= mint && c.minT <= maxt {
			n += chunkSamples
		}
	}
	return min(n, int(s.floats))
}

// hasFloatsIn reports whether s holds a float sample in [mint, maxt].
// Chunk spans are exact (their first and last samples), so a chunk that
// overlaps the range may still hold nothing inside it; those are decoded.
func (e *metricEntry) hasFloatsIn(u *unpacker, s *packedSeries, mint, maxt int64) (bool, error) {
	for _, c := range e.chunks[s.c0:s.c1] {
		if c.maxT < mint || c.minT > maxt {
			continue
		}
		if c.minT >= mint || c.maxT <= maxt {
			return true, nil // an end sample is inside
		}
		got, err := u.chunk(e, c, mint, maxt, nil)
		if err != nil {
			return false, err
		}
		if len(got) > 0 {
			return true, nil
		}
	}
	return false, nil
}

// newMetricEntry packs series (canonical, sorted by labels) into an entry
// and builds its postings.
func newMetricEntry(series []promsample.Series) (*metricEntry, error) {
	e := &metricEntry{series: make([]packedSeries, len(series))}
	var p packer
	for i := range series {
		sr := &series[i]
		c0, c1, err := p.add(sr.Samples)
		if err != nil {
			return nil, err
		}
		e.series[i] = packedSeries{lbls: sr.Labels, c0: c0, c1: c1, floats: int32(len(sr.Samples))}
		e.setExtras(&e.series[i], sr.Histograms, sr.Exemplars)
	}
	// Trim the arena and chunk list to their length: the cache accounts
	// what is held.
	e.data = append([]byte(nil), p.data...)
	e.chunks = append([]packedChunk(nil), p.chunks...)
	e.buildPostings()
	e.bytes = e.computeSize()
	return e, nil
}

// computeSize is the entry's memory: arena, chunk list, series, label
// strings, histograms, exemplars and postings.
func (e *metricEntry) computeSize() int64 {
	n := int64(unsafe.Sizeof(*e)) + int64(cap(e.data)) + int64(cap(e.chunks))*int64(unsafe.Sizeof(packedChunk{})) +
		int64(cap(e.series))*int64(unsafe.Sizeof(packedSeries{}))
	for i := range e.series {
		n += int64(e.series[i].lbls.ByteSize())
	}
	n += int64(cap(e.extras)) * int64(unsafe.Sizeof(seriesExtras{}))
	for i := range e.extras {
		s := &e.extras[i]
		n += int64(cap(s.exemplars)) * int64(unsafe.Sizeof(promsample.Exemplar{}))
		for _, x := range s.exemplars {
			n += int64(x.Labels.ByteSize())
		}
		n += int64(cap(s.hists)) * int64(unsafe.Sizeof(promsample.Histogram{}))
		for _, h := range s.hists {
			n += 160 // the histogram struct and its span slices
			if h.H != nil {
				n += int64(len(h.H.PositiveBuckets)+len(h.H.NegativeBuckets)) * 8
			}
			if h.FH != nil {
				n += int64(len(h.FH.PositiveBuckets)+len(h.FH.NegativeBuckets)) * 8
			}
		}
	}
	// Postings: a map per label name, an entry per value (about 64 bytes
	// of map overhead each; the value string is shared with the labels),
	// and 4 bytes per series per label.
	for _, vals := range e.postings {
		n += 64
		for _, idx := range vals {
			n += 64 + int64(cap(idx))*4
		}
	}
	return n
}

// copyChunk appends chunk c of src (bytes and span) unchanged.
func (p *packer) copyChunk(src *metricEntry, c packedChunk) error {
	off := len(p.data)
	b := src.data[c.off:c.end]
	if off+len(b) > math.MaxUint32 {
		return fmt.Errorf("packed entry exceeds 4 GiB")
	}
	p.data = append(p.data, b...)
	p.chunks = append(p.chunks, packedChunk{minT: c.minT, maxT: c.maxT, off: uint32(off), end: uint32(len(p.data))})
	return nil
}

// chunkLen is how many samples chunk c of e holds (its header).
func (e *metricEntry) chunkLen(c packedChunk) int {
	return int(binary.BigEndian.Uint16(e.data[c.off:]))
}

// extendEntry returns a new entry holding old's series merged with add
// (canonical series sorted by labels, as decodeRows returns them); old is
// not changed (nil means none). Samples of a series that all come after
// its last packed sample (the usual case: a tail that grew) re-encode only
// its last, partial chunk; the other chunks are copied as bytes. Anything
// else decodes the series and merges it as the reader would.
func extendEntry(old *metricEntry, add []promsample.Series) (*metricEntry, error) {
	if old == nil {
		return newMetricEntry(add)
	}
	e := &metricEntry{series: make([]packedSeries, 0, len(old.series)+len(add))}
	var p packer
	var u unpacker
	var scratch []promsample.Sample
	i, j := 0, 0
	for i < len(old.series) || j < len(add) {
		var c int
		switch {
		case i == len(old.series):
			c = 1
		case j == len(add):
			c = -1
		default:
			c = labels.Compare(old.series[i].lbls, add[j].Labels)
		}
		switch {
		case c < 0: // only in old: copy
			s := old.series[i]
			c0 := int32(len(p.chunks))
			for _, ch := range old.chunks[s.c0:s.c1] {
				if err := p.copyChunk(old, ch); err != nil {
					return nil, err
				}
			}
			s.c0, s.c1 = c0, int32(len(p.chunks))
			e.setExtras(&s, old.hists(&s), old.exemplars(&s))
			e.series = append(e.series, s)
			i++
		case c > 0: // only new: pack
			sr := &add[j]
			c0, c1, err := p.add(sr.Samples)
			if err != nil {
				return nil, err
			}
			ps := packedSeries{lbls: sr.Labels, c0: c0, c1: c1, floats: int32(len(sr.Samples))}
			e.setExtras(&ps, sr.Histograms, sr.Exemplars)
			e.series = append(e.series, ps)
			j++
		default: // both
			s, sr := old.series[i], &add[j]
			chunks := old.chunks[s.c0:s.c1]
			c0 := int32(len(p.chunks))
			keep := len(chunks) // chunks copied as they are
			var fl []promsample.Sample
			merged := false
			switch {
			case len(sr.Samples) == 0:
			case len(chunks) == 0 || sr.Samples[0].T > chunks[len(chunks)-1].maxT:
				// Appended after the last sample: re-encode the last
				// chunk only if it has room.
				scratch = scratch[:0]
				if len(chunks) > 0 && old.chunkLen(chunks[len(chunks)-1]) < chunkSamples {
					keep--
					var err error
					if scratch, err = u.chunk(old, chunks[keep], math.MinInt64, math.MaxInt64, scratch); err != nil {
						return nil, err
					}
				}
				fl = append(scratch, sr.Samples...)
			default:
				keep, merged = 0, true
				var err error
				if scratch, err = u.floats(old, &s, math.MinInt64, math.MaxInt64, scratch[:0]); err != nil {
					return nil, err
				}
				fl = mergeSamples([][]promsample.Sample{scratch, sr.Samples})
			}
			for _, ch := range chunks[:keep] {
				if err := p.copyChunk(old, ch); err != nil {
					return nil, err
				}
			}
			if _, _, err := p.add(fl); err != nil {
				return nil, err
			}
			s.c0, s.c1 = c0, int32(len(p.chunks))
			if merged {
				s.floats = int32(len(fl)) // exact duplicates dropped
			} else {
				s.floats += int32(len(sr.Samples))
			}
			hs, ex := old.hists(&s), old.exemplars(&s)
			if len(sr.Histograms) > 0 {
				hs = mergeHists([][]promsample.Histogram{hs, sr.Histograms})
			}
			if len(sr.Exemplars) > 0 {
				ex = mergeExemplars([][]promsample.Exemplar{ex, sr.Exemplars})
			}
			e.setExtras(&s, hs, ex)
			e.series = append(e.series, s)
			i++
			j++
		}
	}
	e.data = append([]byte(nil), p.data...)
	e.chunks = append([]packedChunk(nil), p.chunks...)
	e.buildPostings()
	e.bytes = e.computeSize()
	return e, nil
}
