package promread

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

// A stream's live tail, decoded once and kept.
//
// The live tail is every row of a stream above its sealed watermark. A
// question about a few series must not decode it whole each time: at a
// million series a stream's tail is hundreds of thousands of samples of
// other series. So the tail is decoded row by row as rows arrive (each
// Select first brings it up to its snapshot: sync) into per-series packed
// samples, and a read takes just the series it asks for.
//
// The rows are append-only and keyed by ts, the watermark only rises, and
// retention removes only a prefix, so a tail advances three ways: new rows
// (read from the newest applied ts on), a seal (the parts at or below the
// new watermark leave), an eviction of live rows (the parts below the
// first live row leave). Rows come in units that a seal never splits
// (promsample's closedPrefix: a format-2 epoch, or a format-1 row), and a
// tail part is one epoch or a run of format-1 rows; a run a seal did cut,
// or anything else the tail cannot follow (a row count that does not add
// up), makes the tail start over from the snapshot's rows.
//
// Snapshots of different ages share the tail. One newer than the tail
// moves it forward; one older than it (its watermark below the tail's)
// reads the parts the last seal retired, kept one generation for it, or,
// failing that, decodes its own tail from its snapshot (stale).
type tail struct {
	mu     sync.Mutex
	loc    seriesindex.Loc
	sealed bool  // the stream had a segment when w was applied
	w      int64 // the watermark applied (when sealed)
	rows   int64 // live rows applied
	first  int64 // ts of the first live row applied (rows > 0)
	high   int64 // ts of the newest live row applied (rows > 0)
	parts  []*tailPart
	// retired are the parts the last seal removed, for snapshots older
	// than it (retiredW is the watermark before it).
	retired  []*tailPart
	retiredW int64
	retSeal  bool
	decoded  int64 // rows decoded since the tail was made (tests)
}

// tailPart is the decoded rows of one unit run.
//
// At a million series a stream's open epoch holds ~125 k series with a
// few samples each, so per-series state, not samples, is what the tail's
// memory is made of: a series costs a part a map entry, its bytes (see
// packState) and the 24 bytes of state that appending to them needs.
type tailPart struct {
	epoch      uint64 // format 2
	v1         bool   // a run of format-1 rows
	rows       int64
	firstTS    int64
	lastTS     int64
	closed     bool  // a close marker ended it
	minT, maxT int64 // sample-time span of its samples
	byRef      map[seriesindex.Ref]uint32
	bufs       [][]byte          // per series (byRef's values): its samples, packed
	st         []packState       // per series: where its packing stands
	refs       []seriesindex.Ref // per series: its Ref
	locals     []int32           // format 2: local id -> index in bufs, -1 if none
	extras     map[uint32]*tailExtras
}

type tailExtras struct {
	hists     []promsample.Histogram
	exemplars []promsample.Exemplar
}

func newTailPart(h promsample.RowHeader, ts int64) *tailPart {
	return &tailPart{epoch: h.Epoch, v1: h.Format == 1, firstTS: ts, lastTS: ts, byRef: map[seriesindex.Ref]uint32{},
		minT: math.MaxInt64, maxT: math.MinInt64}
}

// seriesOf returns the index in p.bufs of ref's samples, making it.
func (p *tailPart) seriesOf(ref seriesindex.Ref) uint32 {
	if i, ok := p.byRef[ref]; ok {
		return i
	}
	i := uint32(len(p.bufs))
	p.bufs = append(p.bufs, nil)
	p.st = append(p.st, packState{})
	p.refs = append(p.refs, ref)
	p.byRef[ref] = i
	return i
}

// add appends a sample of series i.
func (p *tailPart) add(i uint32, t int64, v float64) {
	p.minT, p.maxT = min(p.minT, t), max(p.maxT, t)
	p.bufs[i] = p.st[i].append(p.bufs[i], t, v)
}

// packState is where the packing of one series' samples stands. A sample
// is packed as
//
//	varint  the delta of its timestamp's delta (0 for a steady scrape)
//	byte    0: its value's bits equal the previous ones; else 1 + 8*lead
//	        + trail, lead and trail the zero bytes at the top and bottom
//	        of bits XOR previous bits
//	8-lead-trail bytes of (bits XOR previous) >> 8*trail, little-endian
//
// so a steady scrape of a slowly moving value costs 2 to 4 bytes and
// every float keeps its bits. Arithmetic wraps: any int64 time packs.
type packState struct {
	lastT, lastDT int64
	lastBits      uint64
	unordered     bool // a sample came at or before the one before
	n             uint32
}

func (ps *packState) append(b []byte, t int64, v float64) []byte {
	if ps.n > 0 && t <= ps.lastT {
		ps.unordered = true
	}
	ps.n++
	dt := t - ps.lastT
	b = binary.AppendVarint(b, dt-ps.lastDT)
	ps.lastT, ps.lastDT = t, dt
	bits64 := math.Float64bits(v)
	x := bits64 ^ ps.lastBits
	ps.lastBits = bits64
	if x == 0 {
		return append(b, 0)
	}
	lead, trail := bits.LeadingZeros64(x)/8, bits.TrailingZeros64(x)/8
	b = append(b, byte(1+lead*8+trail))
	x >>= 8 * trail
	for range 8 - lead - trail {
		b = append(b, byte(x))
		x >>= 8
	}
	return b
}

// samples returns series i's samples in [mint, maxt], in canonical order
// (by t and value bits, exact duplicates dropped).
func (p *tailPart) samples(i uint32, mint, maxt int64) []promsample.Sample {
	out := make([]promsample.Sample, 0, p.st[i].n)
	var t, dt int64
	var vb uint64
	for b := p.bufs[i]; len(b) > 0; {
		dod, k := binary.Varint(b)
		b = b[k:]
		dt += dod
		t += dt
		h := b[0]
		b = b[1:]
		if h != 0 {
			lead, trail := int(h-1)/8, int(h-1)%8
			var x uint64
			for j := range 8 - lead - trail {
				x |= uint64(b[j]) << (8 * j)
			}
			b = b[8-lead-trail:]
			vb ^= x << (8 * trail)
		}
		if t >= mint && t <= maxt {
			out = append(out, promsample.Sample{T: t, V: math.Float64frombits(vb)})
		}
	}
	if p.st[i].unordered {
		slices.SortFunc(out, compareSample)
		out = slices.CompactFunc(out, sameSample)
	}
	return out
}

// rowSource is what a tail needs of a snapshot: its live rows of the
// stream from a ts on.
type rowSource interface {
	LiveWALRange(source archive.SourceID, stream string, start, end int64) ([]archive.Row, error)
	LiveWAL(source archive.SourceID, stream string) ([]archive.Row, error)
}

// tailView is what a read takes of a tail for its snapshot: the parts
// that hold the snapshot's live rows (and maybe newer ones: a read may
// see rows committed after its snapshot, never fewer than it holds).
type tailView struct {
	t     *tail // nil for a private tail (stale)
	parts []*tailPart
}

// sync brings t to the snapshot whose stream has watermark w (sealed) and
// live rows span, and returns the view a read of that snapshot uses.
// Called with t.mu held.
func (t *tail) sync(x *seriesindex.Index, rs rowSource, src archive.SourceID, stream string, sealed bool, w int64, span archive.Span) (tailView, error) {
	switch {
	case sealed && (!t.sealed || w > t.w):
		// A seal (or the first): its parts leave.
		var kept, gone []*tailPart
		straddles := false
		for _, p := range t.parts {
			switch {
			case p.lastTS <= w:
				gone = append(gone, p)
			case p.firstTS <= w:
				straddles = true
			default:
				kept = append(kept, p)
			}
		}
		t.retired, t.retiredW, t.retSeal = gone, t.w, t.sealed
		t.parts, t.sealed, t.w = kept, true, w
		if straddles {
			t.reset()
		} else {
			t.recount()
		}
	case (sealed && w < t.w) || (!sealed && t.sealed):
		// A snapshot older than the last seal the tail applied: the parts
		// that seal retired, and the current ones, hold its live rows.
		if sealed == t.retSeal && (!sealed || w == t.retiredW) && (span.Rows == 0 || span.LastTS <= t.high) {
			return tailView{t: t, parts: append(slices.Clone(t.retired), t.parts...)}, nil
		}
		return t.private(x, rs, src, stream, span)
	}
	if span.Rows == 0 {
		t.parts, t.rows = nil, 0
		return tailView{t: t}, nil
	}
	if t.rows > 0 && span.FirstTS > t.first {
		// Retention removed live rows: the parts below the first live row
		// go (and all of them, should one straddle it).
		var kept []*tailPart
		straddles := false
		for _, p := range t.parts {
			switch {
			case p.lastTS < span.FirstTS:
			case p.firstTS < span.FirstTS:
				straddles = true
			default:
				kept = append(kept, p)
			}
		}
		t.parts = kept
		if straddles {
			t.reset()
		} else {
			t.recount()
		}
	}
	if t.rows == span.Rows && (t.rows == 0 || t.high == span.LastTS) {
		return tailView{t: t, parts: t.parts}, nil
	}
	if t.rows > span.Rows || (t.rows > 0 && t.high > span.LastTS) {
		// Newer than this snapshot: it sees rows it does not hold, which
		// a read may (they are committed).
		return tailView{t: t, parts: t.parts}, nil
	}
	var rows []archive.Row
	var err error
	if t.rows == 0 {
		rows, err = rs.LiveWAL(src, stream)
	} else {
		rows, err = rs.LiveWALRange(src, stream, t.high+1, span.LastTS)
	}
	if err != nil {
		return tailView{}, err
	}
	if err := t.apply(x, rows); err != nil {
		t.reset()
		return tailView{}, err
	}
	if t.rows != span.Rows {
		// Rows appeared below the newest applied one (an unstamped
		// append): start over.
		t.reset()
		rows, err := rs.LiveWAL(src, stream)
		if err != nil {
			return tailView{}, err
		}
		if err := t.apply(x, rows); err != nil {
			t.reset()
			return tailView{}, err
		}
	}
	return tailView{t: t, parts: t.parts}, nil
}

// private decodes a snapshot's tail into a tail of its own.
func (t *tail) private(x *seriesindex.Index, rs rowSource, src archive.SourceID, stream string, span archive.Span) (tailView, error) {
	if span.Rows == 0 {
		return tailView{}, nil
	}
	rows, err := rs.LiveWAL(src, stream)
	if err != nil {
		return tailView{}, err
	}
	p := &tail{loc: t.loc}
	if err := p.apply(x, rows); err != nil {
		return tailView{}, err
	}
	return tailView{parts: p.parts}, nil
}

func (t *tail) reset() { t.parts, t.rows = nil, 0 }

func (t *tail) recount() {
	t.rows = 0
	for _, p := range t.parts {
		t.rows += p.rows
	}
	if len(t.parts) == 0 {
		t.rows = 0
		return
	}
	t.first, t.high = t.parts[0].firstTS, t.parts[len(t.parts)-1].lastTS
}

// apply decodes rows (a stream's, by ts, above everything applied) into
// the tail and the index.
func (t *tail) apply(x *seriesindex.Index, rows []archive.Row) error {
	var dec promsample.RowDecoder
	var dr promsample.DecodedRow
	for i := range rows {
		row := &rows[i]
		if err := dec.Decode(row.Data, &dr); err != nil {
			return fmt.Errorf("row ts %d: %w", row.TS, err)
		}
		t.decoded++
		p := t.partFor(dr.Header, row.TS)
		p.rows++
		p.lastTS = row.TS
		t.rows++
		t.high = row.TS
		if t.rows == 1 {
			t.first = row.TS
		}
		if dr.Header.Close {
			p.closed = true
			continue
		}
		base := int(dr.Header.FirstLocal)
		if p.v1 {
			base = 0
		}
		var local []int32 // format 1: this row's series, by position
		for k, ls := range dr.Anchors {
			ref := x.Get(ls)
			if ref == 0 {
				ref, _ = x.Add(ls)
			}
			idx := int32(p.seriesOf(ref))
			if p.v1 {
				local = append(local, idx)
				continue
			}
			id := base + k
			for id >= len(p.locals) {
				p.locals = append(p.locals, -1) // amortized: an epoch anchors ids in order
			}
			p.locals[id] = idx
		}
		for _, s := range dr.Series {
			var idx int32 = -1
			switch {
			case p.v1:
				idx = local[s.Local]
			case int(s.Local) < len(p.locals):
				idx = p.locals[s.Local]
			}
			if idx < 0 {
				continue // its anchor is gone (see promsample's rowCollector.epochs)
			}
			ref := p.refs[idx]
			minT, maxT := int64(math.MaxInt64), int64(math.MinInt64)
			for _, smp := range s.Samples {
				p.add(uint32(idx), smp.T, smp.V)
				minT, maxT = min(minT, smp.T), max(maxT, smp.T)
			}
			if len(s.Histograms)+len(s.Exemplars) > 0 {
				if p.extras == nil {
					p.extras = map[uint32]*tailExtras{}
				}
				e := p.extras[uint32(idx)]
				if e == nil {
					e = &tailExtras{}
					p.extras[uint32(idx)] = e
				}
				e.hists = append(e.hists, s.Histograms...)
				e.exemplars = append(e.exemplars, s.Exemplars...)
				for _, h := range s.Histograms {
					minT, maxT = min(minT, h.T), max(maxT, h.T)
				}
				for _, ex := range s.Exemplars {
					minT, maxT = min(minT, ex.T), max(maxT, ex.T)
				}
			}
			if minT <= maxT {
				x.Observe(ref, t.loc, minT, maxT, row.TS)
			}
		}
	}
	return nil
}

// partFor returns the part a row with header h at ts belongs to: the last
// one if it continues it, else a new one.
func (t *tail) partFor(h promsample.RowHeader, ts int64) *tailPart {
	if n := len(t.parts); n > 0 {
		p := t.parts[n-1]
		switch {
		case h.Format == 1 && p.v1:
			return p
		case h.Format == 2 && !p.v1 && !p.closed && p.epoch == h.Epoch:
			return p
		case h.Format == 2 && h.Close && !p.v1 && !p.closed:
			// A marker closes the open epoch, whichever it names.
			return p
		}
	}
	p := newTailPart(h, ts)
	t.parts = append(t.parts, p)
	return p
}

// read calls fn for every part's piece of ref in [mint, maxt];
// histograms and exemplars are the tail's (read only).
func (v *tailView) read(ref seriesindex.Ref, mint, maxt int64, fn func(fl []promsample.Sample, hs []promsample.Histogram, ex []promsample.Exemplar) error) error {
	for _, p := range v.parts {
		i, ok := p.byRef[ref]
		if !ok {
			continue
		}
		var fl []promsample.Sample
		if len(p.bufs[i]) > 0 && p.minT <= maxt && p.maxT >= mint {
			fl = p.samples(i, mint, maxt)
		}
		var hs []promsample.Histogram
		var ex []promsample.Exemplar
		if e := p.extras[i]; e != nil {
			hs, ex = trimHists(sortedHists(e.hists), mint, maxt), trimExemplars(e.exemplars, mint, maxt)
		}
		if len(fl)+len(hs)+len(ex) == 0 {
			continue
		}
		if err := fn(fl, hs, ex); err != nil {
			return err
		}
	}
	return nil
}

func sortedHists(hs []promsample.Histogram) []promsample.Histogram {
	if slices.IsSortedFunc(hs, func(a, b promsample.Histogram) int { return cmpInt64(a.T, b.T) }) {
		return hs
	}
	out := slices.Clone(hs)
	slices.SortStableFunc(out, func(a, b promsample.Histogram) int { return cmpInt64(a.T, b.T) })
	return out
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
