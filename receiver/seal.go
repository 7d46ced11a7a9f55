package receiver

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// SealDue seals every stream whose account says it is due. A seal the
// writer bounds (archive.WriterOptions.MaxSealRows, MaxSealBytes) leaves
// the stream's newer rows live; they are carried into its account, and a
// stream still due after that is sealed again in the next round, up to
// maxSealRounds rounds per call.
func (in *Ingester) SealDue(ctx context.Context) {
	for range maxSealRounds {
		if !in.sealDueRound(ctx) || ctx.Err() != nil {
			return
		}
	}
}

// minSamplesPerSeries: a stream with more than manySeries series in its
// epoch that is due only by its row count is sealed once the epoch holds
// this many samples per series. At a million series a stream's 900 rows
// hold ~2 samples of each of its ~125 k series, and a segment, like the
// live tail, costs per series before it costs per sample (labels in its
// columns and table, a seal's sort); so at high cardinality a seal waits
// for a segment's worth of samples, within the policy's bytes and age.
// At 10 k series 900 rows hold ~180 per series and nothing changes.
const (
	minSamplesPerSeries = 8
	manySeries          = 4096
)

// thin reports whether epoch ep holds many series with few samples each.
func (ep *epochState) thin() bool {
	n := int64(ep.next.Load())
	return n > manySeries && ep.samples.Load() < minSamplesPerSeries*n
}

// worthSealing reports whether stream k, due by account a, should seal
// now (called with in.mu held).
func (in *Ingester) worthSealing(k streamKey, a *archive.SegmentAccount, now time.Time) bool {
	maxBytes, _, maxAge := a.Targets()
	if a.Bytes() >= maxBytes || now.Sub(a.Opened()) >= maxAge {
		return true
	}
	st := in.byID[k.source]
	if st == nil {
		return true
	}
	b := st.bucketOf(k.stream)
	if b < 0 {
		return true
	}
	st.mu.RLock()
	ep := st.epochs[b]
	st.mu.RUnlock()
	return !ep.thin()
}

// SealBacklog seals round after round until no stream is due, or budget
// has passed. A restart calls it before indexing the archive for reads:
// the rows an earlier run left are due at once, a bounded seal
// (MaxSealRows) takes a few hundred of them, and SealDue's rounds stop at
// maxSealRounds; the rest, sealed by Run's ticker after the server said
// it was ready, left segments that the first question about them had to
// index itself (240 ms for a temperature selector after a restart at 1 M
// series, 4 ms the second time).
func (in *Ingester) SealBacklog(ctx context.Context, budget time.Duration) {
	deadline := time.Now().Add(budget)
	for in.sealDueRound(ctx) && ctx.Err() == nil && time.Now().Before(deadline) {
	}
}

// maxSealRounds bounds the rounds of one SealDue, so that a writer behind
// the appends does not keep Run from retention and compaction.
const maxSealRounds = 4

// dueStream is a stream's account as it stood when it fell due.
type dueStream struct {
	stream      string
	rows, bytes int64
	opened      time.Time
}

// sealDueRound seals the streams due now and reports whether one of them is
// due again (a bounded seal left enough rows behind).
func (in *Ingester) sealDueRound(ctx context.Context) bool {
	now := in.opts.Now()
	due := map[archive.SourceID][]dueStream{}
	// While appends are held for them (sealroom.go), every stream with
	// live rows seals: nothing else makes room.
	held := in.held.Load()
	var taken int64
	in.mu.Lock()
	for k, a := range in.accounts {
		if (held && a.Rows() > 0) || (a.Due(now) && in.worthSealing(k, a, now)) {
			due[k.source] = append(due[k.source], dueStream{k.stream, a.Rows(), a.Bytes(), a.Opened()})
			taken += a.Bytes()
			a.Rotate(in.opts.Seal, now)
		}
	}
	// Still live until sealed: liveBytes counts them meanwhile.
	in.sealingBytes.Add(taken)
	in.mu.Unlock()
	if held && len(due) > 0 {
		defer in.wakeDiskCheck() // the room may be back: resume appends
	}
	again := false
	for src, streams := range due {
		slices.SortFunc(streams, func(a, b dueStream) int { return strings.Compare(a.stream, b.stream) })
		// A seal takes closed epochs only (epochs.go): close theirs first.
		if st := in.sourceByID(src); st != nil {
			var buckets []int
			for _, d := range streams {
				if b := st.bucketOf(d.stream); b >= 0 {
					buckets = append(buckets, b)
				}
			}
			markers, err := in.closeEpochs(ctx, st, buckets, false, nil)
			if err != nil && ctx.Err() == nil {
				in.log.Warn("closing epochs before a seal", "source", src, "err", err)
			}
			// The markers go with the rows taken from the account: the
			// seal that follows takes them (or carries them with the
			// rest it leaves).
			for _, m := range markers {
				for i := range streams {
					if streams[i].stream == m.Stream {
						streams[i].rows++
						streams[i].bytes += int64(len(m.Data))
						in.sealingBytes.Add(int64(len(m.Data))) // as taken was
					}
				}
			}
		}
		// One stream per seal: a seal holds its streams' live rows in memory
		// while they are encoded, and streams that rotated together fall due
		// together (8 x 900 rows were a third of the peak heap).
		for _, d := range streams {
			sealed, err := in.opts.Writer.SealWait(ctx, src, []string{d.stream})
			// What it left live goes back to the account (carry, recount).
			in.sealingBytes.Add(-d.bytes)
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, archive.ErrCannotCommit) { // an outage is logged by the writer
					in.log.Warn("seal failed", "source", src, "stream", d.stream, "err", err)
				}
				// The rows stay live: count them toward the next seal again,
				// or a stream whose seals failed for a while (a full disk)
				// would carry that backlog unsealed for good.
				in.recount(streamKey{src, d.stream}, d)
				continue
			}
			if in.carry(streamKey{src, d.stream}, d, sealed) {
				again = true
			}
		}
	}
	// One prune for the round, when the writer defers them
	// (archive.WriterOptions.DeferPrunes): the streams' rows share pages,
	// which one transaction rewrites or frees once.
	if len(due) > 0 {
		if err := in.opts.Writer.Prune(ctx); err != nil && ctx.Err() == nil {
			in.log.Warn("prune failed", "err", err)
		}
	}
	return again
}

// carry counts the rows of d that its seal left live into the stream's
// account, and reports whether that made the stream due again. A seal takes
// the stream's oldest live rows, those d counted first; rows committed
// since d was taken are already in the account.
func (in *Ingester) carry(k streamKey, d dueStream, sealed []archive.Sealed) bool {
	var n int64
	for _, s := range sealed {
		n += s.Rows
	}
	left := d.rows - n
	if n == 0 || left <= 0 {
		return false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	a := in.accounts[k]
	if a == nil {
		return false
	}
	a.Carry(left, d.bytes*left/d.rows, d.opened)
	return a.Due(in.opts.Now())
}

// recount counts the rows of d, whose seal failed, into the stream's
// account again: they are still live, and the oldest.
func (in *Ingester) recount(k streamKey, d dueStream) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if a := in.accounts[k]; a != nil {
		a.Carry(d.rows, d.bytes, d.opened)
	}
}

// SealAll seals every stream that has live rows (operators, tests).
func (in *Ingester) SealAll(ctx context.Context) error {
	now := in.opts.Now()
	due := map[archive.SourceID][]string{}
	in.mu.Lock()
	for k, a := range in.accounts {
		due[k.source] = append(due[k.source], k.stream)
		a.Rotate(in.opts.Seal, now)
	}
	in.mu.Unlock()
	for src, streams := range due {
		sort.Strings(streams)
		if st := in.sourceByID(src); st != nil {
			if err := in.closeAllEpochs(ctx, st); err != nil {
				return err
			}
		}
		if err := in.sealToTheEnd(ctx, src, streams); err != nil {
			return err
		}
	}
	return nil
}

// sealToTheEnd seals the streams of source src until none has live rows
// left: a bounded seal (archive.WriterOptions.MaxSealRows) leaves rows
// live, so the streams that sealed are sealed again. It reuses streams.
func (in *Ingester) sealToTheEnd(ctx context.Context, src archive.SourceID, streams []string) error {
	for len(streams) > 0 {
		sealed, err := in.opts.Writer.SealWait(ctx, src, streams)
		if err != nil {
			return err
		}
		streams = streams[:0]
		for _, s := range sealed {
			streams = append(streams, s.Stream)
		}
	}
	return nil
}
