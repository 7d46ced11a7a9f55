package archive

import (
	"fmt"
	"math"
	"time"
)

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
	if !l.mayWrite() {
		return l.refuse(ticks)
	}
	t, ok := l.prepareTick(ticks, stamp)
	if ok {
		l.commitTick(t)
	}
	return t.res
}

// refuse answers an append in an outage without touching the disk: every
// row dropped, with the outage's error (invariant 6).
func (l *loop) refuse(ticks []SourceRows) AppendResult {
	n := 0
	for _, t := range ticks {
		n += len(t.Rows)
	}
	l.w.stats.droppedTicks.Add(1)
	l.w.stats.rowsDropped.Add(int64(n))
	return AppendResult{Streams: droppedAll(ticks, l.cannotCommit())}
}

// appendGroup commits several waiting appends in one transaction (group
// commit: one fsync for all). Each append is whole in that transaction and
// its caller is answered only after the commit, so what a reply promises is
// unchanged. If the shared transaction fails on a constraint, each append
// is committed on its own, so one append's bad rows are not another's; a
// transient failure is every append's (each would only meet it again).
func (l *loop) appendGroup(msgs []msgAppend) {
	if !l.mayWrite() {
		for _, m := range msgs {
			m.reply <- l.refuse(m.ticks)
		}
		return
	}
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
		err := l.withRetries(func() error {
			return l.update(func(tx *WriteTx) error {
				for _, t := range ticks {
					for _, k := range t.kept {
						if err := tx.InsertWALRows(k.Source, k.Rows); err != nil {
							return err
						}
					}
				}
				return nil
			})
		})
		l.w.stats.commitNanos.Add(int64(time.Since(begin)))
		switch {
		case err == nil:
			for _, t := range ticks {
				l.committed(t)
			}
			l.w.stats.groupedCommits.Add(1)
		case IsConstraint(err):
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
		default:
			for _, t := range ticks {
				for _, k := range t.kept {
					l.lost(t, k, err)
				}
				if len(t.kept) > 0 {
					l.w.stats.droppedTicks.Add(1)
				}
			}
			if !IsRetryable(err) {
				l.fail(err)
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
			if IsRetryable(err) {
				// The stamp's read failed (EIO): the tick is lost like a
				// failed commit, and the writer goes on.
				l.w.stats.droppedTicks.Add(1)
				l.wrote(err)
				return t, true
			}
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

// commitTick commits a prepared tick in one transaction (withRetries); a
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
		if !any {
			l.w.stats.droppedTicks.Add(1)
		}
	case IsRetryable(err):
		for _, k := range t.kept {
			l.lost(t, k, err)
		}
		l.w.stats.droppedTicks.Add(1)
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
