package receiver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// SourceLabel is the label that names a source in the archive's catalog.
const SourceLabel = "source"

// MetadataKeyStreamBuckets is the sources.metadata key recording how many
// sample streams the source's series are spread over (promsample.StreamFor).
const MetadataKeyStreamBuckets = "stream_buckets"

// IngestOptions configures an Ingester. The zero value of every field but
// Writer and Reader means its default.
type IngestOptions struct {
	Writer *archive.Writer  // the archive's one writer; required
	Reader *archive.Archive // a read handle on the same file; required
	// Buckets is how many sample streams a source's series are spread over
	// by metric name (promsample.StreamFor); 0 means the default.
	Buckets int
	// Seal is the seal policy consulted per (source, stream).
	Seal archive.SealPolicy
	// Retention removes data received longer ago than this; 0 keeps all.
	Retention time.Duration
	// RetentionBytes caps the archive's size by evicting the oldest
	// segments; 0 means no cap.
	RetentionBytes int64
	// CompactTargetRows is the row count compaction merges segments up to;
	// 0 means DefaultCompactTargetRows, negative disables compaction.
	CompactTargetRows int64
	// WriteTimeout bounds how long a request waits for the writer before it
	// is answered 503; 0 means 30 s.
	WriteTimeout time.Duration
	// Parallelism is how many requests are encoded into rows at once, each
	// with a label cache of its own; 0 means GOMAXPROCS.
	Parallelism int
	// Now is the clock; nil means time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// DefaultCompactTargetRows: a merged segment holds up to this many wal rows
// (requests' shares). 400 small segments read 18x slower than one; merging
// toward a few thousand rows keeps a day's segments per stream in the tens.
const DefaultCompactTargetRows = 8192

// Maintenance cadences.
const (
	sealCheckEvery   = 250 * time.Millisecond
	retentionEvery   = time.Minute
	compactionEvery  = 5 * time.Minute
	compactMinSegs   = 4 // a stream is compacted once it has this many segments
	defaultWriteWait = 30 * time.Second
)

// Ingester is the Sink that routes remote-written series into the archive:
// each request's data goes to its source (the sender, named by the
// handler), split over a few streams by metric name, and is committed in ONE
// writer transaction with writer-assigned, strictly increasing receipt
// timestamps (so no acknowledged sample is ever dropped for lateness: a
// row's ts is never at or below its stream's sealed watermark, whatever the
// samples' own timestamps are). It also runs the background work: sealing
// by policy, compaction and retention, all through the writer.
type Ingester struct {
	opts IngestOptions
	enc  *promsample.Encoder
	log  *slog.Logger

	mu      sync.Mutex
	sources map[string]archive.SourceID // by name
	// buckets is each source's stream bucket count, fixed when the source
	// was created (sources.metadata "stream_buckets"): readers prune streams
	// by it, so a source must never be written with another count.
	buckets  map[archive.SourceID]int
	accounts map[streamKey]*archive.SegmentAccount

	// scratch lends rowScratches, each with its encoder's label cache, at
	// most IngestOptions.Parallelism at a time: that bounds the caches'
	// memory.
	scratch *freeList[*rowScratch]
	// rowBufs holds the byte slices of committed rows for the next
	// request's rows to be encoded into.
	rowBufs bufStack
}

func (in *Ingester) getScratch() *rowScratch { return in.scratch.get() }

func (in *Ingester) putScratch(sc *rowScratch) {
	sc.release()
	in.scratch.put(sc)
}

// rowScratch is what encoding one request's rows reuses: the row encoder
// and the per-stream split. Borrowed for one Write; nothing kept from it
// outlives the call (rows are copied out by the encoder).
type rowScratch struct {
	enc    promsample.BatchEncoder
	bucket []uint16              // per series: its bucket
	series []promsample.Series   // series grouped by bucket
	meta   []promsample.Metadata // metadata grouped by bucket
	count  []int                 // per bucket: series, then start offsets
	mcount []int
	names  []string // StreamsFor(len(count))
}

// split groups a request's series and metadata by stream exactly as
// promsample.SplitBatch does (xxhash64 of the metric name mod buckets, in
// bucket order, empty streams skipped), into the scratch's reused slices:
// SplitBatch's per-bucket appends were a fifth of the bytes allocated.
func (sc *rowScratch) split(series []promsample.Series, meta []promsample.Metadata, buckets int) []promsample.StreamBatch {
	if len(sc.names) != buckets {
		sc.names = promsample.StreamsFor(buckets)
	}
	sc.count = append(sc.count[:0], make([]int, buckets)...)
	sc.mcount = append(sc.mcount[:0], make([]int, buckets)...)
	sc.bucket = sc.bucket[:0]
	for i := range series {
		b := uint16(xxhash.Sum64String(series[i].Labels.Get(labels.MetricName)) % uint64(buckets))
		sc.bucket = append(sc.bucket, b)
		sc.count[b]++
	}
	mb := make([]uint16, len(meta))
	for i := range meta {
		mb[i] = uint16(xxhash.Sum64String(meta[i].MetricFamily) % uint64(buckets))
		sc.mcount[mb[i]]++
	}
	// Counts become start offsets; the slices are filled in wire order.
	starts := make([]int, buckets+1)
	mstarts := make([]int, buckets+1)
	for b := 0; b < buckets; b++ {
		starts[b+1] = starts[b] + sc.count[b]
		mstarts[b+1] = mstarts[b] + sc.mcount[b]
		sc.count[b], sc.mcount[b] = starts[b], mstarts[b]
	}
	sc.series = append(sc.series[:0], make([]promsample.Series, len(series))...)
	for i := range series {
		b := sc.bucket[i]
		sc.series[sc.count[b]] = series[i]
		sc.count[b]++
	}
	sc.meta = append(sc.meta[:0], make([]promsample.Metadata, len(meta))...)
	for i := range meta {
		b := mb[i]
		sc.meta[sc.mcount[b]] = meta[i]
		sc.mcount[b]++
	}
	var out []promsample.StreamBatch
	for b := 0; b < buckets; b++ {
		ss := sc.series[starts[b]:starts[b+1]:starts[b+1]]
		ms := sc.meta[mstarts[b]:mstarts[b+1]:mstarts[b+1]]
		if len(ss) == 0 && len(ms) == 0 {
			continue
		}
		var batch promsample.Batch
		if len(ss) > 0 {
			batch.Series = ss
		}
		if len(ms) > 0 {
			batch.Metadata = ms
		}
		out = append(out, promsample.StreamBatch{Stream: sc.names[b], Batch: batch})
	}
	return out
}

// release drops the references the scratch holds into a request.
func (sc *rowScratch) release() {
	clear(sc.series)
	clear(sc.meta)
}

type streamKey struct {
	source archive.SourceID
	stream string
}

// NewIngester resumes every source the archive already holds (same ids and
// uuids) and returns the Ingester. Call Run to start background work and
// Close to finalize.
func NewIngester(ctx context.Context, opts IngestOptions) (*Ingester, error) {
	if opts.Writer == nil || opts.Reader == nil {
		return nil, errors.New("receiver: IngestOptions needs Writer and Reader")
	}
	if opts.Buckets <= 0 {
		opts.Buckets = promsample.DefaultStreamBuckets
	}
	if opts.Buckets > promsample.MaxStreamBuckets {
		return nil, fmt.Errorf("receiver: %d stream buckets exceeds the maximum of %d", opts.Buckets, promsample.MaxStreamBuckets)
	}
	if opts.CompactTargetRows == 0 {
		opts.CompactTargetRows = DefaultCompactTargetRows
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = defaultWriteWait
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	opts.Seal = opts.Seal.WithDefaults()
	in := &Ingester{opts: opts, enc: &promsample.Encoder{}, log: opts.Logger,
		sources: map[string]archive.SourceID{}, buckets: map[archive.SourceID]int{},
		accounts: map[streamKey]*archive.SegmentAccount{}}
	in.scratch = newFreeList(cmp.Or(max(opts.Parallelism, 0), runtime.GOMAXPROCS(0)), func() *rowScratch { return new(rowScratch) })

	type resumable struct {
		id      archive.SourceID
		name    string
		last    int64
		has     bool
		buckets int
	}
	var todo []resumable
	if err := opts.Reader.View(ctx, func(tx *archive.ReadTx) error {
		srcs, err := tx.Sources()
		if err != nil {
			return err
		}
		for _, s := range srcs {
			name, ok := s.Labels[SourceLabel]
			if !ok {
				continue
			}
			last, has, err := tx.SourceLastTS(s.ID)
			if err != nil {
				return err
			}
			buckets := promsample.DefaultStreamBuckets
			if v, err := strconv.Atoi(s.Metadata[MetadataKeyStreamBuckets]); err == nil && v >= 1 && v <= promsample.MaxStreamBuckets {
				buckets = v
			}
			todo = append(todo, resumable{s.ID, name, last, has, buckets})
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("receiver: reading sources to resume: %w", err)
	}
	for _, r := range todo {
		anchor := opts.Now().UnixNano()
		if r.has && anchor <= r.last {
			anchor = r.last + 1 // the clock stepped back: the timeline still moves forward
		}
		if _, err := opts.Writer.ResumeSource(ctx, r.id, anchor); err != nil {
			return nil, fmt.Errorf("receiver: resuming source %q (id %d): %w", r.name, r.id, err)
		}
		in.sources[r.name] = r.id
		in.buckets[r.id] = r.buckets
		if r.buckets != opts.Buckets {
			in.log.Warn("source keeps the stream bucket count it was created with", "source", r.name,
				"stream_buckets", r.buckets, "flag", opts.Buckets)
		}
		in.log.Info("resumed source", "source", r.name, "id", r.id)
	}
	return in, nil
}

// source returns the id of the named source, adding it on first sight.
func (in *Ingester) source(ctx context.Context, name string) (archive.SourceID, error) {
	in.mu.Lock()
	id, ok := in.sources[name]
	in.mu.Unlock()
	if ok {
		return id, nil
	}
	// Serialize additions so two first requests of one sender add it once.
	in.mu.Lock()
	defer in.mu.Unlock()
	if id, ok := in.sources[name]; ok {
		return id, nil
	}
	src, err := in.opts.Writer.AddSource(ctx, archive.SourceSpec{
		Labels:            map[string]string{SourceLabel: name},
		Metadata:          map[string]string{MetadataKeyStreamBuckets: fmt.Sprint(in.opts.Buckets)},
		ClockAnchorWallNS: in.opts.Now().UnixNano(),
	}, "")
	if err != nil {
		return 0, err
	}
	in.sources[name] = src.ID()
	in.buckets[src.ID()] = in.opts.Buckets
	in.log.Info("added source", "source", name, "id", src.ID(), "uuid", src.UUID())
	return src.ID(), nil
}

// Write commits one request's data. It returns nil only when the writer
// reported every row committed and none dropped.
func (in *Ingester) Write(ctx context.Context, name string, series []promsample.Series, meta []promsample.Metadata) (Counts, error) {
	ctx, cancel := context.WithTimeout(ctx, in.opts.WriteTimeout)
	defer cancel()
	id, err := in.source(ctx, name)
	if err != nil {
		return Counts{}, in.writeError(err)
	}
	in.mu.Lock()
	buckets := in.buckets[id]
	in.mu.Unlock()
	sc := in.getScratch()
	parts := sc.split(series, meta, buckets)
	rows := make([]archive.Row, 0, len(parts))
	for _, p := range parts {
		var err error
		if rows, err = appendRows(&sc.enc, &in.rowBufs, rows, p.Stream, &p.Batch); err != nil {
			in.putScratch(sc)
			return Counts{}, fmt.Errorf("%w: %w", ErrRejected, err)
		}
	}
	in.putScratch(sc)
	if len(rows) == 0 {
		return Counts{}, nil
	}
	sending(ctx)
	res, err := in.opts.Writer.AppendWait(ctx, []archive.SourceRows{{Source: id, Rows: rows}}, true)
	if err != nil {
		return Counts{}, in.writeError(err)
	}
	if n := res.Dropped(); n > 0 {
		cause := res.Err()
		if cause == nil {
			cause = fmt.Errorf("%d row(s) dropped as out of order", n)
		}
		return Counts{}, fmt.Errorf("%w: %w", ErrIncompleteWrite, in.writeError(cause))
	}
	in.account(id, rows)
	// Committed: the writer has let go of the rows' bytes (it reads them
	// only until the commit it answered), so they can carry the next
	// request's rows. On an error they may still be queued, and are left
	// to the GC.
	for i := range rows {
		in.rowBufs.put(rows[i].Data)
	}
	var c Counts
	for _, s := range series {
		c.Samples += len(s.Samples)
		c.Histograms += len(s.Histograms)
		c.Exemplars += len(s.Exemplars)
	}
	return c, nil
}

// appendRows encodes one stream's share of a request as a row, or, when it
// is larger than a row may be (promsample.MaxBatchBytes), as several rows of
// that stream, halving its series until each fits. All of them go into the
// request's one transaction, and the writer stamps each with its own ts.
func appendRows(enc *promsample.BatchEncoder, bufs *bufStack, rows []archive.Row, stream string, b *promsample.Batch) ([]archive.Row, error) {
	data, err := enc.Append(bufs.get(), b)
	if err == nil {
		return append(rows, archive.Row{Stream: stream, Data: data}), nil
	}
	if !errors.Is(err, promsample.ErrTooLarge) || len(b.Series) < 2 {
		return rows, err
	}
	half := len(b.Series) / 2
	first := promsample.Batch{Series: b.Series[:half], Metadata: b.Metadata}
	second := promsample.Batch{Series: b.Series[half:]}
	if rows, err = appendRows(enc, bufs, rows, stream, &first); err != nil {
		return rows, err
	}
	return appendRows(enc, bufs, rows, stream, &second)
}

// writeError maps an archive failure onto the handler's retry contract.
func (in *Ingester) writeError(err error) error {
	switch {
	case archive.IsDiskFull(err):
		return fmt.Errorf("%w: %w", ErrDiskFull, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, archive.ErrWriterStopped), errors.Is(err, archive.ErrClosed), archive.IsRetryable(err):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// account feeds committed rows (their ts stamped by the writer) to the
// streams' seal accounts.
func (in *Ingester) account(id archive.SourceID, rows []archive.Row) {
	now := in.opts.Now()
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, r := range rows {
		k := streamKey{id, r.Stream}
		a := in.accounts[k]
		if a == nil {
			a = archive.OpenFirst(r.Stream, fmt.Sprint(id), in.opts.Seal, now)
			in.accounts[k] = a
		}
		a.AddRow(len(r.Data), r.TS)
	}
}

// Run does the background work until ctx ends: seals by policy four times
// a second (a stream that takes 900 rows a second is then sealed near the
// policy's 900, not anywhere up to twice that: a seal holds its rows and
// their decoded samples while it encodes), retention every minute,
// compaction every five minutes.
func (in *Ingester) Run(ctx context.Context) {
	sealT := time.NewTicker(sealCheckEvery)
	defer sealT.Stop()
	retT := time.NewTicker(retentionEvery)
	defer retT.Stop()
	compT := time.NewTicker(compactionEvery)
	defer compT.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sealT.C:
			in.SealDue(ctx)
		case <-retT.C:
			if err := in.EnforceRetention(ctx); err != nil && ctx.Err() == nil {
				in.log.Warn("retention failed", "err", err)
			}
		case <-compT.C:
			if err := in.Compact(ctx); err != nil && ctx.Err() == nil {
				in.log.Warn("compaction failed", "err", err)
			}
		}
	}
}

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
	in.mu.Lock()
	for k, a := range in.accounts {
		if a.Due(now) {
			due[k.source] = append(due[k.source], dueStream{k.stream, a.Rows(), a.Bytes(), a.Opened()})
			a.Rotate(in.opts.Seal, now)
		}
	}
	in.mu.Unlock()
	again := false
	for src, streams := range due {
		slices.SortFunc(streams, func(a, b dueStream) int { return strings.Compare(a.stream, b.stream) })
		// One stream per seal: a seal holds its streams' live rows in memory
		// while they are encoded, and streams that rotated together fall due
		// together (8 x 900 rows were a third of the peak heap).
		for _, d := range streams {
			sealed, err := in.opts.Writer.SealWait(ctx, src, []string{d.stream})
			if err != nil {
				if ctx.Err() == nil {
					in.log.Warn("seal failed", "source", src, "stream", d.stream, "err", err)
				}
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
		// A bounded seal (archive.WriterOptions.MaxSealRows) leaves rows
		// live: seal again the streams that sealed until none has any.
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
	}
	return nil
}

// EnforceRetention evicts what was received before now-Retention, then,
// when the archive exceeds RetentionBytes, the oldest segments until it fits.
func (in *Ingester) EnforceRetention(ctx context.Context) error {
	ids := in.sourceIDs()
	if in.opts.Retention > 0 {
		cutoff := in.opts.Now().Add(-in.opts.Retention).UnixNano()
		for _, id := range ids {
			if _, err := in.opts.Writer.EvictBefore(ctx, id, cutoff); err != nil {
				return err
			}
		}
	}
	if in.opts.RetentionBytes <= 0 {
		return nil
	}
	var size int64
	type seg struct {
		src    archive.SourceID
		lastTS int64
		bytes  int64
	}
	var segs []seg
	if err := in.opts.Reader.View(ctx, func(tx *archive.ReadTx) error {
		ps, err := tx.PageStats()
		if err != nil {
			return err
		}
		size = (ps.Pages - ps.Free) * ps.PageSize
		for _, id := range ids {
			sizes, err := tx.SegmentSizes(id)
			if err != nil {
				return err
			}
			for _, s := range sizes {
				segs = append(segs, seg{id, s.LastTS, s.Bytes})
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if size <= in.opts.RetentionBytes {
		return nil
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].lastTS < segs[j].lastTS })
	excess := size - in.opts.RetentionBytes
	cutoff := int64(0)
	for _, s := range segs {
		if excess <= 0 {
			break
		}
		excess -= s.bytes
		cutoff = s.lastTS + 1
	}
	if cutoff == 0 {
		return nil
	}
	in.log.Info("size retention: evicting the oldest segments", "cutoff_ns", cutoff, "archive_bytes", size, "limit", in.opts.RetentionBytes)
	for _, id := range ids {
		if _, err := in.opts.Writer.EvictBefore(ctx, id, cutoff); err != nil {
			return err
		}
	}
	return nil
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
				n, _, err := tx.SegmentSpan(id, st)
				if err != nil {
					return err
				}
				if n >= compactMinSegs {
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

func (in *Ingester) sourceIDs() []archive.SourceID {
	in.mu.Lock()
	defer in.mu.Unlock()
	ids := make([]archive.SourceID, 0, len(in.sources))
	for _, id := range in.sources {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// Sources returns the number of sources and of streams with rows accounted
// this session.
func (in *Ingester) Sources() (sources, streams int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.sources), len(in.accounts)
}

// Finalize marks every source complete: the last step of a clean stop,
// before the writer closes.
func (in *Ingester) Finalize(ctx context.Context) error {
	var errs []error
	for _, id := range in.sourceIDs() {
		if err := in.opts.Writer.Finalize(ctx, id, in.opts.Now().UnixNano(), 0); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
