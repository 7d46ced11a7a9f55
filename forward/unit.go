package forward

import (
	"errors"
	"fmt"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// A unit is what the loop reads in one go and dispatches item by item: one
// sealed segment or one wal row. Its items are its samples, histograms and
// exemplars, series by series, in the order the unit decodes in (which is
// the same every time it is read: a segment's series sorted by labels, a
// row's in the order its request had them), so that "the first K items"
// names the same items after a restart.
type unit struct {
	st    *streamState
	kind  unitKind
	first int64 // receipt ts of its first row (Unix ns); a row's ts
	last  int64 // receipt ts of its last row
	seq   int64 // a segment's seq
	// A row of a format-2 epoch: the epoch's first row, from which a
	// restart inside the epoch reads again (the cursor's e).
	epochFirst int64
	inEpoch    bool
	// resentAll: every item may have reached the upstream before a
	// restart (candidate.resentAll).
	resentAll bool

	series []unitSeries
	meta   []promsample.Metadata
	items  int64
	// unresolved counts items of series a row referred to by an id no
	// earlier row anchored (rows lost to retention or corruption): they
	// cannot be sent.
	unresolved int64

	// Dispatch: series[next] from item nextOff; dispatched counts items
	// from the unit's start (skipped ones included).
	next       int
	nextOff    int64
	dispatched int64
	// Acknowledgment: pieces in dispatch order; low is the first not done.
	pieces []pieceMark
	low    int
	// slab is where newPiece takes pieces from.
	slab []piece
}

// newPiece returns a zero piece, one of a few allocations per unit rather
// than one per piece (a row yields a piece for every series in it, of a
// few samples each). A piece's slab lives as long as any of its pieces.
func (un *unit) newPiece() *piece {
	if len(un.slab) == cap(un.slab) {
		n := min(max(len(un.series)-un.next, 16), 4096)
		un.slab = make([]piece, 0, n)
		if un.pieces == nil {
			un.pieces = make([]pieceMark, 0, len(un.series))
		}
	}
	un.slab = un.slab[:len(un.slab)+1]
	return &un.slab[len(un.slab)-1]
}

type unitSeries struct {
	s          *seriesState
	samples    []promsample.Sample
	histograms []promsample.Histogram
	exemplars  []promsample.Exemplar
}

func (us *unitSeries) items() int64 {
	return int64(len(us.samples) + len(us.histograms) + len(us.exemplars))
}

// slice returns the items [from, to) of the series.
func (us *unitSeries) slice(from, to int64) (s []promsample.Sample, h []promsample.Histogram, e []promsample.Exemplar) {
	ns, nh := int64(len(us.samples)), int64(len(us.histograms))
	clip := func(lo, hi, base, n int64) (int64, int64) {
		// [lo, hi) may end before this kind's items begin (hi < base)
		// or start after they end: then it takes none of them.
		a, b := min(max(lo-base, 0), n), min(max(hi-base, 0), n)
		if a > b {
			a = b
		}
		return a, b
	}
	a, b := clip(from, to, 0, ns)
	s = us.samples[a:b]
	a, b = clip(from, to, ns, nh)
	h = us.histograms[a:b]
	a, b = clip(from, to, ns+nh, int64(len(us.exemplars)))
	e = us.exemplars[a:b]
	return s, h, e
}

type pieceMark struct {
	start, n int64
	done     bool
}

// ackedPrefix is how many of the unit's first items are acknowledged.
func (u *unit) ackedPrefix() int64 {
	if u.low < len(u.pieces) {
		return u.pieces[u.low].start
	}
	return u.dispatched
}

func (u *unit) complete() bool {
	return u.dispatched == u.items && u.low == len(u.pieces)
}

// errMissingAnchors: a row refers to series anchored by rows that are not
// there (the reader did not start at its epoch's first row).
var errMissingAnchors = errors.New("forward: a row refers to series anchored in rows not read")

// epochTable is the series of the stream's open epoch, by local id.
type epochTable struct {
	id     uint64
	first  int64 // ts of its first row
	series []*seriesState
}

// rowDecoder turns a stream's rows into units, keeping its open epoch.
type rowDecoder struct {
	dec promsample.RowDecoder
	out promsample.DecodedRow
}

// decodeRow decodes row r of stream st into a unit. It advances the
// stream's epoch: a format-1 row or a close marker closes it, a row of
// another epoch starts one.
func (u *upstream) decodeRow(st *streamState, r archive.Row) (*unit, error) {
	d := &u.rows
	if err := d.dec.Decode(r.Data, &d.out); err != nil {
		return nil, fmt.Errorf("row ts %d: %w", r.TS, err)
	}
	out := &d.out
	un := &unit{st: st, kind: kindRow, first: r.TS, last: r.TS}
	now := u.f.opts.Now()
	var table []*seriesState
	switch h := out.Header; {
	case h.Format == 1:
		st.epoch = nil
		table = make([]*seriesState, len(out.Anchors))
		for i, ls := range out.Anchors {
			table[i] = u.series.get(ls, now)
		}
	case h.Close:
		st.epoch = nil
		return un, nil
	default:
		if st.epoch == nil || st.epoch.id != h.Epoch {
			// A new epoch: this is its first row. (Its FirstLocal need
			// not be 0: requests reserve their ids before they reach the
			// writer, so the rows anchoring an epoch's series commit in
			// any order. Only a reference to an id no row read anchored
			// says the reader did not start at the epoch's first row.)
			st.epoch = &epochTable{id: h.Epoch, first: r.TS}
		}
		ep := st.epoch
		if end := int(h.FirstLocal) + len(out.Anchors); end > len(ep.series) {
			ep.series = append(ep.series, make([]*seriesState, end-len(ep.series))...)
		}
		for i, ls := range out.Anchors {
			ep.series[int(h.FirstLocal)+i] = u.series.get(ls, now)
		}
		table = ep.series
		un.inEpoch, un.epochFirst = true, ep.first
	}
	// The decoder's samples share a slab it reuses: copy them into one of
	// the unit's own.
	n := 0
	for i := range out.Series {
		n += len(out.Series[i].Samples)
	}
	slab := make([]promsample.Sample, 0, n)
	un.series = make([]unitSeries, 0, len(out.Series))
	for i := range out.Series {
		rs := &out.Series[i]
		var s *seriesState
		if int(rs.Local) < len(table) {
			s = table[rs.Local]
		}
		if s == nil {
			un.unresolved += int64(len(rs.Samples) + len(rs.Histograms) + len(rs.Exemplars))
			continue
		}
		s.seen = now
		at := len(slab)
		slab = append(slab, rs.Samples...)
		us := unitSeries{s: s, samples: slab[at:len(slab):len(slab)], histograms: rs.Histograms, exemplars: rs.Exemplars}
		un.items += us.items()
		un.series = append(un.series, us)
	}
	if len(out.Metadata) > 0 {
		un.meta = append([]promsample.Metadata(nil), out.Metadata...)
	}
	if un.unresolved > 0 {
		return un, fmt.Errorf("row ts %d: %d items of series it refers to by ids: %w", r.TS, un.unresolved, errMissingAnchors)
	}
	return un, nil
}

// decodeSegment decodes a segment's bytes (any goroutine: it touches no
// loop state).
func decodeSegment(seg archive.StreamSegment, b []byte) ([]promsample.Series, []promsample.Metadata, error) {
	ss, err := promsample.ReadSegment(b, promsample.AllTime())
	if err != nil {
		return nil, nil, fmt.Errorf("segment %d: %w", seg.Seq, err)
	}
	meta, err := promsample.ReadSegmentMetadata(b)
	if err != nil {
		return nil, nil, fmt.Errorf("segment %d metadata: %w", seg.Seq, err)
	}
	return ss, meta, nil
}

// segmentUnit makes a unit of a decoded segment, its series interned.
func (u *upstream) segmentUnit(st *streamState, seg archive.StreamSegment, ss []promsample.Series, meta []promsample.Metadata) *unit {
	un := &unit{st: st, kind: kindSegment, first: seg.FirstTS, last: seg.LastTS, seq: seg.Seq, meta: meta}
	now := u.f.opts.Now()
	un.series = make([]unitSeries, 0, len(ss))
	for i := range ss {
		s := &ss[i]
		us := unitSeries{s: u.series.get(s.Labels, now), samples: s.Samples, histograms: s.Histograms, exemplars: s.Exemplars}
		un.items += us.items()
		un.series = append(un.series, us)
	}
	return un
}
