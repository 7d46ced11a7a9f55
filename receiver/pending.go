package receiver

import (
	"context"
	"sync/atomic"
)

// Pending counts the requests being decoded and encoded on their way to
// the archive writer: from the moment the Handler has a request's body
// until the Ingester hands its rows to the writer (or the request ends
// first). Its Count is what the writer's group commit consults
// (archive.WriterOptions.Coming): while requests are on their way, a
// commit waits briefly to take them along, so that requests sent together
// share one commit (one fsync, one write of the pages they share) instead
// of each paying for its own.
type Pending struct{ n atomic.Int64 }

// Count is how many requests are on their way to the writer.
func (p *Pending) Count() int {
	if p == nil {
		return 0
	}
	return int(p.n.Load())
}

// pendingToken is one request's share of a Pending; end is idempotent.
type pendingToken struct {
	p    *Pending
	done atomic.Bool
}

type pendingKey struct{}

// begin counts a request and returns a context carrying its token.
func (p *Pending) begin(ctx context.Context) (context.Context, *pendingToken) {
	if p == nil {
		return ctx, nil
	}
	p.n.Add(1)
	t := &pendingToken{p: p}
	return context.WithValue(ctx, pendingKey{}, t), t
}

func (t *pendingToken) end() {
	if t != nil && t.done.CompareAndSwap(false, true) {
		t.p.n.Add(-1)
	}
}

// sending ends the token ctx carries, if any: its rows are about to be
// queued for the writer.
func sending(ctx context.Context) {
	if t, ok := ctx.Value(pendingKey{}).(*pendingToken); ok {
		t.end()
	}
}
