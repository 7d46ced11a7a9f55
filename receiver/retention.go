package receiver

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// EnforceRetention evicts what was received before now-Retention, then,
// when the archive exceeds RetentionBytes, the oldest segments until it fits.
func (in *Ingester) EnforceRetention(ctx context.Context) error {
	ids := in.sourceIDs()
	if in.opts.Retention > 0 {
		cutoff := in.opts.Now().Add(-in.opts.Retention).UnixNano()
		for _, id := range ids {
			// Never below what a forwarder upstream still needs (Floors).
			if _, err := in.evictBefore(ctx, id, in.retentionCutoff(id, cutoff), true); err != nil {
				return err
			}
		}
	}
	if in.opts.RetentionBytes <= 0 {
		return nil
	}
	room, err := in.room(ctx)
	if err != nil {
		return err
	}
	if room.used <= in.opts.RetentionBytes {
		return nil
	}
	in.log.Info("size retention: evicting the oldest segments", "archive_bytes", room.used, "limit", in.opts.RetentionBytes)
	_, _, err = in.evictOldest(ctx, ids, room.used-in.opts.RetentionBytes)
	return err
}

// room is what the archive occupies and what it may still grow into.
type room struct {
	used     int64 // bytes of the file's pages in use
	freeFile int64 // bytes of its free pages, reused before the file grows
	freeDisk int64 // bytes the filesystem may still give it
}

func (in *Ingester) room(ctx context.Context) (room, error) {
	var r room
	err := in.opts.Reader.View(ctx, func(tx *archive.ReadTx) error {
		ps, err := tx.PageStats()
		r.used, r.freeFile = (ps.Pages-ps.Free)*ps.PageSize, ps.Free*ps.PageSize
		return err
	})
	if err != nil {
		return r, err
	}
	r.freeDisk, err = archive.DiskFree(in.opts.Reader.Path())
	return r, err
}

// keepRoom keeps DiskReserve of room for the archive (free space on its
// filesystem, free pages in its file, and the ballast) beyond the room a
// seal of the live rows needs (sealroom.go) when RetentionBytes is set, by
// evicting the oldest segments early: before the size cap asks for it, and
// before a full disk refuses a write. When that is not enough, seals
// become urgent, and then appends are held for them. When the disk is full
// all the same (a write found it so, or too little is free for the -wal
// sidecar to grow), or appends are held, it first releases the ballast, so
// that the seals and evictions that free room can commit; it writes the
// ballast again once the filesystem has room for it twice over and
// appends flow. keepDiskReserve calls it.
func (in *Ingester) keepRoom(ctx context.Context, b *ballast) error {
	r, err := in.room(ctx)
	if err != nil {
		return err
	}
	full := in.sawFull.Swap(false)
	if b.present && (full || in.held.Load() || r.freeDisk < b.size/4) {
		if err := b.release(); err != nil {
			return err
		}
		in.stats.ballastReleases.Add(1)
		in.log.Warn("the disk is full, or a seal needs its room: released the ballast so that seals and evictions can commit",
			"ballast", b.size, "disk_free", r.freeDisk, "file_free", r.freeFile)
		r.freeDisk += b.size
	}
	live := in.liveBytes()
	seal := sealRoomFactor * live
	left := r.freeDisk + r.freeFile + b.room() - seal // once the live rows are sealed
	short := in.opts.DiskReserve - left
	var evictErr error
	if short > 0 {
		// A quarter of the reserve more than is short, so that a steady
		// load costs one eviction per quarter-reserve written, not one per
		// check.
		var segs, bytes int64
		segs, bytes, evictErr = in.evictOldest(ctx, in.sourceIDs(), short+in.opts.DiskReserve/4)
		if segs > 0 {
			in.stats.earlyEvictions.Add(1)
			in.stats.earlyEvictedSegments.Add(segs)
			in.stats.earlyEvictedBytes.Add(bytes)
			in.log.Warn("the disk is nearly full: evicted the oldest segments early to keep room for the archive",
				"segments", segs, "bytes", bytes, "disk_free", r.freeDisk, "file_free", r.freeFile,
				"live_bytes", live, "reserve", in.opts.DiskReserve)
		}
		if evictErr == nil {
			left += bytes // the next check sees what a failed pass freed
		}
	}
	// Urgent well before the reserve is reached: an encode that has
	// started at nice 19 stays there, and a host whose CPU others take can
	// leave it a few percent of one while the live rows grow. Appends are
	// held below a quarter of the reserve, resumed above half.
	in.opts.Urgency.set(left < 2*in.opts.DiskReserve)
	switch {
	case left < in.opts.DiskReserve/4:
		in.holdAppends(true, left, live)
	case left >= in.opts.DiskReserve/2:
		in.holdAppends(false, left, live)
	}
	if evictErr != nil {
		return evictErr
	}
	if !b.present && !full && !in.held.Load() && left >= in.opts.DiskReserve && b.size > 0 && r.freeDisk >= 2*b.size {
		return b.fill()
	}
	return nil
}

// evictOldest evicts, from every source, everything older than the newest
// row of the oldest segments that together hold at least excess bytes
// (by receipt time: every source's ts are the one writer's clock). It
// returns the segments and bytes evicted.
func (in *Ingester) evictOldest(ctx context.Context, ids []archive.SourceID, excess int64) (segs, bytes int64, err error) {
	type seg struct {
		lastTS, bytes int64
	}
	var all []seg
	if err := in.opts.Reader.View(ctx, func(tx *archive.ReadTx) error {
		for _, id := range ids {
			sizes, err := tx.SegmentSizes(id)
			if err != nil {
				return err
			}
			for _, s := range sizes {
				all = append(all, seg{s.LastTS, s.Bytes})
			}
		}
		return nil
	}); err != nil {
		return 0, 0, err
	}
	sort.Slice(all, func(i, j int) bool { return all[i].lastTS < all[j].lastTS })
	cutoff := int64(0)
	for _, s := range all {
		if bytes >= excess {
			break
		}
		bytes += s.bytes
		cutoff = s.lastTS + 1
	}
	if cutoff == 0 {
		return 0, 0, nil
	}
	for _, id := range ids {
		// No seal first: this frees room, often on a disk too full to
		// write a segment; a live row older than cutoff waits for its
		// stream's own seal and goes with a later eviction.
		// The archive must fit, whatever a forwarder still needs: it is
		// told first, and counts and logs what its upstreams lose.
		in.evicting(ctx, id, cutoff)
		ev, err := in.evictBefore(ctx, id, cutoff, false)
		segs += ev.Segments
		if err != nil {
			return segs, bytes, err
		}
	}
	return segs, bytes, nil
}

// Compact merges small segments of every stream with at least
// compactMinSegs segments.
func (in *Ingester) Compact(ctx context.Context) error {
	if in.opts.CompactTargetRows < 0 {
		return nil
	}
	var todo []streamKey
	if err := in.opts.Reader.View(ctx, func(tx *archive.ReadTx) error {
		for _, id := range in.sourceIDs() {
			streams, err := tx.Streams(id)
			if err != nil {
				return err
			}
			for _, st := range streams {
				n, span, err := tx.SegmentSpan(id, st)
				if err != nil {
					return err
				}
				if n >= compactMinSegs && in.mayCompact(id, st, span.LastTS) {
					todo = append(todo, streamKey{id, st})
				}
			}
		}
		return nil
	}); err != nil {
		return err
	}
	for _, k := range todo {
		c, err := in.opts.Writer.Compact(ctx, k.source, k.stream, in.opts.CompactTargetRows, in.enc)
		if err != nil {
			return fmt.Errorf("compact source %d stream %s: %w", k.source, k.stream, err)
		}
		if c.Merges > 0 {
			in.log.Debug("compacted", "source", k.source, "stream", k.stream, "before", c.Before, "after", c.After)
		}
	}
	return nil
}

// evictBefore evicts what source id received before cutoff, sealing
// first (when seal is set) every stream of it whose live rows may reach
// back past cutoff, and never evicting a live row.
//
// Evicting live rows by receipt time would cut a format-2 epoch
// (epochs.go): its later rows refer to the labels its first rows anchor,
// so with those gone the rest of the epoch decodes to nothing, a hole in
// the history rather than a shorter one. That happens whenever a live row
// outlives the retention: a --retention.time shorter than --seal.max-age,
// seals held up by a full disk, or a size cap that evicts by the newest
// segment's time. Sealed, the rows go into a segment, which eviction
// takes whole once all of it is older than the cutoff. A seal that fails
// (a full disk is the usual reason) leaves the rows live; then each
// stream that still holds live rows older than cutoff is evicted only
// below its oldest live row (an epoch is sealed whole or not at all, so
// that keeps every epoch whole), and the rest waits for a later pass.
func (in *Ingester) evictBefore(ctx context.Context, id archive.SourceID, cutoff int64, seal bool) (archive.Evicted, error) {
	if seal {
		if err := in.sealOlderThan(ctx, id, time.Unix(0, cutoff)); err != nil {
			if ctx.Err() != nil {
				return archive.Evicted{}, err
			}
			in.log.Warn("sealing the live rows older than the retention failed; evicting only what is sealed below them",
				"source", id, "err", err)
		}
	}
	held, err := in.liveBefore(ctx, id, cutoff)
	if err != nil {
		return archive.Evicted{}, err
	}
	if len(held) == 0 {
		return in.opts.Writer.EvictBefore(ctx, id, cutoff)
	}
	ev, err := in.opts.Writer.EvictStreamsBefore(ctx, id, cutoff, func(s string) bool { _, ok := held[s]; return !ok })
	for s, oldest := range held {
		if err != nil {
			break
		}
		var e archive.Evicted
		e, err = in.opts.Writer.EvictStreamsBefore(ctx, id, oldest, func(t string) bool { return t == s })
		ev.Segments, ev.WALRows, ev.LiveRows, ev.CallerRows = ev.Segments+e.Segments, ev.WALRows+e.WALRows, ev.LiveRows+e.LiveRows, ev.CallerRows+e.CallerRows
	}
	return ev, err
}

// liveBefore maps each stream of source id with live rows received before
// cutoff to the ts of its oldest live row. It reads a snapshot: rows
// committed after it are newer than any cutoff retention computes, and a
// seal since it only makes the answer stricter than it need be.
func (in *Ingester) liveBefore(ctx context.Context, id archive.SourceID, cutoff int64) (map[string]int64, error) {
	var held map[string]int64
	err := in.opts.Reader.View(ctx, func(tx *archive.ReadTx) error {
		spans, err := tx.LiveSpans(id)
		for _, sp := range spans {
			if sp.FirstTS < cutoff {
				if held == nil {
					held = map[string]int64{}
				}
				held[sp.Stream] = sp.FirstTS
			}
		}
		return err
	})
	return held, err
}

// sealOlderThan seals, to the end, each stream of source id whose seal
// account opened before cutoff (an account opens at or before its first
// row, so no stream with rows that old is missed).
func (in *Ingester) sealOlderThan(ctx context.Context, id archive.SourceID, cutoff time.Time) error {
	now := in.opts.Now()
	var streams []string
	in.mu.Lock()
	for k, a := range in.accounts {
		if k.source == id && a.Rows() > 0 && a.Opened().Before(cutoff) {
			streams = append(streams, k.stream)
			a.Rotate(in.opts.Seal, now)
		}
	}
	in.mu.Unlock()
	if len(streams) == 0 {
		return nil
	}
	sort.Strings(streams)
	st := in.sourceByID(id)
	if st == nil {
		return nil
	}
	var buckets []int
	for _, s := range streams {
		if b := st.bucketOf(s); b >= 0 {
			buckets = append(buckets, b)
		}
	}
	// A seal takes closed epochs only: close theirs, so that it takes
	// every row they have now.
	markers, err := in.closeEpochs(ctx, st, buckets, false, nil)
	if err != nil {
		return err
	}
	in.account(id, markers)
	in.log.Info("sealing live rows older than the retention before evicting", "source", id, "streams", len(streams))
	return in.sealToTheEnd(ctx, id, streams)
}
