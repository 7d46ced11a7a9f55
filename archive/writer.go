package archive

// The writer.
//
// Every mutation of a live archive goes through one goroutine, which owns the
// only writing connection and every piece of cached writer state (each
// stream's next seq, its sealed watermark, resumed sources' floors, the
// newest ts handed out per stream). The design rests on six invariants:
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
//  6. A transient failure changes nothing but the outage. SQLite rolls a
//     failed transaction back, and the writer's cached seqs, watermarks
//     and queued prunes move only after a commit (an epoch bumped for a
//     write that then failed only makes a seal in flight read again), so
//     after any number of failed commits the cache still describes the
//     file, and the first commit that succeeds needs no recovery. A writer in an
//     outage answers writes at once with the outage's error rather than
//     queueing them: the channel's one slot stays the only buffer.
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
// Failure policy (writer_failure.go): a constraint failure is isolated to
// its source; a transient failure (a full disk, EIO, a held lock) never
// stops the writer: it is retried in place, then on a backoff, while writes
// are refused with ErrCannotCommit, until a commit succeeds again (invariant
// 6); corruption, an encoder failure or any other error stops the writer,
// and every handle then reports that error (ErrWriterStopped).
//
// Where each part lives: this file holds the options, the handle and its
// open; writer_api.go the messages and the calls that send them;
// writer_loop.go the loop, its dispatch and group commit; writer_append.go
// appends and stamping; writer_seal.go the seal; writer_prune.go the prune
// after it; writer_retention.go eviction and reclaim; writer_sources.go
// adding and resuming sources; writer_failure.go retries and the failure
// policy.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
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
	// implementation is recorded in writer_sessions.
	implementation = "dendro-receiver/archive 0.1.0"
)

// retryBackoff is the in-place retry schedule for transient failures of a
// healthy writer (writer_failure.go; an outage has a backoff of its own).
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
	// KeepWAL, if set, names for a stream the oldest wal row a reader
	// outside the writer still reads as a row (a forwarder resuming inside
	// an epoch of format-2 rows): the prune after a seal then deletes only
	// the stream's sealed rows below it, and keeps the rest queued until a
	// later prune finds the floor moved (see writer_keep.go). It is called
	// on the writer goroutine: it must be cheap and must not call the
	// Writer.
	KeepWAL func(source SourceID, stream string) (from int64, ok bool)
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

	// fault, when set, is called in each of the writer's write
	// transactions just before its commit; an error it returns fails the
	// transaction as if SQLite had, and it is rolled back. The one seam for
	// injected faults (tests, through export_test.go).
	fault func(tx *WriteTx) error
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
	outage  *CannotCommitError // the loop's outage as last published; nil while it commits
	dropped map[SourceID]int64 // rows dropped out of order, per source

	stats writerCounters

	staged stagedMetadata // metadata patches riding on the next commit (writer_staged.go)

	// segs counts the commits that changed segments, for read handles
	// that follow this writer (segments_epoch.go); moves counts its
	// reclaims, the commits that move segments' pages (blobchains.go).
	segs, moves segmentsEpoch
}

// WriterStats are the writer's cumulative counters.
type WriterStats struct {
	Commits          int64 // append transactions committed
	RowsCommitted    int64
	RowsDropped      int64 // out of order, below a resume floor, or a failed tick
	DroppedTicks     int64 // appends (and clock observations) lost to transient failures
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
	// Outages counts the times the writer found it could not commit (a
	// transient failure outlasted the in-place retries); Probes the idle
	// writes it made in them to learn whether it can again. Health tells
	// whether one is in progress.
	Outages, Probes int64
}

type writerCounters struct {
	commits, rowsCommitted, rowsDropped, droppedTicks, retries, commitNanos   atomic.Int64
	seals, segmentBytes, sealNanos, deferredSeals, compactions, evictions     atomic.Int64
	evictedSegments, evictedLiveRows, checkpoints, checkpointErrors, reclaims atomic.Int64
	pagesWritten, groupedCommits, groupFallbacks, prunedRows, sealsBehind     atomic.Int64
	outages, probes                                                           atomic.Int64
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
		Outages: c.outages.Load(), Probes: c.probes.Load(),
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
