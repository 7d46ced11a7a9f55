package promsample

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/prometheus/model/labels"
)

// SeriesTable is a segment's series, in row order (metric name, then
// labels): each one's labels, Parquet row count and SeriesHash. It is what
// a reader needs to find a series' rows without decoding any label column,
// and what an archive's series index is rebuilt from at open without
// reading any sample.
//
// Encoding (after the format-1 fields of a format-2 index):
//
//	uvarint nSymbols, then each: uvarint len, bytes (sorted, distinct)
//	uvarint nSeries, then per series:
//	  uvarint shared  leading label pairs equal to the previous series'
//	  uvarint n       then n x (uvarint nameSym, uvarint valueSym)
//	  uvarint rows    Parquet rows (0: a series with exemplars only)
//	  8 bytes         SeriesHash, little-endian
//
// Consecutive series of one metric share most of their leading labels, so
// a series costs ~8 bytes of hash and a few bytes of symbol references.
type SeriesTable struct {
	Symbols []string
	pairs   []uint32 // every series' (name, value) symbol ids, concatenated
	off     []uint32 // series i's pairs are pairs[off[i]:off[i+1]]
	Rows    []uint32 // Parquet rows of series i
	Hashes  []uint64 // SeriesHash of series i
}

// Len is the number of series.
func (t *SeriesTable) Len() int { return len(t.Rows) }

// Pairs returns series i's labels as (name, value) symbol ids into
// Symbols, in label order. The slice is shared: read only.
func (t *SeriesTable) Pairs(i int) []uint32 { return t.pairs[t.off[i]:t.off[i+1]] }

// Labels returns series i's labels, built with b.
func (t *SeriesTable) Labels(i int, b *labels.ScratchBuilder) labels.Labels {
	b.Reset()
	p := t.Pairs(i)
	for j := 0; j+1 < len(p); j += 2 {
		b.Add(t.Symbols[p[j]], t.Symbols[p[j+1]])
	}
	return b.Labels()
}

// RowStarts returns, per series, the index of its first Parquet row in the
// segment, and the total as a last element.
func (t *SeriesTable) RowStarts() []int64 {
	out := make([]int64, len(t.Rows)+1)
	for i, n := range t.Rows {
		out[i+1] = out[i] + int64(n)
	}
	return out
}

// SeriesHash is the hash series are keyed by in segment indexes and in the
// series index: xxhash64 of each label's name, 0xff, value and 0xff, in
// label order (0xff never occurs in UTF-8). It is part of the index format
// and must never change.
func SeriesHash(ls labels.Labels) uint64 {
	var h SeriesHasher
	h.Reset()
	ls.Range(func(l labels.Label) { h.Add(l.Name, l.Value) })
	return h.Sum()
}

// SeriesHasher computes SeriesHash one label at a time, for a caller that
// has the labels in another form (a decoder reading them off the wire).
// Labels must be added in label order, without empty values. The zero
// value is ready to use.
//
// A label set that fits buf (nearly all do) is hashed in one call over
// its bytes: streaming them into the digest, two small writes a label,
// cost four times as much, and the hash is taken for every series a
// request does not find by its predecessor, every series added and every
// series of every seal. A longer set streams what does not fit; the
// digest's value is the same either way (xxhash of the concatenation).
type SeriesHasher struct {
	n    int  // bytes of buf not yet written to d
	long bool // d holds a prefix of the labels' bytes
	d    xxhash.Digest
	buf  [256]byte
}

// Reset starts a new label set.
func (h *SeriesHasher) Reset() { h.n, h.long = 0, false }

// Add adds one label.
func (h *SeriesHasher) Add(name, value string) {
	need := len(name) + len(value) + 2
	if h.n+need > len(h.buf) {
		h.spill()
		if need > len(h.buf) {
			h.d.WriteString(name)
			h.d.Write(sep)
			h.d.WriteString(value)
			h.d.Write(sep)
			return
		}
	}
	n := h.n
	n += copy(h.buf[n:], name)
	h.buf[n] = 0xff
	n++
	n += copy(h.buf[n:], value)
	h.buf[n] = 0xff
	h.n = n + 1
}

// spill writes buf's bytes to the digest, starting it on the first spill.
func (h *SeriesHasher) spill() {
	if !h.long {
		h.d.Reset()
		h.long = true
	}
	h.d.Write(h.buf[:h.n])
	h.n = 0
}

// Sum returns the hash of the labels added since Reset. It may be called
// again, and more labels added after it.
func (h *SeriesHasher) Sum() uint64 {
	if !h.long {
		return xxhash.Sum64(h.buf[:h.n])
	}
	h.spill()
	return h.d.Sum64()
}

var sep = []byte{0xff}

// newSeriesTable builds the table of series: canonical, distinct (the
// collector's, before splitLongSeries cuts any into pieces). symbols are
// the series' strings sorted, and every series' pairs index them
// (collector.finish); the table takes both as they are. Each series'
// pairs then point into the table's copy, so the collector's (cut from
// its slabs) are garbage: the table does not hold a second copy of every
// series' labels while the segment is written.
func newSeriesTable(series []*seriesData, symbols []string) *SeriesTable {
	// Sized once: a row per series, and every series' pairs.
	npairs := 0
	for _, s := range series {
		npairs += len(s.pairs)
	}
	t := &SeriesTable{Symbols: symbols, pairs: make([]uint32, 0, npairs), off: make([]uint32, 1, len(series)+1),
		Rows: make([]uint32, 0, len(series)), Hashes: make([]uint64, 0, len(series))}
	var h SeriesHasher
	for _, s := range series {
		at := len(t.pairs)
		t.pairs = append(t.pairs, s.pairs...) // within its capacity: earlier series' pairs stay where they point
		t.off = append(t.off, uint32(len(t.pairs)))
		t.Rows = append(t.Rows, uint32(s.numRows()))
		h.Reset()
		for j := 0; j+1 < len(s.pairs); j += 2 {
			h.Add(symbols[s.pairs[j]], symbols[s.pairs[j+1]])
		}
		t.Hashes = append(t.Hashes, h.Sum()) // SeriesHash of its labels
		s.pairs = t.pairs[at:len(t.pairs):len(t.pairs)]
	}
	return t
}

// encodedLen is len(t.appendBinary(nil)).
func (t *SeriesTable) encodedLen() int {
	n := uvarintLen(uint64(len(t.Symbols)))
	for _, s := range t.Symbols {
		n += uvarintLen(uint64(len(s))) + len(s)
	}
	n += uvarintLen(uint64(len(t.Rows)))
	var prev []uint32
	for i := range t.Rows {
		p := t.Pairs(i)
		shared := sharedPairs(p, prev)
		n += uvarintLen(uint64(shared/2)) + uvarintLen(uint64((len(p)-shared)/2))
		for _, id := range p[shared:] {
			n += uvarintLen(uint64(id))
		}
		n += uvarintLen(uint64(t.Rows[i])) + 8
		prev = p
	}
	return n
}

// sharedPairs returns how many leading ids p and prev share, whole pairs.
func sharedPairs(p, prev []uint32) int {
	shared := 0
	for shared+1 < len(p) && shared+1 < len(prev) && p[shared] == prev[shared] && p[shared+1] == prev[shared+1] {
		shared += 2
	}
	return shared
}

func (t *SeriesTable) appendBinary(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(t.Symbols)))
	for _, s := range t.Symbols {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, uint64(len(t.Rows)))
	var prev []uint32
	for i := range t.Rows {
		p := t.Pairs(i)
		shared := sharedPairs(p, prev)
		b = binary.AppendUvarint(b, uint64(shared/2))
		b = binary.AppendUvarint(b, uint64((len(p)-shared)/2))
		for _, id := range p[shared:] {
			b = binary.AppendUvarint(b, uint64(id))
		}
		b = binary.AppendUvarint(b, uint64(t.Rows[i]))
		b = binary.LittleEndian.AppendUint64(b, t.Hashes[i])
		prev = p
	}
	return b
}

// SeriesFunc receives the series of a table as ParseIndexFunc parses it,
// in table order: its position, SeriesHash, and labels as (name, value)
// ids into symbols. symbols is the table's, the same slice at every call,
// and is never written after; pairs belongs to the parser: read it during
// the call only.
type SeriesFunc func(symbols []string, i int, hash uint64, pairs []uint32)

// parseSeriesTable reads a series table; failures go to r.err. Without
// withLabels it checks the labels (every symbol reference in range, every
// shared prefix no longer than the series before it had) and keeps only
// Rows and Hashes, as DropLabels leaves a table; then fn, if not nil, is
// handed each series' labels as they are read.
func parseSeriesTable(r *reader, withLabels bool, fn SeriesFunc) *SeriesTable {
	t := &SeriesTable{}
	nsym := r.count(1)
	var syms []string
	if withLabels || fn != nil {
		syms = make([]string, 0, nsym)
	}
	for i := 0; i < nsym && r.err == nil; i++ {
		b := r.bytes(r.count(1))
		if syms != nil {
			syms = append(syms, string(b))
		}
	}
	if withLabels {
		t.Symbols = syms
	}
	ns := r.count(11) // a series takes at least 3 varints and a hash
	t.Rows = make([]uint32, 0, ns)
	t.Hashes = make([]uint64, 0, ns)
	t.off = []uint32{0}
	if withLabels {
		t.off = make([]uint32, 1, ns+1)
	}
	var prev []uint32
	prevLen := 0     // len(prev), which is all !withLabels keeps of it
	var cur []uint32 // fn's: the series' pairs, its shared prefix left in place
	for i := 0; i < ns && r.err == nil; i++ {
		shared := r.uvarint()
		if r.err == nil && shared > uint64(prevLen/2) {
			r.fail(fmt.Sprintf("series %d shares %d labels with one of %d", i, shared, prevLen/2))
			break
		}
		start := len(t.pairs)
		if withLabels {
			t.pairs = append(t.pairs, prev[:2*shared]...)
		}
		if fn != nil {
			cur = cur[:2*shared] // len(cur) is prevLen
		}
		k := r.count(2)
		for j := 0; j < 2*k && r.err == nil; j++ {
			id := r.uvarint()
			if r.err == nil && id >= uint64(nsym) {
				r.fail("symbol reference out of range")
			}
			if withLabels {
				t.pairs = append(t.pairs, uint32(id))
			} else if fn != nil {
				cur = append(cur, uint32(id))
			}
		}
		rows := r.uvarint()
		if r.err == nil && rows > MaxRowGroupRows*1024 {
			r.fail(fmt.Sprintf("series %d claims %d rows", i, rows))
		}
		t.Rows = append(t.Rows, uint32(rows))
		t.Hashes = append(t.Hashes, r.u64())
		prevLen = 2*int(shared) + 2*k
		if !withLabels {
			if fn != nil && r.err == nil {
				fn(syms, i, t.Hashes[i], cur)
			}
			continue
		}
		t.off = append(t.off, uint32(len(t.pairs)))
		prev = t.pairs[start:]
		if i == 0 && r.err == nil {
			// Series of one stream mostly have as many labels as the
			// first: size for that, so that a table of a hundred
			// thousand series is not regrown twenty times (bounded by
			// what is left to read, so a corrupt count cannot make it
			// allocate more than a few times the table's size).
			t.pairs = slices.Grow(t.pairs, min((ns-1)*len(prev), 4*r.left()))
			prev = t.pairs[start:]
		}
	}
	return t
}

// DropLabels forgets the table's labels, keeping what a reader needs to
// find a series' rows (Rows, Hashes): for a reader that caches tables.
func (t *SeriesTable) DropLabels() {
	t.Symbols, t.pairs = nil, nil
	t.off = []uint32{0} // not t.off[:1:1], which would keep its array
}

// Bytes is the table's memory.
func (t *SeriesTable) Bytes() int64 {
	n := int64(cap(t.pairs)+cap(t.off)+cap(t.Rows))*4 + int64(cap(t.Hashes))*8
	for _, s := range t.Symbols {
		n += int64(len(s)) + 16
	}
	return n
}
