package promsample

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/klauspost/compress/s2"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// Anchored rows (row format 2).
//
// A format-1 row carries the label set of every series it holds, so a
// request of one sample per series is mostly label bytes. A format-2 row
// belongs to an epoch of its stream and names a series by a local id: the
// first row of the epoch that holds a series carries its labels (an
// anchor) and every later row of the epoch refers to it by that id. A
// sender repeats the same series every scrape, so in the steady state a
// row is samples and one-byte references.
//
// The design's rule still holds: an encoder works from the rows alone.
// An epoch's rows are decodable without anything else as long as the
// epoch's earlier rows are there, and an epoch never straddles a segment:
// the Encoder seals only closed epochs (closedPrefix), so the live tail
// above a stream's watermark always starts at an epoch's first row, and a
// reader in another process decodes it with none of the writer's memory.
// A seal "re-anchors" by construction: the writer starts a new epoch for
// every seal, and the labels travel again in its first rows.
//
// What the writer of rows must guarantee (receiver.Ingester does):
//
//  1. Epochs are sequential in a stream: every row of an epoch has a
//     lower ts than every row of the stream's next epoch. A row of another
//     epoch, or a close marker, therefore closes every epoch before it.
//  2. A row refers to a local id only once the row anchoring it has
//     committed; so every reference points at a row with a lower ts.
//  3. Epoch ids are never reused in a stream (they are random 64-bit
//     values, so a restarted writer cannot continue a crashed one's epoch).
//
// Layout:
//
//	byte 0     rowFormatV2
//	uvarint    kind: rowKindData or rowKindClose
//	uvarint    epoch
//	close:     nothing more
//	data:      uvarint firstLocal, then an S2 block of the body:
//
//	uvarint nStrings, then each string: uvarint len, bytes   (anchors, exemplars, metadata)
//	uvarint nAnchors, then per anchor: uvarint n, n x (nameRef, valueRef)
//	                  (anchor i is local id firstLocal+i)
//	uvarint nSeries, then per series:
//	  varint  local id minus the previous series' (the first: minus 0)
//	  samples, histograms and exemplars exactly as format 1
//	uvarint nMetadata, then n x (familyRef, typeRef, helpRef, unitRef)
const rowFormatV2 = 2

// Row kinds of format 2.
const (
	rowKindData  = 0
	rowKindClose = 1
)

// MaxEpochSeries bounds the local ids of one epoch. A writer closes an
// epoch long before (a seal's worth of rows); a reader refuses a row
// claiming more, which bounds what a corrupt row can make it allocate.
const MaxEpochSeries = 1 << 24

// AnchoredRow is one format-2 data row: one request's data for one stream,
// in one epoch.
type AnchoredRow struct {
	Epoch uint64
	// FirstLocal is the local id of the row's first anchor; anchor i is
	// FirstLocal+i.
	FirstLocal uint32
	// Anchors are the label sets this row introduces to the epoch, unless
	// Interned is set.
	Anchors []labels.Labels
	// Interned, when set, gives the anchors instead (and Anchors must be
	// empty): a caller that holds its label sets interned encodes them
	// without building a labels.Labels each. Both encode to the same
	// content.
	Interned *InternedAnchors
	// Series refer to series by local id: anchored by this row or by an
	// earlier, committed row of the epoch.
	Series   []RowSeries
	Metadata []Metadata
}

// InternedAnchors are a row's anchors as symbol ids of the caller's
// interned strings (the receiver's series index): anchor i's labels are
// Pairs[Ends[i-1]:Ends[i]] (from 0 for the first), (name, value) ids in
// label order, sorted by name as labels.Labels are. Symbol returns an id's
// string; it is called once per distinct id in a row.
type InternedAnchors struct {
	Symbol func(id uint32) string
	Pairs  []uint32
	Ends   []uint32
}

// Reset empties a, keeping its capacity.
func (a *InternedAnchors) Reset() { a.Pairs, a.Ends = a.Pairs[:0], a.Ends[:0] }

// Add appends an anchor given as (name, value) symbol ids.
func (a *InternedAnchors) Add(pairs []uint32) {
	a.Pairs = append(a.Pairs, pairs...)
	a.Ends = append(a.Ends, uint32(len(a.Pairs)))
}

// numAnchors is how many anchors r carries.
func (r *AnchoredRow) numAnchors() int {
	if r.Interned != nil {
		return len(r.Interned.Ends)
	}
	return len(r.Anchors)
}

// RowSeries is one series of an anchored row.
type RowSeries struct {
	Local      uint32
	Samples    []Sample
	Histograms []Histogram
	Exemplars  []Exemplar
}

// RowEncoder encodes anchored rows, reusing its buffers between calls. The
// zero value is ready; it is not safe for concurrent use.
type RowEncoder struct {
	tab  []byte
	body []byte
	raw  []byte
	comp []byte
	ids  map[string]uint32
	// syms maps an interned anchor's symbol id to its string's id in the
	// row (InternedAnchors): a uint32 key, where ids hashes the string.
	// The two do not share entries, so a string that an interned anchor
	// and an exemplar or metadata both use is in the row's table twice; a
	// reader resolves either id to the same string.
	syms RowIDMap
}

func (e *RowEncoder) ref(body []byte, s string) []byte {
	id, ok := e.ids[s]
	if !ok {
		id = uint32(len(e.ids) + e.syms.Len())
		e.ids[s] = id
		e.tab = binary.AppendUvarint(e.tab, uint64(len(s)))
		e.tab = append(e.tab, s...)
	}
	return binary.AppendUvarint(body, uint64(id))
}

// symbol appends the row's id of the caller's symbol id, adding its
// string to the table on first sight.
func (e *RowEncoder) symbol(body []byte, id uint32, str func(uint32) string) []byte {
	n, ok := e.syms.Get(id)
	if !ok {
		s := str(id)
		n = uint32(len(e.ids) + e.syms.Len())
		e.syms.Set(id, n)
		e.tab = binary.AppendUvarint(e.tab, uint64(len(s)))
		e.tab = append(e.tab, s...)
	}
	return binary.AppendUvarint(body, uint64(n))
}

// interned appends the anchors of a as labels are written: a count of
// labels, then (name, value) string ids.
func (e *RowEncoder) interned(body []byte, a *InternedAnchors) []byte {
	from := uint32(0)
	for _, end := range a.Ends {
		p := a.Pairs[from:end]
		body = binary.AppendUvarint(body, uint64(len(p)/2))
		for _, id := range p {
			body = e.symbol(body, id, a.Symbol)
		}
		from = end
	}
	return body
}

func (e *RowEncoder) labels(body []byte, ls labels.Labels) []byte {
	body = binary.AppendUvarint(body, uint64(ls.Len()))
	ls.Range(func(l labels.Label) {
		body = e.ref(body, l.Name)
		body = e.ref(body, l.Value)
	})
	return body
}

// Append appends the encoding of r to dst and returns the extended slice.
// It refuses local ids at or above MaxEpochSeries.
func (e *RowEncoder) Append(dst []byte, r *AnchoredRow) ([]byte, error) {
	na := r.numAnchors()
	if uint64(r.FirstLocal)+uint64(na) > MaxEpochSeries {
		return dst, fmt.Errorf("%w: local ids up to %d exceed %d", ErrInvalidBatch, uint64(r.FirstLocal)+uint64(na), MaxEpochSeries)
	}
	if r.Interned != nil && len(r.Anchors) > 0 {
		return dst, fmt.Errorf("%w: anchors given both as labels and interned", ErrInvalidBatch)
	}
	if e.ids == nil {
		e.ids = make(map[string]uint32)
	}
	clear(e.ids)
	e.syms.Reset()
	e.tab = e.tab[:0]
	body := e.body[:0]
	body = binary.AppendUvarint(body, uint64(na))
	if r.Interned != nil {
		body = e.interned(body, r.Interned)
	}
	for _, ls := range r.Anchors {
		body = e.labels(body, ls)
	}
	body = binary.AppendUvarint(body, uint64(len(r.Series)))
	var prevT int64
	var prevLocal uint32
	for i := range r.Series {
		s := &r.Series[i]
		if s.Local >= MaxEpochSeries {
			e.body = body
			return dst, fmt.Errorf("%w: local id %d exceeds %d", ErrInvalidBatch, s.Local, MaxEpochSeries)
		}
		body = binary.AppendVarint(body, int64(s.Local)-int64(prevLocal))
		prevLocal = s.Local
		body = binary.AppendUvarint(body, uint64(len(s.Samples)))
		for _, smp := range s.Samples {
			body = binary.AppendVarint(body, smp.T-prevT)
			prevT = smp.T
			body = appendValue(body, smp.V)
		}
		body = binary.AppendUvarint(body, uint64(len(s.Histograms)))
		for _, h := range s.Histograms {
			body = binary.AppendVarint(body, h.T-prevT)
			prevT = h.T
			var err error
			if body, err = appendHistogram(body, h); err != nil {
				e.body = body
				return dst, err
			}
		}
		body = binary.AppendUvarint(body, uint64(len(s.Exemplars)))
		for _, ex := range s.Exemplars {
			body = e.labels(body, ex.Labels)
			body = binary.AppendVarint(body, ex.T)
			body = binary.LittleEndian.AppendUint64(body, math.Float64bits(ex.V))
		}
	}
	body = binary.AppendUvarint(body, uint64(len(r.Metadata)))
	for _, m := range r.Metadata {
		body = e.ref(body, m.MetricFamily)
		body = e.ref(body, string(m.Type))
		body = e.ref(body, m.Help)
		body = e.ref(body, m.Unit)
	}
	e.body = body
	e.raw = binary.AppendUvarint(e.raw[:0], uint64(len(e.ids)+e.syms.Len()))
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
		dst = make([]byte, 0, 3*binary.MaxVarintLen64+len(enc))
	}
	dst = appendRowHeader(dst, rowKindData, r.Epoch)
	dst = binary.AppendUvarint(dst, uint64(r.FirstLocal))
	dst = append(dst, enc...)
	if cap(e.comp) > maxKeptScratch {
		e.comp = nil
	}
	if cap(e.raw) > maxKeptScratch {
		e.raw, e.body, e.tab = nil, nil, nil
	}
	return dst, nil
}

func appendRowHeader(dst []byte, kind int, epoch uint64) []byte {
	dst = append(dst, rowFormatV2)
	dst = binary.AppendUvarint(dst, uint64(kind))
	return binary.AppendUvarint(dst, epoch)
}

// AppendEpochClose appends an epoch close marker: a row that says epoch
// (and, epochs being sequential, every epoch of the stream before it) has
// no more rows. A writer appends one before it asks for a seal, so that
// the seal can take the epoch whole (see closedPrefix).
func AppendEpochClose(dst []byte, epoch uint64) []byte {
	return appendRowHeader(dst, rowKindClose, epoch)
}

// RowHeader is what a row says about itself without decompressing.
type RowHeader struct {
	// Format is 1 (self-contained: every series carries its labels) or 2
	// (anchored, in Epoch).
	Format int
	// Close marks a format-2 epoch close marker, which holds no data.
	Close bool
	Epoch uint64
	// FirstLocal is the local id of a format-2 data row's first anchor.
	FirstLocal uint32
	// body is where the S2 block starts.
	body int
}

// ParseRowHeader reads a row's header. Errors match ErrCorruptRow or
// ErrUnsupportedVersion.
func ParseRowHeader(row []byte) (RowHeader, error) {
	if len(row) == 0 {
		return RowHeader{}, corruptRow("empty row", nil)
	}
	switch row[0] {
	case rowFormatV1:
		return RowHeader{Format: 1, body: 1}, nil
	case rowFormatV2:
	default:
		return RowHeader{}, fmt.Errorf("%w: row format %d", ErrUnsupportedVersion, row[0])
	}
	r := reader{b: row, off: 1}
	kind := r.uvarint()
	h := RowHeader{Format: 2, Epoch: r.uvarint()}
	switch {
	case r.err != nil:
		return RowHeader{}, corruptRow("row header", r.err)
	case kind == rowKindClose:
		if r.left() != 0 {
			return RowHeader{}, corruptRow("close marker with a body", nil)
		}
		h.Close = true
		return h, nil
	case kind != rowKindData:
		return RowHeader{}, corruptRow(fmt.Sprintf("row kind %d", kind), nil)
	}
	first := r.uvarint()
	if r.err != nil {
		return RowHeader{}, corruptRow("row header", r.err)
	}
	if first >= MaxEpochSeries {
		return RowHeader{}, corruptRow(fmt.Sprintf("first local id %d exceeds %d", first, MaxEpochSeries), nil)
	}
	h.FirstLocal, h.body = uint32(first), r.off
	return h, nil
}

// closedPrefix returns how many of rows (a run of a stream's rows, by ts)
// form closed units, the most a segment may take of them. A format-1 row
// is a unit of its own. A format-2 epoch is closed by a close marker, or
// by any later row of another epoch or format: epochs are sequential, so
// no row of it can follow (rule 1 above). The open epoch at the end of
// rows is left for a later seal, which will find it closed; sealing it now
// would leave its next rows referring to anchors no live row holds.
func closedPrefix(rows []archive.Row) (int, error) {
	closed := 0
	var open bool // rows[closed:i] are an open epoch's
	var epoch uint64
	for i := range rows {
		h, err := ParseRowHeader(rows[i].Data)
		if err != nil {
			return 0, fmt.Errorf("row ts %d: %w", rows[i].TS, err)
		}
		switch {
		case h.Format == 1:
			closed, open = i+1, false
		case h.Close:
			closed, open = i+1, false
		case open && h.Epoch == epoch:
			// the open epoch goes on
		default:
			// a new epoch: it closes whatever came before
			closed, open, epoch = i, true, h.Epoch
		}
	}
	return closed, nil
}

// decodeAnchored decodes the body of a format-2 data row (h from
// ParseRowHeader) into out, whose slices it reuses. Strings do not alias
// row; samples are appended to samples, which it returns grown.
func (d *RowDecoder) decodeAnchored(row []byte, h RowHeader, out *DecodedRow) error {
	raw, err := decompressBlock(&d.raw, row[h.body:])
	if err != nil {
		return err
	}
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
	na := r.count(1)
	if r.err == nil && uint64(h.FirstLocal)+uint64(na) > MaxEpochSeries {
		r.fail(fmt.Sprintf("anchors up to local id %d exceed %d", uint64(h.FirstLocal)+uint64(na), MaxEpochSeries))
	}
	for i := 0; i < na && r.err == nil; i++ {
		out.Anchors = append(out.Anchors, readLabels())
	}
	nser := r.count(4)
	var prevT int64
	var local int64
	for i := 0; i < nser && r.err == nil; i++ {
		local += r.varint()
		if r.err == nil && (local < 0 || local >= MaxEpochSeries) {
			r.fail(fmt.Sprintf("local id %d out of range", local))
			break
		}
		s := RowSeries{Local: uint32(local)}
		if n := r.count(2); n > 0 {
			start := len(d.samples)
			for range n {
				prevT += r.varint()
				d.samples = append(d.samples, Sample{T: prevT, V: r.value()})
			}
			s.Samples = d.samples[start:len(d.samples):len(d.samples)]
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
		out.Series = append(out.Series, s)
	}
	if n := r.count(4); n > 0 {
		for range n {
			m := Metadata{MetricFamily: str(), Type: MetricType(str()), Help: str(), Unit: str()}
			if r.err == nil {
				out.Metadata = append(out.Metadata, m)
			}
		}
	}
	if r.err == nil && r.left() != 0 {
		r.fail(fmt.Sprintf("%d trailing bytes", r.left()))
	}
	return r.err
}

// decompressBlock decompresses an S2 block into *buf (grown as needed),
// refusing one that claims more than MaxBatchBytes.
func decompressBlock(buf *[]byte, block []byte) ([]byte, error) {
	n, err := s2.DecodedLen(block)
	if err != nil {
		return nil, corruptRow("compressed header", err)
	}
	if n > MaxBatchBytes {
		return nil, fmt.Errorf("%w: row claims %d bytes uncompressed (max %d)", ErrTooLarge, n, MaxBatchBytes)
	}
	if cap(*buf) < n {
		*buf = make([]byte, n)
	}
	raw, err := s2.Decode((*buf)[:n], block)
	if err != nil {
		return nil, corruptRow("decompress", err)
	}
	return raw, nil
}

// anchorIDs reads an anchor's labels as the collector's symbol ids, in
// label order: the pairs seriesOf would make of the labels.Labels that
// readLabels builds, without building it. A row's strings are interned in
// the collector's table as the row is read (rc.local), so building labels
// only for seriesOf to intern them again was a tenth of the CPU of a seal
// at 1 M series. The pairs are put in order as labels.ScratchBuilder.Sort
// does (slices.SortFunc by name), so even a set that repeats a name comes
// out as it would.
func (rc *rowCollector) anchorIDs(r *reader, strID func() uint32) []uint32 {
	n := r.count(2)
	pairs := rc.anchor[:0]
	sorted := true
	for i := 0; i < n && r.err == nil; i++ {
		name := strID()
		p := labelIDs{name, strID()}
		if r.err != nil {
			return nil // the ids read are not to be looked up
		}
		// Strictly increasing names need no sort; a repeated name is
		// sorted as ScratchBuilder.Sort would, which may swap the two.
		if len(pairs) > 0 && rc.strs[pairs[len(pairs)-1].name] >= rc.strs[name] {
			sorted = false
		}
		pairs = append(pairs, p)
	}
	if r.err != nil {
		return nil
	}
	if !sorted {
		slices.SortFunc(pairs, func(a, b labelIDs) int { return strings.Compare(rc.strs[a.name], rc.strs[b.name]) })
	}
	ids := rc.ids[:0]
	for _, p := range pairs {
		ids = append(ids, p.name, p.value)
	}
	rc.anchor, rc.ids = pairs, ids
	return ids
}

// labelIDs is one label as the collector's symbol ids.
type labelIDs struct{ name, value uint32 }

// DecodedRow is one row as the tail readers see it, whatever its format:
// a format-1 row reads as an epoch of its own in which every series is
// anchored (Anchors[i] is Series[i]'s labels, local id i).
type DecodedRow struct {
	Header RowHeader
	// Anchors introduce label sets: anchor i has local id
	// Header.FirstLocal+i.
	Anchors  []labels.Labels
	Series   []RowSeries
	Metadata []Metadata
}

// RowDecoder decodes rows of either format into DecodedRows, reusing its
// buffers. The zero value is ready; it is not safe for concurrent use.
// Samples of a decoded row share one slab that the next Decode reuses;
// labels, histograms and exemplars are the caller's to keep.
type RowDecoder struct {
	raw     []byte
	strs    []string
	sb      labels.ScratchBuilder
	samples []Sample
	v1      BatchDecoder
}

// Decode decodes one row into out (its slices are reused). Errors match
// ErrCorruptRow, ErrUnsupportedVersion or ErrTooLarge; it never panics.
func (d *RowDecoder) Decode(row []byte, out *DecodedRow) error {
	*out = DecodedRow{Anchors: out.Anchors[:0], Series: out.Series[:0], Metadata: out.Metadata[:0]}
	d.samples = d.samples[:0]
	h, err := ParseRowHeader(row)
	if err != nil {
		return err
	}
	out.Header = h
	switch {
	case h.Format == 1:
		b, err := d.v1.Decode(row)
		if err != nil {
			return err
		}
		for i, s := range b.Series {
			out.Anchors = append(out.Anchors, s.Labels)
			out.Series = append(out.Series, RowSeries{Local: uint32(i), Samples: s.Samples, Histograms: s.Histograms, Exemplars: s.Exemplars})
		}
		out.Metadata = append(out.Metadata, b.Metadata...)
		return nil
	case h.Close:
		return nil
	}
	return d.decodeAnchored(row, h, out)
}

// addAnchored decodes a format-2 data row into the collector: what add
// does for format 1, with a series found by its local id in the epoch's
// table instead of by its label bytes.
func (rc *rowCollector) addAnchored(row []byte, h RowHeader) error {
	raw, err := decompressBlock(&rc.raw, row[h.body:])
	if err != nil {
		return err
	}
	r := reader{b: raw}
	ns := r.count(1)
	rc.local = rc.local[:0]
	for i := 0; i < ns && r.err == nil; i++ {
		l := r.count(1)
		b := r.bytes(l)
		id, ok := rc.strID[string(b)]
		if !ok && r.err == nil {
			id = uint32(len(rc.strs))
			s := string(b)
			rc.strs = append(rc.strs, s)
			rc.strID[s] = id
		}
		rc.local = append(rc.local, id)
	}
	strID := func() uint32 {
		id := r.uvarint()
		if r.err != nil {
			return 0
		}
		if id >= uint64(len(rc.local)) {
			r.fail("string reference out of range")
			return 0
		}
		return rc.local[id]
	}
	str := func() string {
		id := strID()
		if r.err != nil {
			return ""
		}
		return rc.strs[id]
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
	table := rc.epochs[h.Epoch]
	na := r.count(1)
	if r.err == nil && uint64(h.FirstLocal)+uint64(na) > MaxEpochSeries {
		r.fail(fmt.Sprintf("anchors up to local id %d exceed %d", uint64(h.FirstLocal)+uint64(na), MaxEpochSeries))
	}
	if end := int(h.FirstLocal) + na; r.err == nil && end > len(table) {
		table = append(table, make([]*seriesData, end-len(table))...)
	}
	for i := 0; i < na && r.err == nil; i++ {
		ids := rc.anchorIDs(&r, strID)
		if r.err != nil {
			break
		}
		if rc.fresh {
			table[int(h.FirstLocal)+i] = rc.c.addFresh(ids)
		} else {
			table[int(h.FirstLocal)+i] = rc.c.seriesOfIDs(ids)
		}
	}
	rc.epochs[h.Epoch] = table
	nser := r.count(4)
	var prevT int64
	var local int64
	for i := 0; i < nser && r.err == nil; i++ {
		local += r.varint()
		if r.err == nil && (local < 0 || local >= MaxEpochSeries) {
			r.fail(fmt.Sprintf("local id %d out of range", local))
			break
		}
		var sd *seriesData
		if local < int64(len(table)) {
			sd = table[local]
		}
		n := r.count(2)
		switch {
		case sd == nil:
			for range n {
				prevT += r.varint()
				r.value()
			}
			rc.unresolved += int64(n)
		case rc.c.pack:
			for range n {
				prevT += r.varint()
				sd.packed.add(&rc.c.arena, prevT, r.value())
			}
		default:
			sd.samples = slices.Grow(sd.samples, n)
			for range n {
				prevT += r.varint()
				sd.samples = append(sd.samples, Sample{T: prevT, V: r.value()})
			}
		}
		if n := r.count(16); n > 0 {
			for range n {
				prevT += r.varint()
				h := r.histogram(prevT)
				if sd != nil {
					sd.hists = append(sd.hists, h)
				} else {
					rc.unresolved++
				}
			}
		}
		if n := r.count(10); n > 0 {
			for range n {
				ls := readLabels()
				t := r.varint()
				ex := Exemplar{Labels: ls, T: t, V: math.Float64frombits(r.u64())}
				if sd != nil {
					sd.exemplars = append(sd.exemplars, ex)
				} else {
					rc.unresolved++
				}
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
