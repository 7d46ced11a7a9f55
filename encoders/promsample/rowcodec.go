package promsample

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/klauspost/compress/s2"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
)

// Row format (one wal row = one Batch):
//
//	byte 0     rowFormatV1
//	bytes 1..  an S2 block (github.com/klauspost/compress/s2) of the body
//
// body:
//
//	uvarint nStrings, then each string: uvarint len, bytes  (the string table)
//	uvarint nSeries, then per series:
//	  labels:      uvarint n, then n x (uvarint nameRef, uvarint valueRef)
//	  samples:     uvarint n, then n x (varint dT, value)
//	  histograms:  uvarint n, then n x (varint dT, histogram)
//	  exemplars:   uvarint n, then n x (labels, varint T, u64 value bits)
//	uvarint nMetadata, then n x (uvarint familyRef, typeRef, helpRef, unitRef)
//
// dT is the wrapping difference from the previous sample or histogram
// timestamp in the batch (the first is relative to 0), so consecutive
// series' timestamps cost a byte or two. A value is uvarint(zigzag(i)<<1)
// when it is an integer i with |i| <= 2^53 (not -0), else the byte 0x01 and
// the 8 little-endian bytes of its IEEE bits: exact for every NaN payload.
// Every count is bounded by the bytes left to read, so a corrupt row cannot
// make the decoder allocate more than a small multiple of its own size.
const rowFormatV1 = 1

// MaxBatchBytes bounds a row's uncompressed body. It is far above what one
// remote-write request can carry (Prometheus caps a decoded request at 32
// MiB of protobuf, and the body here is smaller than the protobuf), and it
// keeps a corrupt length prefix from allocating without bound.
const MaxBatchBytes = 32 << 20

// maxInt53 is the largest magnitude stored on the integer path: every integer
// up to it is exactly representable as a float64.
const maxInt53 = 1 << 53

// BatchEncoder encodes Batches into format-1 rows, reusing its buffers
// between calls. The receiver writes format-2 rows (RowEncoder); format 1
// remains the self-contained encoding of a segment's footer extras, and
// of rows written before. The zero value is ready to use; it is not safe
// for concurrent use.
type BatchEncoder struct {
	tab  []byte // string table
	body []byte // references and values
	raw  []byte // table + body
	comp []byte // compressed raw
	ids  map[string]uint32
}

func (e *BatchEncoder) ref(s string) {
	id, ok := e.ids[s]
	if !ok {
		id = uint32(len(e.ids))
		e.ids[s] = id
		e.tab = binary.AppendUvarint(e.tab, uint64(len(s)))
		e.tab = append(e.tab, s...)
	}
	e.body = binary.AppendUvarint(e.body, uint64(id))
}

func (e *BatchEncoder) labels(ls labels.Labels) {
	e.body = binary.AppendUvarint(e.body, uint64(ls.Len()))
	ls.Range(func(l labels.Label) {
		e.ref(l.Name)
		e.ref(l.Value)
	})
}

// EncodeBatch encodes b as one self-contained, compressed wal row.
func EncodeBatch(b *Batch) ([]byte, error) {
	var e BatchEncoder
	return e.Append(nil, b)
}

// Append appends the row encoding of b to dst and returns the extended
// slice. The result does not alias the encoder's buffers beyond dst.
func (e *BatchEncoder) Append(dst []byte, b *Batch) ([]byte, error) {
	if e.ids == nil {
		e.ids = make(map[string]uint32)
	}
	clear(e.ids)
	e.tab, e.body = e.tab[:0], e.body[:0]
	e.body = binary.AppendUvarint(e.body, uint64(len(b.Series)))
	var prevT int64
	for i := range b.Series {
		s := &b.Series[i]
		e.labels(s.Labels)
		e.body = binary.AppendUvarint(e.body, uint64(len(s.Samples)))
		for _, smp := range s.Samples {
			e.body = binary.AppendVarint(e.body, smp.T-prevT)
			prevT = smp.T
			e.body = appendValue(e.body, smp.V)
		}
		e.body = binary.AppendUvarint(e.body, uint64(len(s.Histograms)))
		for _, h := range s.Histograms {
			e.body = binary.AppendVarint(e.body, h.T-prevT)
			prevT = h.T
			var err error
			if e.body, err = appendHistogram(e.body, h); err != nil {
				return dst, err
			}
		}
		e.body = binary.AppendUvarint(e.body, uint64(len(s.Exemplars)))
		for _, ex := range s.Exemplars {
			e.labels(ex.Labels)
			e.body = binary.AppendVarint(e.body, ex.T)
			e.body = binary.LittleEndian.AppendUint64(e.body, math.Float64bits(ex.V))
		}
	}
	e.body = binary.AppendUvarint(e.body, uint64(len(b.Metadata)))
	for _, m := range b.Metadata {
		e.ref(m.MetricFamily)
		e.ref(string(m.Type))
		e.ref(m.Help)
		e.ref(m.Unit)
	}
	e.raw = binary.AppendUvarint(e.raw[:0], uint64(len(e.ids)))
	e.raw = append(e.raw, e.tab...)
	e.raw = append(e.raw, e.body...)
	if len(e.raw) > MaxBatchBytes {
		return dst, fmt.Errorf("%w: %d bytes uncompressed (max %d)", ErrTooLarge, len(e.raw), MaxBatchBytes)
	}
	need := s2.MaxEncodedLen(len(e.raw))
	if cap(e.comp) < need {
		e.comp = make([]byte, need)
	}
	enc := s2.Encode(e.comp[:need], e.raw)
	if dst == nil {
		dst = make([]byte, 0, 1+len(enc))
	}
	dst = append(dst, rowFormatV1)
	dst = append(dst, enc...)
	if cap(e.comp) > maxKeptScratch {
		e.comp = nil // one huge request must not pin its buffer
	}
	return dst, nil
}

// maxKeptScratch bounds the compression buffer an encoder keeps.
const maxKeptScratch = 4 << 20

// isIntegral reports whether v is stored on the integer path: an integer of
// magnitude at most 2^53 and not -0, so float64(int64(v)) has v's exact bits.
func isIntegral(v float64) (int64, bool) {
	if v != math.Trunc(v) || v > maxInt53 || v < -maxInt53 || (v == 0 && math.Signbit(v)) {
		return 0, false
	}
	return int64(v), true
}

func appendValue(b []byte, v float64) []byte {
	if i, ok := isIntegral(v); ok {
		return binary.AppendUvarint(b, zigzag(i)<<1)
	}
	b = append(b, 1)
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
}

func zigzag(i int64) uint64   { return uint64(i<<1) ^ uint64(i>>63) }
func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

const (
	histFlagFloat = 1 << 0
	histHintShift = 1
)

// appendHistogram appends one native histogram (either kind).
func appendHistogram(b []byte, h Histogram) ([]byte, error) {
	switch {
	case h.H != nil && h.FH == nil:
		x := h.H
		b = append(b, byte(x.CounterResetHint&3)<<histHintShift)
		b = binary.AppendVarint(b, int64(x.Schema))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x.ZeroThreshold))
		b = binary.AppendUvarint(b, x.ZeroCount)
		b = binary.AppendUvarint(b, x.Count)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x.Sum))
		b = appendSpans(b, x.PositiveSpans)
		b = appendSpans(b, x.NegativeSpans)
		b = appendInts(b, x.PositiveBuckets)
		b = appendInts(b, x.NegativeBuckets)
		b = appendFloats(b, x.CustomValues)
	case h.FH != nil && h.H == nil:
		x := h.FH
		b = append(b, histFlagFloat|byte(x.CounterResetHint&3)<<histHintShift)
		b = binary.AppendVarint(b, int64(x.Schema))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x.ZeroThreshold))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x.ZeroCount))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x.Count))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x.Sum))
		b = appendSpans(b, x.PositiveSpans)
		b = appendSpans(b, x.NegativeSpans)
		b = appendFloats(b, x.PositiveBuckets)
		b = appendFloats(b, x.NegativeBuckets)
		b = appendFloats(b, x.CustomValues)
	default:
		return b, fmt.Errorf("%w: histogram at %d ms must have exactly one of H and FH", ErrInvalidBatch, h.T)
	}
	return b, nil
}

func appendSpans(b []byte, spans []histogram.Span) []byte {
	b = binary.AppendUvarint(b, uint64(len(spans)))
	for _, s := range spans {
		b = binary.AppendVarint(b, int64(s.Offset))
		b = binary.AppendUvarint(b, uint64(s.Length))
	}
	return b
}

func appendInts(b []byte, xs []int64) []byte {
	b = binary.AppendUvarint(b, uint64(len(xs)))
	for _, x := range xs {
		b = binary.AppendVarint(b, x)
	}
	return b
}

func appendFloats(b []byte, xs []float64) []byte {
	b = binary.AppendUvarint(b, uint64(len(xs)))
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	return b
}

// BatchDecoder decodes rows, reusing its decompression buffer between
// calls. The zero value is ready to use; it is not safe for concurrent use.
// Decoded Batches share no memory with the decoder or the input.
type BatchDecoder struct {
	raw  []byte
	strs []string
	sb   labels.ScratchBuilder
}

// DecodeBatch decodes one row written by EncodeBatch. Any input yields a
// Batch or an error matching ErrCorruptRow / ErrUnsupportedVersion /
// ErrTooLarge; it never panics.
func DecodeBatch(row []byte) (Batch, error) {
	var d BatchDecoder
	return d.Decode(row)
}

// Decode is DecodeBatch with buffer reuse.
func (d *BatchDecoder) Decode(row []byte) (Batch, error) {
	raw, err := decompressRow(&d.raw, row)
	if err != nil {
		return Batch{}, err
	}
	return d.decodeBody(raw)
}

// decompressRow checks a row's header and decompresses its body into *buf
// (grown as needed).
func decompressRow(buf *[]byte, row []byte) ([]byte, error) {
	if len(row) == 0 {
		return nil, corruptRow("empty row", nil)
	}
	if row[0] != rowFormatV1 {
		return nil, fmt.Errorf("%w: row format %d", ErrUnsupportedVersion, row[0])
	}
	n, err := s2.DecodedLen(row[1:])
	if err != nil {
		return nil, corruptRow("compressed header", err)
	}
	if n > MaxBatchBytes {
		return nil, fmt.Errorf("%w: row claims %d bytes uncompressed (max %d)", ErrTooLarge, n, MaxBatchBytes)
	}
	if cap(*buf) < n {
		*buf = make([]byte, n)
	}
	raw, err := s2.Decode((*buf)[:n], row[1:])
	if err != nil {
		return nil, corruptRow("decompress", err)
	}
	return raw, nil
}

// rowCollector decodes the rows of one segment straight into a collector.
// It reads exactly what decodeBody reads (same checks, same errors) but
// resolves a series' labels through string ids shared by all the rows: a
// series already seen in an earlier row (the steady state: the same series
// every request) costs one map lookup, not a string per label, a
// labels.Labels and its byte key. Not safe for concurrent use.
type rowCollector struct {
	c   *collector
	raw []byte
	// symtab is the collector's string table (strID, strs): a row's
	// strings are interned there, so a label string is copied out of the
	// rows once, and the collector keeps that copy.
	*symtab
	local  []uint32               // this row's string table -> ids
	series map[string]*seriesData // uvarint ids of a series' labels -> series
	key    []byte
	sb     labels.ScratchBuilder
	// epochs maps a format-2 epoch to its series by local id. An epoch's
	// anchors come before its references (rule 2 of rowv2.go), so a
	// reference to a local id not (yet) anchored is to a row that is not
	// among the rows given: the stream's rows were cut mid-epoch, which
	// only a retention that evicted live rows does. Such samples are
	// dropped and counted in unresolved.
	epochs     map[uint64][]*seriesData
	unresolved int64
	// freshEpoch is the epoch whose anchors are added to the collector
	// without a lookup (collector.addFresh): the first one read, while no
	// row of another epoch or format came (started: one came). A seal
	// reads one epoch, or two when the first outgrew the policy before
	// the seal came (about half the seals of the benchmark's loads); the
	// first one's anchors are each a new series, a later one's mostly
	// series seen before, and are looked up.
	freshEpoch     uint64
	started, fresh bool

	anchor []labelIDs // anchorIDs' scratch
	ids    []uint32   // anchorIDs' result, valid until its next call
}

func newRowCollector(c *collector) *rowCollector {
	return &rowCollector{c: c, symtab: &c.syms, series: map[string]*seriesData{}, epochs: map[uint64][]*seriesData{}}
}

// add decodes one row, of either format, into the collector. On error the
// collector may hold part of the row; the caller discards it.
func (rc *rowCollector) add(row []byte) error {
	h, err := ParseRowHeader(row)
	if err != nil {
		return err
	}
	if h.Format == 2 {
		if h.Close {
			return nil
		}
		if !rc.started {
			// Fresh only into an empty collector: a caller's earlier
			// series would have to be looked up.
			rc.started, rc.fresh, rc.freshEpoch = true, rc.c.count == 0, h.Epoch
		} else if h.Epoch != rc.freshEpoch {
			rc.fresh = false
		}
		return rc.addAnchored(row, h)
	}
	rc.started, rc.fresh = true, false
	raw, err := decompressRow(&rc.raw, row)
	if err != nil {
		return err
	}
	r := reader{b: raw}
	ns := r.count(1)
	rc.local = rc.local[:0]
	for i := 0; i < ns && r.err == nil; i++ {
		l := r.count(1)
		b := r.bytes(l)
		id, ok := rc.strID[string(b)] // no allocation for the lookup
		if !ok && r.err == nil {
			id = uint32(len(rc.strs))
			s := string(b)
			rc.strs = append(rc.strs, s)
			rc.strID[s] = id
		}
		rc.local = append(rc.local, id)
	}
	ref := func() (uint32, bool) {
		id := r.uvarint()
		if r.err != nil {
			return 0, false
		}
		if id >= uint64(len(rc.local)) {
			r.fail("string reference out of range")
			return 0, false
		}
		return rc.local[id], true
	}
	str := func() string {
		if id, ok := ref(); ok {
			return rc.strs[id]
		}
		return ""
	}
	readLabels := func() labels.Labels {
		n := r.count(2)
		rc.sb.Reset()
		for i := 0; i < n && r.err == nil; i++ {
			name := str()
			rc.sb.Add(name, str())
		}
		rc.sb.Sort()
		return rc.sb.Labels()
	}
	// seriesOf reads a series' labels as ids and finds (or makes) its entry.
	seriesOf := func() *seriesData {
		n := r.count(2)
		rc.key = rc.key[:0]
		for i := 0; i < 2*n && r.err == nil; i++ {
			id, _ := ref()
			rc.key = binary.AppendUvarint(rc.key, uint64(id))
		}
		if r.err != nil {
			return nil
		}
		if sd, ok := rc.series[string(rc.key)]; ok {
			return sd
		}
		rc.sb.Reset()
		for k := rc.key; len(k) > 0; {
			name, m := binary.Uvarint(k)
			value, m2 := binary.Uvarint(k[m:])
			k = k[m+m2:]
			rc.sb.Add(rc.strs[name], rc.strs[value])
		}
		rc.sb.Sort()
		ls := rc.sb.Labels()
		// Another id sequence may spell the same label set (another label
		// order): the collector's own key decides.
		sd := rc.c.seriesOf(ls)
		rc.series[string(rc.key)] = sd
		return sd
	}
	nser := r.count(4)
	var prevT int64
	for i := 0; i < nser && r.err == nil; i++ {
		sd := seriesOf()
		if r.err != nil {
			break
		}
		if n := r.count(2); n > 0 {
			if rc.c.pack {
				for range n {
					prevT += r.varint()
					sd.packed.add(&rc.c.arena, prevT, r.value())
				}
			} else {
				sd.samples = slices.Grow(sd.samples, n)
				for range n {
					prevT += r.varint()
					sd.samples = append(sd.samples, Sample{T: prevT, V: r.value()})
				}
			}
		}
		if n := r.count(16); n > 0 {
			for range n {
				prevT += r.varint()
				sd.hists = append(sd.hists, r.histogram(prevT))
			}
		}
		if n := r.count(10); n > 0 {
			for range n {
				ls := readLabels()
				t := r.varint()
				sd.exemplars = append(sd.exemplars, Exemplar{Labels: ls, T: t, V: math.Float64frombits(r.u64())})
			}
		}
	}
	if n := r.count(4); n > 0 {
		for range n {
			m := Metadata{MetricFamily: str(), Type: MetricType(str()), Help: str(), Unit: str()}
			if r.err == nil {
				rc.c.meta[m] = struct{}{}
			}
		}
	}
	if r.err == nil && r.left() != 0 {
		r.fail(fmt.Sprintf("%d trailing bytes", r.left()))
	}
	return r.err
}

func (d *BatchDecoder) decodeBody(raw []byte) (Batch, error) {
	r := reader{b: raw}
	ns := r.count(1)
	d.strs = d.strs[:0]
	for i := 0; i < ns && r.err == nil; i++ {
		l := r.count(1)
		d.strs = append(d.strs, string(r.bytes(l)))
	}
	str := func() string {
		id := r.uvarint()
		if r.err != nil {
			return ""
		}
		if id >= uint64(len(d.strs)) {
			r.fail("string reference out of range")
			return ""
		}
		return d.strs[id]
	}
	readLabels := func() labels.Labels {
		n := r.count(2)
		d.sb.Reset()
		for i := 0; i < n && r.err == nil; i++ {
			name := str()
			d.sb.Add(name, str())
		}
		d.sb.Sort()
		return d.sb.Labels()
	}
	var b Batch
	nser := r.count(4)
	if nser > 0 {
		b.Series = make([]Series, 0, nser)
	}
	var prevT int64
	for i := 0; i < nser && r.err == nil; i++ {
		var s Series
		s.Labels = readLabels()
		if n := r.count(2); n > 0 {
			s.Samples = make([]Sample, n)
			for j := range s.Samples {
				prevT += r.varint()
				s.Samples[j] = Sample{T: prevT, V: r.value()}
			}
		}
		if n := r.count(16); n > 0 {
			s.Histograms = make([]Histogram, n)
			for j := range s.Histograms {
				prevT += r.varint()
				s.Histograms[j] = r.histogram(prevT)
			}
		}
		if n := r.count(10); n > 0 {
			s.Exemplars = make([]Exemplar, n)
			for j := range s.Exemplars {
				ls := readLabels()
				t := r.varint()
				s.Exemplars[j] = Exemplar{Labels: ls, T: t, V: math.Float64frombits(r.u64())}
			}
		}
		b.Series = append(b.Series, s)
	}
	if n := r.count(4); n > 0 {
		b.Metadata = make([]Metadata, n)
		for i := range b.Metadata {
			b.Metadata[i] = Metadata{MetricFamily: str(), Type: MetricType(str()), Help: str(), Unit: str()}
		}
	}
	if r.err == nil && r.left() != 0 {
		r.fail(fmt.Sprintf("%d trailing bytes", r.left()))
	}
	if r.err != nil {
		return Batch{}, r.err
	}
	return b, nil
}

// reader reads the row body with a sticky error: after the first failure
// every read returns zero, so decode loops end without further checks.
//
// It advances an offset rather than reslicing b: assigning a resliced b
// writes a pointer, and the decode closures reach the reader through a
// pointer, so each read paid a write barrier while the collector marked.
type reader struct {
	b   []byte
	off int // b[off:] is what is left to read
	err error
}

// left is how many bytes are left to read.
func (r *reader) left() int { return len(r.b) - r.off }

func (r *reader) fail(detail string) {
	if r.err == nil {
		r.err = corruptRow(detail, nil)
	}
	r.off = len(r.b)
}

// uvarint reads one uvarint. Most of a row's are one byte (string
// references, counts, small deltas): that case is read here, without
// binary.Uvarint's loop. After a failure nothing is left, so the sticky
// error is kept by the slow path.
func (r *reader) uvarint() uint64 {
	if r.off < len(r.b) {
		if c := r.b[r.off]; c < 0x80 {
			r.off++
			return uint64(c)
		}
	}
	return r.uvarintSlow()
}

func (r *reader) uvarintSlow() uint64 {
	if r.err != nil {
		return 0
	}
	// Two bytes (up to 16,383: a series table's symbol references, which
	// were most of a catalog index's parse at 170 k series) without the
	// loop either. Only uvarint calls this: b[off] is a continuation byte.
	if r.off+1 < len(r.b) {
		if c := r.b[r.off+1]; c < 0x80 {
			v := uint64(r.b[r.off]&0x7f) | uint64(c)<<7
			r.off += 2
			return v
		}
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.fail("bad uvarint")
		return 0
	}
	r.off += n
	return v
}

// varint reads one zigzag varint, one byte without a loop, as uvarint.
func (r *reader) varint() int64 {
	if r.off < len(r.b) {
		if c := r.b[r.off]; c < 0x80 {
			r.off++
			return int64(c>>1) ^ -int64(c&1)
		}
	}
	return r.varintSlow()
}

func (r *reader) varintSlow() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b[r.off:])
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.off += n
	return v
}

// count reads a length whose elements take at least minBytes each, and
// refuses one the remaining input cannot hold: the allocation bound.
func (r *reader) count(minBytes int) int {
	v := r.uvarint()
	if r.err != nil {
		return 0
	}
	if v > uint64(r.left()/minBytes) {
		r.fail(fmt.Sprintf("count %d exceeds the %d bytes left", v, r.left()))
		return 0
	}
	return int(v)
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n > r.left() {
		r.fail("short input")
		return nil
	}
	out := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return out
}

func (r *reader) u64() uint64 {
	b := r.bytes(8)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}

func (r *reader) byte1() byte {
	b := r.bytes(1)
	if b == nil {
		return 0
	}
	return b[0]
}

func (r *reader) value() float64 {
	h := r.uvarint()
	switch {
	case h == 1:
		return math.Float64frombits(r.u64())
	case h&1 == 1:
		r.fail("bad value tag")
		return 0
	}
	i := unzigzag(h >> 1)
	if i > maxInt53 || i < -maxInt53 {
		r.fail("integer value out of range")
		return 0
	}
	return float64(i)
}

func (r *reader) int32() int32 {
	v := r.varint()
	if v < math.MinInt32 || v > math.MaxInt32 {
		r.fail("int32 out of range")
		return 0
	}
	return int32(v)
}

func (r *reader) spans() []histogram.Span {
	n := r.count(2)
	if n == 0 {
		return nil
	}
	out := make([]histogram.Span, n)
	for i := range out {
		out[i].Offset = r.int32()
		l := r.uvarint()
		if l > math.MaxUint32 {
			r.fail("span length out of range")
		}
		out[i].Length = uint32(l)
	}
	return out
}

func (r *reader) ints() []int64 {
	n := r.count(1)
	if n == 0 {
		return nil
	}
	out := make([]int64, n)
	for i := range out {
		out[i] = r.varint()
	}
	return out
}

func (r *reader) floats() []float64 {
	n := r.count(8)
	if n == 0 {
		return nil
	}
	out := make([]float64, n)
	for i := range out {
		out[i] = math.Float64frombits(r.u64())
	}
	return out
}

func (r *reader) histogram(t int64) Histogram {
	flags := r.byte1()
	if flags&^(histFlagFloat|3<<histHintShift) != 0 {
		r.fail("bad histogram flags")
		return Histogram{T: t}
	}
	hint := histogram.CounterResetHint(flags >> histHintShift & 3)
	schema := r.int32()
	zt := math.Float64frombits(r.u64())
	if flags&histFlagFloat == 0 {
		h := &histogram.Histogram{CounterResetHint: hint, Schema: schema, ZeroThreshold: zt}
		h.ZeroCount = r.uvarint()
		h.Count = r.uvarint()
		h.Sum = math.Float64frombits(r.u64())
		h.PositiveSpans = r.spans()
		h.NegativeSpans = r.spans()
		h.PositiveBuckets = r.ints()
		h.NegativeBuckets = r.ints()
		h.CustomValues = r.floats()
		return Histogram{T: t, H: h}
	}
	h := &histogram.FloatHistogram{CounterResetHint: hint, Schema: schema, ZeroThreshold: zt}
	h.ZeroCount = math.Float64frombits(r.u64())
	h.Count = math.Float64frombits(r.u64())
	h.Sum = math.Float64frombits(r.u64())
	h.PositiveSpans = r.spans()
	h.NegativeSpans = r.spans()
	h.PositiveBuckets = r.floats()
	h.NegativeBuckets = r.floats()
	h.CustomValues = r.floats()
	return Histogram{T: t, FH: h}
}
