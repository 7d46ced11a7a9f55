package archive

import "sync/atomic"

// Knowing, without SQL, that the segments table has not changed.
//
// A reader that lists a stream's segments (the catalog a question starts
// from) can keep the list only while it knows the table is as it was.
// SQLite tells a connection that something was committed (data_version),
// not what: under ingest every commit, a few a second, is wal rows, and a
// reader listed every stream's segments again for every question (at a
// million series, a quarter of a label-values question under a light
// ingest, and ~4 ms of it over an hour's 146 segments a source).
//
// The writer knows what it commits. Its segmentsEpoch counts its commits
// that insert or delete segments, twice each: once just before COMMIT (the
// count is odd while one is in flight) and once after COMMIT returns,
// whether it succeeded or not. A read handle given the writer
// (ReadOptions.Writer) loads the count before its snapshot starts and
// after, and when both loads agree and are even, no such commit was in
// flight at either and none began between them, so every one the count
// covers is in the snapshot and none after it is:
//
//   - a commit counted at the first load had finished (even count) before
//     the snapshot started, so the snapshot sees it;
//   - a commit not counted at the second load had not begun when the
//     snapshot had already started, so the snapshot does not see it.
//
// Two snapshots with the same epoch therefore hold the same segments
// rows, and a list read in one is the list of the other (ReadTx.
// SegmentsEpoch). This rests on the writer being the only one that
// changes segments, which the archive's lock holds to while it runs (the
// operator commands that change segments refuse to run beside it,
// ErrInUse); a handle not given a writer never claims an epoch.
type segmentsEpoch struct{ n atomic.Uint64 }

// begin marks a commit that changes segments as in flight (odd count);
// end, called once COMMIT has returned, marks it done.
func (e *segmentsEpoch) begin() { e.n.Add(1) }
func (e *segmentsEpoch) end()   { e.n.Add(1) }

// SegmentsEpoch returns the snapshot's segments epoch: equal epochs of a
// handle's snapshots mean equal segments rows, and a later change makes a
// greater one. ok is false when the handle follows no writer
// (ReadOptions.Writer) or a change of the segments was in flight as the
// snapshot started.
func (tx *ReadTx) SegmentsEpoch() (epoch uint64, ok bool) {
	return tx.segs.epoch, tx.segs.ok
}

// changeSegments runs a statement that inserts or deletes segments rows,
// and marks the transaction as one that does, so that its commit moves the
// writer's segments epoch (update).
func (tx *WriteTx) changeSegments(what, query string, args ...any) (int64, error) {
	tx.segsChanged = true
	return tx.exec(what, query, args...)
}
