// Package membudget is the process's one memory budget: a count of bytes
// against a limit, from which every part of the process that holds memory
// in proportion to what it is asked, rather than to what it was sent,
// reserves before it holds and releases after.
//
// The types:
//
//   - Budget (New) is the limit and what is reserved against it.
//   - Reservation is one holder's share, which it may grow, shrink and
//     release as what it holds changes.
//
// What a reservation means: its bytes are counted until Release, whether or
// not the holder still uses them, so a holder reserves what it is about to
// hold (an estimate is fine) and releases when it lets go. A reservation
// that does not fit waits, first come first served, for releases that make
// room, as long as its context allows; one that could never fit (more than
// the whole limit) is refused at once with *ExceedsError, which a server
// answers like a query over its sample limit (422: retrying cannot help),
// where a wait that ran out of time is answered 503 (retry later).
//
// Caveat: a holder that grows while holding can wait for others that wait
// to grow too; none of them releases, and each waits until its context
// ends. Reserve the estimate once, then grow with TryGrow and treat a
// refusal as too large, or bound every Grow by a deadline.
//
// The package knows nothing of what the bytes are; dendro-receiver's
// cmd/dendro-receiver makes the one Budget from --memory.limit and says how
// it is shared.
package membudget

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrExceedsBudget is matched by every *ExceedsError.
var ErrExceedsBudget = errors.New("membudget: more memory than the budget allows")

// ExceedsError is a reservation that could never fit: Want bytes (the
// holder's total, for a Grow) against a limit of Limit.
type ExceedsError struct {
	Want, Limit int64
}

func (e *ExceedsError) Error() string {
	return fmt.Sprintf("needs %d bytes of memory, more than the whole budget of %d", e.Want, e.Limit)
}

// Is makes ExceedsError match ErrExceedsBudget.
func (e *ExceedsError) Is(target error) bool { return target == ErrExceedsBudget }

// Budget is a limit in bytes and the reservations against it. Its methods
// are safe for concurrent use.
type Budget struct {
	limit int64

	mu      sync.Mutex
	used    int64
	waiters []*waiter // first come, first served
	stats   Stats
}

type waiter struct {
	n     int64
	ready chan struct{} // closed when granted
}

// Stats describes a Budget.
type Stats struct {
	Limit, InUse int64
	// Waiting is how many reservations wait now; Waited and Refused count
	// those that had to wait, and those refused (too large, or their wait
	// ended first).
	Waiting         int
	Waited, Refused int64
}

// New returns a Budget of limit bytes (at least 1).
func New(limit int64) *Budget { return &Budget{limit: max(limit, 1)} }

// Limit is the budget's limit in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// Stats returns a snapshot of the budget.
func (b *Budget) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stats
	s.Limit, s.InUse, s.Waiting = b.limit, b.used, len(b.waiters)
	return s
}

// Reserve reserves n bytes, waiting for room as long as ctx allows. It
// fails at once with *ExceedsError when n exceeds the limit, and with
// ctx's error when the wait ends first.
func (b *Budget) Reserve(ctx context.Context, n int64) (*Reservation, error) {
	r := &Reservation{b: b}
	if err := b.take(ctx, n, n); err != nil {
		return nil, err
	}
	r.n = n
	return r, nil
}

// TryReserve reserves n bytes if they fit now, without waiting.
func (b *Budget) TryReserve(n int64) (*Reservation, bool) {
	if !b.tryTake(n) {
		return nil, false
	}
	return &Reservation{b: b, n: n}, true
}

// take reserves n bytes for a holder whose total would then be total.
func (b *Budget) take(ctx context.Context, n, total int64) error {
	if n < 0 {
		return fmt.Errorf("membudget: reserving %d bytes", n)
	}
	b.mu.Lock()
	if total > b.limit {
		b.stats.Refused++
		b.mu.Unlock()
		return &ExceedsError{Want: total, Limit: b.limit}
	}
	if len(b.waiters) == 0 && b.used+n <= b.limit {
		b.used += n
		b.mu.Unlock()
		return nil
	}
	w := &waiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.stats.Waited++
	b.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready: // granted meanwhile: give it back
		b.used -= n
	default:
		for i, x := range b.waiters {
			if x == w {
				b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
				break
			}
		}
	}
	b.stats.Refused++
	b.grant() // the head may have been waiting behind this one
	return ctx.Err()
}

func (b *Budget) tryTake(n int64) bool {
	if n < 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.waiters) > 0 || b.used+n > b.limit {
		return false
	}
	b.used += n
	return true
}

// give returns n bytes and grants the waiters that now fit, in order.
func (b *Budget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	b.grant()
	b.mu.Unlock()
}

// grant admits waiters from the head while they fit. b.mu is held.
func (b *Budget) grant() {
	for len(b.waiters) > 0 && b.used+b.waiters[0].n <= b.limit {
		w := b.waiters[0]
		b.waiters = b.waiters[1:]
		b.used += w.n
		close(w.ready)
	}
}

// Reservation is one holder's bytes of a Budget. It is not safe for
// concurrent use: one holder grows and shrinks it. Bytes, Shrink and
// Release accept a nil *Reservation (one never made), which holds nothing.
type Reservation struct {
	b *Budget
	n int64
}

// Bytes is what the reservation holds.
func (r *Reservation) Bytes() int64 {
	if r == nil {
		return 0
	}
	return r.n
}

// Grow reserves n more bytes, waiting as Reserve does; on failure the
// reservation is unchanged. *ExceedsError means the total would exceed the
// limit.
func (r *Reservation) Grow(ctx context.Context, n int64) error {
	if err := r.b.take(ctx, n, r.n+n); err != nil {
		return err
	}
	r.n += n
	return nil
}

// TryGrow reserves n more bytes if they fit now.
func (r *Reservation) TryGrow(n int64) bool {
	if !r.b.tryTake(n) {
		return false
	}
	r.n += n
	return true
}

// Shrink gives back n of the reservation's bytes (all of them, at most).
func (r *Reservation) Shrink(n int64) {
	if r == nil || n <= 0 {
		return
	}
	n = min(n, r.n)
	r.n -= n
	r.b.give(n)
}

// Release gives back everything the reservation holds. Idempotent.
func (r *Reservation) Release() {
	if r != nil {
		r.Shrink(r.n)
	}
}
