package promread

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"

	"github.com/klauspost/compress/s2"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// The SAMPLES answer, a prompb.ReadResponse, is written straight from the
// selections to protobuf bytes: building prompb.TimeSeries first costs a
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
//
// How it is built, in parallel. A QueryResult is its TimeSeries fields
// back to back, and each TimeSeries field (tag, length, message) depends
// on its series alone. So each query's series are cut into runs
// (parallelism.runs), and each run is one unit of work: decode its
// series' packed floats, write their TimeSeries fields, and snappy-compress
// those bytes on their own. A snappy block is a uvarint of the decoded
// length followed by elements (literals and copies back into what was
// decoded before), so compressed runs concatenate: a run's copies reach
// back only into its own bytes, which precede them in the whole too. The
// answer is then the total length, and per query a literal holding its
// QueryResult tag and length followed by its runs' elements. The ratio is
// what compressing the whole would give: snappy's own encoders cut their
// input into 64 KiB blocks the same way.

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

// samplesRun is one unit of work: series [lo, hi) of one query's
// selection. Once encoded, its compressed elements are
// encoders[w].arena[chunk][off:end] and they decode to rawLen bytes.
type samplesRun struct {
	query              int
	lo, hi             int
	w, chunk, off, end int
	rawLen             int
}

// runEncoder is one goroutine's buffers, reused across runs and (through
// API.encoders) across requests.
type runEncoder struct {
	raw    []byte              // the run's protobuf
	floats []promsample.Sample // one series' merged floats
	hists  []prompb.Histogram  // one series' histograms
	// arena holds the compressed runs, back to back in chunks that
	// double from 64 KiB up to arenaChunk bytes; a run is never split
	// between two. One
	// growing slice was copied at every growth: for the whole metric's
	// answer at a million series (a ~40 MiB arena per goroutine), growing
	// by append's 1.25x copied it ~4 times over, into new pages, and that
	// memmove was 40% of the answer's CPU.
	arena [][]byte
}

// arenaChunk is the largest chunk a runEncoder's arena adds, unless one
// run needs more.
const arenaChunk = 4 << 20

// room returns the index of the arena's last chunk, with room for n more
// bytes: a chunk is added if it has not.
func (e *runEncoder) room(n int) int {
	size := 64 << 10
	if k := len(e.arena) - 1; k >= 0 {
		if cap(e.arena[k])-len(e.arena[k]) >= n {
			return k
		}
		size = min(2*cap(e.arena[k]), arenaChunk)
	}
	e.arena = append(e.arena, make([]byte, 0, max(size, n)))
	return len(e.arena) - 1
}

// resetArena empties the arena, keeping its first chunk for reuse.
func (e *runEncoder) resetArena() {
	if len(e.arena) == 0 {
		return
	}
	clear(e.arena[1:])
	e.arena = e.arena[:1]
	e.arena[0] = e.arena[0][:0]
}

// arenaBytes is the arena's capacity.
func (e *runEncoder) arenaBytes() int {
	n := 0
	for _, c := range e.arena {
		n += cap(c)
	}
	return n
}

// samplesAnswer builds one SAMPLES answer from the selections of its
// queries (a nil selection answers nothing).
type samplesAnswer struct {
	sels     []*selection
	runs     []samplesRun
	encoders []*runEncoder
	qrLen    []int // per query: its QueryResult message's bytes
}

// encode decodes and encodes every run, on par's goroutines when the
// answer is large; encoders must hold par.workers encoders (or one).
func (a *samplesAnswer) encode(ctx context.Context, par parallelism) error {
	total := 0
	for q, sel := range a.sels {
		if sel == nil {
			continue
		}
		ends, n := par.runs(sel.list, sel.mint, sel.maxt)
		total += n
		lo := 0
		for _, hi := range ends {
			a.runs = append(a.runs, samplesRun{query: q, lo: lo, hi: hi})
			lo = hi
		}
	}
	width := min(par.width(total), len(a.encoders))
	for _, e := range a.encoders {
		e.resetArena()
	}
	err := parallel(ctx, width, len(a.runs), func(w, i int) error {
		return a.encoders[w].encodeRun(a.sels[a.runs[i].query], &a.runs[i], w)
	})
	if err != nil {
		return err
	}
	a.qrLen = make([]int, len(a.sels))
	for _, r := range a.runs {
		a.qrLen[r.query] += r.rawLen
	}
	return nil
}

// encodeRun writes the TimeSeries fields of the run's series and
// compresses them onto the arena.
func (e *runEncoder) encodeRun(sel *selection, r *samplesRun, w int) error {
	e.raw = e.raw[:0]
	for _, pc := range sel.list[r.lo:r.hi] {
		fl := []promsample.Sample(nil)
		switch {
		case len(pc.floats) == 1:
			fl = pc.floats[0] // charged when added
		case len(pc.floats) > 1:
			var err error
			if e.floats, _, err = pc.floatsInto(sel.mint, sel.maxt, e.floats[:0]); err != nil {
				return err
			}
			fl = e.floats
		}
		e.hists = e.hists[:0]
		for _, h := range mergeHists(pc.hists) {
			if h.H != nil {
				e.hists = append(e.hists, prompb.FromIntHistogram(h.T, h.H))
			} else {
				e.hists = append(e.hists, prompb.FromFloatHistogram(h.T, h.FH))
			}
		}
		if len(fl)+len(e.hists) == 0 {
			continue // nothing in range after all
		}
		if err := e.appendSeries(pc.lbls, fl); err != nil {
			return err
		}
	}
	r.rawLen = len(e.raw)
	if len(e.raw) == 0 {
		return nil
	}
	need := 0
	for raw := e.raw; len(raw) > 0; raw = raw[min(len(raw), compressPiece):] {
		m := s2.MaxEncodedLen(min(len(raw), compressPiece))
		if m < 0 {
			return fmt.Errorf("read response piece of %d bytes is too large to compress", min(len(raw), compressPiece))
		}
		need += m
	}
	k := e.room(need)
	arena := e.arena[k]
	r.w, r.chunk, r.off = w, k, len(arena)
	for raw := e.raw; len(raw) > 0; {
		// In pieces of 64 KiB: S2 then uses its small-block encoder
		// (16-bit offsets, a table that stays in cache), ~10% faster
		// for a ratio within 1% (snappy's own encoder cuts its input
		// the same way).
		piece := raw[:min(len(raw), compressPiece)]
		raw = raw[len(piece):]
		m := s2.MaxEncodedLen(len(piece))
		at := len(arena)
		dst := arena[at : at+m] // room(need) made room for every piece
		c := s2.EncodeSnappy(dst, piece)
		// Drop the piece's own length header: the answer has one for all.
		_, hdr := binary.Uvarint(c)
		if hdr <= 0 || &c[0] != &dst[0] {
			return fmt.Errorf("snappy encoder wrote no length header or not in place")
		}
		arena = arena[:at+copy(dst, c[hdr:])] // copy is memmove: the ranges overlap
	}
	e.arena[k] = arena
	r.end = len(arena)
	return nil
}

// compressPiece is how much of a run is compressed at once.
const compressPiece = 64 << 10

// appendSeries appends one TimeSeries field: labels, floats and e.hists.
func (e *runEncoder) appendSeries(lbls labels.Labels, fl []promsample.Sample) error {
	n := 0
	lbls.Range(func(l labels.Label) { n += sizeField(labelSize(l)) })
	for _, s := range fl {
		n += 2 + sampleSize(s.T, s.V) // at most 20 bytes: a one-byte length
	}
	for i := range e.hists {
		n += sizeField(e.hists[i].Size())
	}
	start := len(e.raw)
	e.raw = append(e.raw, tagField1Bytes)
	e.raw = binary.AppendUvarint(e.raw, uint64(n))
	lbls.Range(func(l labels.Label) {
		e.raw = append(e.raw, tagField1Bytes)
		e.raw = binary.AppendUvarint(e.raw, uint64(labelSize(l)))
		e.raw = appendString(e.raw, tagField1Bytes, l.Name)
		e.raw = appendString(e.raw, tagField2Bytes, l.Value)
	})
	e.raw = appendSamples(e.raw, fl)
	for k := range e.hists {
		h := &e.hists[k]
		hn := h.Size()
		e.raw = append(e.raw, tagField4Bytes)
		e.raw = binary.AppendUvarint(e.raw, uint64(hn))
		at := len(e.raw)
		e.raw = slices.Grow(e.raw, hn)[:at+hn]
		if _, err := h.MarshalToSizedBuffer(e.raw[at:]); err != nil {
			return fmt.Errorf("histogram: %w", err)
		}
	}
	if got := len(e.raw) - start; got != sizeField(n) {
		return fmt.Errorf("read response: wrote %d bytes of a %d-byte series", got, sizeField(n))
	}
	return nil
}

func appendString(b []byte, tag byte, s string) []byte {
	if len(s) == 0 {
		return b
	}
	b = append(b, tag)
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// maxSampleField is the most bytes one Sample field takes: tag and
// length, the value (tag and 8 bytes), the timestamp (tag and a varint of
// up to 10 bytes, a negative one).
const maxSampleField = 2 + 9 + 11

// appendSamples appends one Sample field per float: the hot loop of a
// SAMPLES answer, so it writes by index into room made once with every
// index in locals.
func appendSamples(b []byte, fl []promsample.Sample) []byte {
	at := len(b)
	b = slices.Grow(b, maxSampleField*len(fl))[:at+maxSampleField*len(fl)]
	i := at
	for _, s := range fl {
		vb, t := math.Float64bits(s.V), uint64(s.T)
		c := b[i : i+maxSampleField : i+maxSampleField]
		k := 2
		if vb != 0 {
			c[2] = tagSampleValue
			binary.LittleEndian.PutUint64(c[3:11], vb)
			k = 11
		}
		if t != 0 {
			c[k] = tagSampleTstamp
			k++
			for t >= 0x80 {
				c[k] = byte(t) | 0x80
				t >>= 7
				k++
			}
			c[k] = byte(t)
			k++
		}
		c[0] = tagField2Bytes
		c[1] = byte(k - 2)
		i += k
	}
	return b[:i]
}

// rawLen is the whole answer's protobuf bytes.
func (a *samplesAnswer) rawLen() int {
	n := 0
	for _, q := range a.qrLen {
		n += sizeField(q)
	}
	return n
}

// header is the snappy block's length header and, per query, the literal
// element holding its QueryResult tag and length.
func (a *samplesAnswer) header() (hdr []byte, lits [][]byte, err error) {
	total := a.rawLen()
	if uint64(total) > math.MaxUint32 {
		// The snappy block format's limit (golang/snappy refuses more).
		return nil, nil, fmt.Errorf("read response of %d bytes exceeds snappy's 4 GiB block", total)
	}
	hdr = binary.AppendUvarint(nil, uint64(total))
	for _, q := range a.qrLen {
		// A literal of n <= 60 bytes: tag (n-1)<<2, then the bytes.
		lit := []byte{0, tagField1Bytes}
		lit = binary.AppendUvarint(lit, uint64(q))
		lit[0] = byte(len(lit)-2) << 2
		lits = append(lits, lit)
	}
	return hdr, lits, nil
}

// compressedLen is the bytes writeTo writes.
func (a *samplesAnswer) compressedLen(hdr []byte, lits [][]byte) int {
	n := len(hdr)
	for _, l := range lits {
		n += len(l)
	}
	for _, r := range a.runs {
		n += r.end - r.off
	}
	return n
}

// writeTo writes the compressed answer.
func (a *samplesAnswer) writeTo(w io.Writer, hdr []byte, lits [][]byte) error {
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	k := 0
	for q := range a.sels {
		if _, err := w.Write(lits[q]); err != nil {
			return err
		}
		for ; k < len(a.runs) && a.runs[k].query == q; k++ {
			r := a.runs[k]
			if r.end > r.off {
				if _, err := w.Write(a.encoders[r.w].arena[r.chunk][r.off:r.end]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
