package archive

import (
	"fmt"
	"time"
)

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
