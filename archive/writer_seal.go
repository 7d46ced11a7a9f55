package archive

import (
	"context"
	"errors"
	"time"
)

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
//     finalize and resume), each stream's seq and watermark, and
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
	if !l.mayWrite() {
		// In an outage a seal would read and encode its rows only to fail
		// its commit: it is deferred at once, and its rows stay live.
		l.w.stats.deferredSeals.Add(1)
		if m.reply != nil {
			m.reply <- result[[]Sealed]{err: l.cannotCommit()}
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
// writer would: eviction, finalize, resume, clock offsets and shutdown.
// Appends, source additions, metadata patches, checkpoints and a
// compaction's reads and commits (Writer.Compact) do not wait.
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
