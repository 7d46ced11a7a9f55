package archive

import (
	"context"
	"time"
)

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
	if err := l.reclaim(); err != nil {
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
		if err := l.reclaim(); err != nil {
			l.log.Warn("reclaim at close failed", "err", err)
			return
		}
	}
	l.log.Warn("reclaim at close ran out of time; free pages remain")
}

// reclaim runs one pass of incremental_vacuum, which moves pages of live
// segments into free ones, counted in the writer's moves (blobchains.go):
// begun before the statement, whose commit is its own, and ended once it
// has returned, whatever it returned.
func (l *loop) reclaim() error {
	l.w.moves.begin()
	defer l.w.moves.end()
	return incrementalVacuum(context.Background(), l.conn, ReclaimPagesPerPass)
}
