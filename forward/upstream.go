package forward

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"golang.org/x/time/rate"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// One upstream: a loop goroutine that reads the archive and dispatches,
// and its shards, which batch and send. The loop owns every piece of
// reading, dispatch and cursor state (see doc.go); shards own their
// batches and report back which pieces are finished.

type streamKey struct {
	source archive.SourceID
	stream string
}

// streamState is one (source, stream) as an upstream's loop reads it.
type streamState struct {
	key streamKey

	// Acknowledged: every unit with last <= done is complete; open are the
	// units dispatched (wholly or partly) and not complete, in order.
	done int64
	open []*unit

	// Reading: every unit with last <= readDone has been read. rows are
	// wal rows read ahead (by ts); those at or below readDone are read
	// again only for the series their epoch anchors (a restart inside an
	// epoch). epoch is the open epoch the rows read so far are in.
	readDone int64
	rows     []archive.Row
	epoch    *epochTable
	// released: the stream fell so far behind that it let go of the rows
	// it held from the prune; rows at or below the sealed watermark are
	// not read as rows until it reaches the live tail again.
	released  bool
	watermark int64 // the sealed watermark at the last plan
	sealed    bool
	// next is the planned next unit; nil: plan again (not before
	// plannedAt + PollInterval when the last plan found nothing).
	next      *candidate
	plannedAt time.Time
	idle      bool
	// emptyAt: the last plan found the stream empty (nothing ever read,
	// nothing acknowledged) at this wall time, Unix ns; 0: it did not.
	// See floor().
	emptyAt int64

	// Resuming from a cursor: until the first unit past its h.
	resume *resumeState
	// stagedKeep, stagedNeed: the floors the cursor last staged (or
	// loaded) needs, published with the live ones (floor()). The live
	// floors run ahead of the cursor on disk (they follow what is
	// acknowledged now; the cursor is staged every CursorInterval), and a
	// prune, eviction or compaction below what the disk's cursor needs
	// would leave a restart without the rows or segment it resumes in: it
	// would read what holds them whole, sending again more than it can
	// count. (A prune takes the stage in its own transaction after
	// reading the floors, so the cursor it commits is at least as new as
	// the one the floors it read were published for.)
	stagedKeep, stagedNeed int64
	hasStaged              bool
	// stagedE: the cursor's e, when hasStagedE (its epoch's anchors).
	stagedE    int64
	hasStagedE bool
	// anchorsFrom: read rows from this ts (the cursor's e).
	anchorsFrom    int64
	hasAnchorsFrom bool
	retriedLive    bool

	// Written ahead: hCommitted is on disk; hWant is staged (its stage is
	// hGen, 0 once committed), asked for at hAsked, hFlushed when a
	// commit of its own was asked for.
	hCommitted, hWant pos
	hGen              uint64
	hAsked            time.Time
	hFlushed          bool
}

type resumeState struct {
	p, h   pos
	e      int64 // the cursor's e, when hasE
	hasE   bool
	warned bool
}

// namesSegment reports whether the cursor names seg as a unit: the
// previous process read it as a segment, so positions in it are exact
// when it is read as one again.
func (r *resumeState) namesSegment(seg archive.StreamSegment) bool {
	is := func(p pos) bool { return p.Kind == kindSegment && p.First == seg.FirstTS && p.Last == seg.LastTS }
	return is(r.p) || is(r.h)
}

// straddled reports whether p names a segment unit that starts at or
// before p.Done: the previous process had sent the segment's rows up to
// Done as rows, then read the rest of it as the segment, its dispatch
// filter holding back what those rows had sent (plan).
func straddled(p pos) bool { return p.Kind == kindSegment && p.First <= p.Done }

// straddledAt returns, when the cursor names seg as a straddled unit, the
// Done it was read at: a restart replays the rows up to it (those up to p
// only to set the filter) and then reads seg as a segment, exactly.
func (r *resumeState) straddledAt(seg archive.StreamSegment) (int64, bool) {
	is := func(p pos) bool { return straddled(p) && p.First == seg.FirstTS && p.Last == seg.LastTS }
	switch {
	case is(r.h):
		return r.h.Done, true
	case is(r.p):
		return r.p.Done, true
	}
	return 0, false
}

// sentAsRows reports whether the previous process may have sent, as
// rows, items of rows that seg now holds (sealed since): rows after p up
// to h. Read as the segment, those items could not be told from the
// rest (a segment is sorted by series); read as the rows, the cursor
// names them exactly.
func (r *resumeState) sentAsRows(seg archive.StreamSegment) bool {
	if _, ok := r.straddledAt(seg); ok {
		return true // its rows up to then went as rows: replayed
	}
	if r.namesSegment(seg) || seg.LastTS <= r.h.Done {
		return false // read as a segment, or wholly covered by h: exact either way
	}
	in := func(p pos) bool { return p.Kind == kindRow && p.First >= seg.FirstTS && p.First <= seg.LastTS }
	return in(r.p) || in(r.h) || r.h.Done >= seg.FirstTS
}

type candKind int8

const (
	candRows candKind = iota + 1
	candSegment
)

type candidate struct {
	kind  candKind
	seg   archive.StreamSegment
	order int64 // receipt ts of the first row it would send
	// resentAll: a segment read whole although the previous process may
	// have sent some of its rows' items as rows, which it cannot tell
	// apart: every item of it counts as resent.
	resentAll bool
}

// piece is a run of one series' items in one unit: what a shard batches.
// Its data may be a filtered copy of the unit's.
type piece struct {
	u          *unit
	idx        int32 // in u.pieces
	s          *seriesState
	meta       *promsample.Metadata
	samples    []promsample.Sample
	histograms []promsample.Histogram
	exemplars  []promsample.Exemplar
	resent     bool // may have reached the upstream before a restart
}

func (p *piece) items() int { return len(p.samples) + len(p.histograms) + len(p.exemplars) }

type evictReq struct {
	source archive.SourceID
	cutoff int64
	reply  chan int64 // capacity 1
}

type upstream struct {
	f        *Forwarder
	cfg      Upstream
	shownURL string // cfg.URL without credentials
	log      *slog.Logger
	client   *http.Client
	proto    atomic.Int32 // the Protocol currently sent
	limiter  *rate.Limiter
	shards   []*shard
	window   int64

	done   chan []*piece // finished pieces, from shards
	ctrl   chan evictReq
	stop   chan struct{}
	exited chan struct{}
	ctx    context.Context // canceled at stop: in-flight requests end
	cancel context.CancelFunc

	stats  counters
	floors atomic.Pointer[floorMap]

	// The loop's alone.
	streams     map[streamKey]*streamState
	dirty       map[archive.SourceID]bool // sources whose cursor changed since staged
	series      *seriesTable
	meta        map[string]*promsample.Metadata
	rows        rowDecoder
	inflight    int64
	pre         *prefetch  // the segment read ahead, if any (readAhead)
	queued      [][]*piece // per shard, not yet handed over (see send)
	queuedItems []int
	timer       *time.Timer
	lastStage   time.Time
	lastMaint   time.Time
	lastPending time.Time
	lastDisc    time.Time
	discAt      int64 // receipt ts (Unix ns) of the last discovery
	lastForget  time.Time
	warnedAt    map[string]time.Time
	perRow      float64 // items per wal row seen, for the pending estimate

	// ackedSince counts the items acknowledged since the cursor was last
	// staged; ackGen is that stage's number until it is committed (0
	// after), ackAsked when it was staged, ackFlushed whether a commit of
	// its own was asked for (see housekeeping).
	ackedSince int64
	ackGen     uint64
	ackAsked   time.Time
	ackFlushed bool

	warnMu     sync.Mutex // the shards' warnShared
	warnShards map[string]time.Time
}

func newUpstream(f *Forwarder, cfg Upstream, client *http.Client) *upstream {
	u := &upstream{f: f, cfg: cfg, client: client, log: f.opts.Logger.With("upstream", cfg.Name),
		window: cfg.window(), done: make(chan []*piece, 2*cfg.Queue.Shards), ctrl: make(chan evictReq),
		stop: make(chan struct{}), exited: make(chan struct{}),
		streams: map[streamKey]*streamState{}, dirty: map[archive.SourceID]bool{},
		series: newSeriesTable(cfg.Queue.Shards), meta: map[string]*promsample.Metadata{},
		warnedAt: map[string]time.Time{}, perRow: 1, warnShards: map[string]time.Time{}}
	if p, err := url.Parse(cfg.URL); err == nil {
		p.User = nil
		u.shownURL = p.String()
	}
	u.ctx, u.cancel = context.WithCancel(context.Background())
	u.proto.Store(int32(cfg.Protocol))
	if cfg.MaxSamplesPerSecond > 0 {
		burst := max(int(cfg.MaxSamplesPerSecond), cfg.Queue.MaxSamplesPerSend)
		u.limiter = rate.NewLimiter(rate.Limit(cfg.MaxSamplesPerSecond), burst)
	}
	u.stats.dropped = map[string]int64{}
	for i := range cfg.Queue.Shards {
		u.shards = append(u.shards, newShard(u, i))
	}
	u.queued, u.queuedItems = make([][]*piece, cfg.Queue.Shards), make([]int, cfg.Queue.Shards)
	u.floors.Store(&floorMap{loading: true})
	return u
}

func (u *upstream) now() time.Time { return u.f.opts.Now() }

func (u *upstream) stopping() bool {
	select {
	case <-u.stop:
		return true
	default:
		return false
	}
}

// run is the loop: read the next unit, dispatch it, repeat; when there is
// nothing to read, flush the shards and wait PollInterval.
func (u *upstream) run() {
	defer close(u.exited)
	u.timer = time.NewTimer(time.Hour)
	u.timer.Stop()
	shardsDone := make(chan struct{}, len(u.shards))
	for _, s := range u.shards {
		go func() {
			u.f.onThread()
			s.run()
			shardsDone <- struct{}{}
		}()
	}
	defer u.shutdown(shardsDone)
	u.discover()
	for !u.stopping() {
		u.housekeeping()
		un, err := u.nextUnit()
		if err != nil {
			u.warn("read", "reading the archive failed; retrying", "err", err)
			if !u.idleFor(u.f.opts.PollInterval) {
				return
			}
			continue
		}
		if un == nil {
			u.flushShards()
			if !u.idleFor(u.f.opts.PollInterval) {
				return
			}
			continue
		}
		t0 := time.Now()
		if !u.dispatch(un) {
			return
		}
		if u.yielding() {
			u.stats.yields.Add(1)
			if !u.idleFor(min(9*time.Since(t0), yieldMaxWait)) {
				return
			}
		}
	}
}

// yieldMaxWait bounds one wait of a yielding upstream, so that it still
// takes its completions and stops promptly.
const yieldMaxWait = 100 * time.Millisecond

// yielding reports whether the upstream leaves the CPU to ingest now
// (Options.Busy, Options.Yield).
func (u *upstream) yielding() bool {
	o := &u.f.opts
	if o.Yield <= 0 || o.Busy == nil {
		return false
	}
	lag := time.Duration(u.lag())
	return lag > 0 && lag < o.Yield && o.Busy()
}

// shutdown stops the shards (their requests in flight are abandoned: not
// acknowledged, so sent again by the next process), takes what they
// finished, and commits the cursor.
func (u *upstream) shutdown(shardsDone chan struct{}) {
	u.cancel()
	if u.pre != nil {
		<-u.pre.done // its View ends with the context
		u.pre = nil
	}
	for left := len(u.shards); left > 0; {
		select {
		case ps := <-u.done:
			u.completed(ps)
		case <-shardsDone:
			left--
		}
	}
	for {
		select {
		case ps := <-u.done:
			u.completed(ps)
			continue
		default:
		}
		break
	}
	var gens []uint64
	for src := range u.sourcesWithState() {
		gens = append(gens, u.stageSource(src))
	}
	if len(gens) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := u.f.w.FlushStaged(ctx); err == nil {
		err = u.f.w.Sync(ctx)
		if err == nil && u.f.w.StagedCommitted() < slices.Max(gens) {
			err = errors.New("the writer did not commit it")
		}
		if err != nil {
			u.log.Warn("the final cursor was not committed; the next start sends the last batches again", "err", err)
		}
	}
}

func (u *upstream) sourcesWithState() map[archive.SourceID]bool {
	out := map[archive.SourceID]bool{}
	for k, st := range u.streams {
		if st.done != math.MinInt64 || len(st.open) > 0 || st.hWant != start {
			out[k.source] = true
		}
	}
	return out
}

// idleFor handles events for d; false when the upstream stops.
func (u *upstream) idleFor(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return true
		}
		if !u.event(left) {
			return false
		}
	}
}

// waitFor handles events until cond holds; false when the upstream stops.
func (u *upstream) waitFor(cond func() bool, poll time.Duration) bool {
	for !cond() {
		if !u.event(poll) {
			return false
		}
	}
	return true
}

// event waits up to d for one event and handles it; false when stopping.
func (u *upstream) event(d time.Duration) bool {
	u.timer.Reset(min(d, time.Second))
	defer u.timer.Stop()
	select {
	case <-u.stop:
		return false
	case ps := <-u.done:
		u.completed(ps)
	case r := <-u.ctrl:
		u.control(r)
	case <-u.timer.C:
	}
	u.housekeeping()
	return true
}

// housekeeping is the periodic work: stage changed cursors, maintenance.
func (u *upstream) housekeeping() {
	now := time.Now()
	// What a kill -9 sends again is what was in flight and what was
	// acknowledged since the cursor's last commit. During a drain no
	// ingest commits come to take the stage, and a CursorInterval at
	// millions of samples a second is many windows: so once half a
	// window has been acknowledged the cursor is staged at once, and if
	// no commit takes it within flushAfter the writer is asked for one
	// (a transaction per half window of a drain, none while ingest
	// commits anyway).
	byAcks := u.ackedSince >= u.window/2
	if len(u.dirty) > 0 && (byAcks || now.Sub(u.lastStage) >= u.f.opts.CursorInterval) {
		u.lastStage = now
		var gen uint64
		for src := range u.dirty {
			gen = max(gen, u.stageSource(src))
		}
		if byAcks && gen > 0 {
			u.ackGen, u.ackAsked, u.ackFlushed = gen, now, false
		}
		u.ackedSince = 0
	}
	if u.ackGen != 0 {
		if u.f.w.StagedCommitted() >= u.ackGen {
			u.ackGen = 0
		} else if !u.ackFlushed && now.Sub(u.ackAsked) >= flushAfter {
			u.ackFlushed = true
			u.stats.flushes.Add(1)
			ctx, cancel := context.WithTimeout(u.ctx, time.Second)
			if err := u.f.w.FlushStaged(ctx); err != nil {
				u.warn("flush", "asking the writer to commit the cursor failed", "err", err)
			}
			cancel()
		}
	}
	if now.Sub(u.lastMaint) >= time.Second {
		u.lastMaint = now
		u.maintain()
	}
}

// ---- dispatch ----

// dispatch sends a unit's items to the shards, piece by piece, within the
// window and behind the written-ahead position. false: stopping.
func (u *upstream) dispatch(un *unit) bool {
	st := un.st
	prevDone := st.readDone
	st.readDone = max(st.readDone, un.last)
	st.open = append(st.open, un)
	if un.kind == kindSegment {
		u.readAhead()
	}
	u.dirty[st.key.source] = true
	u.learnMetadata(un.meta)
	if un.unresolved > 0 {
		u.stats.drop(reasonUnresolvable, un.unresolved)
	}
	if un.kind == kindRow && un.items > 0 {
		u.perRow = 0.9*u.perRow + 0.1*float64(un.items)
	}
	r := u.resumeFor(st, un)
	if r != nil && r.p.Kind == un.kind && r.p.First == un.first && r.p.Last == un.last {
		u.skipItems(un, min(r.p.K, un.items))
	} else if r != nil && r.p.Kind != kindNone && !r.warned && un.first <= r.p.First && un.last >= r.p.Last {
		// A unit that holds the cursor's but is not it.
		r.warned = true
		u.log.Info("the unit the cursor was inside is gone (sealed and pruned, or compacted); reading what holds it whole",
			"source", st.key.source, "stream", st.key.stream, "first_ns", r.p.First, "last_ns", r.p.Last)
	}
	maxPer := int64(u.cfg.Queue.MaxSamplesPerSend)
	var base int64
	var fc filterCounts
	for ; un.next < len(un.series); un.next, un.nextOff = un.next+1, 0 {
		us := &un.series[un.next]
		n := us.items()
		for un.nextOff < n {
			if base+un.nextOff < un.dispatched {
				un.nextOff = un.dispatched - base // skipped by the resume
				continue
			}
			m := min(n-un.nextOff, maxPer)
			from := base + un.nextOff
			if u.inflight+m > u.window && u.inflight > 0 {
				// The window is full: nothing more goes out until some of
				// it is acknowledged, so the shards must not sit on
				// partial batches until their deadline.
				u.flushShards()
				if !u.waitFor(func() bool { return u.inflight+m <= u.window || u.inflight == 0 }, time.Second) {
					return false
				}
			}
			if !u.writeAhead(st, un, prevDone, from+m) {
				return false
			}
			smp, hs, exs := us.slice(un.nextOff, un.nextOff+m)
			p := un.newPiece()
			*p = piece{u: un, idx: int32(len(un.pieces)), s: us.s, meta: u.metaFor(us.s.lbls)}
			p.samples = us.s.filterSamples(nil, smp, &fc)
			p.histograms = us.s.filterHistograms(hs, &fc)
			p.exemplars = us.s.filterExemplars(exs, &fc)
			p.resent = un.resentAll || r != nil && r.h.covers(un.kind, un.first, un.last, from)
			un.pieces = append(un.pieces, pieceMark{start: from, n: m})
			un.dispatched = from + m
			un.nextOff += m
			if p.items() == 0 {
				un.pieces[p.idx].done = true
				u.advance(un)
				continue
			}
			if p.resent {
				u.stats.resent.Add(int64(p.items()))
			}
			u.inflight += m
			if !u.send(p) {
				return false
			}
		}
		base += n
	}
	if un.kind == kindSegment && un.first <= prevDone {
		// A segment read over rows already sent as rows (it straddled the
		// place): what the filter held back was sent, not dropped.
		u.stats.drop(reasonDuplicate, 0)
	} else {
		u.stats.drop(reasonDuplicate, fc.duplicate)
		u.stats.drop(reasonOutOfOrder, fc.outOfOrder)
	}
	un.dispatched = un.items
	un.series = nil // the pieces keep what they send
	u.advance(un)
	if r != nil && !r.h.covers(un.kind, un.first, un.last, max(un.items-1, 0)) {
		st.resume = nil // past what the previous process may have sent
	}
	return true
}

// resumeFor returns the stream's resume state while un is within it.
func (u *upstream) resumeFor(st *streamState, un *unit) *resumeState {
	r := st.resume
	if r == nil {
		return nil
	}
	isP := r.p.Kind == un.kind && r.p.First == un.first && r.p.Last == un.last
	if !isP && !r.h.covers(un.kind, un.first, un.last, 0) {
		st.resume = nil // nothing of it, nor after it, was ever sent
		return nil
	}
	return r
}

// skipItems marks un's first k items dispatched and done without sending
// them (acknowledged before a restart), feeding the dispatch filter.
func (u *upstream) skipItems(un *unit, k int64) {
	var base int64
	var fc filterCounts
	for i := range un.series {
		us := &un.series[i]
		n := us.items()
		if base >= k {
			break
		}
		s, h, e := us.slice(0, min(n, k-base))
		us.s.filterSamples(nil, s, &fc)
		us.s.filterHistograms(h, &fc)
		us.s.filterExemplars(e, &fc)
		base += n
	}
	un.dispatched = max(un.dispatched, k)
}

// writeAhead makes sure the cursor on disk says items up to end of un may
// have been sent before any is. It stages h a window ahead and, when what
// is committed does not cover end yet, waits for the commit (asking for
// one of its own when the archive is quiet); and once the dispatch is
// half way through what is committed, it stages the next stretch without
// waiting, so that its commit overlaps the sending.
func (u *upstream) writeAhead(st *streamState, un *unit, prevDone, end int64) bool {
	if end <= 0 {
		return true
	}
	u.aheadCommitted(st)
	if !st.hCommitted.covers(un.kind, un.first, un.last, end-1) {
		if st.hGen == 0 || !st.hWant.covers(un.kind, un.first, un.last, end-1) {
			u.stageAhead(st, un, prevDone, end)
		}
		ok := u.waitFor(func() bool {
			u.aheadCommitted(st)
			return st.hGen == 0
		}, time.Millisecond)
		if !ok {
			return false
		}
	}
	if half := end + u.window/2; st.hGen == 0 && half < un.items {
		if !st.hCommitted.covers(un.kind, un.first, un.last, half) {
			u.stageAhead(st, un, prevDone, half)
		}
	} else if st.hGen == 0 && un.kind == kindRow {
		// The same for the rows read ahead: half a window on.
		if ts, ok := u.rowAheadTS(st, half-un.items); ok && ts > st.hCommitted.Done {
			u.stageAhead(st, un, prevDone, end)
		}
	}
	return true
}

// rowAheadTS is the ts of the row read ahead that the next items items
// reach, by the items-per-row estimate (at least the next row, at most
// the last read); false when no row is read ahead.
func (u *upstream) rowAheadTS(st *streamState, items int64) (int64, bool) {
	if len(st.rows) == 0 {
		return 0, false
	}
	k := int(float64(items) / max(u.perRow, 1))
	k = min(max(k, 1), len(st.rows))
	return st.rows[k-1].TS, true
}

// stageAhead stages h covering end of un and a window more.
func (u *upstream) stageAhead(st *streamState, un *unit, prevDone, end int64) {
	want := pos{Done: max(prevDone, st.hCommitted.Done), Kind: un.kind, First: un.first, Last: un.last,
		K: min(un.items, end+u.window)}
	if want.K >= un.items {
		want = pos{Done: max(want.Done, un.last)}
		// The rows read ahead too, a window's worth: h is what a restart
		// counts as resent, so it runs no further ahead than that.
		if ts, ok := u.rowAheadTS(st, end+u.window-un.items); ok && un.kind == kindRow {
			want.Done = max(want.Done, ts)
		}
	}
	if want.Kind != kindNone && want.Last <= want.Done {
		want = pos{Done: want.Done}
	}
	st.hWant = want
	st.hGen = u.stageSource(st.key.source)
	st.hAsked, st.hFlushed = time.Now(), false
}

// aheadCommitted takes the commit of a staged h, and asks the writer for a
// commit of its own if none came within flushAfter.
func (u *upstream) aheadCommitted(st *streamState) {
	if st.hGen == 0 {
		return
	}
	if u.f.w.StagedCommitted() >= st.hGen {
		st.hCommitted, st.hGen = st.hWant, 0
		return
	}
	if !st.hFlushed && time.Since(st.hAsked) >= flushAfter {
		st.hFlushed = true
		u.stats.flushes.Add(1)
		ctx, cancel := context.WithTimeout(u.ctx, time.Second)
		err := u.f.w.FlushStaged(ctx)
		cancel()
		if err != nil {
			u.warn("flush", "asking the writer to commit the cursor failed", "err", err)
			st.hFlushed, st.hAsked = false, time.Now()
		}
	}
}

// flushAfter is how long a write-ahead waits for another commit to take
// its cursor before it asks the writer for one of its own.
const flushAfter = 2 * time.Millisecond

// send queues p for its shard; queued pieces go to the shard in one
// message once they make half a request (one channel operation per
// piece would cost more than the piece), or at a flush.
func (u *upstream) send(p *piece) bool {
	i := p.s.shard
	u.queued[i] = append(u.queued[i], p)
	u.queuedItems[i] += p.items()
	if u.queuedItems[i] < u.cfg.Queue.MaxSamplesPerSend/2 {
		return true
	}
	return u.handOver(i)
}

// handOver gives shard i what is queued for it, handling events while the
// shard is full.
func (u *upstream) handOver(i int) bool {
	ps := u.queued[i]
	if len(ps) == 0 {
		return true
	}
	u.queued[i], u.queuedItems[i] = nil, 0
	sh := u.shards[i]
	select {
	case sh.in <- ps:
		return true
	default:
	}
	for {
		u.timer.Reset(time.Second)
		select {
		case sh.in <- ps:
			u.timer.Stop()
			return true
		case ps := <-u.done:
			u.completed(ps)
		case r := <-u.ctrl:
			u.control(r)
		case <-u.timer.C:
			u.housekeeping() // a stalled upstream still reports its lag
		case <-u.stop:
			u.timer.Stop()
			return false
		}
		u.timer.Stop()
	}
}

// handOverAll gives every shard what is queued for it.
func (u *upstream) handOverAll() bool {
	for i := range u.shards {
		if !u.handOver(i) {
			return false
		}
	}
	return true
}

func (u *upstream) flushShards() {
	u.handOverAll()
	for _, s := range u.shards {
		select {
		case s.flush <- struct{}{}:
		default:
		}
	}
}

// completed takes pieces the shards finished (sent or dropped for good).
func (u *upstream) completed(ps []*piece) {
	for _, p := range ps {
		mark := &p.u.pieces[p.idx]
		if mark.done {
			continue
		}
		mark.done = true
		u.inflight -= mark.n
		u.ackedSince += mark.n
		u.advance(p.u)
	}
}

// advance moves a unit's low mark and, when units at the front of their
// stream are complete, the stream's acknowledged position.
func (u *upstream) advance(un *unit) {
	low := un.low
	for un.low < len(un.pieces) && un.pieces[un.low].done {
		un.low++
	}
	st := un.st
	moved := un.low != low
	for len(st.open) > 0 && st.open[0].complete() {
		st.done = max(st.done, st.open[0].last)
		st.open[0] = nil
		st.open = st.open[1:]
		moved = true
	}
	if moved {
		// The cursor (ackPos) follows low and open alone: a piece done
		// behind an unfinished one changes nothing to stage.
		u.dirty[st.key.source] = true
	}
}

// ---- metadata ----

func (u *upstream) learnMetadata(ms []promsample.Metadata) {
	for _, m := range ms {
		if old := u.meta[m.MetricFamily]; old == nil || *old != m {
			u.meta[m.MetricFamily] = &m
		}
	}
}

// metaFor finds a series' metadata: its family is its metric name, or the
// name without a suffix a family's series carry.
func (u *upstream) metaFor(ls labels.Labels) *promsample.Metadata {
	if len(u.meta) == 0 {
		return nil
	}
	name := ls.Get(labels.MetricName)
	if m := u.meta[name]; m != nil {
		return m
	}
	for _, suf := range [...]string{"_bucket", "_count", "_sum", "_total", "_created", "_info", "_gcount", "_gsum"} {
		if f, ok := strings.CutSuffix(name, suf); ok {
			if m := u.meta[f]; m != nil {
				return m
			}
		}
	}
	return nil
}

// ---- logging ----

// warn logs msg at most once per 10 s per key.
func (u *upstream) warn(key, msg string, args ...any) {
	now := time.Now()
	if t, ok := u.warnedAt[key]; ok && now.Sub(t) < 10*time.Second {
		return
	}
	u.warnedAt[key] = now
	u.log.Warn(msg, args...)
}

// warnShared is warn for the shards: at most once per 10 s per key among
// all of them.
func (u *upstream) warnShared(key, msg string, args ...any) {
	now := time.Now()
	u.warnMu.Lock()
	t, seen := u.warnShards[key]
	due := !seen || now.Sub(t) >= 10*time.Second
	if due {
		u.warnShards[key] = now
	}
	u.warnMu.Unlock()
	if due {
		u.log.Warn(msg, args...)
	}
}
