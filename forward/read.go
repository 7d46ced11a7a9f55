package forward

import (
	"errors"
	"math"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// An upstream's reading: which unit of which stream comes next (doc.go,
// "Reading order"), and reading it from the archive, rows or a segment,
// in a snapshot of its own. The loop's alone, but for a prefetch's
// fetchSegment.

// Bounds of one read of rows.
const (
	rowChunk      = 512
	rowChunkBytes = 8 << 20
	// straddleRows: a sealed segment with more rows than this still to
	// read is read as the segment (plan).
	straddleRows = 64
)

// nextUnit returns the next unit to dispatch: of the streams' next units
// the one received first (streams go forward together by receipt time,
// so an upstream's notion of "now" moves with all of them), or nil when
// there is nothing to read.
func (u *upstream) nextUnit() (*unit, error) {
	for {
		if err := u.planStreams(); err != nil {
			return nil, err
		}
		var best *streamState
		for _, st := range u.streams {
			if st.next == nil {
				continue
			}
			if best == nil || st.next.order < best.next.order ||
				(st.next.order == best.next.order && lessKey(st.key, best.key)) {
				best = st
			}
		}
		if best == nil {
			return nil, nil
		}
		un, err := u.openUnit(best)
		if err != nil || un != nil {
			return un, err
		}
		// The candidate vanished or was only anchors: plan again.
	}
}

func lessKey(a, b streamKey) bool {
	if a.source != b.source {
		return a.source < b.source
	}
	return a.stream < b.stream
}

// planStreams plans, in one snapshot, every stream without a candidate
// (a stream that had nothing is asked again after PollInterval).
func (u *upstream) planStreams() error {
	now := time.Now()
	var todo []*streamState
	for _, st := range u.streams {
		if st.next == nil && (!st.idle || now.Sub(st.plannedAt) >= u.f.opts.PollInterval) {
			todo = append(todo, st)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	return u.f.r.View(u.ctx, func(tx *archive.ReadTx) error {
		for _, st := range todo {
			if err := u.plan(tx, st, now); err != nil {
				return err
			}
			st.plannedAt = now
		}
		return nil
	})
}

// plan decides a stream's next unit (see doc.go, "Reading order").
func (u *upstream) plan(tx *archive.ReadTx, st *streamState, now time.Time) error {
	src, name := st.key.source, st.key.stream
	segs, err := tx.StreamSegmentsAfter(src, name, st.readDone, 1)
	if err != nil {
		return err
	}
	if st.watermark, st.sealed, err = tx.SealedWatermark(src, name); err != nil {
		return err
	}
	st.idle = false
	// A segment the previous process may have sent rows of (a restart's
	// resume) is read as its rows, as long as the prune left them all:
	// the cursor's floors hold them (stagedKeep).
	resumeRows := len(segs) == 1 && st.resume != nil && st.resume.sentAsRows(segs[0])
	if len(segs) == 1 && segs[0].FirstTS > st.readDone && !resumeRows {
		// A whole segment ahead: read it as a segment. Any rows it holds
		// (shadowed) are the same data; rows of an epoch before it are
		// closed with it.
		st.next, st.rows, st.hasAnchorsFrom = &candidate{kind: candSegment, seg: segs[0], order: segs[0].FirstTS}, nil, false
		return nil
	}
	// straddle: the segment holds rows up to and after readDone, or rows
	// a restart must read as rows.
	straddle := len(segs) == 1
	if !straddle {
		st.released = false // the live tail: rows above the watermark are never pruned
	}
	// asSegment reads the segment, over what of it was sent as rows: the
	// dispatch filter holds that back. After a restart the filter knows
	// only what this process read, so unless the cursor names the
	// segment exactly (replay below), all of it counts as resent.
	asSegment := func(exact bool) {
		c := &candidate{kind: candSegment, seg: segs[0], order: min(st.readDone+1, segs[0].FirstTS)}
		c.resentAll = !exact && (resumeRows || st.resume != nil && segs[0].FirstTS <= st.readDone && !st.resume.namesSegment(segs[0]))
		if segs[0].FirstTS > st.readDone {
			st.hasAnchorsFrom = false
		}
		st.next, st.rows = c, nil
	}
	if straddle && st.released {
		asSegment(false)
		return nil
	}
	from := st.readDone + 1
	if st.readDone == math.MaxInt64 {
		return nil
	}
	anchoring := st.hasAnchorsFrom && st.anchorsFrom <= st.readDone
	if st.hasAnchorsFrom && st.anchorsFrom < from {
		from = st.anchorsFrom
	}
	upto := int64(math.MaxInt64) // rows after it are not read as rows now
	if straddle {
		// Its rows are read as rows only if every one of them from the
		// first this read needs is still there (held from the prune);
		// otherwise the segment is read, and the dispatch filter holds
		// back what was already sent.
		ok, err := rowsIntact(tx, src, name, segs[0], from)
		if err != nil {
			return err
		}
		done, replay := int64(0), false
		if st.resume != nil {
			done, replay = st.resume.straddledAt(segs[0])
		}
		switch {
		case replay && st.readDone >= done && !anchoring:
			// The rows the previous process sent of it are read again
			// (to set the filter) or sent again: the segment now goes
			// out as it did then, item for item.
			asSegment(true)
			return nil
		case replay && !ok:
			asSegment(false)
			return nil
		case replay:
			upto = done
		case !ok:
			asSegment(false)
			return nil
		case st.resume == nil && segs[0].FirstTS <= st.readDone:
			// A backlog (rows sealed while this upstream was behind):
			// the segment is read rather than many rows, each a unit of
			// a few samples a series (a drain reads segments about
			// twice as fast). Only if all its rows are there, so that a
			// restart can replay the rows it sent as rows (the cursor
			// then names the segment as straddled, and its floor holds
			// them: setStaged).
			ahead, err := tx.WALCountBetween(src, name, st.readDone+1, segs[0].LastTS)
			if err != nil {
				return err
			}
			all, err := tx.WALCountBetween(src, name, segs[0].FirstTS, segs[0].LastTS)
			if err != nil {
				return err
			}
			if ahead > straddleRows && all == segs[0].Rows {
				asSegment(true)
				return nil
			}
		}
	}
	rows, err := tx.WALFrom(src, name, from, rowChunk, rowChunkBytes)
	if err != nil {
		return err
	}
	for i, r := range rows {
		if r.TS > upto {
			rows = rows[:i]
			break
		}
	}
	st.rows = rows
	// Read to the end of the stream: plan it again only after
	// PollInterval, so that a caught-up upstream reads (and sends) what
	// arrived meanwhile in one go rather than a row at a time.
	st.idle = len(rows) < rowChunk
	for _, r := range rows {
		if r.TS > st.readDone {
			st.next = &candidate{kind: candRows, order: r.TS}
			return nil
		}
	}
	if len(rows) > 0 {
		// Only anchors (rows up to readDone): read them, then plan again.
		st.next = &candidate{kind: candRows, order: st.readDone + 1}
		return nil
	}
	st.rows, st.hasAnchorsFrom, st.idle = nil, false, true
	st.emptyAt = 0
	if st.readDone == math.MinInt64 && st.done == math.MinInt64 && len(st.open) == 0 {
		st.emptyAt = now.UnixNano()
	}
	return nil
}

// rowsIntact reports whether every wal row of seg at or after from is
// still there. Whatever deletes a stream's rows (a seal's prune, below its
// KeepWAL floor; retention, below its cutoff) deletes every row up to a
// ts: what is left of a segment's rows is a suffix of them. So they are
// all there, or one at or before from is (then nothing at or after from
// went).
func rowsIntact(tx *archive.ReadTx, src archive.SourceID, name string, seg archive.StreamSegment, from int64) (bool, error) {
	n, err := tx.WALCountBetween(src, name, seg.FirstTS, seg.LastTS)
	if err != nil || n == seg.Rows {
		return err == nil, err
	}
	if from < seg.FirstTS || n == 0 {
		return false, nil
	}
	n, err = tx.WALCountBetween(src, name, seg.FirstTS, from)
	return n > 0, err
}

// openUnit turns a stream's candidate into a unit, or returns nil when the
// candidate turned out to be nothing to dispatch (the caller plans again).
func (u *upstream) openUnit(st *streamState) (*unit, error) {
	c := st.next
	switch c.kind {
	case candSegment:
		st.next = nil
		un, err := u.openSegment(st, c.seg)
		if un != nil && c.resentAll {
			un.resentAll = true
			u.log.Info("reading a segment whole that holds rows sent before the restart; all of it counts as resent",
				"source", st.key.source, "stream", st.key.stream, "first_ns", c.seg.FirstTS, "last_ns", c.seg.LastTS)
		}
		return un, err
	case candRows:
		for len(st.rows) > 0 {
			r := st.rows[0]
			st.rows = st.rows[1:]
			un, err := u.decodeRow(st, r)
			if errors.Is(err, errMissingAnchors) {
				if !u.missingAnchors(st, r.TS, err) || r.TS <= st.readDone {
					return nil, nil
				}
				// Nothing left to learn its series from: send what
				// resolves, count the rest.
				u.stats.drop(reasonUnresolvable, un.unresolved)
				un.unresolved = 0
				return un, nil
			}
			if err != nil {
				return nil, err
			}
			if r.TS <= st.readDone {
				// Read again for its anchors: its items were acknowledged
				// before the restart; they only set the dispatch filter.
				u.skipItems(un, un.items)
				st.anchorsFrom = r.TS + 1
				st.hasAnchorsFrom = st.anchorsFrom <= st.readDone
				continue
			}
			if len(st.rows) == 0 {
				st.next = nil
			} else {
				st.next.order = st.rows[0].TS
			}
			st.hasAnchorsFrom, st.retriedLive = false, false
			return un, nil
		}
		st.next = nil
		return nil, nil
	}
	st.next = nil
	return nil, nil
}

// missingAnchors: the rows read refer to series whose anchoring rows are
// not there. Read the stream's straddling segment instead when there is
// one; read the live tail from its start once (it always starts an epoch);
// else skip the row, counting what it held.
// It reports true when there is nothing left to try: the caller sends the
// row's series that resolve and counts the rest.
func (u *upstream) missingAnchors(st *streamState, ts int64, err error) (giveUp bool) {
	st.rows, st.next, st.epoch = nil, nil, nil
	switch {
	case st.sealed && st.readDone < st.watermark:
		u.warn("anchors:"+st.key.stream, "rows to resume from are gone; reading the segment that holds them instead (samples sent before may go again)",
			"source", st.key.source, "stream", st.key.stream, "err", err)
		st.released = true
		return false
	case !st.retriedLive:
		st.retriedLive = true
		st.anchorsFrom, st.hasAnchorsFrom = math.MinInt64, true
		if st.sealed {
			st.anchorsFrom = st.watermark + 1
		}
		return false
	}
	u.warn("unresolvable:"+st.key.stream, "a row refers to series no row read anchors; their samples cannot be sent",
		"source", st.key.source, "stream", st.key.stream, "err", err)
	st.retriedLive = false
	st.hasAnchorsFrom = false
	return true
}

// fetched is a segment read and decoded, by the loop or ahead of it.
type fetched struct {
	found  bool  // false: gone (compacted or evicted)
	tooOld int64 // items of a segment wholly older than MaxAge (not decoded)
	series []promsample.Series
	meta   []promsample.Metadata
	err    error
}

// prefetch is the one segment being read ahead of the loop.
type prefetch struct {
	key  streamKey
	seg  archive.StreamSegment
	done chan fetched // capacity 1
}

// fetchSegment reads and decodes a segment in a snapshot of its own. A
// segment wholly older than MaxAge is counted from its index and not
// read. It touches no loop state, so a prefetch runs it on a goroutine.
func (u *upstream) fetchSegment(key streamKey, seg archive.StreamSegment) fetched {
	var f fetched
	var b []byte
	f.err = u.f.r.View(u.ctx, func(tx *archive.ReadTx) error {
		if u.cfg.MaxAge > 0 {
			idx, ok, err := tx.SegmentIndex(key.source, key.stream, seg.Seq)
			if err != nil || !ok {
				return err
			}
			if x, err := promsample.ParseIndex(idx); err == nil && x.MaxT < u.now().Add(-u.cfg.MaxAge).UnixMilli() {
				f.found, f.tooOld = true, x.Samples+x.Histograms+x.Exemplars
				return nil
			}
		}
		var err error
		b, f.found, err = tx.SegmentBytes(key.source, key.stream, seg.Seq)
		return err
	})
	if f.err == nil && b != nil {
		f.series, f.meta, f.err = decodeSegment(seg, b)
	}
	return f
}

// openSegment makes a unit of a segment: the one read ahead when it is,
// else read now. nil when it is gone (plan again).
func (u *upstream) openSegment(st *streamState, seg archive.StreamSegment) (*unit, error) {
	var f fetched
	if p := u.pre; p != nil {
		f = <-p.done
		u.pre = nil
		if p.key != st.key || p.seg != seg {
			f = u.fetchSegment(st.key, seg)
		}
	} else {
		f = u.fetchSegment(st.key, seg)
	}
	if f.err != nil || !f.found {
		return nil, f.err
	}
	if f.series == nil && f.tooOld > 0 {
		u.stats.drop(reasonTooOld, f.tooOld)
		return &unit{st: st, kind: kindSegment, first: seg.FirstTS, last: seg.LastTS, seq: seg.Seq}, nil
	}
	un := u.segmentUnit(st, seg, f.series, f.meta)
	if seg.Rows > 0 {
		u.perRow = 0.9*u.perRow + 0.1*float64(un.items)/float64(seg.Rows)
	}
	return un, nil
}

// readAhead starts reading the next unit if it is a segment, so that its
// decoding overlaps the dispatch of the one before (a backlog drains as
// fast as the shards send, not as fast as one goroutine both decodes and
// dispatches). Called once the current unit's place is taken (readDone).
func (u *upstream) readAhead() {
	if u.pre != nil {
		return
	}
	if err := u.planStreams(); err != nil {
		return // the loop's own plan reports it
	}
	var best *streamState
	for _, st := range u.streams {
		if st.next != nil && (best == nil || st.next.order < best.next.order ||
			(st.next.order == best.next.order && lessKey(st.key, best.key))) {
			best = st
		}
	}
	if best == nil || best.next.kind != candSegment {
		return
	}
	p := &prefetch{key: best.key, seg: best.next.seg, done: make(chan fetched, 1)}
	u.pre = p
	go func() {
		u.f.onThread()
		p.done <- u.fetchSegment(p.key, p.seg)
	}()
}
