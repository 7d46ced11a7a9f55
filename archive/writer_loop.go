package archive

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"time"

	sqlite "modernc.org/sqlite"
)

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
	// remove rows or change what a seal may assume (eviction, finalize,
	// resume; not compaction, see msgCompactTxn): a seal encoded across one
	// is redone.
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

	opened, finalized int // sources added or resumed, and finalized, this session
	lastCheckpoint    time.Time

	// The failure policy's state (writer_failure.go): down is the outage in
	// progress (nil while commits succeed); upAgain is when the last one
	// ended and lastBackoff the backoff it had reached (outageFlapGuard);
	// warnedDown when the outage was last logged.
	down        *outage
	upAgain     time.Time
	lastBackoff time.Duration
	warnedDown  time.Time
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
	if l.opts.fault != nil {
		inner := fn
		fn = func(tx *WriteTx) error {
			if err := inner(tx); err != nil {
				return err
			}
			return l.opts.fault(tx)
		}
	}
	// Every transaction also writes the staged metadata (writer_staged.go).
	staged := l.w.staged.take()
	err := update(context.Background(), l.conn, l.insertWAL, &l.w.segs, func(tx *WriteTx) error {
		if err := fn(tx); err != nil {
			return err
		}
		return l.applyStaged(tx, staged)
	})
	l.w.staged.finish(staged, err)
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
		if len(l.prunes) > 0 && time.Since(l.pruneSince) >= pruneMaxDelay && l.mayWrite() {
			l.prunePending()
		}
		// In an outage, an idle writer probes when its backoff has passed
		// (writer_failure.go): nothing else would tell it that the disk has
		// room again.
		if l.down != nil && l.mayWrite() {
			l.probe()
			if l.failed() {
				return
			}
		}
		wake := time.Hour
		if checkpoints {
			wake = l.opts.CheckpointInterval - time.Since(l.lastCheckpoint)
		}
		if len(l.prunes) > 0 {
			wake = min(wake, pruneMaxDelay-time.Since(l.pruneSince))
		}
		if l.down != nil {
			wake = min(wake, time.Until(l.down.next))
		}
		timer.Reset(max(wake, time.Millisecond))
	}
}

func (l *loop) checkpoint() error {
	l.lastCheckpoint = time.Now()
	_, err := l.conn.ExecContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)")
	if err != nil {
		l.w.stats.checkpointErrors.Add(1)
		if l.down == nil {
			l.log.Warn("passive checkpoint failed", "err", err)
		} else {
			l.log.Debug("passive checkpoint failed in an outage", "err", err) // the outage is logged
		}
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
		if !l.mayWrite() {
			m.reply <- result[*Source]{err: l.cannotCommit()}
			return
		}
		s, err := l.addSource(m.spec, m.uuid)
		m.reply <- result[*Source]{s, err}
	case msgResume:
		if !l.mayWrite() {
			m.reply <- result[*Source]{err: l.cannotCommit()}
			return
		}
		if l.drainSeals(); l.failed() {
			m.reply <- result[*Source]{err: l.w.stoppedErr()}
			return
		}
		l.epoch[m.source]++
		s, err := l.resume(m.source, m.anchor)
		m.reply <- result[*Source]{s, err}
	case msgEvict:
		// Even in an outage: retention is what frees space.
		if l.drainSeals(); l.failed() {
			m.reply <- result[Evicted]{err: l.w.stoppedErr()}
			return
		}
		l.epoch[m.source]++
		l.prunePending() // so that Evicted.WALRows counts no sealed row
		ev, err := l.evict(m.source, m.cutoff, m.remove)
		m.reply <- result[Evicted]{ev, err}
	case msgPatch:
		var err error
		if l.mayWrite() {
			err = l.withRetries(func() error {
				return l.update(func(tx *WriteTx) error { return tx.PatchMetadata(m.source, m.patch) })
			})
		} else {
			err = l.cannotCommit()
		}
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
		if !l.mayWrite() {
			l.w.stats.droppedTicks.Add(1)
			return
		}
		err := l.withRetries(func() error {
			return l.update(func(tx *WriteTx) error { return tx.InsertClockOffset(m.source, m.ts, m.offsetNS) })
		})
		l.afterWriteError(err)
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
		switch {
		case err == nil:
			l.finalized++
		case IsRetryable(err):
			// Not fatal: the source stays incomplete, as after a crash, and
			// the next session resumes it.
			l.log.Warn("finalize failed; the source stays incomplete", "source", m.source, "err", err)
		default:
			l.fail(fmt.Errorf("finalize source %d: %w", m.source, err))
		}
		m.reply <- result[struct{}]{err: err}
	case msgCompactView:
		if !l.mayWrite() { // a merge that could not commit is wasted work
			m.reply <- result[struct{}]{err: l.cannotCommit()}
			return
		}
		m.reply <- result[struct{}]{err: l.view(m.fn)}
	case msgCompactTxn:
		// No seal is drained and the epoch is not bumped: a merge replaces
		// segments below the stream's newest by one with the same rows, the
		// same last_ts and the first one's seq, so a seal in flight relies
		// on nothing it changes (the live rows, the watermark, the next
		// seq); and the commit checks that its run is still there.
		if !l.mayWrite() {
			m.reply <- result[struct{}]{err: l.cannotCommit()}
			return
		}
		err := l.withRetries(func() error { return l.update(m.fn) })
		m.reply <- result[struct{}]{err: err}
	case msgReclaim:
		if l.mayWrite() {
			l.reclaimIfFragmented()
		}
		m.reply <- struct{}{}
	case msgCheckpoint:
		m.reply <- result[struct{}]{err: l.checkpoint()}
	case msgPrune:
		l.prunePending()
	case msgFlushStaged:
		l.flushStaged()
	}
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
