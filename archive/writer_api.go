package archive

import "context"

// Path is the archive's file name.
func (w *Writer) Path() string { return w.path }

// Err returns the stored failure once the writer has stopped on one, else nil.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failure
}

// Health reports whether the writer can commit now: nil while it can; a
// *CannotCommitError (ErrCannotCommit) while its writes fail with a
// transient error and it keeps trying (a full disk, EIO); the stored
// *WriterError (ErrWriterStopped) once it stopped on a failure; ErrClosed
// once it was closed. A server answers "not ready" while it is not nil.
func (w *Writer) Health() error {
	w.mu.Lock()
	failure, outage := w.failure, w.outage
	w.mu.Unlock()
	switch {
	case failure != nil:
		return failure
	case outage != nil:
		return outage
	}
	select {
	case <-w.done:
		return ErrClosed
	default:
		return nil
	}
}

// DroppedOutOfOrder is how many rows of source were dropped for being at or
// below their stream's sealed watermark.
func (w *Writer) DroppedOutOfOrder(source SourceID) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dropped[source]
}

// stoppedErr is what a call gets once the loop has exited.
func (w *Writer) stoppedErr() error {
	if err := w.Err(); err != nil {
		return err
	}
	return ErrClosed
}

// send hands msg to the loop, blocking while it is busy (backpressure).
func (w *Writer) send(ctx context.Context, msg message) error {
	select {
	case <-w.done:
		return w.stoppedErr()
	default:
	}
	select {
	case w.reqs <- msg:
		return nil
	case <-w.done:
		return w.stoppedErr()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// call sends msg and waits for its reply.
func call[T any](ctx context.Context, w *Writer, msg message, reply chan T) (T, error) {
	var zero T
	if err := w.send(ctx, msg); err != nil {
		return zero, err
	}
	select {
	case r := <-reply:
		return r, nil
	case <-w.done:
		select { // the loop may have replied just before it exited
		case r := <-reply:
			return r, nil
		default:
		}
		return zero, w.stoppedErr()
	case <-ctx.Done():
		return zero, ctx.Err() // the message stands: invariant 4
	}
}

type result[T any] struct {
	v   T
	err error
}

func callErr[T any](ctx context.Context, w *Writer, msg message, reply chan result[T]) (T, error) {
	r, err := call(ctx, w, msg, reply)
	if err != nil {
		return r.v, err
	}
	return r.v, r.err
}

// Messages. Each type is applied by the loop; reply channels have capacity 1.
type message interface{ isMessage() }

type (
	msgAddSource struct {
		spec  SourceSpec
		uuid  string
		reply chan result[*Source]
	}
	msgResume struct {
		source SourceID
		anchor int64
		reply  chan result[*Source]
	}
	msgAppend struct {
		ticks []SourceRows
		stamp bool
		reply chan AppendResult // nil: fire and forget
	}
	msgSeal struct {
		source  SourceID
		streams []string
		reply   chan result[[]Sealed] // nil: fire and forget
	}
	msgEvict struct {
		source SourceID
		cutoff int64
		remove func(stream string) bool // nil: the whole source
		reply  chan result[Evicted]
	}
	msgPatch struct {
		source SourceID
		patch  map[string]string
		reply  chan result[struct{}] // nil: fire and forget
	}
	msgClockOffset struct {
		source       SourceID
		ts, offsetNS int64
	}
	msgSync     struct{ reply chan struct{} }
	msgFinalize struct {
		source       SourceID
		ts, offsetNS int64
		reply        chan result[struct{}]
	}
	// A compaction's reads and commits (Writer.Compact); its merges run on
	// the caller's goroutine, between them.
	msgCompactView struct {
		fn    func(*ReadTx) error
		reply chan result[struct{}]
	}
	msgCompactTxn struct {
		fn    func(*WriteTx) error
		reply chan result[struct{}]
	}
	msgReclaim    struct{ reply chan struct{} }
	msgCheckpoint struct{ reply chan result[struct{}] }
	msgPrune      struct{}
	msgShutdown   struct{}
)

func (msgAddSource) isMessage()   {}
func (msgResume) isMessage()      {}
func (msgAppend) isMessage()      {}
func (msgSeal) isMessage()        {}
func (msgEvict) isMessage()       {}
func (msgPatch) isMessage()       {}
func (msgClockOffset) isMessage() {}
func (msgSync) isMessage()        {}
func (msgFinalize) isMessage()    {}
func (msgCompactView) isMessage() {}
func (msgCompactTxn) isMessage()  {}
func (msgReclaim) isMessage()     {}
func (msgCheckpoint) isMessage()  {}
func (msgPrune) isMessage()       {}
func (msgShutdown) isMessage()    {}

// SourceRows is one source's rows in a tick.
type SourceRows struct {
	Source SourceID
	Rows   []Row
}

// StreamResult reports what an append did with one (source, stream).
type StreamResult struct {
	Source    SourceID
	Stream    string
	Committed int
	Dropped   int   // out of order, below the source's floor, or lost with a failed tick
	Err       error // why rows were lost to a failure (nil for out-of-order drops)
}

// AppendResult reports an AppendWait, per (source, stream) in the order
// they first appear in the tick.
type AppendResult struct {
	Streams []StreamResult
}

// Dropped is the number of rows the archive did not commit.
func (r AppendResult) Dropped() int {
	n := 0
	for _, s := range r.Streams {
		n += s.Dropped
	}
	return n
}

// Err returns the first failure that cost rows, or nil.
func (r AppendResult) Err() error {
	for _, s := range r.Streams {
		if s.Err != nil {
			return s.Err
		}
	}
	return nil
}

// Sealed describes a segment a seal wrote.
type Sealed struct {
	Stream string
	Seq    int64
	SegmentMeta
}

// AddSource adds a source (labels, metadata, clock anchor) and returns its
// handle. An empty uuid mints a fresh v4 uuid from SQLite's randomblob.
func (w *Writer) AddSource(ctx context.Context, spec SourceSpec, uuid string) (*Source, error) {
	reply := make(chan result[*Source], 1)
	return callErr(ctx, w, msgAddSource{spec: spec, uuid: uuid, reply: reply}, reply)
}

// ResumeSource continues a source written by an earlier session. Its floor
// becomes the newest row it holds (segments and live wal): rows at or below
// it are refused as TimelineBackwards, and so is an anchor at or below it.
func (w *Writer) ResumeSource(ctx context.Context, id SourceID, anchor int64) (*Source, error) {
	reply := make(chan result[*Source], 1)
	return callErr(ctx, w, msgResume{source: id, anchor: anchor, reply: reply}, reply)
}

// Append hands a tick (rows of many sources, committed in ONE transaction)
// to the writer and returns once it is queued, not committed. Use
// AppendWait to learn what was committed. The writer owns the rows' Data
// from now on.
func (w *Writer) Append(ctx context.Context, ticks []SourceRows) error {
	return w.send(ctx, msgAppend{ticks: nonEmptyTicks(ticks)})
}

// AppendWait commits a tick in one transaction and reports, per source and
// stream, how many rows were committed and how many dropped. A server must
// acknowledge only rows reported committed.
//
// With stamp, the writer assigns each row's TS itself (the input TS is
// ignored and overwritten): the clock's Unix nanoseconds, raised to one
// above the newest ts the stream holds, so ts is strictly increasing per
// stream and always above its sealed watermark. The rows are the writer's
// until AppendWait returns.
func (w *Writer) AppendWait(ctx context.Context, ticks []SourceRows, stamp bool) (AppendResult, error) {
	reply := make(chan AppendResult, 1)
	r, err := call(ctx, w, msgAppend{ticks: nonEmptyTicks(ticks), stamp: stamp, reply: reply}, reply)
	if err != nil {
		return r, err
	}
	return r, nil
}

func nonEmptyTicks(ticks []SourceRows) []SourceRows {
	out := ticks[:0:0]
	for _, t := range ticks {
		if len(t.Rows) > 0 {
			out = append(out, t)
		}
	}
	return out
}

// Seal asks the writer to seal streams of source (fire and forget).
func (w *Writer) Seal(ctx context.Context, source SourceID, streams []string) error {
	return w.send(ctx, msgSeal{source: source, streams: streams})
}

// SealWait seals streams of source and reports the segments written.
func (w *Writer) SealWait(ctx context.Context, source SourceID, streams []string) ([]Sealed, error) {
	reply := make(chan result[[]Sealed], 1)
	return callErr(ctx, w, msgSeal{source: source, streams: streams, reply: reply}, reply)
}

// EvictBefore runs retention for a whole source through the writer.
func (w *Writer) EvictBefore(ctx context.Context, source SourceID, cutoff int64) (Evicted, error) {
	reply := make(chan result[Evicted], 1)
	return callErr(ctx, w, msgEvict{source: source, cutoff: cutoff, reply: reply}, reply)
}

// EvictStreamsBefore runs retention for the streams remove selects.
func (w *Writer) EvictStreamsBefore(ctx context.Context, source SourceID, cutoff int64, remove func(stream string) bool) (Evicted, error) {
	reply := make(chan result[Evicted], 1)
	return callErr(ctx, w, msgEvict{source: source, cutoff: cutoff, remove: remove, reply: reply}, reply)
}

// PatchMetadata merges patch into a source's metadata, in order with the
// ticks around it (fire and forget; a failure is logged, never fatal).
func (w *Writer) PatchMetadata(ctx context.Context, source SourceID, patch map[string]string) error {
	return w.send(ctx, msgPatch{source: source, patch: patch})
}

// ClockOffset records a clock observation of source (fire and forget).
func (w *Writer) ClockOffset(ctx context.Context, source SourceID, ts, offsetNS int64) error {
	return w.send(ctx, msgClockOffset{source: source, ts: ts, offsetNS: offsetNS})
}

// Sync waits until everything sent before it has been applied.
func (w *Writer) Sync(ctx context.Context) error {
	reply := make(chan struct{}, 1)
	_, err := call(ctx, w, msgSync{reply: reply}, reply)
	return err
}

// Finalize records a last clock observation and marks the source complete.
func (w *Writer) Finalize(ctx context.Context, source SourceID, ts, offsetNS int64) error {
	reply := make(chan result[struct{}], 1)
	_, err := callErr(ctx, w, msgFinalize{source: source, ts: ts, offsetNS: offsetNS, reply: reply}, reply)
	return err
}

// Compact merges runs of adjacent small segments of one stream up to
// targetRows rows each, one transaction per merge. The segments are read
// and each merge is committed by the writer goroutine, but the merges run
// on the caller's: at a million series a merge takes a second or more, and
// appends must not wait for it. A run that changed between its read and
// its commit (retention evicted part of it, another compaction merged it)
// is left as it now is.
func (w *Writer) Compact(ctx context.Context, source SourceID, stream string, targetRows int64, merger SegmentMerger) (Compacted, error) {
	read := func(fn func(*ReadTx) error) error {
		reply := make(chan result[struct{}], 1)
		_, err := callErr(ctx, w, msgCompactView{fn: fn, reply: reply}, reply)
		return err
	}
	txn := func(fn func(*WriteTx) error) error {
		reply := make(chan result[struct{}], 1)
		_, err := callErr(ctx, w, msgCompactTxn{fn: fn, reply: reply}, reply)
		return err
	}
	c, err := compactStream(ctx, read, txn, source, stream, targetRows, merger)
	w.stats.compactions.Add(int64(c.Merges))
	if c.Merges > 0 {
		reply := make(chan struct{}, 1)
		if _, rerr := call(ctx, w, msgReclaim{reply: reply}, reply); err == nil {
			err = rerr
		}
	}
	return c, err
}

// Checkpoint runs a passive checkpoint now.
func (w *Writer) Checkpoint(ctx context.Context) error {
	reply := make(chan result[struct{}], 1)
	_, err := callErr(ctx, w, msgCheckpoint{reply: reply}, reply)
	return err
}

// Prune deletes, in one transaction, the wal rows of every committed seal
// whose prune was deferred (WriterOptions.DeferPrunes). Fire and forget.
func (w *Writer) Prune(ctx context.Context) error {
	return w.send(ctx, msgPrune{})
}

// Close stops the writer after everything queued before it, reclaims free
// pages when every source it opened was finalized, and closes the file: with
// no other connection open, one file remains. It returns the stored failure
// if the writer had stopped on one. Idempotent.
func (w *Writer) Close() error {
	w.closeOnce.Do(func() {
		select {
		case w.reqs <- msgShutdown{}:
		case <-w.done:
		}
		<-w.done
		w.closeErr = w.Err()
	})
	return w.closeErr
}

// Source is a handle on one source of a Writer.
type Source struct {
	w     *Writer
	id    SourceID
	uuid  string
	floor int64 // newest row of the previous session; valid when hasFloor
	hasFl bool
}

// ID is the source's row id.
func (s *Source) ID() SourceID { return s.id }

// UUID is the source's identity.
func (s *Source) UUID() string { return s.uuid }

// Floor is the newest ts of the previous session of a resumed source.
func (s *Source) Floor() (int64, bool) { return s.floor, s.hasFl }

// Writer returns the writer the handle belongs to.
func (s *Source) Writer() *Writer { return s.w }

// Append queues rows of this source (fire and forget). On a resumed source
// a row at or below the floor is refused here, synchronously, before
// anything is sent.
func (s *Source) Append(ctx context.Context, rows ...Row) error {
	if s.hasFl {
		for _, r := range rows {
			if r.TS <= s.floor {
				return &TimelineBackwardsError{Source: s.id, TS: r.TS, Floor: s.floor}
			}
		}
	}
	return s.w.Append(ctx, []SourceRows{{Source: s.id, Rows: rows}})
}

// Seal queues a seal of streams.
func (s *Source) Seal(ctx context.Context, streams ...string) error {
	return s.w.Seal(ctx, s.id, streams)
}

// Sync waits for everything queued before it.
func (s *Source) Sync(ctx context.Context) error { return s.w.Sync(ctx) }

// Finalize marks the source complete with a last clock observation.
func (s *Source) Finalize(ctx context.Context, ts, offsetNS int64) error {
	return s.w.Finalize(ctx, s.id, ts, offsetNS)
}

// DroppedOutOfOrder is how many of this source's rows were dropped below
// a sealed watermark.
func (s *Source) DroppedOutOfOrder() int64 { return s.w.DroppedOutOfOrder(s.id) }
