package forward

import (
	"context"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// The loop's bookkeeping: finding streams, the cursor, the floors it
// publishes to the archive's writer and the ingester, and the periodic
// estimates.

// streamBucketsKey is the sources.metadata key the receiver records a
// source's stream count under (receiver.MetadataKeyStreamBuckets): its
// sample streams are promsample.StreamsFor that many, so a source's
// streams are known from its row alone, without listing the wal.
const streamBucketsKey = "stream_buckets"

const (
	// discoverEvery: sources are looked at every second (their rows are
	// few); every stream of the archive is listed this often, for streams
	// outside a source's buckets.
	discoverEvery = time.Minute
	pendingEvery  = 5 * time.Second
	forgetEvery   = 10 * time.Minute
	// forgetAfter: a series not read for this long loses its dispatch
	// filter (it costs memory per series ever seen).
	forgetAfter = 2 * time.Hour
)

// load reads the upstream's cursors and the archive's streams (one
// snapshot), before the loop starts: from then on the floors it publishes
// are its own, not "keep everything".
func (u *upstream) load(tx *archive.ReadTx) error {
	srcs, err := tx.Sources()
	if err != nil {
		return err
	}
	loaded := map[streamKey]streamCursor{}
	for _, s := range srcs {
		v, ok := s.Metadata[CursorKeyPrefix+u.cfg.Name]
		if !ok {
			continue
		}
		c, err := decodeCursor(v)
		if err != nil {
			return err
		}
		for name, sc := range c {
			loaded[streamKey{s.ID, name}] = sc
		}
	}
	if err := u.discoverIn(tx, loaded); err != nil {
		return err
	}
	u.publishFloors()
	return nil
}

// discover finds streams that appeared since the last look.
func (u *upstream) discover() {
	err := u.f.r.View(u.ctx, func(tx *archive.ReadTx) error { return u.discoverIn(tx, nil) })
	if err != nil && u.ctx.Err() == nil {
		u.warn("discover", "listing the archive's streams failed", "err", err)
	}
}

func (u *upstream) discoverIn(tx *archive.ReadTx, loaded map[streamKey]streamCursor) error {
	return u.discoverStreams(tx, loaded, true)
}

// discoverStreams adds the streams of every source: those its stream
// buckets name, and with all, every stream the archive lists.
func (u *upstream) discoverStreams(tx *archive.ReadTx, loaded map[streamKey]streamCursor, all bool) error {
	at := u.now().UnixNano()
	srcs, err := tx.Sources()
	if err != nil {
		return err
	}
	for _, s := range srcs {
		var names []string
		if b, err := strconv.Atoi(s.Metadata[streamBucketsKey]); err == nil && b >= 1 && b <= promsample.MaxStreamBuckets {
			names = promsample.StreamsFor(b)
		}
		if all {
			listed, err := tx.Streams(s.ID)
			if err != nil {
				return err
			}
			names = append(names, listed...)
		}
		for _, name := range names {
			if !strings.HasPrefix(name, promsample.SampleStreamPrefix) {
				continue
			}
			k := streamKey{s.ID, name}
			if _, ok := u.streams[k]; ok {
				continue
			}
			st := &streamState{key: k, done: math.MinInt64, readDone: math.MinInt64, hCommitted: start, hWant: start}
			if c, ok := loaded[k]; ok {
				st.done, st.readDone = c.p.Done, c.p.Done
				st.hCommitted, st.hWant = c.h, c.h
				st.resume = &resumeState{p: c.p, h: c.h, e: c.e, hasE: c.hasE}
				st.setStaged(c.p, c.h, c.e, c.hasE)
				for _, q := range []pos{c.p, c.h} {
					if straddled(q) {
						// Replay the rows the segment was read over, to set
						// the dispatch filter as it was (plan).
						if !st.hasAnchorsFrom || q.First < st.anchorsFrom {
							st.anchorsFrom, st.hasAnchorsFrom = q.First, true
						}
					}
				}
				if c.hasE {
					st.anchorsFrom, st.hasAnchorsFrom = c.e, true
				}
			}
			u.streams[k] = st
		}
	}
	if all {
		u.lastDisc = time.Now()
	}
	u.discAt = at
	return nil
}

// ackPos is the stream's acknowledged position and, when it is inside an
// epoch, the epoch's first row.
func (st *streamState) ackPos() (p pos, e int64, hasE bool) {
	p = pos{Done: st.done}
	if len(st.open) > 0 {
		un := st.open[0]
		if k := un.ackedPrefix(); k > 0 {
			p.Kind, p.First, p.Last, p.K = un.kind, un.first, un.last, k
		}
		if un.kind == kindRow && un.inEpoch {
			return p, un.epochFirst, true
		}
		return p, 0, false
	}
	if r := st.resume; r != nil && st.done == r.p.Done {
		// Nothing dispatched since the restart: the loaded cursor stands.
		return r.p, r.e, r.hasE
	}
	if st.epoch != nil {
		return p, st.epoch.first, true
	}
	if st.hasAnchorsFrom {
		return p, st.anchorsFrom, true
	}
	return p, 0, false
}

// stageSource stages the cursor of every stream of src for the writer's
// next commit and returns the stage's number.
func (u *upstream) stageSource(src archive.SourceID) uint64 {
	streams := map[string]streamCursor{}
	for k, st := range u.streams {
		if k.source != src {
			continue
		}
		p, e, hasE := st.ackPos()
		h := st.hWant
		if !h.covers(p.Kind, p.First, p.Last, max(p.K-1, 0)) && p.Done > h.Done {
			h = pos{Done: p.Done} // never behind what is acknowledged
		}
		streams[k.stream] = streamCursor{p: p, h: h, e: e, hasE: hasE}
	}
	delete(u.dirty, src)
	v, err := encodeCursor(streams)
	if err != nil {
		u.warn("cursor", "encoding the cursor failed", "err", err)
		return 0
	}
	gen := u.f.w.StageMetadata(src, map[string]string{CursorKeyPrefix + u.cfg.Name: v})
	// Only now, with the cursor staged, may the floors move up to it
	// (see streamState.stagedKeep).
	for k, st := range u.streams {
		if k.source == src {
			c := streams[k.stream]
			st.setStaged(c.p, c.h, c.e, c.hasE)
		}
	}
	u.publishFloors()
	return gen
}

// setStaged records what the cursor staged (or loaded) for the stream
// needs kept: its segments and rows after p (stagedNeed), and, for a
// restart to read them as rows when a seal has taken them (plan), its
// rows from e when p is in an epoch, else from p's own last row: the
// rows after it, and one at or before where the restart reads from, by
// which rowsIntact tells that none of those after it went.
func (st *streamState) setStaged(p, h pos, e int64, hasE bool) {
	st.hasStaged = true
	st.stagedNeed, st.stagedKeep = p.Done, p.Done
	if p.Done != math.MaxInt64 {
		st.stagedNeed = p.Done + 1
	}
	st.stagedE, st.hasStagedE = e, hasE
	for _, q := range []pos{p, h} {
		if straddled(q) && (!st.hasStagedE || q.First < st.stagedE) {
			// A restart replays the rows the segment was read over.
			st.stagedE, st.hasStagedE = q.First, true
		}
	}
}

// ---- floors ----

// floor is what one stream needs kept, as its upstream last published.
type floor struct {
	// keep: wal rows at or after it are read as rows (KeepWAL); keepOK
	// false: none.
	keep   int64
	keepOK bool
	// need: data received at or after it is not yet acknowledged
	// (retention and compaction leave it alone).
	need int64
}

// floorMap is an upstream's published floors: immutable once stored.
type floorMap struct {
	// loading: the cursors are not read yet; everything is needed.
	loading bool
	streams map[streamKey]floor
	sources map[archive.SourceID]int64 // the least need of a source's streams
	// discAt: a stream not listed had no data at this receipt ts (Unix
	// ns), so everything it holds was received later.
	discAt int64
	// ageFloor: data received before it is older than MaxAge and never
	// sent; MinInt64 without MaxAge.
	ageFloor int64
}

// emptyMargin bounds how long after its stamp a row commits (see floor).
const emptyMargin = 5 * time.Second

func (st *streamState) floor() floor {
	p, e, hasE := st.ackPos()
	need := p.Done
	if need != math.MaxInt64 {
		need++
	}
	if st.hasStaged {
		need = min(need, st.stagedNeed) // see stagedKeep
	}
	if need == math.MinInt64+1 && st.emptyAt != 0 {
		// A stream that held nothing when last read (a source's stream
		// bucket never written) needs nothing older than then: its first
		// row is stamped by the writer's clock after that, but for one
		// stamped before the read and committed after its snapshot, which
		// emptyMargin covers. Without this, one empty bucket would hold
		// the whole source from time retention (its need is per source).
		// Only a retention shorter than the margin could reach what the
		// margin guards.
		need = st.emptyAt - int64(emptyMargin)
	}
	// keep: the rows a restart (or this reader) reads as rows. Only rows
	// of an epoch the reader is in, or rows after live rows it read, can
	// end up in a segment that straddles its place; a reader at a segment
	// boundary finds the next seal wholly ahead of it and holds nothing.
	keep, keepOK := int64(math.MaxInt64), false
	add := func(ts int64) { keep, keepOK = min(keep, ts), true }
	for _, un := range st.open {
		if un.kind == kindRow {
			if un.inEpoch {
				add(un.epochFirst)
			} else {
				add(un.first)
			}
		}
	}
	if st.epoch != nil {
		add(st.epoch.first)
	}
	if hasE {
		add(e)
	}
	if st.hasAnchorsFrom {
		add(st.anchorsFrom)
	}
	if st.readDone != math.MinInt64 && st.readDone != math.MaxInt64 && (!st.sealed || st.readDone > st.watermark) {
		add(st.readDone + 1)
	}
	if st.hasStaged && st.hasStagedE {
		add(st.stagedE) // never above what the cursor on disk needs (stagedKeep)
	}
	if st.released {
		return floor{need: need}
	}
	if keepOK {
		need = min(need, keep)
	}
	if st.hasStaged && (st.stagedNeed != math.MinInt64+1 || st.emptyAt == 0) {
		// The row at p (stagedKeep) only marks for rowsIntact that the
		// rows after it are there: the prune keeps it, retention may take
		// it (a restart then reads the segment that held it whole, and
		// counts all of it as resent), so it does not lower need.
		keep, keepOK = min(keep, st.stagedKeep), true
	}
	if !keepOK {
		return floor{need: need}
	}
	return floor{keep: keep, keepOK: true, need: need}
}

func (u *upstream) publishFloors() {
	fm := &floorMap{streams: make(map[streamKey]floor, len(u.streams)), sources: map[archive.SourceID]int64{},
		discAt: u.discAt, ageFloor: math.MinInt64}
	if u.cfg.MaxAge > 0 {
		// Receipt time is at or after a sample's own (give a sender's
		// clock 10 minutes), so data received before this is too old.
		fm.ageFloor = u.now().Add(-u.cfg.MaxAge - 10*time.Minute).UnixNano()
	}
	for k, st := range u.streams {
		f := st.floor()
		fm.streams[k] = f
		if n, ok := fm.sources[k.source]; !ok || f.need < n {
			fm.sources[k.source] = f.need
		}
	}
	u.floors.Store(fm)
}

// ---- maintenance ----

// maintain runs about once a second: discovery, lag, pending, held rows,
// forgetting idle series, floors.
func (u *upstream) maintain() {
	now := time.Now()
	if now.Sub(u.lastDisc) >= discoverEvery {
		u.discover()
	} else if err := u.f.r.View(u.ctx, func(tx *archive.ReadTx) error { return u.discoverStreams(tx, nil, false) }); err != nil && u.ctx.Err() == nil {
		u.warn("discover", "listing the archive's sources failed", "err", err)
	}
	u.stats.inflight.Store(u.inflight)
	u.stats.lagNS.Store(u.lag())
	if now.Sub(u.lastPending) >= pendingEvery {
		u.lastPending = now
		if err := u.f.r.View(u.ctx, u.pendingAndHeld); err != nil && u.ctx.Err() == nil {
			u.warn("pending", "estimating what is pending failed", "err", err)
		}
	}
	if now.Sub(u.lastForget) >= forgetEvery {
		u.lastForget = now
		if n := u.series.forget(u.now().Add(-forgetAfter)); n > 0 {
			u.log.Debug("forgot idle series", "series", n, "left", u.series.len())
		}
	}
	u.publishFloors()
}

// lag is the age of the oldest data not yet acknowledged, by receipt time.
func (u *upstream) lag() int64 {
	oldest := int64(math.MaxInt64)
	for _, st := range u.streams {
		switch {
		case len(st.open) > 0:
			oldest = min(oldest, st.open[0].first)
		case st.next != nil:
			oldest = min(oldest, st.next.order)
		case len(st.rows) > 0:
			oldest = min(oldest, st.rows[0].TS)
		}
	}
	if oldest == math.MaxInt64 {
		return 0
	}
	return max(u.now().UnixNano()-oldest, 0)
}

// pendingAndHeld estimates the samples not yet acknowledged, and lets go
// of the rows a stream holds from the prune once there are more than
// MaxHeldRows of them: the upstream is that far behind, and reads the
// segments instead.
func (u *upstream) pendingAndHeld(tx *archive.ReadTx) error {
	var rows int64
	var held int64
	for _, st := range u.streams {
		src, name := st.key.source, st.key.stream
		segs, err := tx.StreamSegmentsAfter(src, name, st.readDone, 0)
		if err != nil {
			return err
		}
		for _, s := range segs {
			rows += s.Rows
		}
		wm, sealed, err := tx.SealedWatermark(src, name)
		if err != nil {
			return err
		}
		from := st.readDone
		if sealed {
			from = max(from, wm)
		}
		if from != math.MaxInt64 {
			n, err := tx.WALCountBetween(src, name, from+1, math.MaxInt64)
			if err != nil {
				return err
			}
			rows += n
		}
		f := st.floor()
		if !f.keepOK || !sealed || f.keep > wm {
			continue
		}
		n, err := tx.WALCountBetween(src, name, f.keep, wm)
		if err != nil {
			return err
		}
		if n > int64(u.f.opts.MaxHeldRows) {
			st.released, st.rows, st.next = true, nil, nil
			u.log.Info("letting the prune take the sealed rows this upstream holds; it reads the segments instead",
				"source", src, "stream", name, "held_rows", n)
			continue
		}
		if n > 0 {
			held++
		}
	}
	u.stats.pending.Store(int64(float64(rows)*u.perRow) + u.inflight)
	u.stats.heldStreams.Store(held)
	return nil
}

// control handles a message from the forwarder.
func (u *upstream) control(r evictReq) {
	var lost int64
	err := u.f.r.View(u.ctx, func(tx *archive.ReadTx) error {
		var err error
		lost, err = u.lostTo(tx, r.source, r.cutoff)
		return err
	})
	if err != nil {
		u.log.Warn("counting what size retention removes failed", "err", err)
	}
	if lost > 0 {
		u.stats.drop(reasonRetention, lost)
		u.log.Warn("size retention (--retention.size) removes data this upstream has not been sent",
			"source", r.source, "cutoff_ns", r.cutoff, "samples", lost)
	}
	r.reply <- lost
}

// lostTo counts the items of src received before cutoff that the upstream
// has not read: what an eviction at cutoff takes from it. (What it has read
// is in memory and still goes out.)
func (u *upstream) lostTo(tx *archive.ReadTx, src archive.SourceID, cutoff int64) (int64, error) {
	var lost int64
	for k, st := range u.streams {
		if k.source != src || st.readDone >= cutoff-1 {
			continue
		}
		after := st.readDone
		if len(st.rows) > 0 {
			after = max(after, st.rows[len(st.rows)-1].TS)
		}
		segs, err := tx.StreamSegmentsAfter(src, k.stream, after, 0)
		if err != nil {
			return 0, err
		}
		for _, s := range segs {
			if s.LastTS >= cutoff {
				break
			}
			if p := u.pre; p != nil && p.key == k && p.seg == s {
				continue // read ahead: in memory, it still goes out
			}
			idx, ok, err := tx.SegmentIndex(src, k.stream, s.Seq)
			if err != nil {
				return 0, err
			}
			if !ok {
				continue
			}
			if x, err := promsample.ParseIndex(idx); err == nil {
				lost += x.Samples + x.Histograms + x.Exemplars
			} else {
				lost += int64(float64(s.Rows) * u.perRow)
			}
		}
		// Live rows below the cutoff: never sealed, so only decoding tells.
		live, err := tx.LiveWALRange(src, k.stream, after+1, cutoff-1)
		if err != nil {
			return 0, err
		}
		if len(live) > 0 {
			if ss, err := promsample.ReadRows(live, promsample.AllTime()); err == nil {
				for _, s := range ss {
					lost += int64(len(s.Samples) + len(s.Histograms) + len(s.Exemplars))
				}
			}
		}
	}
	return lost, nil
}

// evicting asks the loop to count what an eviction at cutoff takes, and
// waits for the answer (bounded: retention must not hang on a stuck
// upstream).
func (u *upstream) evicting(ctx context.Context, src archive.SourceID, cutoff int64) {
	r := evictReq{source: src, cutoff: cutoff, reply: make(chan int64, 1)}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	select {
	case u.ctrl <- r:
	case <-u.exited:
		return
	case <-ctx.Done():
		u.log.Warn("size retention did not wait for this upstream to count what it loses", "source", src)
		return
	}
	select {
	case <-r.reply:
	case <-u.exited:
	case <-ctx.Done():
	}
}
