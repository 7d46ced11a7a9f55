package forward

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/prometheus/common/config"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// Forwarder sends what an archive holds to its upstreams. New builds it;
// its floor methods (KeepWAL, RetentionFloor, CompactFloor) may be handed
// to the archive's writer and the ingester before Start, and say "keep
// everything" until Start has read the cursors. Close stops it.
type Forwarder struct {
	opts Options
	ups  []*upstream

	r *archive.Archive
	w *archive.Writer

	mu      sync.Mutex
	started bool
	closed  bool
}

// New validates opts and builds the upstreams' HTTP clients. Nothing runs
// until Start.
func New(opts Options) (*Forwarder, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	f := &Forwarder{opts: opts}
	for _, cfg := range opts.Upstreams {
		client, err := config.NewClientFromConfig(cfg.HTTP, "forward", config.WithUserAgent(opts.UserAgent))
		if err != nil {
			return nil, fmt.Errorf("%w: upstream %s: %v", ErrConfig, cfg.Name, err)
		}
		f.ups = append(f.ups, newUpstream(f, cfg, client))
	}
	return f, nil
}

// Start reads every upstream's cursor from the archive (r, a read handle)
// and starts sending; cursors are written through w, the archive's
// writer. An unreadable cursor fails Start (ErrCursor).
func (f *Forwarder) Start(ctx context.Context, r *archive.Archive, w *archive.Writer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.started {
		return ErrStarted
	}
	f.r, f.w = r, w
	if err := r.View(ctx, func(tx *archive.ReadTx) error {
		for _, u := range f.ups {
			if err := u.load(tx); err != nil {
				return fmt.Errorf("upstream %s: %w", u.cfg.Name, err)
			}
		}
		return nil
	}); err != nil {
		return err
	}
	f.started = true
	for _, u := range f.ups {
		u.log.Info("forwarding", "url", u.shownURL, "protocol", u.cfg.Protocol, "shards", u.cfg.Queue.Shards,
			"streams", len(u.streams))
		go func() {
			f.onThread()
			u.run()
		}()
	}
	return nil
}

// Close stops every upstream: requests in flight are abandoned (they are
// not acknowledged, so the next start sends them again) and the cursors
// are committed. Idempotent.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	for _, u := range f.ups {
		if f.started {
			close(u.stop)
		} else {
			u.cancel()
		}
	}
	if f.started {
		for _, u := range f.ups {
			<-u.exited
		}
	}
	for _, u := range f.ups {
		u.client.CloseIdleConnections()
	}
	return nil
}

// Stats returns every upstream's statistics, in configuration order.
func (f *Forwarder) Stats() []UpstreamStats {
	out := make([]UpstreamStats, len(f.ups))
	for i, u := range f.ups {
		out[i] = u.snapshot()
	}
	return out
}

// KeepWAL is archive.WriterOptions.KeepWAL: the oldest wal row of a stream
// an upstream still reads as a row. Called on the writer goroutine; it
// only reads what the upstreams last published.
func (f *Forwarder) KeepWAL(source archive.SourceID, stream string) (int64, bool) {
	keep, any := int64(math.MaxInt64), false
	for _, u := range f.ups {
		fm := u.floors.Load()
		if fm.loading {
			return math.MinInt64, true
		}
		if fl, ok := fm.streams[streamKey{source, stream}]; ok && fl.keepOK {
			keep, any = min(keep, fl.keep), true
		}
	}
	return keep, any
}

// RetentionFloor is what time retention must keep of a source: data
// received at or after the returned ts (Unix ns) is not yet acknowledged
// by some upstream (and not too old for its MaxAge).
func (f *Forwarder) RetentionFloor(source archive.SourceID) (int64, bool) {
	floor := int64(math.MaxInt64)
	for _, u := range f.ups {
		fm := u.floors.Load()
		if fm.loading {
			return math.MinInt64, true
		}
		need := fm.discAt // streams it has not listed yet hold only newer data
		if n, ok := fm.sources[source]; ok {
			need = min(need, n)
		}
		floor = min(floor, max(need, fm.ageFloor))
	}
	return floor, true
}

// CompactFloor is what compaction must not merge in a stream: segments
// whose newest row is at or after the returned ts hold data some upstream
// has not had acknowledged, and merging them would lose the cursor's
// place in them.
func (f *Forwarder) CompactFloor(source archive.SourceID, stream string) (int64, bool) {
	floor := int64(math.MaxInt64)
	for _, u := range f.ups {
		fm := u.floors.Load()
		if fm.loading {
			return math.MinInt64, true
		}
		need := fm.discAt
		if fl, ok := fm.streams[streamKey{source, stream}]; ok {
			need = fl.need
		}
		floor = min(floor, max(need, fm.ageFloor))
	}
	return floor, true
}

// ForcedEviction is told, before size retention evicts source below cutoff
// regardless of RetentionFloor, so that each upstream counts and logs the
// samples it loses (reason "retention"). It waits for them, at most a few
// seconds each.
func (f *Forwarder) ForcedEviction(ctx context.Context, source archive.SourceID, cutoff int64) {
	f.mu.Lock()
	started, closed := f.started, f.closed
	f.mu.Unlock()
	if !started || closed {
		return
	}
	for _, u := range f.ups {
		if fl, ok := f.floorOf(u, source); ok && fl >= cutoff {
			continue
		}
		u.evicting(ctx, source, cutoff)
	}
}

func (f *Forwarder) floorOf(u *upstream, source archive.SourceID) (int64, bool) {
	fm := u.floors.Load()
	if fm.loading {
		return math.MinInt64, true
	}
	n, ok := fm.sources[source]
	if !ok {
		return fm.discAt, true
	}
	return max(min(n, fm.discAt), fm.ageFloor), true
}

// onThread locks the calling goroutine to its thread for good (the thread
// ends with the goroutine, so whatever OnThread set never reaches another)
// and calls OnThread.
func (f *Forwarder) onThread() {
	if f.opts.OnThread != nil {
		runtime.LockOSThread()
		f.opts.OnThread()
	}
}
