package receiver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

// SourceLabel is the label that names a source in the archive's catalog.
const SourceLabel = "source"

// MetadataKeyStreamBuckets is the sources.metadata key recording how many
// sample streams the source's series are spread over (promsample.StreamFor).
const MetadataKeyStreamBuckets = "stream_buckets"

// IngestOptions configures an Ingester. The zero value of every field but
// Writer and Reader means its default.
type IngestOptions struct {
	Writer *archive.Writer  // the archive's one writer; required
	Reader *archive.Archive // a read handle on the same file; required
	// Series is the series index requests name their series in (the
	// Handler's Options.Series); nil means a new one, which only a caller
	// writing with its own Decoder can use.
	Series *seriesindex.Index
	// Buckets is how many sample streams a source's series are spread over
	// by metric name (promsample.StreamFor); 0 means the default.
	Buckets int
	// Seal is the seal policy consulted per (source, stream).
	Seal archive.SealPolicy
	// Retention removes data received longer ago than this; 0 keeps all.
	Retention time.Duration
	// RetentionBytes caps the archive's size by evicting the oldest
	// segments; 0 means no cap. Set, the oldest segments also go, before
	// the cap is reached, whenever the room left for the archive (free
	// space on its filesystem and free pages in its file) falls below
	// DiskReserve: the operator has said old data may go, and on a full
	// disk it goes before any write is refused.
	RetentionBytes int64
	// DiskReserve is that room; 0 means DefaultDiskReserve. Room to seal
	// the live rows is kept beyond it (sealroom.go).
	DiskReserve int64
	// Urgency, when set, is told when seals must not wait for idle CPU
	// (sealroom.go): the same value the writer's EncodeOn consults.
	Urgency *SealUrgency
	// CompactTargetRows is the row count compaction merges segments up to;
	// 0 means DefaultCompactTargetRows, negative disables compaction.
	CompactTargetRows int64
	// WriteTimeout bounds how long a request waits for the writer before it
	// is answered 503; 0 means 30 s.
	WriteTimeout time.Duration
	// Parallelism is how many requests are encoded into rows at once; 0
	// means GOMAXPROCS.
	Parallelism int
	// IdleTimeout: a series ingest has not written for this long drops its
	// ingest state (its anchor and its place in the prediction of the
	// next series), as Prometheus's head drops idle series; its data stays
	// readable. 0 means DefaultIdleTimeout, negative never.
	IdleTimeout time.Duration
	// Floors keep retention and compaction off what a forwarder still
	// needs (floors.go); the zero value keeps nothing.
	Floors Floors
	// Now is the clock; nil means time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// DefaultIdleTimeout is IngestOptions.IdleTimeout's default: a series
// that has not been scraped for an hour has most likely gone.
const DefaultIdleTimeout = time.Hour

// DefaultCompactTargetRows: a merged segment holds up to this many wal rows
// (requests' shares). 400 small segments read 18x slower than one; merging
// toward a few thousand rows keeps a day's segments per stream in the tens.
const DefaultCompactTargetRows = 8192

// DefaultDiskReserve is the room RetentionBytes keeps free for the archive:
// a few checkpoint intervals of the sidecar at a high ingest rate, so that a
// disk that fills is noticed (diskCheckEvery) while commits still fit.
// Below it, a commit can fail for good until space returns: one that finds
// the disk full does so because the -wal sidecar cannot grow, and then no
// eviction can commit either (see archive's writer_failure.go).
const DefaultDiskReserve = 64 << 20

// writeAmplification is how many bytes an ingest commit may write for
// each byte of its rows, as the disk reserve's early check counts them
// (measured: ~10, whole 4 KiB pages of the wal table's b-tree per stream
// a request touches, to the -wal sidecar and again at the checkpoint).
const writeAmplification = 10

// Maintenance cadences.
const (
	diskCheckEvery   = 2 * time.Second
	sealCheckEvery   = 250 * time.Millisecond
	retentionEvery   = time.Minute
	compactionEvery  = 5 * time.Minute
	idleEvery        = time.Minute
	compactMinSegs   = 4 // a stream is compacted once it has this many segments
	defaultWriteWait = 30 * time.Second
)

// Ingester is the Sink that routes remote-written series into the archive:
// each request's data goes to its source (the sender, named by the
// handler), split over a few streams by metric name, and is committed in ONE
// writer transaction with writer-assigned, strictly increasing receipt
// timestamps (so no acknowledged sample is ever dropped for lateness: a
// row's ts is never at or below its stream's sealed watermark, whatever the
// samples' own timestamps are). Rows name their series once per epoch
// (epochs.go). It also runs the background work: sealing by policy,
// compaction and retention, all through the writer.
type Ingester struct {
	opts IngestOptions
	enc  *promsample.Encoder
	log  *slog.Logger
	x    *seriesindex.Index

	mu      sync.Mutex
	sources map[string]*sourceState // by name
	byID    map[archive.SourceID]*sourceState
	// accounts is each stream's seal account. A source keeps the stream
	// bucket count it was created with (sources.metadata
	// "stream_buckets"): readers prune streams by it.
	accounts map[streamKey]*archive.SegmentAccount
	stamps   atomic.Uint32 // epoch stamps handed out (newEpoch)

	// scratch lends rowScratches, at most IngestOptions.Parallelism at a
	// time.
	scratch *freeList[*rowScratch]
	// rowBufs holds the byte slices of committed rows for the next
	// request's rows to be encoded into.
	rowBufs bufStack

	// checkDisk wakes the disk reserve's goroutine (Run) when a write
	// found the disk full (sawFull), or may have written a tenth of the
	// reserve since the last check (capacity 1, sent without blocking);
	// written counts the wal bytes appended since that check, times
	// writeAmplification.
	checkDisk chan struct{}
	sawFull   atomic.Bool
	written   atomic.Int64
	// held: appends are refused, the room left kept for seals
	// (sealroom.go); sealingBytes: the live row bytes a seal round took
	// from the accounts and has not sealed yet (liveBytes).
	held         atomic.Bool
	sealingBytes atomic.Int64
	stats        ingestCounters
}

// IngestStats are the Ingester's cumulative counters.
type IngestStats struct {
	// EarlyEvictions counts the passes that evicted the oldest segments to
	// keep IngestOptions.DiskReserve free, before RetentionBytes required
	// it; EarlyEvictedSegments and EarlyEvictedBytes what they evicted.
	EarlyEvictions, EarlyEvictedSegments, EarlyEvictedBytes int64
	// BallastReleases counts the times a full disk, or a seal that needed
	// its room, took the ballast (ballast.go).
	BallastReleases int64
	// Holds counts the times appends were held so that the room left went
	// to seals (sealroom.go); HeldWrites the writes refused meanwhile;
	// Held says whether they are held now.
	Holds, HeldWrites int64
	Held              bool
}

type ingestCounters struct {
	earlyEvictions, earlyEvictedSegments, earlyEvictedBytes atomic.Int64
	ballastReleases                                         atomic.Int64
	holds, heldWrites                                       atomic.Int64
}

// Stats returns a snapshot of the Ingester's counters.
func (in *Ingester) Stats() IngestStats {
	return IngestStats{EarlyEvictions: in.stats.earlyEvictions.Load(),
		EarlyEvictedSegments: in.stats.earlyEvictedSegments.Load(), EarlyEvictedBytes: in.stats.earlyEvictedBytes.Load(),
		BallastReleases: in.stats.ballastReleases.Load(),
		Holds:           in.stats.holds.Load(), HeldWrites: in.stats.heldWrites.Load(), Held: in.held.Load()}
}

func (in *Ingester) getScratch() *rowScratch { return in.scratch.get() }

func (in *Ingester) putScratch(sc *rowScratch) {
	sc.release()
	in.scratch.put(sc)
}

// rowScratch is what encoding one request's rows reuses. Borrowed for the
// encoding part of one Write, up to the rows' enqueueing, not across the
// wait for their commit; nothing kept from it outlives that (rows are
// copied out by the encoder, the anchors copied before it goes back).
type rowScratch struct {
	enc      promsample.RowEncoder
	bucket   []uint16 // per series: its bucket
	order    []int32  // series indexes grouped by bucket
	count    []int    // per bucket: series, then start offsets
	meta     [][]promsample.Metadata
	row      promsample.AnchoredRow
	locals   []uint32            // per series of a row: its local id
	fresh    promsample.RowIDMap // a row's series not yet anchored (Ref) -> local id
	anchored []anchorRec         // anchors of the request's rows
	// interned is a row's anchors as the index's symbol ids: the row
	// encoder copies their strings from the index, and no labels.Labels
	// is built per anchor (at a million series, anchoring every series
	// once a seal period, building them was 7% of the receiver's CPU).
	interned promsample.InternedAnchors
}

// anchorRec is an anchor a request's row carries: the series' stamp once
// the row committed.
type anchorRec struct {
	ref   seriesindex.Ref
	stamp uint64
}

// release drops the references the scratch holds into a request.
func (sc *rowScratch) release() {
	for i := range sc.meta {
		sc.meta[i] = sc.meta[i][:0]
	}
	clear(sc.row.Series)
	sc.row = promsample.AnchoredRow{Series: sc.row.Series[:0]}
	sc.interned.Reset()
	sc.anchored = sc.anchored[:0]
}

// split groups a request's series by stream bucket (xxhash64 of the
// metric name mod buckets, as promsample.StreamFor), in wire order within
// a bucket, and its metadata likewise.
func (sc *rowScratch) split(x *seriesindex.Index, series []Series, meta []promsample.Metadata, buckets int) {
	sc.count = append(sc.count[:0], make([]int, buckets+1)...)
	sc.bucket = sc.bucket[:0]
	// The metric name is found by symbol ids, and its bucket hashed only
	// when it differs from the series before's: a request lists a
	// metric's series together (Prometheus sends a scrape in order), and
	// comparing and hashing the name of every series was 4% of the
	// receiver's CPU at 10,000 series.
	const unnamed = 1 << 32 // a name key no symbol id takes: no __name__
	nameSym, hasName := x.SymbolID(labels.MetricName)
	lastName, lastBucket := uint64(math.MaxUint64), uint16(0)
	for i := range series {
		name := uint64(unnamed)
		if hasName {
			for p := x.Pairs(series[i].Ref); p.Len() > 0; {
				if n, v := p.Next(); n == nameSym {
					name = uint64(v)
					break
				}
			}
		}
		if name != lastName {
			s := "" // as labels.Get finds no __name__
			if name != unnamed {
				s = x.Symbol(uint32(name))
			}
			lastName, lastBucket = name, uint16(xxhash.Sum64String(s)%uint64(buckets))
		}
		sc.bucket = append(sc.bucket, lastBucket)
		sc.count[lastBucket+1]++
	}
	for b := 0; b < buckets; b++ {
		sc.count[b+1] += sc.count[b]
	}
	sc.order = append(sc.order[:0], make([]int32, len(series))...)
	pos := append([]int(nil), sc.count[:buckets]...)
	for i, b := range sc.bucket {
		sc.order[pos[b]] = int32(i)
		pos[b]++
	}
	if len(sc.meta) < buckets {
		sc.meta = append(sc.meta, make([][]promsample.Metadata, buckets-len(sc.meta))...)
	}
	for _, m := range meta {
		b := xxhash.Sum64String(m.MetricFamily) % uint64(buckets)
		sc.meta[b] = append(sc.meta[b], m)
	}
}

type streamKey struct {
	source archive.SourceID
	stream string
}

// NewIngester resumes every source the archive already holds (same ids and
// uuids) and returns the Ingester. Call Run to start background work and
// Close to finalize.
func NewIngester(ctx context.Context, opts IngestOptions) (*Ingester, error) {
	if opts.Writer == nil || opts.Reader == nil {
		return nil, errors.New("receiver: IngestOptions needs Writer and Reader")
	}
	if opts.Series == nil {
		opts.Series = seriesindex.New()
	}
	if opts.Buckets <= 0 {
		opts.Buckets = promsample.DefaultStreamBuckets
	}
	if opts.Buckets > promsample.MaxStreamBuckets {
		return nil, fmt.Errorf("receiver: %d stream buckets exceeds the maximum of %d", opts.Buckets, promsample.MaxStreamBuckets)
	}
	if opts.CompactTargetRows == 0 {
		opts.CompactTargetRows = DefaultCompactTargetRows
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = defaultWriteWait
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.DiskReserve <= 0 {
		opts.DiskReserve = DefaultDiskReserve
	}
	opts.Seal = opts.Seal.WithDefaults()
	in := &Ingester{opts: opts, enc: &promsample.Encoder{}, log: opts.Logger, x: opts.Series,
		sources: map[string]*sourceState{}, byID: map[archive.SourceID]*sourceState{},
		accounts: map[streamKey]*archive.SegmentAccount{}, checkDisk: make(chan struct{}, 1)}
	in.scratch = newFreeList(cmp.Or(max(opts.Parallelism, 0), runtime.GOMAXPROCS(0)), func() *rowScratch {
		return &rowScratch{interned: promsample.InternedAnchors{Symbol: in.x.Symbol}}
	})

	type resumable struct {
		id      archive.SourceID
		name    string
		last    int64
		has     bool
		buckets int
		live    []archive.StreamSpan // streams with live rows
	}
	var todo []resumable
	if err := opts.Reader.View(ctx, func(tx *archive.ReadTx) error {
		srcs, err := tx.Sources()
		if err != nil {
			return err
		}
		for _, s := range srcs {
			name, ok := s.Labels[SourceLabel]
			if !ok {
				continue
			}
			last, has, err := tx.SourceLastTS(s.ID)
			if err != nil {
				return err
			}
			buckets := promsample.DefaultStreamBuckets
			if v, err := strconv.Atoi(s.Metadata[MetadataKeyStreamBuckets]); err == nil && v >= 1 && v <= promsample.MaxStreamBuckets {
				buckets = v
			}
			r := resumable{id: s.ID, name: name, last: last, has: has, buckets: buckets}
			if r.live, err = tx.LiveSpans(s.ID); err != nil {
				return err
			}
			todo = append(todo, r)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("receiver: reading sources to resume: %w", err)
	}
	for _, r := range todo {
		anchor := opts.Now().UnixNano()
		if r.has && anchor <= r.last {
			anchor = r.last + 1 // the clock stepped back: the timeline still moves forward
		}
		if _, err := opts.Writer.ResumeSource(ctx, r.id, anchor); err != nil {
			return nil, fmt.Errorf("receiver: resuming source %q (id %d): %w", r.name, r.id, err)
		}
		st := in.newSourceState(r.id, r.buckets)
		// Rule 3 (epochs.go): close whatever epoch the last process left
		// open in a stream, so that its rows can be sealed.
		var markers []archive.Row
		for _, sp := range r.live {
			markers = append(markers, archive.Row{Stream: sp.Stream, Data: promsample.AppendEpochClose(nil, rand.Uint64())})
		}
		if len(markers) > 0 {
			if _, err := opts.Writer.AppendWait(ctx, []archive.SourceRows{{Source: r.id, Rows: markers}}, true); err != nil {
				return nil, fmt.Errorf("receiver: resuming source %q (id %d): %w", r.name, r.id, err)
			}
			// Accounted, so the live rows they close are sealed by age
			// even if the stream gets no new row.
			in.account(r.id, markers)
		}
		in.inherit(r.id, r.live)
		in.sources[r.name] = st
		in.byID[r.id] = st
		if r.buckets != opts.Buckets {
			in.log.Warn("source keeps the stream bucket count it was created with", "source", r.name,
				"stream_buckets", r.buckets, "flag", opts.Buckets)
		}
		in.log.Info("resumed source", "source", r.name, "id", r.id)
	}
	return in, nil
}

// inherit counts into the seal accounts of a resumed source's streams the
// live rows an earlier session left, counted from the wal's index (no row
// is read): otherwise a bounded seal would take only as many of those rows
// as new rows made the stream due, and every unclean stop would leave a
// backlog that no seal ever took up (108,175 live rows after 31 kills
// under load). A row's ts is its receipt time (the writer stamps it), so
// the account's age runs from the oldest; their bytes are not counted, so
// an account due only by size falls due by rows or age instead.
func (in *Ingester) inherit(id archive.SourceID, live []archive.StreamSpan) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, sp := range live {
		k := streamKey{id, sp.Stream}
		a := in.accounts[k]
		if a == nil {
			a = archive.OpenFirst(sp.Stream, fmt.Sprint(id), in.opts.Seal, in.opts.Now())
			in.accounts[k] = a
		}
		a.Carry(sp.Rows, 0, time.Unix(0, sp.FirstTS))
	}
}

// Series returns the series index the ingester writes through.
func (in *Ingester) Series() *seriesindex.Index { return in.x }

// source returns the state of the named source, adding it on first sight.
func (in *Ingester) source(ctx context.Context, name string) (*sourceState, error) {
	in.mu.Lock()
	st, ok := in.sources[name]
	in.mu.Unlock()
	if ok {
		return st, nil
	}
	// Serialize additions so two first requests of one sender add it once.
	in.mu.Lock()
	defer in.mu.Unlock()
	if st, ok := in.sources[name]; ok {
		return st, nil
	}
	src, err := in.opts.Writer.AddSource(ctx, archive.SourceSpec{
		Labels:            map[string]string{SourceLabel: name},
		Metadata:          map[string]string{MetadataKeyStreamBuckets: fmt.Sprint(in.opts.Buckets)},
		ClockAnchorWallNS: in.opts.Now().UnixNano(),
	}, "")
	if err != nil {
		return nil, err
	}
	st = in.newSourceState(src.ID(), in.opts.Buckets)
	in.sources[name] = st
	in.byID[src.ID()] = st
	in.log.Info("added source", "source", name, "id", src.ID(), "uuid", src.UUID())
	return st, nil
}

// Write commits one request's data. It returns nil only when the writer
// reported every row committed and none dropped. While appends are held
// (sealroom.go) it refuses at once with ErrDiskFull.
func (in *Ingester) Write(ctx context.Context, name string, series []Series, meta []promsample.Metadata) (Counts, error) {
	if in.held.Load() {
		in.stats.heldWrites.Add(1)
		return Counts{}, errHeldForSeals
	}
	ctx, cancel := context.WithTimeout(ctx, in.opts.WriteTimeout)
	defer cancel()
	st, err := in.source(ctx, name)
	if err != nil {
		return Counts{}, in.writeError(err)
	}
	sc := in.getScratch()
	held := true
	release := func() {
		if held {
			held = false
			in.putScratch(sc)
		}
	}
	defer release()
	sc.split(in.x, series, meta, st.buckets)

	// Encode and enqueue under the epochs' read lock (epochs.go, rule 1).
	st.mu.RLock()
	epochs := make([]*epochState, 0, 8) // per row: its epoch
	sampleCounts := make([]int, 0, 8)   // per row: about its samples
	var rows []archive.Row
	for b := 0; b < st.buckets; b++ {
		idx := sc.order[sc.count[b]:sc.count[b+1]]
		if len(idx) == 0 && len(sc.meta[b]) == 0 {
			continue
		}
		ep := st.epochs[b]
		var err error
		n0 := len(rows)
		if rows, err = in.appendRows(sc, ep, rows, st.names[b], series, idx, sc.meta[b]); err != nil {
			st.mu.RUnlock()
			return Counts{}, fmt.Errorf("%w: %w", ErrRejected, err)
		}
		n := 0
		for _, i := range idx {
			n += len(series[i].Samples) + len(series[i].Histograms)
		}
		for k := n0; k < len(rows); k++ {
			epochs = append(epochs, ep)
			sampleCounts = append(sampleCounts, n/(len(rows)-n0))
		}
	}
	if len(rows) == 0 {
		st.mu.RUnlock()
		return Counts{}, nil
	}
	sending(ctx)
	if in.opts.RetentionBytes > 0 {
		b := int64(0)
		for i := range rows {
			b += int64(len(rows[i].Data))
		}
		// A check for every tenth of the reserve the disk may have lost.
		// Rows are not what the disk loses: every commit writes whole
		// pages to the sidecar (44-54 bytes written a sample against the
		// rows' ~4.5; see the README's benchmark), so a trigger on row
		// bytes alone let a whole reserve go between two checks.
		if in.written.Add(b*writeAmplification) > in.opts.DiskReserve/10 {
			in.written.Store(0)
			in.wakeDiskCheck()
		}
	}
	q, err := in.opts.Writer.AppendQueued(ctx, []archive.SourceRows{{Source: st.id, Rows: rows}}, true)
	st.mu.RUnlock()
	// The scratch is for encoding (pure CPU: the free list holds
	// GOMAXPROCS of them); waiting for the commit, an fsync, must not hold
	// it, or no more than GOMAXPROCS requests could share a group commit.
	// Measured at 10 k series, 2 cores: ~400 requests/s whatever the
	// senders, the writer idle half the time. Only the anchors outlive it.
	anchored := slices.Clone(sc.anchored)
	release()
	if err != nil {
		return Counts{}, in.writeError(err)
	}
	res, err := q.Wait(ctx)
	if err != nil {
		return Counts{}, in.writeError(err)
	}
	if n := res.Dropped(); n > 0 {
		cause := res.Err()
		if archive.IsDiskFull(cause) && in.opts.RetentionBytes > 0 {
			in.sawFull.Store(true)
			in.wakeDiskCheck()
		}
		if cause == nil {
			cause = fmt.Errorf("%d row(s) dropped as out of order", n)
		}
		return Counts{}, fmt.Errorf("%w: %w", ErrIncompleteWrite, in.writeError(cause))
	}
	// Committed: the anchors may now be referred to (rule 2).
	now := in.opts.Now()
	for _, a := range anchored {
		in.x.SetAnchor(a.ref, a.stamp)
	}
	var c Counts
	for i := range series {
		in.x.Touch(series[i].Ref, now)
		c.Samples += len(series[i].Samples)
		c.Histograms += len(series[i].Histograms)
		c.Exemplars += len(series[i].Exemplars)
	}
	var outgrown map[int]*epochState // by bucket
	for i, r := range rows {
		ep := epochs[i]
		ep.rows.Add(1)
		ep.samples.Add(int64(sampleCounts[i]))
		if ep.bytes.Add(int64(len(r.Data))) >= in.opts.Seal.MaxBytes || (ep.rows.Load() >= in.opts.Seal.MaxRows && !ep.thin()) {
			if b := st.bucketOf(r.Stream); b >= 0 {
				if outgrown == nil {
					outgrown = map[int]*epochState{}
				}
				outgrown[b] = ep
			}
		}
	}
	in.account(st.id, rows)
	// Committed: the writer has let go of the rows' bytes (it reads them
	// only until the commit it answered), so they can carry the next
	// request's rows. On an error they may still be queued, and are left
	// to the GC.
	for i := range rows {
		in.rowBufs.put(rows[i].Data)
	}
	if len(outgrown) > 0 {
		// An epoch that grew to a seal's worth (seals falling behind):
		// close it, so that a bounded seal can still take it whole.
		if err := in.closeOutgrown(ctx, st, outgrown); err != nil {
			in.log.Warn("closing an outgrown epoch", "source", st.id, "err", err)
		}
	}
	return c, nil
}

// appendRows encodes one stream's share of a request (series[idx...] and
// meta) as a row of epoch ep, or, when it is larger than a row may be
// (promsample.MaxBatchBytes), as several rows, halving its series until
// each fits. A series the epoch has a committed anchor for is named by its
// local id; any other is anchored in the row.
func (in *Ingester) appendRows(sc *rowScratch, ep *epochState, rows []archive.Row, stream string, series []Series, idx []int32, meta []promsample.Metadata) ([]archive.Row, error) {
	r := &sc.row
	r.Epoch, r.Metadata = ep.id, meta
	r.Interned, r.Series = nil, r.Series[:0]
	sc.interned.Reset()
	anchoredFrom := len(sc.anchored)
	// locals[k] is the local id of series[idx[k]]: the one its anchor in
	// this epoch gave it (a committed row's, so any reader of the row can
	// resolve it), or, for a series not anchored yet, one of the ids
	// reserved below, assigned once per series (sc.fresh) however often
	// the request lists it. In the steady state every series is anchored
	// and no map is touched: a map probe per series was 5% of the
	// receiver's CPU at 10,000 series.
	locals := sc.locals[:0]
	sc.fresh.Reset()
	var fresh []seriesindex.Ref
	for _, i := range idx {
		ref := series[i].Ref
		if a := in.x.Anchor(ref); a != 0 && uint32(a>>32) == ep.stamp {
			locals = append(locals, uint32(a))
			continue
		}
		locals = append(locals, 0) // set below
		if _, dup := sc.fresh.Get(uint32(ref)); !dup {
			sc.fresh.Set(uint32(ref), 0)
			fresh = append(fresh, ref)
		}
	}
	sc.locals = locals
	if len(fresh) > 0 {
		if uint64(ep.next.Load())+uint64(len(fresh)) >= promsample.MaxEpochSeries {
			return rows, fmt.Errorf("stream %s: epoch holds %d series", stream, ep.next.Load())
		}
		first := ep.next.Add(uint32(len(fresh))) - uint32(len(fresh))
		r.FirstLocal, r.Interned = first, &sc.interned
		for k, ref := range fresh {
			sc.fresh.Set(uint32(ref), first+uint32(k))
			p, a := in.x.Pairs(ref), &sc.interned
			for range p.Len() {
				n, v := p.Next()
				a.Pairs = append(a.Pairs, n, v)
			}
			a.Ends = append(a.Ends, uint32(len(a.Pairs)))
			sc.anchored = append(sc.anchored, anchorRec{ref: ref, stamp: uint64(ep.stamp)<<32 | uint64(first+uint32(k))})
		}
	} else {
		r.FirstLocal = ep.next.Load()
	}
	for k, i := range idx {
		s := &series[i]
		l := locals[k]
		if len(fresh) > 0 {
			if f, ok := sc.fresh.Get(uint32(s.Ref)); ok {
				l = f
			}
		}
		r.Series = append(r.Series, promsample.RowSeries{Local: l, Samples: s.Samples, Histograms: s.Histograms, Exemplars: s.Exemplars})
	}
	data, err := sc.enc.Append(in.rowBufs.get(), r)
	if err == nil {
		return append(rows, archive.Row{Stream: stream, Data: data}), nil
	}
	if !errors.Is(err, promsample.ErrTooLarge) || len(idx) < 2 {
		return rows, err
	}
	// Too large: two rows, each anchoring its own series afresh (the local
	// ids reserved above stay unused).
	sc.anchored = sc.anchored[:anchoredFrom]
	half := len(idx) / 2
	first, second := idx[:half:half], idx[half:]
	if rows, err = in.appendRows(sc, ep, rows, stream, series, first, meta); err != nil {
		return rows, err
	}
	return in.appendRows(sc, ep, rows, stream, series, second, nil)
}

// writeError maps an archive failure onto the handler's retry contract
// (classify turns the result into a status): a full disk is 507, a writer
// that cannot commit now (an outage: archive.ErrCannotCommit), has stopped
// or is closed, and every transient SQLite failure, 503; both retried.
func (in *Ingester) writeError(err error) error {
	switch {
	case archive.IsDiskFull(err):
		return fmt.Errorf("%w: %w", ErrDiskFull, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, archive.ErrCannotCommit), errors.Is(err, archive.ErrWriterStopped),
		errors.Is(err, archive.ErrClosed), archive.IsRetryable(err):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// account feeds committed rows (their ts stamped by the writer) to the
// streams' seal accounts.
func (in *Ingester) account(id archive.SourceID, rows []archive.Row) {
	now := in.opts.Now()
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, r := range rows {
		k := streamKey{id, r.Stream}
		a := in.accounts[k]
		if a == nil {
			a = archive.OpenFirst(r.Stream, fmt.Sprint(id), in.opts.Seal, now)
			in.accounts[k] = a
		}
		a.AddRow(len(r.Data), r.TS)
	}
}

// Run does the background work until ctx ends: seals by policy four times
// a second (a stream that takes 900 rows a second is then sealed near the
// policy's 900, not anywhere up to twice that: a seal holds its rows and
// their decoded samples while it encodes), retention every minute,
// compaction every five minutes.
func (in *Ingester) Run(ctx context.Context) {
	sealT := time.NewTicker(sealCheckEvery)
	defer sealT.Stop()
	retT := time.NewTicker(retentionEvery)
	defer retT.Stop()
	compT := time.NewTicker(compactionEvery)
	defer compT.Stop()
	idleT := time.NewTicker(idleEvery)
	defer idleT.Stop()
	if in.opts.RetentionBytes > 0 {
		// The reserve has a goroutine of its own: a seal or a compaction
		// on this one can take seconds at high cardinality, and the load
		// goes on filling the disk meanwhile. Once the disk is full an
		// eviction cannot commit either (archive's failure policy), so
		// the check must never wait behind them.
		done := make(chan struct{})
		defer func() { <-done }() // after ctx ended: Run returns only then
		go func() { defer close(done); in.keepDiskReserve(ctx) }()
	} else if err := newBallast(in.opts.Reader.Path(), 0).release(); err != nil {
		in.log.Warn("removing the ballast of an earlier run", "err", err) // one --retention.size set
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-idleT.C:
			if in.opts.IdleTimeout > 0 {
				if n := in.x.Idle(in.opts.Now(), in.opts.IdleTimeout); n > 0 {
					in.log.Debug("series went idle", "series", n, "idle_timeout", in.opts.IdleTimeout)
				}
			}
		case <-sealT.C:
			in.SealDue(ctx)
		case <-retT.C:
			if err := in.EnforceRetention(ctx); err != nil && ctx.Err() == nil {
				in.log.Warn("retention failed", "err", err)
			}
		case <-compT.C:
			if err := in.Compact(ctx); err != nil && ctx.Err() == nil {
				in.log.Warn("compaction failed", "err", err)
			}
		}
	}
}

// keepDiskReserve keeps the reserve (keepRoom) at once, every
// diskCheckEvery and whenever checkDisk wakes it, until ctx ends. It owns
// the ballast, and removes it as it returns.
func (in *Ingester) keepDiskReserve(ctx context.Context) {
	b := newBallast(in.opts.Reader.Path(), in.opts.DiskReserve/2)
	defer func() {
		if err := b.release(); err != nil {
			in.log.Warn("removing the ballast", "err", err)
		}
	}()
	t := time.NewTicker(diskCheckEvery)
	defer t.Stop()
	for {
		if err := in.keepRoom(ctx, b); err != nil && ctx.Err() == nil {
			in.log.Warn("keeping the disk reserve failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-in.checkDisk:
		}
	}
}

// wakeDiskCheck asks for a disk reserve check now, without waiting.
func (in *Ingester) wakeDiskCheck() {
	select {
	case in.checkDisk <- struct{}{}:
	default:
	}
}

func (in *Ingester) sourceIDs() []archive.SourceID {
	in.mu.Lock()
	defer in.mu.Unlock()
	ids := make([]archive.SourceID, 0, len(in.sources))
	for _, st := range in.sources {
		ids = append(ids, st.id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

func (in *Ingester) sourceByID(id archive.SourceID) *sourceState {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.byID[id]
}

// Sources returns the number of sources and of streams with rows accounted
// this session.
func (in *Ingester) Sources() (sources, streams int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.sources), len(in.accounts)
}

// Finalize marks every source complete: the last step of a clean stop,
// before the writer closes.
func (in *Ingester) Finalize(ctx context.Context) error {
	var errs []error
	for _, id := range in.sourceIDs() {
		if err := in.opts.Writer.Finalize(ctx, id, in.opts.Now().UnixNano(), 0); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
