package archive

import "context"

// QueuedAppend is an append the writer has taken into its queue and not
// yet answered: the two halves of AppendWait, for a caller that must know
// when its rows took their place in the writer's order (and so their ts
// relative to every later message) before it waits for the commit. The
// receiver's ingester holds a lock over the first half only, so that a
// stream's epochs stay in ts order (see promsample's rowv2.go) without
// holding it across an fsync.
type QueuedAppend struct {
	w     *Writer
	reply chan AppendResult
}

// AppendQueued hands a tick to the writer, as AppendWait does, and returns
// once the writer's channel took it: every message sent afterwards is
// applied after it. The rows are the writer's until Wait returns.
func (w *Writer) AppendQueued(ctx context.Context, ticks []SourceRows, stamp bool) (*QueuedAppend, error) {
	reply := make(chan AppendResult, 1)
	if err := w.send(ctx, msgAppend{ticks: nonEmptyTicks(ticks), stamp: stamp, reply: reply}); err != nil {
		return nil, err
	}
	return &QueuedAppend{w: w, reply: reply}, nil
}

// Wait waits for the append's commit and reports it as AppendWait does. A
// caller that gives up (ctx) leaves the append queued: it may still commit.
func (q *QueuedAppend) Wait(ctx context.Context) (AppendResult, error) {
	select {
	case r := <-q.reply:
		return r, nil
	case <-q.w.done:
		select { // the loop may have replied just before it exited
		case r := <-q.reply:
			return r, nil
		default:
		}
		return AppendResult{}, q.w.stoppedErr()
	case <-ctx.Done():
		return AppendResult{}, ctx.Err()
	}
}
