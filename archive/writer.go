package archive

// The writer.
//
// Every mutation of a live archive goes through one goroutine, which owns the
// only writing connection and every piece of cached writer state (each
// stream's next seq, its sealed watermark, resumed sources' floors, the
// newest ts handed out per stream). The design rests on five invariants:
//
//  1. One writer. A second writing connection would stall on SQLite's write
//     lock for busy_timeout before failing, which against a steady append
//     cadence reads as a hang; and it could insert or evict segments behind
//     the cache, after which the next seal would collide on seq or the next
//     append be dropped as out of order. OpenWriter therefore takes an
//     advisory lock on the file and refuses a second writer with ErrInUse.
//
//  2. The channel holds one message, for the whole archive. A send blocks
//     while the writer is busy: a disk that cannot keep up slows the callers
//     instead of growing a buffer (backpressure). It is also the loss bound:
//     at any instant at most one message waits in the channel while another
//     commits, so an unclean kill loses at most those two and nothing that
//     was committed. One slot rather than one per source because there is one
//     write lock; a deeper queue would only move the wait.
//
//  3. A reply means committed. AppendWait, and every call that waits, returns
//     only after the writer's transaction has committed at synchronous=FULL
//     (or failed). Reply channels have capacity 1, so the writer never blocks
//     on a caller that stopped waiting.
//
//  4. A caller that gives up (its context ends) after its message was
//     queued has not withdrawn it: the writer still applies it. The caller
//     only learns nothing; a server must then answer "retry", and the retry
//     is an exact duplicate that readers de-duplicate.
//
//  5. Watermarks move with commits, never with requests. A seal advances a
//     stream's watermark only after its segment commits, and rows at or
//     below a watermark are dropped (and counted). Stamped appends
//     (AppendWait with stamp) take their ts from the writer itself, strictly
//     increasing per stream, so no row can be on its way below a watermark.
//
// The one exception to "everything on the writer goroutine" is a seal's
// encode: the writer hands a snapshot of the rows to one encoder goroutine,
// which returns a segment as a value; the writer alone commits it, after
// checking that nothing it relied on changed (see startSeal). The encoder
// goroutine touches no connection and no writer state.
//
// Shutdown order (Close): the loop stops taking messages, finishes a seal
// in flight, reclaims free pages (up to 2 s) if every source it opened was
// finalized, closes the connection (SQLite then folds the sidecar into the
// file and removes -wal and -shm if no one else has the file open) and
// finally releases the advisory lock.
//
// Failure policy: retryable SQLite codes are retried 10/50/250 ms; a
// constraint failure is isolated to its source; 30 consecutive dropped ticks,
// an encoder failure, or any other error stops the writer, and every handle
// then reports that error (ErrWriterStopped).

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	sqlite "modernc.org/sqlite"
)

// Writer constants (reference values).
const (
	// CheckpointInterval is the time between passive checkpoints: it bounds
	// how much a copy of the main file alone can be missing.
	CheckpointInterval = 10 * time.Second
	// ReclaimPagesPerPass is how many free pages one reclaim returns.
	ReclaimPagesPerPass = 100
	// reclaimFreelistDivisor: reclaim only when free pages exceed 1/10 of
	// the file, i.e. when the working set shrank.
	reclaimFreelistDivisor = 10
	// ReclaimAtCloseBudget bounds the reclaim a clean close runs.
	ReclaimAtCloseBudget = 2 * time.Second
	// pruneMaxDelay bounds how long a deferred prune (WriterOptions.
	// DeferPrunes) waits for a Prune.
	pruneMaxDelay = 5 * time.Second
	// maxConsecutiveDroppedTicks stops a writer that can no longer commit.
	maxConsecutiveDroppedTicks = 30
	// implementation is recorded in writer_sessions.
	implementation = "dendro-receiver/archive 0.1.0"
)

// retryBackoff is the retry schedule for retryable SQLite failures.
var retryBackoff = [...]time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 250 * time.Millisecond}

// WriterOptions configures a Writer. The zero value of every field but
// Encoder means its default.
type WriterOptions struct {
	// Encoder turns a stream's rows into a segment at seal. Required.
	Encoder SegmentEncoder
	// CheckpointInterval between passive checkpoints; 0 means
	// CheckpointInterval, negative disables the timer (tests).
	CheckpointInterval time.Duration
	// BusyTimeout for the writer's connection; 0 means 5 s.
	BusyTimeout time.Duration
	// Logger receives warnings (drops, deferred seals); nil discards.
	Logger *slog.Logger
	// Now is the clock stamped appends use; nil means time.Now.
	Now func() time.Time
	// Coming, if set, reports how many appends callers are preparing and
	// have not yet sent (a receiver decoding requests). While it is above
	// zero and nothing else is queued, a group commit waits up to GroupWait
	// for them, so they share its transaction and fsync instead of each
	// paying for one. It is called on the writer goroutine: it must be
	// cheap and must not call the Writer.
	Coming    func() int
	GroupWait time.Duration
	// DeferPrunes leaves the prune that follows each seal queued until
	// Prune, Sync, an eviction or Close runs every queued prune in one
	// transaction (or pruneMaxDelay passes). Off, a seal prunes its streams
	// right after its commit, in a transaction of its own, before it
	// answers (the reference's order). See prunePending for why a caller
	// that seals streams one after another wants it on.
	DeferPrunes bool
	// MaxSealRows and MaxSealBytes, when > 0, bound what one seal takes
	// from a stream: its oldest live rows, up to MaxSealRows rows and
	// MaxSealBytes bytes of row data (always at least one row). The rest
	// stay live, above the new watermark, for the next seal. A seal holds
	// its rows and their decoded samples in memory while it encodes, so
	// the bound is what keeps that memory fixed when seals fall behind the
	// appends. Zero seals every live row (the reference's behaviour).
	MaxSealRows  int
	MaxSealBytes int64
	// EncodeOn runs one seal's encoding, which is most of the writer's
	// CPU, off the writer goroutine. nil runs encode on a new goroutine.
	// A caller can run it on a thread of lower CPU priority than the
	// appends' (see cmd/dendro-receiver), so that it takes the CPU the
	// appends leave idle while they wait for their fsyncs. behind reports
	// that a stream of the seal still holds at least 2 x MaxSealRows live
	// rows beyond the ones sealed: the encoding is falling behind the
	// appends and should not wait for idle CPU. EncodeOn must call encode
	// exactly once; it may return before encode does.
	EncodeOn func(behind bool, encode func())
}

func (o *WriterOptions) setDefaults() error {
	if o.Encoder == nil {
		return errors.New("archive: WriterOptions.Encoder is required")
	}
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = CheckpointInterval
	}
	if o.BusyTimeout == 0 {
		o.BusyTimeout = defaultBusyTimeoutMS * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

// Writer is the handle to an archive's writer goroutine. Its methods are
// safe for concurrent use.
type Writer struct {
	path string
	reqs chan message  // capacity 1: see invariant 2
	done chan struct{} // closed when the loop has exited and the file is released
	log  *slog.Logger

	closeOnce sync.Once
	closeErr  error

	mu      sync.Mutex
	failure error              // the stored failure, once the loop stopped on one
	dropped map[SourceID]int64 // rows dropped out of order, per source

	stats writerCounters
}

// WriterStats are the writer's cumulative counters.
type WriterStats struct {
	Commits          int64 // append transactions committed
	RowsCommitted    int64
	RowsDropped      int64 // out of order, below a resume floor, or a failed tick
	DroppedTicks     int64 // append transactions lost to retryable failures
	Retries          int64
	CommitNanos      int64 // total time in append commits
	Seals            int64 // segments written
	SegmentBytes     int64 // bytes of segments written
	SealNanos        int64
	DeferredSeals    int64
	Compactions      int64 // merges
	Evictions        int64 // retention passes
	EvictedSegments  int64
	EvictedLiveRows  int64
	Checkpoints      int64
	CheckpointErrors int64
	Reclaims         int64
	// PagesWritten counts pages the writer's connection wrote to the -wal
	// sidecar (SQLite's CACHE_WRITE); each costs PageSize+24 bytes there.
	PagesWritten int64
	// GroupedCommits counts transactions that committed several waiting
	// appends together (group commit).
	GroupedCommits int64
	// GroupFallbacks counts groups whose shared transaction failed, so each
	// of their appends was committed on its own.
	GroupFallbacks int64
	// CacheBytes is the heap memory of the writer connection's page cache
	// (a gauge, as of its last commit or release).
	CacheBytes int64
	// PrunedRows counts sealed wal rows deleted after their seal.
	PrunedRows int64
	// SealsBehind counts seals that started with a stream at least
	// 2 x MaxSealRows live rows past the rows they took (EncodeOn's
	// behind): the encoding was falling behind the appends.
	SealsBehind int64
}

type writerCounters struct {
	commits, rowsCommitted, rowsDropped, droppedTicks, retries, commitNanos   atomic.Int64
	seals, segmentBytes, sealNanos, deferredSeals, compactions, evictions     atomic.Int64
	evictedSegments, evictedLiveRows, checkpoints, checkpointErrors, reclaims atomic.Int64
	pagesWritten, groupedCommits, groupFallbacks, prunedRows, sealsBehind     atomic.Int64
	cacheBytes                                                                atomic.Int64 // a gauge
}

// Stats returns a snapshot of the writer's counters.
func (w *Writer) Stats() WriterStats {
	c := &w.stats
	return WriterStats{
		Commits: c.commits.Load(), RowsCommitted: c.rowsCommitted.Load(), RowsDropped: c.rowsDropped.Load(),
		DroppedTicks: c.droppedTicks.Load(), Retries: c.retries.Load(), CommitNanos: c.commitNanos.Load(),
		Seals: c.seals.Load(), SegmentBytes: c.segmentBytes.Load(), SealNanos: c.sealNanos.Load(),
		DeferredSeals: c.deferredSeals.Load(), Compactions: c.compactions.Load(), Evictions: c.evictions.Load(),
		EvictedSegments: c.evictedSegments.Load(), EvictedLiveRows: c.evictedLiveRows.Load(),
		Checkpoints: c.checkpoints.Load(), CheckpointErrors: c.checkpointErrors.Load(), Reclaims: c.reclaims.Load(),
		PagesWritten: c.pagesWritten.Load(), GroupedCommits: c.groupedCommits.Load(),
		GroupFallbacks: c.groupFallbacks.Load(), CacheBytes: c.cacheBytes.Load(),
		PrunedRows: c.prunedRows.Load(), SealsBehind: c.sealsBehind.Load(),
	}
}

// CreateWriter creates a new archive at path (which must not exist) and
// starts its writer.
func CreateWriter(path string, opts WriterOptions) (*Writer, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	h, err := create(path, PageSize, writerCacheKiB)
	if err != nil {
		return nil, err
	}
	lock, err := lockWriter(path)
	if err != nil {
		h.Close()
		removeArchiveFiles(path)
		return nil, err
	}
	if _, err := h.conn.ExecContext(context.Background(), fmt.Sprintf("PRAGMA busy_timeout=%d", opts.BusyTimeout.Milliseconds())); err != nil {
		h.Close()
		lock.Close()
		removeArchiveFiles(path)
		return nil, sqlErr("busy_timeout", err)
	}
	w, err := start(path, h.db, h.conn, lock, opts)
	if err != nil {
		removeArchiveFiles(path)
	}
	return w, err
}

// OpenWriter opens an existing archive and starts its writer. Readers in
// this and other processes keep reading while it runs. It is refused with
// ErrInUse while another Writer or an OpenWrite handle holds the file, with
// ErrReadOnlyMedia when the file cannot be written, and by the header stamp.
func OpenWriter(path string, opts WriterOptions) (*Writer, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("archive: open %s: %w", path, err)
	}
	if !writable(path) {
		return nil, fmt.Errorf("%s: %w", path, ErrReadOnlyMedia)
	}
	lock, err := lockWriter(path)
	if err != nil {
		return nil, err
	}
	c, err := newConnector(dsn(path, "mode=rw"), fmt.Sprintf("PRAGMA busy_timeout=%d", opts.BusyTimeout.Milliseconds()))
	if err != nil {
		lock.Close()
		return nil, err
	}
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	fail := func(err error) (*Writer, error) {
		db.Close()
		lock.Close()
		return nil, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fail(openWriteError(path, err))
	}
	if ro, err := connReadOnly(conn); err != nil || ro {
		conn.Close()
		if err == nil {
			err = fmt.Errorf("%s: %w", path, ErrReadOnlyMedia)
		}
		return fail(err)
	}
	if err := gate(ctx, conn, path); err != nil {
		conn.Close()
		return fail(openWriteError(path, err))
	}
	pageSize, err := pragmaInt(ctx, conn, "page_size")
	if err != nil {
		conn.Close()
		return fail(err)
	}
	for _, stmt := range connPragmas(writerCacheKiB, int(pageSize)) {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			conn.Close()
			return fail(openWriteError(path, sqlErr(stmt, err)))
		}
	}
	return start(path, db, conn, lock, opts)
}

// lockWriter takes an advisory flock on the archive file for the writer's
// life, so a second Writer (in any process) is refused instead of writing
// behind the first one's cache. flock locks are independent of the POSIX
// locks SQLite takes, so readers are unaffected. The descriptor must stay
// open until the SQLite connection is closed: closing any descriptor of the
// file drops this process's POSIX locks on it.
func lockWriter(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("archive: open %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &InUseError{What: path, Reason: "another writer has it open (is another dendro-receiver running on this archive?)"}
		}
		return nil, fmt.Errorf("archive: lock %s: %w", path, err)
	}
	return f, nil
}

func start(path string, db *sql.DB, conn *sql.Conn, lock *os.File, opts WriterOptions) (*Writer, error) {
	ctx := context.Background()
	l := &loop{
		conn: conn, db: db, lock: lock, opts: opts, log: opts.Logger,
		nextSeq: map[streamKey]int64{}, watermark: map[streamKey]int64{}, floors: map[SourceID]int64{},
		newest: map[streamKey]int64{}, warnedOOO: map[streamKey]bool{}, warnedFloor: map[SourceID]bool{},
		sealDone: make(chan sealOutput, 1), epoch: map[SourceID]uint64{}, prunes: map[streamKey]int64{},
		groupTimer: time.NewTimer(time.Hour),
	}
	l.groupTimer.Stop()
	var err error
	l.insertWAL, err = conn.PrepareContext(ctx, insertWALSQL)
	if err == nil {
		err = l.view(func(tx *ReadTx) error {
			if l.nextSeq, err = tx.nextSeqs(); err != nil {
				return err
			}
			wm, err := tx.SealedWatermarks()
			for src, m := range wm {
				for st, ts := range m {
					l.watermark[streamKey{src, st}] = ts
					// A process stopped between a seal's commit and its
					// prune left the sealed rows behind; a prune finds
					// nothing to delete in one index probe otherwise.
					l.queuePrune(streamKey{src, st}, ts)
				}
			}
			return err
		})
	}
	if err != nil {
		if l.insertWAL != nil {
			l.insertWAL.Close()
		}
		conn.Close()
		db.Close()
		lock.Close()
		return nil, err
	}
	w := &Writer{path: path, reqs: make(chan message, 1), done: make(chan struct{}), log: opts.Logger,
		dropped: map[SourceID]int64{}}
	l.w = w
	go l.run()
	return w, nil
}

// Path is the archive's file name.
func (w *Writer) Path() string { return w.path }

// Err returns the stored failure once the writer has stopped on one, else nil.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failure
}

// DroppedOutOfOrder is how many rows of source were dropped for being at or
// below their stream's sealed watermark.
func (w *Writer) DroppedOutOfOrder(source SourceID) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dropped[source]
}

// stoppedErr is what a call gets once the loop has exited.
func (w *Writer) stoppedErr() error {
	if err := w.Err(); err != nil {
		return err
	}
	return ErrClosed
}

// send hands msg to the loop, blocking while it is busy (backpressure).
func (w *Writer) send(ctx context.Context, msg message) error {
	select {
	case <-w.done:
		return w.stoppedErr()
	default:
	}
	select {
	case w.reqs <- msg:
		return nil
	case <-w.done:
		return w.stoppedErr()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// call sends msg and waits for its reply.
func call[T any](ctx context.Context, w *Writer, msg message, reply chan T) (T, error) {
	var zero T
	if err := w.send(ctx, msg); err != nil {
		return zero, err
	}
	select {
	case r := <-reply:
		return r, nil
	case <-w.done:
		select { // the loop may have replied just before it exited
		case r := <-reply:
			return r, nil
		default:
		}
		return zero, w.stoppedErr()
	case <-ctx.Done():
		return zero, ctx.Err() // the message stands: invariant 4
	}
}

type result[T any] struct {
	v   T
	err error
}

func callErr[T any](ctx context.Context, w *Writer, msg message, reply chan result[T]) (T, error) {
	r, err := call(ctx, w, msg, reply)
	if err != nil {
		return r.v, err
	}
	return r.v, r.err
}

// Messages. Each type is applied by the loop; reply channels have capacity 1.
type message interface{ isMessage() }

type (
	msgAddSource struct {
		spec  SourceSpec
		uuid  string
		reply chan result[*Source]
	}
	msgResume struct {
		source SourceID
		anchor int64
		reply  chan result[*Source]
	}
	msgAppend struct {
		ticks []SourceRows
		stamp bool
		reply chan AppendResult // nil: fire and forget
	}
	msgSeal struct {
		source  SourceID
		streams []string
		reply   chan result[[]Sealed] // nil: fire and forget
	}
	msgEvict struct {
		source SourceID
		cutoff int64
		remove func(stream string) bool // nil: the whole source
		reply  chan result[Evicted]
	}
	msgPatch struct {
		source SourceID
		patch  map[string]string
		reply  chan result[struct{}] // nil: fire and forget
	}
	msgClockOffset struct {
		source       SourceID
		ts, offsetNS int64
	}
	msgSync     struct{ reply chan struct{} }
	msgFinalize struct {
		source       SourceID
		ts, offsetNS int64
		reply        chan result[struct{}]
	}
	msgCompact struct {
		source     SourceID
		stream     string
		targetRows int64
		merger     SegmentMerger
		reply      chan result[Compacted]
	}
	msgCheckpoint struct{ reply chan result[struct{}] }
	msgPrune      struct{}
	msgShutdown   struct{}
)

func (msgAddSource) isMessage()   {}
func (msgResume) isMessage()      {}
func (msgAppend) isMessage()      {}
func (msgSeal) isMessage()        {}
func (msgEvict) isMessage()       {}
func (msgPatch) isMessage()       {}
func (msgClockOffset) isMessage() {}
func (msgSync) isMessage()        {}
func (msgFinalize) isMessage()    {}
func (msgCompact) isMessage()     {}
func (msgCheckpoint) isMessage()  {}
func (msgPrune) isMessage()       {}
func (msgShutdown) isMessage()    {}

// SourceRows is one source's rows in a tick.
type SourceRows struct {
	Source SourceID
	Rows   []Row
}

// StreamResult reports what an append did with one (source, stream).
type StreamResult struct {
	Source    SourceID
	Stream    string
	Committed int
	Dropped   int   // out of order, below the source's floor, or lost with a failed tick
	Err       error // why rows were lost to a failure (nil for out-of-order drops)
}

// AppendResult reports an AppendWait, per (source, stream) in the order
// they first appear in the tick.
type AppendResult struct {
	Streams []StreamResult
}

// Dropped is the number of rows the archive did not commit.
func (r AppendResult) Dropped() int {
	n := 0
	for _, s := range r.Streams {
		n += s.Dropped
	}
	return n
}

// Err returns the first failure that cost rows, or nil.
func (r AppendResult) Err() error {
	for _, s := range r.Streams {
		if s.Err != nil {
			return s.Err
		}
	}
	return nil
}

// Sealed describes a segment a seal wrote.
type Sealed struct {
	Stream string
	Seq    int64
	SegmentMeta
}

// AddSource adds a source (labels, metadata, clock anchor) and returns its
// handle. An empty uuid mints a fresh v4 uuid from SQLite's randomblob.
func (w *Writer) AddSource(ctx context.Context, spec SourceSpec, uuid string) (*Source, error) {
	reply := make(chan result[*Source], 1)
	return callErr(ctx, w, msgAddSource{spec: spec, uuid: uuid, reply: reply}, reply)
}

// ResumeSource continues a source written by an earlier session. Its floor
// becomes the newest row it holds (segments and live wal): rows at or below
// it are refused as TimelineBackwards, and so is an anchor at or below it.
func (w *Writer) ResumeSource(ctx context.Context, id SourceID, anchor int64) (*Source, error) {
	reply := make(chan result[*Source], 1)
	return callErr(ctx, w, msgResume{source: id, anchor: anchor, reply: reply}, reply)
}

// Append hands a tick (rows of many sources, committed in ONE transaction)
// to the writer and returns once it is queued, not committed. Use
// AppendWait to learn what was committed. The writer owns the rows' Data
// from now on.
func (w *Writer) Append(ctx context.Context, ticks []SourceRows) error {
	return w.send(ctx, msgAppend{ticks: nonEmptyTicks(ticks)})
}

// AppendWait commits a tick in one transaction and reports, per source and
// stream, how many rows were committed and how many dropped. A server must
// acknowledge only rows reported committed.
//
// With stamp, the writer assigns each row's TS itself (the input TS is
// ignored and overwritten): the clock's Unix nanoseconds, raised to one
// above the newest ts the stream holds, so ts is strictly increasing per
// stream and always above its sealed watermark. The rows are the writer's
// until AppendWait returns.
func (w *Writer) AppendWait(ctx context.Context, ticks []SourceRows, stamp bool) (AppendResult, error) {
	reply := make(chan AppendResult, 1)
	r, err := call(ctx, w, msgAppend{ticks: nonEmptyTicks(ticks), stamp: stamp, reply: reply}, reply)
	if err != nil {
		return r, err
	}
	return r, nil
}

func nonEmptyTicks(ticks []SourceRows) []SourceRows {
	out := ticks[:0:0]
	for _, t := range ticks {
		if len(t.Rows) > 0 {
			out = append(out, t)
		}
	}
	return out
}

// Seal asks the writer to seal streams of source (fire and forget).
func (w *Writer) Seal(ctx context.Context, source SourceID, streams []string) error {
	return w.send(ctx, msgSeal{source: source, streams: streams})
}

// SealWait seals streams of source and reports the segments written.
func (w *Writer) SealWait(ctx context.Context, source SourceID, streams []string) ([]Sealed, error) {
	reply := make(chan result[[]Sealed], 1)
	return callErr(ctx, w, msgSeal{source: source, streams: streams, reply: reply}, reply)
}

// EvictBefore runs retention for a whole source through the writer.
func (w *Writer) EvictBefore(ctx context.Context, source SourceID, cutoff int64) (Evicted, error) {
	reply := make(chan result[Evicted], 1)
	return callErr(ctx, w, msgEvict{source: source, cutoff: cutoff, reply: reply}, reply)
}

// EvictStreamsBefore runs retention for the streams remove selects.
func (w *Writer) EvictStreamsBefore(ctx context.Context, source SourceID, cutoff int64, remove func(stream string) bool) (Evicted, error) {
	reply := make(chan result[Evicted], 1)
	return callErr(ctx, w, msgEvict{source: source, cutoff: cutoff, remove: remove, reply: reply}, reply)
}

// PatchMetadata merges patch into a source's metadata, in order with the
// ticks around it (fire and forget; a failure is logged, never fatal).
func (w *Writer) PatchMetadata(ctx context.Context, source SourceID, patch map[string]string) error {
	return w.send(ctx, msgPatch{source: source, patch: patch})
}

// ClockOffset records a clock observation of source (fire and forget).
func (w *Writer) ClockOffset(ctx context.Context, source SourceID, ts, offsetNS int64) error {
	return w.send(ctx, msgClockOffset{source: source, ts: ts, offsetNS: offsetNS})
}

// Sync waits until everything sent before it has been applied.
func (w *Writer) Sync(ctx context.Context) error {
	reply := make(chan struct{}, 1)
	_, err := call(ctx, w, msgSync{reply: reply}, reply)
	return err
}

// Finalize records a last clock observation and marks the source complete.
func (w *Writer) Finalize(ctx context.Context, source SourceID, ts, offsetNS int64) error {
	reply := make(chan result[struct{}], 1)
	_, err := callErr(ctx, w, msgFinalize{source: source, ts: ts, offsetNS: offsetNS, reply: reply}, reply)
	return err
}

// Compact merges runs of adjacent small segments of one stream up to
// targetRows rows each, one transaction per merge, on the writer.
func (w *Writer) Compact(ctx context.Context, source SourceID, stream string, targetRows int64, merger SegmentMerger) (Compacted, error) {
	reply := make(chan result[Compacted], 1)
	return callErr(ctx, w, msgCompact{source: source, stream: stream, targetRows: targetRows, merger: merger, reply: reply}, reply)
}

// Checkpoint runs a passive checkpoint now.
func (w *Writer) Checkpoint(ctx context.Context) error {
	reply := make(chan result[struct{}], 1)
	_, err := callErr(ctx, w, msgCheckpoint{reply: reply}, reply)
	return err
}

// Prune deletes, in one transaction, the wal rows of every committed seal
// whose prune was deferred (WriterOptions.DeferPrunes). Fire and forget.
func (w *Writer) Prune(ctx context.Context) error {
	return w.send(ctx, msgPrune{})
}

// Close stops the writer after everything queued before it, reclaims free
// pages when every source it opened was finalized, and closes the file: with
// no other connection open, one file remains. It returns the stored failure
// if the writer had stopped on one. Idempotent.
func (w *Writer) Close() error {
	w.closeOnce.Do(func() {
		select {
		case w.reqs <- msgShutdown{}:
		case <-w.done:
		}
		<-w.done
		w.closeErr = w.Err()
	})
	return w.closeErr
}

// Source is a handle on one source of a Writer.
type Source struct {
	w     *Writer
	id    SourceID
	uuid  string
	floor int64 // newest row of the previous session; valid when hasFloor
	hasFl bool
}

// ID is the source's row id.
func (s *Source) ID() SourceID { return s.id }

// UUID is the source's identity.
func (s *Source) UUID() string { return s.uuid }

// Floor is the newest ts of the previous session of a resumed source.
func (s *Source) Floor() (int64, bool) { return s.floor, s.hasFl }

// Writer returns the writer the handle belongs to.
func (s *Source) Writer() *Writer { return s.w }

// Append queues rows of this source (fire and forget). On a resumed source
// a row at or below the floor is refused here, synchronously, before
// anything is sent.
func (s *Source) Append(ctx context.Context, rows ...Row) error {
	if s.hasFl {
		for _, r := range rows {
			if r.TS <= s.floor {
				return &TimelineBackwardsError{Source: s.id, TS: r.TS, Floor: s.floor}
			}
		}
	}
	return s.w.Append(ctx, []SourceRows{{Source: s.id, Rows: rows}})
}

// Seal queues a seal of streams.
func (s *Source) Seal(ctx context.Context, streams ...string) error {
	return s.w.Seal(ctx, s.id, streams)
}

// Sync waits for everything queued before it.
func (s *Source) Sync(ctx context.Context) error { return s.w.Sync(ctx) }

// Finalize marks the source complete with a last clock observation.
func (s *Source) Finalize(ctx context.Context, ts, offsetNS int64) error {
	return s.w.Finalize(ctx, s.id, ts, offsetNS)
}

// DroppedOutOfOrder is how many of this source's rows were dropped below
// a sealed watermark.
func (s *Source) DroppedOutOfOrder() int64 { return s.w.DroppedOutOfOrder(s.id) }

// loop is the writer goroutine's state. Only run (and what it calls) may
// touch it: ownership by construction, not by a lock.
type loop struct {
	w         *Writer
	conn      *sql.Conn
	db        *sql.DB
	lock      *os.File
	insertWAL *sql.Stmt
	opts      WriterOptions
	log       *slog.Logger

	nextSeq   map[streamKey]int64
	watermark map[streamKey]int64 // newest sealed last_ts; absent: never sealed
	floors    map[SourceID]int64  // resumed sources' previous newest row
	newest    map[streamKey]int64 // newest ts handed out by stamping (seeded lazily)

	warnedOOO   map[streamKey]bool
	warnedFloor map[SourceID]bool

	// The seal in progress (see startSeal). sealing is the job whose rows
	// the encoder goroutine holds; its result arrives on sealDone (capacity
	// 1, one job in flight). epoch counts, per source, the operations that
	// remove rows or segments or change what a seal may assume (eviction,
	// finalize, resume, compaction): a seal encoded across one is redone.
	sealing     *sealJob
	sealDone    chan sealOutput
	syncWaiters []chan struct{} // Syncs waiting for the seals before them
	epoch       map[SourceID]uint64

	// prunes are the streams whose sealed rows may still be in wal, by the
	// watermark to delete up to; pruneSince is when the oldest was queued.
	// The live predicate already hides those rows from every read: pruning
	// them is an optimization with no correctness role (design, "The seal
	// seam"), which is what lets it wait and batch.
	prunes     map[streamKey]int64
	pruneSince time.Time

	groupTimer *time.Timer // applyOrGroup's wait for appends on their way; stopped when unused

	opened, finalized  int // sources added or resumed, and finalized, this session
	consecutiveDropped int
	lastCheckpoint     time.Time
}

func (l *loop) view(fn func(*ReadTx) error) error {
	ctx := context.Background()
	if _, err := l.conn.ExecContext(ctx, "BEGIN DEFERRED"); err != nil {
		return sqlErr("begin", err)
	}
	defer l.conn.ExecContext(ctx, "ROLLBACK")
	return fn(&ReadTx{ctx: ctx, q: l.conn})
}

func (l *loop) update(fn func(*WriteTx) error) error {
	err := update(context.Background(), l.conn, l.insertWAL, fn)
	l.countCache()
	return err
}

// countCache moves SQLite's per-connection count of pages written (to the
// sidecar, in WAL mode) into the writer's stats, and records the heap
// memory of the connection's page cache there.
func (l *loop) countCache() {
	l.conn.Raw(func(dc any) error {
		if st, ok := dc.(sqlite.DBStatus); ok {
			if n, _, err := st.Status(sqlite.DBStatusCacheWrite, true); err == nil {
				l.w.stats.pagesWritten.Add(int64(n))
			}
			if n, _, err := st.Status(sqlite.DBStatusCacheUsed, false); err == nil {
				l.w.stats.cacheBytes.Store(int64(n))
			}
		}
		return nil
	})
}

// withRetries runs op, retrying retryable SQLite failures on the backoff
// schedule. The loop sleeps meanwhile, so the channel backpressures callers.
func (l *loop) withRetries(op func() error) error {
	err := op()
	for _, d := range retryBackoff {
		if err == nil || !IsRetryable(err) {
			return err
		}
		l.w.stats.retries.Add(1)
		time.Sleep(d)
		err = op()
	}
	return err
}

// fail stores err as the writer's failure; the loop then exits.
func (l *loop) fail(err error) {
	l.w.mu.Lock()
	if l.w.failure == nil {
		l.w.failure = &WriterError{Err: err}
	}
	l.w.mu.Unlock()
	l.log.Error("archive writer stopped", "path", l.w.path, "err", err)
}

func (l *loop) failed() bool {
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	return l.w.failure != nil
}

func (l *loop) run() {
	defer l.shutdown()
	l.lastCheckpoint = time.Now()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	l.prunePending() // what an earlier process sealed but did not prune
	for {
		select {
		case msg := <-l.w.reqs:
			for msg != nil {
				if _, ok := msg.(msgShutdown); ok {
					l.drainSeals()
					l.prunePending()
					l.closeCleanly()
					return
				}
				msg = l.applyOrGroup(msg)
				if l.failed() {
					return
				}
			}
		case out := <-l.sealDone:
			l.finishSeal(out)
			if l.failed() {
				return
			}
		case <-timer.C:
		}
		// The time-based checkpoint runs even when idle: it bounds how much
		// a copy of the main file alone can be missing.
		checkpoints := l.opts.CheckpointInterval > 0
		if checkpoints && time.Since(l.lastCheckpoint) >= l.opts.CheckpointInterval {
			l.checkpoint()
		}
		// Prunes run at once where they are due (after a seal without
		// DeferPrunes, at a Prune, Sync, eviction or Close); here only
		// those deferred or failed for pruneMaxDelay.
		if len(l.prunes) > 0 && time.Since(l.pruneSince) >= pruneMaxDelay {
			l.prunePending()
		}
		wake := time.Hour
		if checkpoints {
			wake = l.opts.CheckpointInterval - time.Since(l.lastCheckpoint)
		}
		if len(l.prunes) > 0 {
			wake = min(wake, pruneMaxDelay-time.Since(l.pruneSince))
		}
		timer.Reset(max(wake, time.Millisecond))
	}
}

// queuePrune records that stream k's wal rows up to upto are sealed.
func (l *loop) queuePrune(k streamKey, upto int64) {
	if len(l.prunes) == 0 {
		l.pruneSince = time.Now()
	}
	l.prunes[k] = max(l.prunes[k], upto)
}

// prunePending deletes the sealed rows of every stream queued by
// queuePrune, in ONE transaction. The prune is not part of the seal's
// transaction (the design puts it outside: the watermark already hides the
// rows), which keeps the commit appends wait behind short. Deferred
// (DeferPrunes), it also gets cheaper: the streams' rows were appended
// interleaved, so deleting one stream's rows rewrites every page it shares
// with the others, and streams sealed one after another and pruned
// together rewrite or free each such page once. A failure only leaves the
// rows for the next attempt.
func (l *loop) prunePending() {
	if len(l.prunes) == 0 {
		return
	}
	keys := make([]streamKey, 0, len(l.prunes))
	for k := range l.prunes {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b streamKey) int {
		return cmp.Or(cmp.Compare(a.source, b.source), strings.Compare(a.stream, b.stream))
	})
	targets := make([]pruneTarget, len(keys))
	for i, k := range keys {
		targets[i] = pruneTarget{k.source, k.stream, l.prunes[k]}
	}
	var n int64
	err := l.withRetries(func() error {
		return l.update(func(tx *WriteTx) error {
			var err error
			n, err = tx.pruneStreams(targets)
			return err
		})
	})
	if err != nil {
		l.log.Warn("pruning sealed wal rows failed; they stay hidden and are retried", "err", err)
		l.pruneSince = time.Now() // retried pruneMaxDelay from now, or at the next Prune
		return
	}
	l.w.stats.prunedRows.Add(n)
	clear(l.prunes)
	l.releaseCache()
}

func (l *loop) checkpoint() error {
	l.lastCheckpoint = time.Now()
	_, err := l.conn.ExecContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)")
	if err != nil {
		l.w.stats.checkpointErrors.Add(1)
		l.log.Warn("passive checkpoint failed", "err", err)
		return sqlErr("checkpoint", err)
	}
	l.w.stats.checkpoints.Add(1)
	return nil
}

// maxGroup bounds how many waiting appends one group commit takes.
const maxGroup = 64

// applyOrGroup applies msg. A waiting append is grouped with the waiting
// appends queued behind it: when the loop takes the channel's one message,
// the runtime moves a blocked sender's message into the slot at once, so a
// non-blocking receive drains every caller already waiting; then, while
// WriterOptions.Coming reports appends on their way, it waits for them up
// to GroupWait in all. It returns the first message it took that does not
// belong to the group, to be applied next (a message that is not an
// append also ends the wait: an append on its way may be waiting for it).
func (l *loop) applyOrGroup(msg message) message {
	a, ok := msg.(msgAppend)
	if !ok || a.reply == nil {
		l.apply(msg)
		return nil
	}
	group := []msgAppend{a}
	var next message
	take := func(m message) {
		if b, ok := m.(msgAppend); ok && b.reply != nil {
			group = append(group, b)
		} else {
			next = m
		}
	}
	waiting := false
	for next == nil && len(group) < maxGroup {
		select {
		case m := <-l.w.reqs:
			take(m)
			continue
		default:
		}
		// Nothing is waiting. Appends a caller says are on their way
		// (WriterOptions.Coming) are worth a short wait: each would
		// otherwise pay a commit of its own.
		if l.opts.GroupWait <= 0 || l.opts.Coming == nil || l.opts.Coming() == 0 {
			break
		}
		if !waiting {
			waiting = true
			l.groupTimer.Reset(l.opts.GroupWait)
		}
		select {
		case m := <-l.w.reqs:
			take(m)
		case <-l.groupTimer.C:
			waiting = false
			goto commit
		}
	}
	if waiting {
		// Since Go 1.23 a stopped timer delivers no stale value: the next
		// Reset starts clean without draining the channel.
		l.groupTimer.Stop()
	}
commit:
	if len(group) == 1 {
		a.reply <- l.appendTick(a.ticks, a.stamp)
	} else {
		l.appendGroup(group)
	}
	return next
}

func (l *loop) apply(msg message) {
	switch m := msg.(type) {
	case msgAppend:
		r := l.appendTick(m.ticks, m.stamp)
		if m.reply != nil {
			m.reply <- r
		}
	case msgSeal:
		l.queueSeal(m)
	case msgAddSource:
		s, err := l.addSource(m.spec, m.uuid)
		m.reply <- result[*Source]{s, err}
	case msgResume:
		if l.drainSeals(); l.failed() {
			m.reply <- result[*Source]{err: l.w.stoppedErr()}
			return
		}
		l.epoch[m.source]++
		s, err := l.resume(m.source, m.anchor)
		m.reply <- result[*Source]{s, err}
	case msgEvict:
		if l.drainSeals(); l.failed() {
			m.reply <- result[Evicted]{err: l.w.stoppedErr()}
			return
		}
		l.epoch[m.source]++
		l.prunePending() // so that Evicted.WALRows counts no sealed row
		ev, err := l.evict(m.source, m.cutoff, m.remove)
		m.reply <- result[Evicted]{ev, err}
	case msgPatch:
		err := l.withRetries(func() error {
			return l.update(func(tx *WriteTx) error { return tx.PatchMetadata(m.source, m.patch) })
		})
		if err != nil {
			l.log.Warn("metadata patch skipped", "source", m.source, "err", err)
		}
		if m.reply != nil {
			m.reply <- result[struct{}]{err: err}
		}
	case msgClockOffset:
		// A seal records an observation too; the first at a ts wins.
		if l.drainSeals(); l.failed() {
			return
		}
		err := l.withRetries(func() error {
			return l.update(func(tx *WriteTx) error { return tx.InsertClockOffset(m.source, m.ts, m.offsetNS) })
		})
		l.afterTickError(err)
	case msgSync:
		if l.sealing != nil {
			l.syncWaiters = append(l.syncWaiters, m.reply) // answered by answerSeal
			return
		}
		// Applied includes the prunes that seals before it queued.
		l.prunePending()
		m.reply <- struct{}{}
	case msgFinalize:
		if l.drainSeals(); l.failed() {
			m.reply <- result[struct{}]{err: l.w.stoppedErr()}
			return
		}
		l.epoch[m.source]++
		err := l.withRetries(func() error {
			return l.update(func(tx *WriteTx) error {
				if err := tx.InsertClockOffset(m.source, m.ts, m.offsetNS); err != nil {
					return err
				}
				return tx.MarkComplete(m.source)
			})
		})
		if err != nil {
			l.fail(fmt.Errorf("finalize source %d: %w", m.source, err))
		} else {
			l.finalized++
		}
		m.reply <- result[struct{}]{err: err}
	case msgCompact:
		if l.drainSeals(); l.failed() {
			m.reply <- result[Compacted]{err: l.w.stoppedErr()}
			return
		}
		l.epoch[m.source]++
		c, err := compactStream(context.Background(), l.view, l.update, m.source, m.stream, m.targetRows, m.merger)
		l.w.stats.compactions.Add(int64(c.Merges))
		if err == nil && c.Merges > 0 {
			l.reclaimIfFragmented()
		}
		m.reply <- result[Compacted]{c, err}
	case msgCheckpoint:
		m.reply <- result[struct{}]{err: l.checkpoint()}
	case msgPrune:
		l.prunePending()
	}
}

// afterTickError applies the dropped-tick policy to a failed write that is
// not an append: retryable failures count toward the consecutive-drop
// limit, anything else stops the writer.
func (l *loop) afterTickError(err error) {
	switch {
	case err == nil:
		l.consecutiveDropped = 0
	case IsRetryable(err):
		l.droppedTick(err)
	default:
		l.fail(err)
	}
}

func (l *loop) droppedTick(err error) {
	l.w.stats.droppedTicks.Add(1)
	l.consecutiveDropped++
	l.log.Warn("archive writer dropped a tick", "err", err, "consecutive", l.consecutiveDropped)
	if l.consecutiveDropped >= maxConsecutiveDroppedTicks {
		l.fail(fmt.Errorf("the archive writer dropped %d consecutive ticks; last error: %w", l.consecutiveDropped, err))
	}
}

type session struct {
	Session           string `json:"session"`
	ClockAnchorWallNS int64  `json:"clock_anchor_wall_ns"`
	Implementation    string `json:"dendro"`
	ResumedAfterTS    *int64 `json:"resumed_after_ts,omitempty"`
}

// appendSession adds an entry to the source's writer_sessions metadata key.
func appendSession(tx *WriteTx, source SourceID, anchor int64, resumedAfter *int64) (string, error) {
	s, err := tx.Source(source)
	if err != nil {
		return "", err
	}
	id, err := tx.MintUUID()
	if err != nil {
		return "", err
	}
	var sessions []json.RawMessage
	if raw := s.Metadata[MetadataKeyWriterSessions]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &sessions); err != nil {
			sessions = nil // a foreign value: start the list afresh rather than fail the source
		}
	}
	entry, _ := json.Marshal(session{Session: id, ClockAnchorWallNS: anchor, Implementation: implementation, ResumedAfterTS: resumedAfter})
	sessions = append(sessions, entry)
	b, _ := json.Marshal(sessions)
	return id, tx.PatchMetadata(source, map[string]string{MetadataKeyWriterSessions: string(b)})
}

// Reserved sources.metadata keys.
const (
	// MetadataKeyWriterSessions is a JSON array with one entry per writer
	// session of the source: {"session", "clock_anchor_wall_ns", "dendro",
	// "resumed_after_ts"?}. Written by the archive.
	MetadataKeyWriterSessions = "writer_sessions"
	// MetadataKeyEvents is JSON {"events": [...]}; a resume appends an entry
	// of kind "writer_session".
	MetadataKeyEvents = "events"
)

func (l *loop) addSource(spec SourceSpec, uuid string) (*Source, error) {
	var id SourceID
	err := l.withRetries(func() error {
		return l.update(func(tx *WriteTx) error {
			var err error
			if id, uuid, err = tx.InsertSource(spec, uuid); err != nil {
				return err
			}
			if _, err := appendSession(tx, id, spec.ClockAnchorWallNS, nil); err != nil {
				return err
			}
			if v := l.opts.Encoder.Version(); v != "" {
				return tx.PatchMetadata(id, map[string]string{MetadataKeyEncoder: v})
			}
			return nil
		})
	})
	if err != nil {
		return nil, err // not fatal: the writer stays usable
	}
	l.opened++
	return &Source{w: l.w, id: id, uuid: uuid}, nil
}

func (l *loop) resume(id SourceID, anchor int64) (*Source, error) {
	var src SourceInfo
	var last int64
	var hasLast bool
	err := l.view(func(tx *ReadTx) error {
		var err error
		if src, err = tx.Source(id); err != nil {
			return err
		}
		last, hasLast, err = tx.SourceLastTS(id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("resume: %w", err)
	}
	if err := CheckEncoder(id, src.Metadata, l.opts.Encoder); err != nil {
		return nil, err
	}
	if hasLast && anchor <= last {
		return nil, &TimelineBackwardsError{Source: id, TS: anchor, Floor: last}
	}
	err = l.withRetries(func() error {
		return l.update(func(tx *WriteTx) error {
			if err := tx.MarkIncomplete(id); err != nil {
				return err
			}
			var resumedAfter *int64
			details := "previous session left no rows"
			if hasLast {
				resumedAfter = &last
				details = fmt.Sprintf("previous session's last row at %d", last)
			}
			sid, err := appendSession(tx, id, anchor, resumedAfter)
			if err != nil {
				return err
			}
			return appendEvent(tx, id, anchor, details, sid)
		})
	})
	if err != nil {
		return nil, err
	}
	l.opened++
	s := &Source{w: l.w, id: id, uuid: src.UUID}
	if hasLast {
		l.floors[id] = last
		s.floor, s.hasFl = last, true
	}
	return s, nil
}

func appendEvent(tx *WriteTx, source SourceID, ts int64, details, sessionID string) error {
	s, err := tx.Source(source)
	if err != nil {
		return err
	}
	doc := map[string]any{}
	if raw := s.Metadata[MetadataKeyEvents]; raw != "" {
		if json.Unmarshal([]byte(raw), &doc) != nil {
			doc = map[string]any{}
		}
	}
	events, _ := doc["events"].([]any)
	events = append(events, map[string]any{
		"timestamp":   ts,
		"description": "source resumed by a new writer session",
		"kind":        "writer_session",
		"details":     details,
		"id":          "writer_session:" + sessionID,
	})
	doc["events"] = events
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return tx.PatchMetadata(source, map[string]string{MetadataKeyEvents: string(b)})
}

// tick is one append message being applied: its result so far, and the
// rows that survived the floor and watermark filters.
type tick struct {
	res   AppendResult
	index map[streamKey]int
	kept  []SourceRows
}

func (t *tick) entry(src SourceID, stream string) *StreamResult {
	k := streamKey{src, stream}
	i, ok := t.index[k]
	if !ok {
		i = len(t.res.Streams)
		t.index[k] = i
		t.res.Streams = append(t.res.Streams, StreamResult{Source: src, Stream: stream})
	}
	return &t.res.Streams[i]
}

// appendTick commits one tick: floors and watermarks filter rows, then ONE
// transaction inserts every source's rows (one fsync).
func (l *loop) appendTick(ticks []SourceRows, stamp bool) AppendResult {
	t, ok := l.prepareTick(ticks, stamp)
	if ok {
		l.commitTick(t)
	}
	return t.res
}

// appendGroup commits several waiting appends in one transaction (group
// commit: one fsync for all). Each append is whole in that transaction and
// its caller is answered only after the commit, so what a reply promises is
// unchanged. If the shared transaction fails, each append is committed on
// its own, so one append's failure is not another's.
func (l *loop) appendGroup(msgs []msgAppend) {
	ticks := make([]*tick, len(msgs))
	var rows int
	for i, m := range msgs {
		t, ok := l.prepareTick(m.ticks, m.stamp)
		if !ok {
			for j := i + 1; j < len(msgs); j++ {
				msgs[j].reply <- AppendResult{Streams: droppedAll(msgs[j].ticks, l.w.stoppedErr())}
			}
			msgs[i].reply <- t.res
			for j := 0; j < i; j++ {
				msgs[j].reply <- AppendResult{Streams: droppedAll(msgs[j].ticks, l.w.stoppedErr())}
			}
			return
		}
		ticks[i] = t
		for _, k := range t.kept {
			rows += len(k.Rows)
		}
	}
	if rows > 0 {
		begin := time.Now()
		err := l.update(func(tx *WriteTx) error {
			for _, t := range ticks {
				for _, k := range t.kept {
					if err := tx.InsertWALRows(k.Source, k.Rows); err != nil {
						return err
					}
				}
			}
			return nil
		})
		l.w.stats.commitNanos.Add(int64(time.Since(begin)))
		if err == nil {
			for _, t := range ticks {
				l.committed(t)
			}
			l.consecutiveDropped = 0
			l.w.stats.groupedCommits.Add(1)
		} else {
			l.w.stats.groupFallbacks.Add(1)
			for _, t := range ticks {
				if !l.failed() {
					l.commitTick(t)
				} else {
					for _, k := range t.kept {
						l.lost(t, k, l.w.stoppedErr())
					}
				}
			}
		}
	}
	for i, m := range msgs {
		m.reply <- ticks[i].res
	}
}

func droppedAll(ticks []SourceRows, err error) []StreamResult {
	t := &tick{index: map[streamKey]int{}}
	for _, k := range ticks {
		for _, r := range k.Rows {
			e := t.entry(k.Source, r.Stream)
			e.Dropped++
			e.Err = err
		}
	}
	return t.res.Streams
}

// prepareTick stamps (when asked) and filters a tick; ok is false when the
// writer failed while stamping.
func (l *loop) prepareTick(ticks []SourceRows, stamp bool) (*tick, bool) {
	t := &tick{index: map[streamKey]int{}}
	if l.sealConflicts(ticks, stamp) {
		l.drainSeals() // this tick is judged against the seal's watermark
		if l.failed() {
			t.res.Streams = droppedAll(ticks, l.w.stoppedErr())
			return t, false
		}
	}
	if stamp {
		if err := l.stamp(ticks); err != nil {
			t.res.Streams = droppedAll(ticks, err)
			l.fail(err)
			return t, false
		}
	}
	t.kept = make([]SourceRows, 0, len(ticks))
	for _, st := range ticks {
		if floor, ok := l.floors[st.Source]; ok && !stamp {
			if bad := firstAtOrBelow(st.Rows, floor); bad != nil {
				// The whole tick of this source is refused: it runs backwards.
				err := &TimelineBackwardsError{Source: st.Source, TS: bad.TS, Floor: floor}
				if !l.warnedFloor[st.Source] {
					l.warnedFloor[st.Source] = true
					l.log.Warn("dropping a tick below the source's resume floor", "err", err)
				}
				for _, r := range st.Rows {
					t.entry(st.Source, r.Stream).Dropped++
				}
				l.w.stats.rowsDropped.Add(int64(len(st.Rows)))
				continue
			}
		}
		rows := st.Rows
		dropped := 0
		for i := range st.Rows {
			if w, ok := l.watermark[streamKey{st.Source, st.Rows[i].Stream}]; ok && st.Rows[i].TS <= w {
				dropped++
			}
		}
		if dropped > 0 {
			// Rebuild only when something was dropped: one map lookup per row
			// otherwise.
			rows = make([]Row, 0, len(st.Rows)-dropped)
			for _, r := range st.Rows {
				k := streamKey{st.Source, r.Stream}
				if w, ok := l.watermark[k]; ok && r.TS <= w {
					t.entry(st.Source, r.Stream).Dropped++
					if !l.warnedOOO[k] {
						l.warnedOOO[k] = true
						l.log.Warn("dropping rows at or below the stream's sealed watermark",
							"source", st.Source, "stream", r.Stream, "ts", r.TS, "watermark", w)
					}
					continue
				}
				rows = append(rows, r)
			}
			l.w.mu.Lock()
			l.w.dropped[st.Source] += int64(dropped)
			l.w.mu.Unlock()
			l.w.stats.rowsDropped.Add(int64(dropped))
		}
		if len(rows) > 0 {
			t.kept = append(t.kept, SourceRows{Source: st.Source, Rows: rows})
		}
	}
	return t, true
}

// commitTick commits a prepared tick in one transaction, with retries; a
// constraint failure is isolated to its source by recommitting each source
// alone.
func (l *loop) commitTick(t *tick) {
	if len(t.kept) == 0 {
		return
	}
	begin := time.Now()
	err := l.withRetries(func() error {
		return l.update(func(tx *WriteTx) error {
			for _, k := range t.kept {
				if err := tx.InsertWALRows(k.Source, k.Rows); err != nil {
					return err
				}
			}
			return nil
		})
	})
	l.w.stats.commitNanos.Add(int64(time.Since(begin)))
	switch {
	case err == nil:
		l.committed(t)
		l.consecutiveDropped = 0
	case IsConstraint(err):
		// Isolate the offending source: recommit each on its own.
		any := false
		for _, k := range t.kept {
			err := l.withRetries(func() error {
				return l.update(func(tx *WriteTx) error { return tx.InsertWALRows(k.Source, k.Rows) })
			})
			switch {
			case err == nil:
				any = true
				l.committedRows(t, k)
			case IsConstraint(err) || IsRetryable(err):
				l.lost(t, k, err)
				l.log.Warn("a source's tick was dropped", "source", k.Source, "err", err)
			default:
				l.lost(t, k, err)
				l.fail(err)
				return
			}
		}
		if any {
			l.consecutiveDropped = 0
		} else {
			l.droppedTick(err)
		}
	case IsRetryable(err):
		for _, k := range t.kept {
			l.lost(t, k, err)
		}
		l.droppedTick(err)
	default:
		for _, k := range t.kept {
			l.lost(t, k, err)
		}
		l.fail(err)
	}
}

func (l *loop) committed(t *tick) {
	for _, k := range t.kept {
		l.committedRows(t, k)
	}
	l.w.stats.commits.Add(1)
}

func (l *loop) committedRows(t *tick, k SourceRows) {
	for _, r := range k.Rows {
		t.entry(k.Source, r.Stream).Committed++
		// Keep the stamp cache above every committed row, stamped or not.
		key := streamKey{k.Source, r.Stream}
		if last, ok := l.newest[key]; ok && r.TS > last {
			l.newest[key] = r.TS
		}
	}
	l.w.stats.rowsCommitted.Add(int64(len(k.Rows)))
}

func (l *loop) lost(t *tick, k SourceRows, err error) {
	for _, r := range k.Rows {
		e := t.entry(k.Source, r.Stream)
		e.Dropped++
		e.Err = err
	}
	l.w.stats.rowsDropped.Add(int64(len(k.Rows)))
}

func firstAtOrBelow(rows []Row, floor int64) *Row {
	for i := range rows {
		if rows[i].TS <= floor {
			return &rows[i]
		}
	}
	return nil
}

// stamp assigns each row's ts: the clock, raised to one above the newest ts
// its stream holds. The newest ts is seeded once per stream from the file
// (segments and wal, shadowed rows included, and the resume floor), so a
// stamped row is above every row the stream has and every watermark.
func (l *loop) stamp(ticks []SourceRows) error {
	now := l.opts.Now().UnixNano()
	for _, t := range ticks {
		for i := range t.Rows {
			r := &t.Rows[i]
			k := streamKey{t.Source, r.Stream}
			last, ok := l.newest[k]
			if !ok {
				last = math.MinInt64
				err := l.view(func(tx *ReadTx) error {
					ts, has, err := tx.newestTS(t.Source, r.Stream)
					if has {
						last = ts
					}
					return err
				})
				if err != nil {
					return err
				}
				if f, ok := l.floors[t.Source]; ok && f > last {
					last = f
				}
			}
			if w, ok := l.watermark[k]; ok && w > last {
				last = w // a seal never outruns the rows, but say so here, where it is relied on
			}
			if last == math.MaxInt64 {
				return fmt.Errorf("archive: stream %q of source %d has reached the largest timestamp", r.Stream, t.Source)
			}
			r.TS = max(now, last+1)
			l.newest[k] = r.TS
		}
	}
	return nil
}

// Sealing runs in three steps, so that the Parquet encode (the seal's cost)
// does not stop appends:
//
//  1. startSeal (writer goroutine) reads the streams' live rows in one
//     snapshot, records what it relied on (each stream's next seq and
//     watermark, the source's epoch) and hands the rows to ONE encoder
//     goroutine. The rows are not touched by the writer after the hand-off,
//     and the encoder goroutine touches nothing else: it returns a value on
//     l.sealDone. At most one seal is in flight; later seal messages queue.
//  2. Meanwhile the writer keeps appending. Stamped rows get a ts above every
//     row of their stream (invariant 5), so they are above the rows being
//     sealed and stay live after the seal commits.
//  3. finishSeal (writer goroutine) commits the segments and one clock
//     observation in ONE transaction that first checks that
//     nothing it relied on changed: the source's epoch (bumped by eviction,
//     finalize, resume and compaction), each stream's seq and watermark, and
//     that the stream's live rows up to the newest sealed row are still
//     exactly those that were read (an unstamped append may have added one
//     below it meanwhile). On any change the result is discarded and the
//     seal is read and encoded again (bounded: maxSealAttempts). After the
//     commit the watermark hides the sealed rows; a later transaction
//     deletes them (queuePrune, prunePending).

// maxSealAttempts bounds how often one seal is re-read after a conflict
// before it is deferred (its rows stay live; the next seal takes them).
const maxSealAttempts = 3

// errSealConflict: what a seal relied on changed while it was encoded.
var errSealConflict = errors.New("archive: the rows being sealed changed during the encode")

// sealInput is one stream's share of a seal job. Immutable once the job is
// handed to the encoder goroutine.
type sealInput struct {
	stream string
	seq    int64 // l.nextSeq when the rows were read
	wm     int64 // l.watermark when the rows were read (valid when hasWM)
	hasWM  bool
	rows   []Row // the live rows, by ts
}

// sealJob is a seal message being carried out.
type sealJob struct {
	msg     msgSeal
	epoch   uint64 // l.epoch[source] when the rows were read
	inputs  []sealInput
	attempt int
	begin   time.Time
}

// sealOutput is what the encoder goroutine returns: one segment (or nil)
// per input, or the first encoder failure.
type sealOutput struct {
	job  *sealJob
	segs []*Segment
	err  error
}

// encodeSeal runs on the encoder goroutine. It reads job.inputs only and
// shares nothing else with the writer.
func encodeSeal(enc SegmentEncoder, job *sealJob, done chan<- sealOutput) {
	out := sealOutput{job: job, segs: make([]*Segment, len(job.inputs))}
	for i, in := range job.inputs {
		// The job owns its rows, and finishSeal reads only their TS: the
		// encoder may drop each row's Data once decoded (ConsumingEncoder).
		seg, err := materialize(enc, in.stream, in.rows, true)
		if err != nil {
			out.err = err
			break
		}
		out.segs[i] = seg
	}
	done <- out // capacity 1 and at most one job in flight: never blocks
}

// queueSeal starts a seal message. One seal is in flight at a time: a seal
// must read the rows as they are at its place in the message order, so a
// second waits for the first (the ingester's seals come one at a time
// anyway: SealWait per source).
func (l *loop) queueSeal(m msgSeal) {
	l.drainSeals()
	if l.failed() {
		if m.reply != nil {
			m.reply <- result[[]Sealed]{err: l.w.stoppedErr()}
		}
		return
	}
	l.startSeal(&sealJob{msg: m, begin: time.Now()})
}

// sealConflicts reports whether an unstamped tick holds a row at or below
// the newest row the seal in flight read from that row's stream. Applied
// now, such a row would be judged against the old watermark; in message
// order it comes after the seal and must be judged against the new one, so
// the seal is finished first. Stamped rows never conflict: their ts is
// above every row their stream holds (invariant 5).
func (l *loop) sealConflicts(ticks []SourceRows, stamp bool) bool {
	if l.sealing == nil || stamp {
		return false
	}
	for _, t := range ticks {
		if t.Source != l.sealing.msg.source {
			continue
		}
		for _, in := range l.sealing.inputs {
			last := in.rows[len(in.rows)-1].TS
			for i := range t.Rows {
				if t.Rows[i].Stream == in.stream && t.Rows[i].TS <= last {
					return true
				}
			}
		}
	}
	return false
}

// startSeal reads the job's rows and hands them to the encoder goroutine;
// with nothing to seal it answers at once.
func (l *loop) startSeal(job *sealJob) {
	source := job.msg.source
	job.epoch = l.epoch[source]
	job.inputs = job.inputs[:0]
	behind := false
	err := l.view(func(tx *ReadTx) error {
		for _, stream := range job.msg.streams {
			rows, more, err := tx.liveWALPrefix(source, stream, l.opts.MaxSealRows, l.opts.MaxSealBytes, 2*l.opts.MaxSealRows)
			if err != nil {
				return err
			}
			if more {
				behind = true
			}
			k := streamKey{source, stream}
			if len(rows) == 0 {
				if _, ok := l.nextSeq[k]; !ok {
					l.log.Warn("asked to seal a stream which has no live rows and has never sealed a segment - is the name right?",
						"source", source, "stream", stream)
				}
				continue
			}
			wm, hasWM := l.watermark[k]
			job.inputs = append(job.inputs, sealInput{stream: stream, seq: l.nextSeq[k], wm: wm, hasWM: hasWM, rows: rows})
		}
		return nil
	})
	if err != nil {
		l.w.stats.deferredSeals.Add(1)
		l.log.Warn("seal deferred", "source", source, "err", err)
		l.answerSeal(job, nil, err)
		return
	}
	if len(job.inputs) == 0 {
		l.answerSeal(job, nil, nil)
		return
	}
	l.sealing = job
	if behind {
		l.w.stats.sealsBehind.Add(1)
	}
	if l.opts.EncodeOn == nil {
		go encodeSeal(l.opts.Encoder, job, l.sealDone)
		return
	}
	enc, done := l.opts.Encoder, l.sealDone
	l.opts.EncodeOn(behind, func() { encodeSeal(enc, job, done) })
}

// answerSeal replies to a finished job and to the Syncs that waited for it.
// A Sync is not answered once the writer failed: it learns the failure.
func (l *loop) answerSeal(job *sealJob, sealed []Sealed, err error) {
	l.sealing = nil
	if job.msg.reply != nil {
		job.msg.reply <- result[[]Sealed]{sealed, err}
	}
	if !l.failed() && len(l.syncWaiters) > 0 {
		l.prunePending()
		for _, r := range l.syncWaiters {
			r <- struct{}{}
		}
		l.syncWaiters = l.syncWaiters[:0]
	}
}

// drainSeals waits for the seal in flight to finish (retries included).
// Messages whose effect depends on the order of seals call it first, so
// they see every seal sent before them as the reference's one-at-a-time
// writer would: eviction, finalize, resume, clock offsets, compaction
// (whose merger may also be the seal's encoder, which need not be safe for
// concurrent use) and shutdown. Appends, source additions, metadata patches
// and checkpoints do not wait.
func (l *loop) drainSeals() {
	for l.sealing != nil && !l.failed() {
		l.finishSeal(<-l.sealDone)
	}
}

// finishSeal commits an encoded seal (see the steps above). Only the writer
// goroutine calls it.
func (l *loop) finishSeal(out sealOutput) {
	job := out.job
	source := job.msg.source
	if out.err != nil {
		// An encoder that fails or breaks its contract stops the writer:
		// its rows stay live and readable, but no seal can be trusted.
		l.fail(out.err)
		l.answerSeal(job, nil, out.err)
		return
	}
	type pending struct {
		in  *sealInput
		seg *Segment
	}
	var batch []pending
	var obs *Row
	for i := range job.inputs {
		seg := out.segs[i]
		if seg == nil {
			continue
		}
		in := &job.inputs[i]
		for j := range in.rows {
			if in.rows[j].TS == seg.LastTS && (obs == nil || in.rows[j].TS >= obs.TS) {
				obs = &in.rows[j]
			}
		}
		batch = append(batch, pending{in: in, seg: seg})
	}
	if len(batch) == 0 {
		l.answerSeal(job, nil, nil)
		return
	}
	// What the encode relied on, as far as the writer's own state tells:
	// nothing removed rows of the source, nothing sealed these streams.
	conflict := l.epoch[source] != job.epoch
	for _, p := range batch {
		k := streamKey{source, p.in.stream}
		wm, hasWM := l.watermark[k]
		if l.nextSeq[k] != p.in.seq || hasWM != p.in.hasWM || wm != p.in.wm {
			conflict = true
		}
	}
	var err error
	if conflict {
		err = errSealConflict
	} else {
		err = l.withRetries(func() error {
			return l.update(func(tx *WriteTx) error {
				for _, p := range batch {
					// The stream's live rows up to the last row read must be
					// exactly the rows read: rows are never updated, removals
					// bump the epoch, so only an unstamped append below the
					// newest row can have changed them, and only by adding.
					var n int64
					last := p.in.rows[len(p.in.rows)-1].TS
					if err := tx.q.QueryRowContext(tx.ctx, `SELECT COUNT(*) FROM wal WHERE `+liveStream+` AND ts <= ?3`,
						source, p.in.stream, last).Scan(&n); err != nil {
						return sqlErr("seal: count live rows", err)
					}
					if n != int64(len(p.in.rows)) {
						return errSealConflict
					}
					if err := tx.InsertSegment(source, p.in.stream, p.in.seq, p.seg); err != nil {
						return err
					}
				}
				return tx.InsertClockOffset(source, obs.TS, obs.WallOffset)
			})
		})
	}
	switch {
	case errors.Is(err, errSealConflict):
		job.attempt++
		if job.attempt >= maxSealAttempts {
			l.w.stats.deferredSeals.Add(1)
			l.log.Warn("seal deferred; the rows stay live", "source", source, "err", err)
			l.answerSeal(job, nil, err)
			return
		}
		l.sealing = nil
		l.startSeal(job) // read again, encode again
		return
	case err != nil && IsRetryable(err):
		l.w.stats.deferredSeals.Add(1)
		l.log.Warn("seal deferred; the rows stay live", "source", source, "err", err)
		l.answerSeal(job, nil, err)
		return
	case err != nil:
		l.fail(err)
		l.answerSeal(job, nil, err)
		return
	}
	out2 := make([]Sealed, 0, len(batch))
	for _, p := range batch {
		k := streamKey{source, p.in.stream}
		l.nextSeq[k] = p.in.seq + 1
		l.watermark[k] = p.seg.LastTS
		l.queuePrune(k, p.seg.LastTS) // after the commit, outside it (see prunePending)
		l.w.stats.seals.Add(1)
		l.w.stats.segmentBytes.Add(int64(len(p.seg.Bytes)))
		out2 = append(out2, Sealed{Stream: p.in.stream, Seq: p.in.seq, SegmentMeta: SegmentMeta{
			Rows: p.seg.Rows, FirstTS: p.seg.FirstTS, LastTS: p.seg.LastTS, Size: int64(len(p.seg.Bytes))}})
	}
	l.w.stats.sealNanos.Add(int64(time.Since(job.begin)))
	if l.opts.DeferPrunes {
		l.releaseCache()
	} else {
		l.prunePending() // releases the cache too
	}
	l.answerSeal(job, out2, nil)
}

// releaseCache hands back the memory of the writer connection's unused
// page-cache lines. A seal pulls its rows and its segment through the
// writer's cache, hundreds of pages that the prune and the next appends
// never read again, and SQLite keeps them until the cache (writerCacheKiB)
// is full. The driver's allocator also rounds each ~4.2 KB cache line up to
// an 8 KiB slot, so a full cache holds twice its size of the process's RSS.
// Pages the writer does reuse (the B-trees' upper levels and tails) come
// back from the OS page cache at the next read; the cache size is unchanged.
func (l *loop) releaseCache() {
	if _, err := l.conn.ExecContext(context.Background(), "PRAGMA shrink_memory"); err != nil {
		l.log.Debug("releasing the writer's page cache failed", "err", err)
	}
	l.countCache()
}

func (l *loop) evict(source SourceID, cutoff int64, remove func(string) bool) (Evicted, error) {
	var ev Evicted
	err := l.withRetries(func() error {
		return l.update(func(tx *WriteTx) error {
			var err error
			if remove == nil {
				ev, err = tx.EvictBefore(source, cutoff)
			} else {
				ev, err = tx.EvictStreamsBefore(source, cutoff, remove)
			}
			return err
		})
	})
	if err != nil {
		return Evicted{}, err // never fatal
	}
	l.w.stats.evictions.Add(1)
	l.w.stats.evictedSegments.Add(ev.Segments)
	l.w.stats.evictedLiveRows.Add(ev.LiveRows)
	if ev.LiveRows > 0 {
		l.log.Warn("retention deleted rows no segment held; seal at least as often as you evict",
			"source", source, "rows", ev.LiveRows)
	}
	l.reclaimIfFragmented()
	return ev, nil
}

// reclaimIfFragmented returns ReclaimPagesPerPass pages to the filesystem
// when free pages exceed a tenth of the file. Failures are only logged.
func (l *loop) reclaimIfFragmented() {
	var ps PageStats
	if err := l.view(func(tx *ReadTx) error {
		var err error
		ps, err = tx.PageStats()
		return err
	}); err != nil {
		l.log.Warn("reclaim: page stats", "err", err)
		return
	}
	if ps.Free*reclaimFreelistDivisor <= ps.Pages {
		return
	}
	if err := incrementalVacuum(context.Background(), l.conn, ReclaimPagesPerPass); err != nil {
		l.log.Warn("reclaim failed", "err", err)
		return
	}
	l.w.stats.reclaims.Add(1)
}

// closeCleanly reclaims free pages (bounded) when every source this session
// opened was finalized: the clean-stop case.
func (l *loop) closeCleanly() {
	if l.opened == 0 || l.finalized < l.opened {
		return
	}
	deadline := time.Now().Add(ReclaimAtCloseBudget)
	for time.Now().Before(deadline) {
		var ps PageStats
		if err := l.view(func(tx *ReadTx) error {
			var err error
			ps, err = tx.PageStats()
			return err
		}); err != nil || ps.Free == 0 {
			return
		}
		if err := incrementalVacuum(context.Background(), l.conn, ReclaimPagesPerPass); err != nil {
			l.log.Warn("reclaim at close failed", "err", err)
			return
		}
	}
	l.log.Warn("reclaim at close ran out of time; free pages remain")
}

// shutdown releases everything in order: statement, connection (SQLite
// checkpoints and removes the sidecars if it is the last), then the lock.
func (l *loop) shutdown() {
	l.insertWAL.Close()
	l.conn.Close()
	l.db.Close()
	l.lock.Close()
	close(l.w.done)
}
