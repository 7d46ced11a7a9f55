package archive

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

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
	if len(l.prunes) == 0 || !l.mayWrite() {
		return // in an outage, the rows wait: hidden, and retried with the next attempt
	}
	keys := make([]streamKey, 0, len(l.prunes))
	for k := range l.prunes {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b streamKey) int {
		return cmp.Or(cmp.Compare(a.source, b.source), strings.Compare(a.stream, b.stream))
	})
	targets, held := l.pruneTargets(keys) // WriterOptions.KeepWAL (writer_keep.go)
	var n int64
	err := l.withRetries(func() error {
		if len(targets) == 0 {
			return nil
		}
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
	l.requeueHeld(held)
	l.releaseCache()
}
