package receiver

import (
	"context"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// Floors tell retention and compaction what a reader outside the ingester
// has not finished with: the forwarder (package forward), whose upstreams
// have not all acknowledged what the archive holds. The zero value tells
// nothing: retention and compaction run as if no such reader existed.
type Floors struct {
	// Retention returns the oldest receipt ts (Unix ns) of a source that
	// time retention must keep: a pass evicts below min(cutoff, floor).
	// ok false: no floor.
	Retention func(source archive.SourceID) (floor int64, ok bool)
	// Evicting is called before size retention (RetentionBytes) or the
	// disk reserve (DiskReserve) evicts a source below cutoff, which they
	// do whatever Retention says: the archive must fit. The reader counts and logs what it loses.
	Evicting func(ctx context.Context, source archive.SourceID, cutoff int64)
	// Compact returns, for a stream, the receipt ts from which its
	// segments must not be merged (a reader's place in them would be
	// lost): a stream whose newest segment ends at or after it waits for
	// a later round. ok false: no floor.
	Compact func(source archive.SourceID, stream string) (floor int64, ok bool)
}

// retentionCutoff lowers a time-retention cutoff to the source's floor.
func (in *Ingester) retentionCutoff(source archive.SourceID, cutoff int64) int64 {
	if in.opts.Floors.Retention == nil {
		return cutoff
	}
	if floor, ok := in.opts.Floors.Retention(source); ok && floor < cutoff {
		in.log.Debug("retention keeps what a forwarder upstream has not had acknowledged", "source", source,
			"cutoff_ns", cutoff, "floor_ns", floor)
		return floor
	}
	return cutoff
}

// evicting tells the floors' owner that size retention evicts below cutoff.
func (in *Ingester) evicting(ctx context.Context, source archive.SourceID, cutoff int64) {
	if in.opts.Floors.Evicting != nil {
		in.opts.Floors.Evicting(ctx, source, cutoff)
	}
}

// mayCompact reports whether a stream whose newest segment ends at lastTS
// may be compacted now.
func (in *Ingester) mayCompact(source archive.SourceID, stream string, lastTS int64) bool {
	if in.opts.Floors.Compact == nil {
		return true
	}
	floor, ok := in.opts.Floors.Compact(source, stream)
	return !ok || lastTS < floor
}
