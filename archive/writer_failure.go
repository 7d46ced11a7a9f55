package archive

import (
	"fmt"
	"time"
)

// The failure policy.
//
// A write transaction ends in one of four ways, and each has one answer.
//
//  1. It commits. If the writer was in an outage, the outage ends.
//
//  2. It fails on a constraint: the data is at fault, not the archive. An
//     append isolates it to its source (commitTick); nothing else changes.
//
//  3. It fails with a transient error (IsRetryable: a full disk, EIO, a lock
//     held elsewhere). SQLite has rolled the transaction back, so the file
//     is as it was before it, and so is every cached seq, watermark and
//     epoch: those move only after a commit (invariant 5). A stamp handed
//     out for a row that was not committed leaves a gap in ts, which costs
//     nothing. A healthy writer retries in place on retryBackoff (a lock
//     held for a moment); if that fails too, an outage starts. In an
//     outage the writer makes one attempt per backoff step (outageBackoff,
//     doubling up to outageMaxBackoff) and answers everything else that
//     would write at once, without touching the disk, with a
//     *CannotCommitError wrapping the latest failure: appends are reported
//     dropped (a server answers 507 or 503 with Retry-After, and the sender
//     retries), seals and compactions are deferred and their rows stay
//     live. Retention still runs, since it is what frees space. A writer
//     with nothing to write probes: it rewrites the header's user_version
//     with the value it already has, the smallest transaction that needs a
//     sidecar frame and an fsync, so it notices by itself when the disk has
//     room again. It never gives up: no number of failures stops it.
//
//  4. It fails any other way: corruption (IsCorrupt), a misuse, an encoder
//     that broke its contract. The writer stops and stores the error, and
//     every handle reports it (ErrWriterStopped). Writing on could spread
//     the damage; a restart, after someone has looked, is the way out.
//
// Why the writer does not make room itself by evicting when a commit finds
// the disk full: by then it cannot. A commit fails with SQLITE_FULL when the
// -wal sidecar cannot grow, and the sidecar cannot be written from its start
// again until a checkpoint has copied it into the file, which needs the
// file to grow by the pages the sidecar added past its end. An eviction is
// a transaction too, and needs the same sidecar room. Room must be kept
// before the disk is full: a caller capping the archive's size keeps a
// reserve of free space (dendro-receiver's EnforceRetention).

// Outage backoff: the first attempt after an outage starts waits
// outageBackoff, each failed one doubles the wait, up to outageMaxBackoff
// (the ceiling Prometheus's own remote-write backoff uses by default).
const (
	outageBackoff    = 100 * time.Millisecond
	outageMaxBackoff = 5 * time.Second
	// outageFlapGuard: an outage that starts this soon after the last one
	// ended resumes its backoff and skips the in-place retries. A probe of
	// one page can succeed on a disk that still refuses a whole append;
	// without the guard the writer would alternate between the two at the
	// first step of the backoff, sleeping through retryBackoff each time.
	outageFlapGuard = time.Minute
)

// outage is the writer's state while it cannot commit. Only the loop
// touches it; Writer.Health reads the copy published in Writer.outage.
type outage struct {
	since   time.Time     // the first failure
	next    time.Time     // when the next attempt is due
	backoff time.Duration // the wait after the next failure
	err     error         // the latest failure
}

// attempt runs op. A healthy writer retries transient failures in place on
// retryBackoff, sleeping meanwhile, so the channel backpressures callers;
// in an outage (or just after one: outageFlapGuard) it makes one attempt.
// It records nothing: see withRetries.
func (l *loop) attempt(op func() error) error {
	if l.down != nil && IsDiskFull(l.down.err) {
		// A full disk: copy the sidecar back first, so that this
		// transaction may write it from its start, in the room it
		// already has (see probe). Under a steady load the writer is
		// never idle enough to probe, and an eviction, the transaction
		// that frees room, needs the sidecar room as much as an append.
		l.checkpoint()
	}
	err := op()
	if l.down != nil || (!l.upAgain.IsZero() && time.Since(l.upAgain) < outageFlapGuard) {
		return err
	}
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

// withRetries runs a write transaction through attempt and records its
// outcome (wrote).
func (l *loop) withRetries(op func() error) error {
	err := l.attempt(op)
	l.wrote(err)
	return err
}

// wrote records the outcome of a write transaction: a commit ends an
// outage, a transient failure starts or extends one. Other failures are
// the caller's to judge (a constraint is not the archive's fault; anything
// else stops the writer, or is only logged where the write was optional).
func (l *loop) wrote(err error) {
	now := time.Now()
	switch {
	case err == nil:
		if l.down == nil {
			return
		}
		l.log.Info("the archive writer commits again", "path", l.w.path, "after", now.Sub(l.down.since).Round(time.Millisecond))
		l.lastBackoff = l.down.backoff
		l.down = nil
		l.upAgain = now
		l.publish()
	case IsRetryable(err):
		if l.down == nil {
			backoff := outageBackoff
			if !l.upAgain.IsZero() && now.Sub(l.upAgain) < outageFlapGuard {
				backoff = l.lastBackoff
			}
			l.down = &outage{since: now, backoff: backoff}
			l.w.stats.outages.Add(1)
			l.log.Warn("the archive writer cannot commit; it keeps trying, and refuses writes meanwhile",
				"path", l.w.path, "err", err)
			l.warnedDown = now
		} else if now.Sub(l.warnedDown) >= time.Minute {
			l.log.Warn("the archive writer still cannot commit", "path", l.w.path,
				"for", now.Sub(l.down.since).Round(time.Second), "err", err)
			l.warnedDown = now
		}
		l.down.err = err
		l.down.next = now.Add(l.down.backoff)
		l.down.backoff = min(2*l.down.backoff, outageMaxBackoff)
		l.publish()
	}
}

// mayWrite reports whether a write may be attempted now: always while
// healthy; in an outage, once its backoff has passed.
func (l *loop) mayWrite() bool {
	return l.down == nil || !time.Now().Before(l.down.next)
}

// cannotCommit is what a write refused during an outage reports.
func (l *loop) cannotCommit() error {
	return &CannotCommitError{Since: l.down.since, Next: l.down.next, Err: l.down.err}
}

// publish copies the outage where Writer.Health reads it.
func (l *loop) publish() {
	var e *CannotCommitError
	if l.down != nil {
		e = l.cannotCommit().(*CannotCommitError)
	}
	l.w.mu.Lock()
	l.w.outage = e
	l.w.mu.Unlock()
}

// probe is the write an idle writer in an outage tries when its backoff
// has passed: a passive checkpoint first (a sidecar that has been copied
// back can be written from its start, needing no new space), then a
// transaction that rewrites user_version with the value the gate checked
// at open. It changes nothing a reader sees but the snapshot version.
func (l *loop) probe() {
	l.w.stats.probes.Add(1)
	l.checkpoint()
	err := l.withRetries(func() error {
		return l.update(func(tx *WriteTx) error {
			_, err := tx.exec("probe", fmt.Sprintf("PRAGMA user_version=%d", SchemaVersion))
			return err
		})
	})
	if err != nil && !IsRetryable(err) {
		l.fail(fmt.Errorf("probing whether the archive can commit: %w", err))
	}
}

// fail stores err as the writer's failure; the loop then exits.
func (l *loop) fail(err error) {
	l.w.mu.Lock()
	if l.w.failure == nil {
		l.w.failure = &WriterError{Err: err}
	}
	l.w.mu.Unlock()
	if IsCorrupt(err) {
		l.log.Error("the archive is corrupt: the writer stopped and writes are refused until a restart; "+
			"check it with PRAGMA integrity_check before anything else", "path", l.w.path, "err", err)
		return
	}
	l.log.Error("archive writer stopped", "path", l.w.path, "err", err)
}

func (l *loop) failed() bool {
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	return l.w.failure != nil
}

// afterWriteError judges a failed write that is not an append and whose
// loss matters (a clock observation): a transient failure has been
// recorded by withRetries, and the observation is dropped and counted;
// anything else stops the writer.
func (l *loop) afterWriteError(err error) {
	switch {
	case err == nil:
	case IsRetryable(err):
		l.w.stats.droppedTicks.Add(1)
	default:
		l.fail(err)
	}
}
