package archivecmd

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// CompactOptions configures Compact.
type CompactOptions struct {
	// TargetRows is the wal-row count runs of adjacent segments are merged
	// up to; it must be positive.
	TargetRows int64
	// Progress, when set, is called with streams done of streams.
	Progress func(done, total int64)
}

// Compact merges runs of adjacent small segments of every stream (each
// merge in its own transaction, the merged segment re-canonicalized by
// promsample's Merge), then returns the pages the merges freed to the
// filesystem. h is the exclusive handle: a server must not be running.
func Compact(ctx context.Context, h *archive.WriteHandle, opts CompactOptions) (archive.Compacted, error) {
	var total archive.Compacted
	if opts.TargetRows <= 0 {
		return total, fmt.Errorf("archivecmd: compact target rows %d must be positive", opts.TargetRows)
	}
	keys, err := allStreams(ctx, &h.Archive)
	if err != nil {
		return total, err
	}
	enc := &promsample.Encoder{}
	for i, k := range keys {
		if opts.Progress != nil {
			opts.Progress(int64(i), int64(len(keys)))
		}
		c, err := h.CompactStream(ctx, k.src, k.stream, opts.TargetRows, enc)
		total.Before += c.Before
		total.After += c.After
		total.Merges += c.Merges
		if err != nil {
			return total, fmt.Errorf("source %d stream %s: %w", k.src, k.stream, err)
		}
	}
	if opts.Progress != nil {
		opts.Progress(int64(len(keys)), int64(len(keys)))
	}
	if total.Merges > 0 {
		if err := h.IncrementalVacuum(ctx, math.MaxInt32); err != nil {
			return total, err
		}
	}
	return total, nil
}

type streamKey struct {
	src    archive.SourceID
	stream string
}

func allStreams(ctx context.Context, a *archive.Archive) ([]streamKey, error) {
	var keys []streamKey
	err := a.View(ctx, func(tx *archive.ReadTx) error {
		srcs, err := tx.Sources()
		if err != nil {
			return err
		}
		for _, s := range srcs {
			streams, err := tx.Streams(s.ID)
			if err != nil {
				return err
			}
			for _, st := range streams {
				keys = append(keys, streamKey{s.ID, st})
			}
		}
		return nil
	})
	return keys, err
}

// EvictOptions configures Evict.
type EvictOptions struct {
	// Before is the cutoff in receipt time (the archive's row ts, Unix
	// ns), as --retention.time removes: what was received before it goes.
	// A segment holding rows on both sides of it is kept whole, and so are
	// live rows (see liveBefore).
	Before int64
	// Matchers, when set, limit the eviction to the series they all
	// match: each segment wholly before the cutoff that holds such series
	// is rewritten without them (deleted when nothing else remains).
	// Live rows are never rewritten (a row holds many series, and a
	// format-2 row's series are named by earlier rows): live rows received
	// before the cutoff are left as they are and counted in
	// Evicted.LiveKept; once a server has sealed them, evict again.
	Matchers []*labels.Matcher
	// Progress, when set, is called with streams done of streams.
	Progress func(done, total int64)
}

// Evicted reports what Evict removed.
type Evicted struct {
	archive.Evicted
	// Rewritten counts segments rewritten without the matched series.
	Rewritten int64
	// Series and Samples count what the matched eviction removed (float
	// and histogram samples; series per segment they were removed from).
	Series, Samples int64
	// LiveKept counts the live wal rows received before the cutoff that
	// the eviction kept: live rows are neither evicted by time (see
	// liveBefore) nor rewritten.
	LiveKept int64
}

// Evict removes what was received before opts.Before, from every source,
// in one transaction per source (per segment with matchers), then returns
// the freed pages to the filesystem. h is the exclusive handle.
func Evict(ctx context.Context, h *archive.WriteHandle, opts EvictOptions) (Evicted, error) {
	var ev Evicted
	keys, err := allStreams(ctx, &h.Archive)
	if err != nil {
		return ev, err
	}
	if len(opts.Matchers) == 0 {
		srcs := map[archive.SourceID]bool{}
		for _, k := range keys {
			srcs[k.src] = true
		}
		ids := make([]archive.SourceID, 0, len(srcs))
		for id := range srcs {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		held, err := liveBefore(ctx, h, ids, opts.Before, &ev)
		if err != nil {
			return ev, err
		}
		for i, id := range ids {
			if opts.Progress != nil {
				opts.Progress(int64(i), int64(len(ids)))
			}
			if err := h.Update(ctx, func(tx *archive.WriteTx) error {
				// A stream whose live rows reach back past the cutoff is
				// cut at its oldest live row instead: every segment of
				// it below the cutoff is older than that row (live rows
				// lie above the stream's watermark), so the same
				// segments go, and no live row.
				var e archive.Evicted
				var err error
				if hold := held[id]; len(hold) == 0 {
					e, err = tx.EvictBefore(id, opts.Before)
				} else {
					e, err = tx.EvictStreamsBefore(id, opts.Before, func(s string) bool { _, ok := hold[s]; return !ok })
					for s, oldest := range hold {
						if err != nil {
							break
						}
						var f archive.Evicted
						f, err = tx.EvictStreamsBefore(id, oldest, func(t string) bool { return t == s })
						e.Segments, e.WALRows, e.LiveRows, e.CallerRows = e.Segments+f.Segments, e.WALRows+f.WALRows, e.LiveRows+f.LiveRows, e.CallerRows+f.CallerRows
					}
				}
				ev.Segments += e.Segments
				ev.WALRows += e.WALRows
				ev.Evicted.LiveRows += e.LiveRows
				ev.CallerRows += e.CallerRows
				return err
			}); err != nil {
				return ev, fmt.Errorf("source %d: %w", id, err)
			}
		}
	} else {
		for i, k := range keys {
			if opts.Progress != nil {
				opts.Progress(int64(i), int64(len(keys)))
			}
			if err := evictMatching(ctx, h, k, opts, &ev); err != nil {
				return ev, fmt.Errorf("source %d stream %s: %w", k.src, k.stream, err)
			}
		}
	}
	if ev.Segments+ev.WALRows+ev.Rewritten > 0 {
		if err := h.IncrementalVacuum(ctx, math.MaxInt32); err != nil {
			return ev, err
		}
	}
	return ev, nil
}

// evictMatching rewrites the stream's segments wholly before the cutoff
// without the series the matchers select. A rewritten segment keeps its
// seq and its catalog span and row count, so the stream's sealed
// watermark, and with it what is live, does not move. A segment left
// empty is deleted, together with the wal rows at or below its last ts:
// those are shadowed by it (at or below the watermark), and deleting it
// alone could lower the watermark and make them live again.
func evictMatching(ctx context.Context, h *archive.WriteHandle, k streamKey, opts EvictOptions, ev *Evicted) error {
	var metas []archive.StoredSegment
	var liveKept int64
	if err := h.View(ctx, func(tx *archive.ReadTx) error {
		var err error
		if metas, err = tx.SegmentMetas(k.src, k.stream); err != nil {
			return err
		}
		live, err := tx.LiveWAL(k.src, k.stream)
		for _, r := range live {
			if r.TS < opts.Before {
				liveKept++
			}
		}
		return err
	}); err != nil {
		return err
	}
	nameOK := func(name string) bool {
		for _, m := range opts.Matchers {
			if m.Name == labels.MetricName && !m.Matches(name) {
				return false
			}
		}
		return true
	}
	for _, m := range metas {
		if m.LastTS >= opts.Before {
			continue
		}
		if x, err := promsample.ParseIndex(m.Index); err == nil && !slices.ContainsFunc(x.Metrics, nameOK) {
			continue // no metric of it can match
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		err := h.Update(ctx, func(tx *archive.WriteTx) error {
			b, ok, err := tx.SegmentBytes(k.src, k.stream, m.Seq)
			if err != nil || !ok {
				return err
			}
			seg, dropped, samples, err := withoutSeries(k.stream, b, m, opts.Matchers)
			if err != nil || dropped == 0 {
				return err
			}
			ev.Series += dropped
			ev.Samples += samples
			if err := tx.DeleteSegment(k.src, k.stream, m.Seq); err != nil {
				return err
			}
			if seg == nil {
				ev.Segments++
				n, err := tx.PruneWAL(k.src, k.stream, m.LastTS)
				ev.WALRows += n
				return err
			}
			ev.Rewritten++
			return tx.InsertSegment(k.src, k.stream, m.Seq, seg)
		})
		if err != nil {
			return fmt.Errorf("segment %d: %w", m.Seq, err)
		}
	}
	ev.LiveKept += liveKept
	return nil
}

// withoutSeries re-encodes segment b (catalog entry m) without the series
// all matchers select: it returns the new segment (nil when nothing is
// left), how many series it dropped and their samples. The new segment
// claims m's rows and span, because it stands for the same wal rows.
func withoutSeries(stream string, b []byte, m archive.StoredSegment, ms []*labels.Matcher) (*archive.Segment, int64, int64, error) {
	all, err := promsample.ReadSegment(b, promsample.AllTime())
	if err != nil {
		return nil, 0, 0, err
	}
	meta, err := promsample.ReadSegmentMetadata(b)
	if err != nil {
		return nil, 0, 0, err
	}
	var kept []promsample.Series
	var dropped, samples int64
	names := map[string]bool{}
	for _, s := range all {
		if matchAll(ms, s.Labels) {
			dropped++
			samples += int64(len(s.Samples) + len(s.Histograms))
			continue
		}
		kept = append(kept, s)
		names[s.Labels.Get(labels.MetricName)] = true
	}
	if dropped == 0 {
		return nil, 0, 0, nil
	}
	var keptMeta []promsample.Metadata
	for _, md := range meta {
		if names[md.MetricFamily] {
			keptMeta = append(keptMeta, md)
		}
	}
	if len(kept) == 0 {
		return nil, dropped, samples, nil
	}
	rows, err := seriesRows(kept, keptMeta)
	if err != nil {
		return nil, 0, 0, err
	}
	seg, err := (&promsample.Encoder{}).Encode(stream, rows)
	if err != nil {
		return nil, 0, 0, err
	}
	if seg == nil {
		return nil, dropped, samples, nil
	}
	seg.Rows, seg.FirstTS, seg.LastTS = m.Rows, m.FirstTS, m.LastTS
	return seg, dropped, samples, nil
}

// seriesRowSamples bounds the samples one re-encoded row holds, to stay
// well inside promsample.MaxBatchBytes.
const seriesRowSamples = 1 << 20

// seriesRows packs series into self-contained (format-1) rows for the
// Encoder, splitting long series across rows (the encoder merges a series'
// pieces back into one).
func seriesRows(series []promsample.Series, meta []promsample.Metadata) ([]archive.Row, error) {
	var rows []archive.Row
	var b promsample.Batch
	n := 0
	flush := func() error {
		if len(b.Series) == 0 && len(b.Metadata) == 0 {
			return nil
		}
		data, err := promsample.EncodeBatch(&b)
		if err != nil {
			return err
		}
		rows = append(rows, archive.Row{TS: int64(len(rows)), Data: data})
		b, n = promsample.Batch{}, 0
		return nil
	}
	b.Metadata = meta
	for _, s := range series {
		for len(s.Samples)+len(s.Histograms)+len(s.Exemplars) > 0 {
			room := seriesRowSamples - n
			piece := promsample.Series{Labels: s.Labels}
			take := min(room, len(s.Samples))
			piece.Samples, s.Samples = s.Samples[:take], s.Samples[take:]
			room -= take
			take = min(room, len(s.Histograms))
			piece.Histograms, s.Histograms = s.Histograms[:take], s.Histograms[take:]
			room -= take
			take = min(room, len(s.Exemplars))
			piece.Exemplars, s.Exemplars = s.Exemplars[:take], s.Exemplars[take:]
			room -= take
			b.Series = append(b.Series, piece)
			n = seriesRowSamples - room
			if room == 0 {
				if err := flush(); err != nil {
					return nil, err
				}
			}
		}
	}
	return rows, flush()
}

func matchAll(ms []*labels.Matcher, ls labels.Labels) bool {
	for _, m := range ms {
		if !m.Matches(ls.Get(m.Name)) {
			return false
		}
	}
	return true
}

// liveBefore finds, per source, the streams with live rows received before
// cutoff, with the ts of each one's oldest live row, and counts those rows
// in ev.LiveKept. Live rows are never evicted by time: a format-2 row's
// series are named by the rows of its epoch before it, so deleting a
// prefix of a stream's live rows could leave the rest undecodable. A
// server seals them (it seals the live tail it inherits at start); then
// they can go.
func liveBefore(ctx context.Context, h *archive.WriteHandle, ids []archive.SourceID, cutoff int64, ev *Evicted) (map[archive.SourceID]map[string]int64, error) {
	held := map[archive.SourceID]map[string]int64{}
	err := h.View(ctx, func(tx *archive.ReadTx) error {
		for _, id := range ids {
			spans, err := tx.LiveSpans(id)
			if err != nil {
				return err
			}
			for _, sp := range spans {
				if sp.FirstTS >= cutoff {
					continue
				}
				n, err := tx.LiveRowsBefore(id, sp.Stream, cutoff)
				if err != nil {
					return err
				}
				if held[id] == nil {
					held[id] = map[string]int64{}
				}
				held[id][sp.Stream] = sp.FirstTS
				ev.LiveKept += n
			}
		}
		return nil
	})
	return held, err
}
