package archive

import (
	"math"
	"time"
)

// The prune floor (WriterOptions.KeepWAL).
//
// A seal's prune deletes the stream's wal rows at or below the new
// watermark: the segment holds them, and no read of the live tail can see
// them any more. A reader that reads a stream as rows, not as segments, can
// still need them. The forwarder does: it sends a stream's live tail row by
// row, and a format-2 row names its series by ids anchored in earlier rows
// of its epoch, so resuming inside an epoch (after a restart) means reading
// the epoch again from its first row. If a seal took the epoch in the
// meantime, the rows are the only place the forwarder can resume exactly:
// the segment is sorted by series, and which of its samples were already
// sent cannot be told from it.
//
// So the prune keeps, per stream, the rows at or above the floor KeepWAL
// names, and leaves the stream queued: a later prune (the next seal, or
// pruneMaxDelay) deletes them once the floor has moved past them. Nothing
// else changes: the rows stay shadowed (every read of the live tail skips
// them, by the watermark), so holding them costs disk and a longer prune,
// never a different answer. A caller bounds what it holds (the forwarder
// lets go of a stream it has fallen far behind on).

// pruneTargets turns the queued prunes of keys into statements' targets,
// each cut below its stream's floor, and returns separately the prunes the
// floor held back (whole or in part), to be queued again.
func (l *loop) pruneTargets(keys []streamKey) (targets []pruneTarget, held map[streamKey]int64) {
	targets = make([]pruneTarget, 0, len(keys))
	for _, k := range keys {
		upto := l.prunes[k]
		if l.opts.KeepWAL != nil {
			if from, ok := l.opts.KeepWAL(k.source, k.stream); ok && from <= upto {
				if held == nil {
					held = map[streamKey]int64{}
				}
				held[k] = upto
				if from == math.MinInt64 {
					continue // every row is still needed
				}
				upto = from - 1
			}
		}
		targets = append(targets, pruneTarget{k.source, k.stream, upto})
	}
	return targets, held
}

// requeueHeld queues again the prunes a floor held back; they run again
// after pruneMaxDelay, or with the next Prune.
func (l *loop) requeueHeld(held map[streamKey]int64) {
	if len(held) == 0 {
		return
	}
	for k, upto := range held {
		l.prunes[k] = max(l.prunes[k], upto)
	}
	l.pruneSince = time.Now()
}
