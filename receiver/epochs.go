package receiver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// Epochs: how the ingester names series once per seal period.
//
// Rows are anchored (promsample's row format 2): each stream of a source
// writes in an epoch, and the first row of the epoch holding a series
// carries its labels; later rows name it by its local id. The rules the
// format relies on, and how the ingester keeps them:
//
//  1. Epochs are sequential in a stream. A request encodes its rows and
//     hands them to the writer (AppendQueued, which returns once the
//     writer's channel took them) under sourceState.mu's read lock;
//     closing an epoch takes the write lock, appends a close marker and
//     starts the next epoch. The writer stamps rows in the order its
//     channel took them, so every row of an epoch has a lower ts than the
//     marker that closes it, and every row of the next epoch a higher one.
//     The lock is never held across a commit's fsync: only the enqueue.
//  2. A row names a series by local id only once the row anchoring it has
//     committed. An anchor becomes referable (the series' anchor stamp in
//     the index, epochState.stamp<<32 | local id) after its request's
//     commit was acknowledged; a request that runs meanwhile anchors the
//     series again (the epoch then has two ids for it, which readers
//     resolve to one label set). A request that failed leaves no stamp,
//     so no row can name an anchor that never committed.
//  3. Epoch ids are random 64-bit values, never continued across
//     restarts. At start the ingester appends a close marker to every
//     stream with live rows, which closes whatever epoch a crashed
//     predecessor left open (a marker closes every epoch before it).
//
// An epoch ends at every seal (SealDue, SealAll close the epochs of the
// streams they seal first), so the Encoder, which seals only closed
// epochs, takes every row the seal asked for and the live tail above the
// new watermark starts at the next epoch's first row; and when it reaches
// the seal policy's bytes, or its rows unless it is thin (see
// minSamplesPerSeries) (seals that cannot keep up), so that an epoch always fits in one
// bounded seal: cmd bounds a seal at twice the policy's bytes
// (archive.WriterOptions.MaxSealBytes), which an epoch reaches only by the
// rows of requests in flight when it filled.

// epochState is one stream's current epoch.
type epochState struct {
	id      uint64        // written in its rows
	stamp   uint32        // process-unique, for the index's anchor stamps
	next    atomic.Uint32 // next local id
	rows    atomic.Int64  // data rows committed in it
	bytes   atomic.Int64
	samples atomic.Int64 // samples and histograms committed in it
}

func (in *Ingester) newEpoch() *epochState {
	s := in.stamps.Add(1)
	if s == 0 {
		s = in.stamps.Add(1)
	}
	return &epochState{id: rand.Uint64(), stamp: s}
}

// sourceState is the ingester's view of one source.
type sourceState struct {
	id      archive.SourceID
	buckets int
	names   []string // stream names by bucket
	// mu orders epochs against rows (rule 1 above): read-locked from a
	// request's encode through its enqueue, write-locked to close epochs.
	mu     sync.RWMutex
	epochs []*epochState // by bucket; replaced under mu's write lock
}

func (in *Ingester) newSourceState(id archive.SourceID, buckets int) *sourceState {
	st := &sourceState{id: id, buckets: buckets, names: promsample.StreamsFor(buckets), epochs: make([]*epochState, buckets)}
	for b := range st.epochs {
		st.epochs[b] = in.newEpoch()
	}
	return st
}

// bucketOf returns the bucket of a stream name of st, or -1.
func (st *sourceState) bucketOf(stream string) int {
	for b, n := range st.names {
		if n == stream {
			return b
		}
	}
	return -1
}

// closeEpochs closes the epochs of the given buckets of st that hold rows
// (all of them with force), appending their close markers in one append,
// and starts new ones. It returns once the markers committed, with them:
// a marker is a row like any other to the seal that takes it, and the
// caller counts them where they belong (Ingester.account, or the seal
// about to take them). keep, when not nil, spares the buckets it returns
// true for (called under st.mu's write lock).
func (in *Ingester) closeEpochs(ctx context.Context, st *sourceState, buckets []int, force bool, keep func(b int, ep *epochState) bool) ([]archive.Row, error) {
	st.mu.Lock()
	var rows []archive.Row
	for _, b := range buckets {
		ep := st.epochs[b]
		if !force && ep.rows.Load() == 0 && ep.next.Load() == 0 {
			continue
		}
		if keep != nil && keep(b, ep) {
			continue
		}
		rows = append(rows, archive.Row{Stream: st.names[b], Data: promsample.AppendEpochClose(nil, ep.id)})
		st.epochs[b] = in.newEpoch()
	}
	if len(rows) == 0 {
		st.mu.Unlock()
		return nil, nil
	}
	q, err := in.opts.Writer.AppendQueued(ctx, []archive.SourceRows{{Source: st.id, Rows: rows}}, true)
	st.mu.Unlock()
	if err != nil {
		// The epochs still ended: their next rows (of the new epochs)
		// close them as well as a marker would.
		return nil, fmt.Errorf("closing epochs of source %d: %w", st.id, err)
	}
	if _, err := q.Wait(ctx); err != nil {
		return nil, fmt.Errorf("closing epochs of source %d: %w", st.id, err)
	}
	return rows, nil
}

// closeOutgrown closes the epochs of st that outgrew a seal (by bucket),
// those that are still current: requests committing beside the one that
// found an epoch outgrown find it too, and the first to close it started
// the next, which has outgrown nothing (closed, the anchors of the
// requests already in it would be sent again at once).
func (in *Ingester) closeOutgrown(ctx context.Context, st *sourceState, outgrown map[int]*epochState) error {
	buckets := make([]int, 0, len(outgrown))
	for b := range outgrown {
		buckets = append(buckets, b)
	}
	slices.Sort(buckets)
	notOutgrown := func(b int, ep *epochState) bool { return ep != outgrown[b] }
	markers, err := in.closeEpochs(ctx, st, buckets, false, notOutgrown)
	in.account(st.id, markers)
	return err
}

// closeAllEpochs closes the epochs of every stream of st that hold rows.
func (in *Ingester) closeAllEpochs(ctx context.Context, st *sourceState) error {
	all := make([]int, st.buckets)
	for b := range all {
		all[b] = b
	}
	markers, err := in.closeEpochs(ctx, st, all, false, nil)
	in.account(st.id, markers)
	return err
}
