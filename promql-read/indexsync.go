package promread

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

// Keeping the series index current with the archive.
//
// The index (seriesindex) is derived from what the archive holds: every
// sealed segment's catalog index lists its series, and the live tail's
// rows anchor theirs. A question first brings the index up to its snapshot
// for the streams it reads (syncStream): the segments it has not indexed
// yet are indexed (from their catalog index alone, no sample is read), and
// the stream's tail (tail.go) takes the rows appended since. Indexing is
// idempotent (a series found again only widens its span), so two
// questions racing on one stream only cost each other time; a segment is
// indexed once per process (indexed), from then on the directory cache
// serves it.
//
// A segment compaction replaced or retention removed leaves indexed; the
// series it held keep their spans (an over-estimate: a series whose data
// retention removed still reads as holding it until collected).
//
// History can wait (Options.WarmWindow). Warm may index only the recent
// segments and learn of the older ones just their sample-time spans
// (deferred); a deferred segment is indexed by the first question whose
// range overlaps its span, or by WarmHistory, whichever comes first. That
// is enough for every answer: a question needs the series of the segments
// that hold samples in its range, and those it indexes before it selects
// (syncSegments). A series found only in deferred segments is missing from
// the index meanwhile, and no question whose range misses them can see it.

// indexState is what the store knows it has indexed.
type indexState struct {
	mu   sync.Mutex
	segs map[streamRef]map[segmentID]segSpan // each stream's segments indexed
	// deferred are segments not indexed yet, with their spans (from the
	// head of their index): Warm's older history (Options.WarmWindow).
	deferred map[streamRef]map[segmentID]segSpan
	tails    map[streamRef]*tail
}

// streamSegs returns stream k's map of indexed segments, making it.
// Callers hold mu.
func (st *indexState) streamSegs(k streamRef) map[segmentID]segSpan {
	if st.segs == nil {
		st.segs = map[streamRef]map[segmentID]segSpan{}
	}
	m := st.segs[k]
	if m == nil {
		m = map[segmentID]segSpan{}
		st.segs[k] = m
	}
	return m
}

// indexed records that segment id of stream k is indexed, with its span,
// and no longer deferred. Callers hold mu.
func (st *indexState) indexed(k streamRef, id segmentID, sp segSpan) {
	st.streamSegs(k)[id] = sp
	if d := st.deferred[k]; d != nil {
		delete(d, id)
	}
}

// timeRange is the sample-time range (Unix ms, inclusive) a sync serves:
// the deferred segments whose spans it overlaps are indexed.
type timeRange struct{ mint, maxt int64 }

// noTime overlaps nothing: a sync for it indexes what is new, and no
// deferred history (Warm's own sync, Follow).
var noTime = timeRange{1, 0}

// overlaps reports whether some of sp is in r.
func (r timeRange) overlaps(sp segSpan) bool {
	return r.mint <= r.maxt && !sp.outside(r.mint, r.maxt)
}

// segSpan is an indexed segment's sample-time span (Unix ms, inclusive;
// minT > maxT when it holds no sample), from its index. A question skips
// a segment outside its range by it, without the segment's directory,
// which the cache may have let go: an hour of 1 M-series data has more
// directories than the default cache holds, and one rebuilt only to find
// its segment out of range cost 7-11 ms.
type segSpan struct{ minT, maxT int64 }

func spanOf(x *promsample.Index) segSpan { return segSpan{x.MinT, x.MaxT} }

// outside reports whether no sample of the span is in [mint, maxt].
func (sp segSpan) outside(mint, maxt int64) bool { return sp.minT > maxt || sp.maxT < mint }

// segSpan returns the span of a segment of stream k, if it was indexed or
// deferred.
func (s *store) segSpan(k streamRef, id segmentID) (segSpan, bool) {
	s.idx.mu.Lock()
	defer s.idx.mu.Unlock()
	if sp, ok := s.idx.segs[k][id]; ok {
		return sp, true
	}
	sp, ok := s.idx.deferred[k][id]
	return sp, ok
}

// isDeferred reports whether segment id is deferred (not indexed yet).
func (s *store) isDeferred(id segmentID) bool {
	s.idx.mu.Lock()
	defer s.idx.mu.Unlock()
	_, ok := s.idx.deferred[streamRef{id.source, id.stream}][id]
	return ok
}

// tailOf returns a stream's tail, making it.
func (s *store) tailOf(k streamRef) *tail {
	s.idx.mu.Lock()
	defer s.idx.mu.Unlock()
	if s.idx.tails == nil {
		s.idx.tails = map[streamRef]*tail{}
	}
	t := s.idx.tails[k]
	if t == nil {
		t = &tail{loc: s.x.Loc(int64(k.src), k.stream)}
		s.idx.tails[k] = t
	}
	return t
}

// syncSegments indexes a stream's segments that are not yet indexed (of
// the deferred ones, those whose spans rng overlaps), and reports whether
// some it had indexed are gone (compacted or evicted).
func (s *store) syncSegments(tx *archive.ReadTx, src archive.SourceID, stream string, segs []archive.StreamSegment, rng timeRange) (removed bool, err error) {
	k := streamRef{src, stream}
	s.idx.mu.Lock()
	known := s.idx.streamSegs(k)
	deferred := s.idx.deferred[k]
	var todo []segmentID
	live := make(map[segmentID]struct{}, len(segs))
	knownLive, deferredLive := 0, 0
	for _, m := range segs {
		id := s.segID(src, m)
		live[id] = struct{}{}
		if _, ok := known[id]; ok {
			knownLive++
			continue
		}
		if sp, ok := deferred[id]; ok {
			deferredLive++
			if !rng.overlaps(sp) {
				continue // left for a question that needs it, or WarmHistory
			}
		}
		todo = append(todo, id)
	}
	if len(known) > knownLive {
		for id := range known {
			if _, ok := live[id]; !ok {
				delete(known, id) // compacted or evicted
				removed = true
			}
		}
	}
	if len(deferred) > deferredLive {
		// Deferred segments that went: nothing of them was indexed.
		for id := range deferred {
			if _, ok := live[id]; !ok {
				delete(deferred, id)
			}
		}
	}
	s.idx.mu.Unlock()
	if len(todo) == 0 {
		return removed, nil
	}
	loc := s.x.Loc(int64(src), stream)
	ti := newTableIndexer(s.x)
	for _, id := range todo {
		raw, ok, err := tx.SegmentIndex(id.source, id.stream, id.seq)
		if err != nil {
			return removed, err
		}
		if !ok {
			return removed, fmt.Errorf("segment %d listed but absent", id.seq)
		}
		sp, err := s.indexSegment(tx, ti, id, raw, loc)
		if err != nil {
			return removed, fmt.Errorf("indexing segment %d: %w", id.seq, err)
		}
		s.idx.mu.Lock()
		s.idx.indexed(k, id, sp)
		s.idx.mu.Unlock()
	}
	return removed, nil
}

// collect removes from the index the series of a stream whose data is
// all gone: received before the oldest row the stream still holds (its
// oldest segment's first row, or its first live row), and not being
// written (seriesindex.Index.Collect).
func (s *store) collect(src archive.SourceID, stream string, segs []archive.StreamSegment, span archive.Span) {
	oldest := int64(math.MaxInt64)
	for _, m := range segs {
		oldest = min(oldest, m.FirstTS)
	}
	if span.Rows > 0 {
		oldest = min(oldest, span.FirstTS)
	}
	gone := s.x.Collect(s.x.Loc(int64(src), stream), oldest)
	s.x.Remove(gone)
	if len(gone) > 0 {
		s.opts.Logger.Debug("series without data left the index", "source", src, "stream", stream, "series", len(gone))
	}
}

// indexSegment adds the series of one segment (its catalog index raw) to
// the index, keeps its directory, and returns its span.
func (s *store) indexSegment(tx *archive.ReadTx, ti *tableIndexer, id segmentID, raw []byte, loc seriesindex.Loc) (segSpan, error) {
	if promsample.IndexHasTable(raw) {
		x, err := ti.index(raw, loc, id.lastTS)
		if err != nil {
			return segSpan{}, err
		}
		s.putDir(id, s.newDir(&x, true), true)
		return spanOf(&x), nil
	}
	return s.indexLegacy(tx, id, raw, loc)
}

// indexLegacy indexes a segment written before index format 2: its series
// come from its label columns.
func (s *store) indexLegacy(tx *archive.ReadTx, id segmentID, raw []byte, loc seriesindex.Loc) (segSpan, error) {
	x, err := promsample.ParseIndex(raw)
	if err != nil {
		return segSpan{}, err
	}
	b, err := s.segmentBytes(tx, id)
	if err != nil {
		return segSpan{}, err
	}
	got, err := promsample.ReadSegment(b, promsample.AllTime())
	if err != nil {
		return segSpan{}, err
	}
	for _, sr := range got {
		ref, _ := s.x.Add(sr.Labels)
		s.x.Observe(ref, loc, x.MinT, x.MaxT, id.lastTS)
	}
	s.putDir(id, s.newDir(&x, true), true)
	return spanOf(&x), nil
}

// syncStream brings the index up to the snapshot for one stream (for its
// deferred history, as far as rng needs), and returns its tail locked for
// reading (unlock when done).
func (s *store) syncStream(c *catalog, src archive.SourceID, stream string, segs []archive.StreamSegment, rng timeRange) (tailView, func(), error) {
	removed, err := s.syncSegments(c.tx, src, stream, segs, rng)
	if err != nil {
		return tailView{}, nil, err
	}
	var watermark int64
	for i, m := range segs {
		if i == 0 || m.LastTS > watermark {
			watermark = m.LastTS
		}
	}
	span, err := c.liveSpan(src, stream, watermark, len(segs) > 0)
	if err != nil {
		return tailView{}, nil, err
	}
	t := s.tailOf(streamRef{src, stream})
	t.mu.Lock()
	v, err := t.sync(s.x, c.tx, src, stream, len(segs) > 0, watermark, span)
	if err != nil {
		t.mu.Unlock()
		return tailView{}, nil, fmt.Errorf("live tail: %w", err)
	}
	if removed {
		s.collect(src, stream, segs, span)
	}
	return v, t.mu.Unlock, nil
}

// syncAll brings the index up to one snapshot for every sample stream the
// name constraint nc allows (for their deferred history, as far as rng
// needs).
func (s *store) syncAll(ctx context.Context, nc nameConstraint, rng timeRange) error {
	return s.viewStreams(ctx, nc, func(c *catalog, src archive.SourceInfo, st string, segs []archive.StreamSegment) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		_, unlock, err := s.syncStream(c, src.ID, st, segs, rng)
		if err != nil {
			return fmt.Errorf("source %d stream %s: %w", src.ID, st, err)
		}
		unlock()
		return nil
	})
}

// Warm indexes the whole archive (or its recent history: WarmWindow):
// every segment's series table and every stream's live tail, then caches
// the newest segments' layouts (warmLayouts), after the archive's page
// links (archive.WarmPageJumps). A server calls it before it
// reports ready, so that the first question after a restart costs what
// any other does. The segments' tables are read in one snapshot and
// indexed on every processor.
func (q *Queryable) Warm(ctx context.Context) error {
	started := time.Now()
	// The segments' scattered page links, so that the first questions
	// read them in place too (archive.WarmPageJumps).
	if err := q.s.a.WarmPageJumps(ctx); err != nil {
		return err
	}
	deferred, err := q.s.warmSegments(ctx, q.s.opts.WarmWindow)
	if err != nil {
		return err
	}
	segs := time.Since(started)
	if err := q.s.syncAll(ctx, nameConstraint{all: true}, noTime); err != nil {
		return err
	}
	tails := time.Since(started) - segs
	layouts := q.s.warmLayouts(ctx)
	q.s.opts.Logger.Debug("warmed the read index", "segments_took", segs.Round(time.Millisecond),
		"deferred", deferred, "tails_took", tails.Round(time.Millisecond), "layouts", layouts,
		"layouts_took", (time.Since(started) - segs - tails).Round(time.Millisecond), "series", q.s.x.Len())
	return nil
}

// Deferred returns how many segments are not indexed yet: those Warm left
// for questions and WarmHistory (Options.WarmWindow) and none has
// indexed since.
func (q *Queryable) Deferred() int {
	q.s.idx.mu.Lock()
	defer q.s.idx.mu.Unlock()
	n := 0
	for _, m := range q.s.idx.deferred {
		n += len(m)
	}
	return n
}

// historyBatch is how many segments WarmHistory indexes in one snapshot:
// a snapshot pins the sidecar frames it sees, and WarmHistory may run
// for minutes, so it takes many short ones.
const historyBatch = 32

// WarmHistory indexes the segments Warm deferred (Options.WarmWindow) and
// no question has indexed since, newest first, on half the processors (a
// server runs it after it reports ready, beside ingest), and returns how
// many it indexed. Their directories go into the cache only where it has
// room: they must not push out the recent ones Warm kept.
func (q *Queryable) WarmHistory(ctx context.Context) (int, error) {
	s := q.s
	s.idx.mu.Lock()
	var todo []indexJob
	for k, m := range s.idx.deferred {
		loc := s.x.Loc(int64(k.src), k.stream)
		for id := range m {
			todo = append(todo, indexJob{k: k, id: id, loc: loc})
		}
	}
	s.idx.mu.Unlock()
	slices.SortFunc(todo, func(a, b indexJob) int { return cmp.Compare(b.id.lastTS, a.id.lastTS) })
	workers := max(1, runtime.GOMAXPROCS(0)/2)
	n := 0
	for len(todo) > 0 {
		batch := todo[:min(len(todo), historyBatch)]
		todo = todo[len(batch):]
		err := s.a.View(ctx, func(tx *archive.ReadTx) error {
			k, err := s.indexJobs(ctx, tx, batch, workers, false)
			n += k
			return err
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// 1/warmLayoutShare of the cache is what warmLayouts may fill, and
// warmLayoutTime how long it may take (it runs before the server reports
// ready; a large --query.cache-bytes must not make a restart slow).
const (
	warmLayoutShare = 2
	warmLayoutTime  = 2 * time.Second
)

// warmLayouts caches the layouts of the newest segments, newest first,
// until they hold 1/warmLayoutShare of the cache, or fill its free room,
// or warmLayoutTime has passed, and returns how many it cached.
//
// A layout is read once per segment, and that first read walks the
// segment's whole page chain, since the footer is at its end (0.5-2.5 ms
// a segment of a 1 M-series archive, as much as the question itself); the
// questions that come first after a restart (a dashboard's) are mostly
// about the last hours. It never evicts a directory to make room: a read
// cannot start without its segment's directory (rebuilt from the catalog
// index: several ms at 170 k series), and a restart at 1 M series whose
// layouts had pushed the oldest directories out answered its first
// one-series question in 50-70 ms. It only saves questions time, so a
// failure (a segment evicted meanwhile, or a corrupt one, which its
// question will report) is logged and ends it.
func (s *store) warmLayouts(ctx context.Context) int {
	budget := s.opts.CacheBytes / warmLayoutShare
	if budget <= 0 {
		return 0
	}
	var ids []segmentID
	err := s.viewStreams(ctx, nameConstraint{all: true}, func(_ *catalog, src archive.SourceInfo, _ string, segs []archive.StreamSegment) error {
		for _, m := range segs {
			ids = append(ids, s.segID(src.ID, m))
		}
		return nil
	})
	if err != nil {
		if ctx.Err() == nil {
			s.opts.Logger.Warn("warming segment layouts stopped", "err", err)
		}
		return 0
	}
	slices.SortFunc(ids, func(a, b segmentID) int { return cmp.Compare(b.lastTS, a.lastTS) })
	n := 0
	deadline := time.Now().Add(warmLayoutTime)
	for _, id := range ids {
		if budget <= 0 || time.Now().After(deadline) {
			break
		}
		if s.isDeferred(id) {
			// History Warm left for later: its directory would be
			// built for the layout, and neither is wanted yet.
			continue
		}
		// One snapshot a segment: each holds its BLOB handle to its end.
		full := false
		err := s.a.View(ctx, func(tx *archive.ReadTx) error {
			d, v2, err := s.dir(tx, id)
			if err != nil || !v2 {
				return err // !v2: read whole, no layout
			}
			k := cacheKey{seg: s.names.of(id), kind: kindLayout}
			if _, hit := s.cache.get(k); hit {
				return nil
			}
			blob, found, err := tx.OpenSegment(id.source, id.stream, id.seq)
			if err != nil || !found {
				return err // !found: evicted since the listing
			}
			l, err := promsample.OpenSegmentLayout(blob, blob.Size(), d.x)
			if err != nil {
				return fmt.Errorf("segment %d: %w", id.seq, err)
			}
			if full = !s.cache.putIfFree(k, l, l.Bytes()); !full {
				n++
				budget -= l.Bytes()
			}
			return nil
		})
		if err != nil {
			if ctx.Err() == nil {
				s.opts.Logger.Warn("warming segment layouts stopped", "err", err)
			}
			break
		}
		if full {
			break
		}
	}
	return n
}

// warmSegments indexes every segment, oldest first, parsing and inserting
// their series tables on GOMAXPROCS goroutines (indexJobs) while one reads
// them from the archive in one snapshot. With a window, the segments whose
// rows end more than window before the newest segment's are deferred
// instead (deferHistory). It returns how many it deferred.
func (s *store) warmSegments(ctx context.Context, window time.Duration) (deferred int, err error) {
	var todo []indexJob
	list := func(tx *archive.ReadTx) error {
		c, err := s.catalogFor(tx)
		if err != nil {
			return err
		}
		todo = todo[:0]
		return eachStream(c, nameConstraint{all: true}, func(src archive.SourceInfo, st string, segs []archive.StreamSegment) error {
			k := streamRef{src.ID, st}
			loc := s.x.Loc(int64(src.ID), st)
			for _, m := range segs {
				todo = append(todo, indexJob{k: k, id: s.segID(src.ID, m), loc: loc})
			}
			return nil
		})
	}
	// Oldest first, by receipt, over every stream: each segment's
	// directory goes into the cache as it is indexed, so when they do not
	// all fit (an hour of 1 M-series data is ~500 MB of them) the cache
	// keeps the newest, which the first questions after a restart mostly
	// ask about. (Stream by stream, it kept the last streams' and none of
	// the first ones'.)
	byReceipt := func(a, b indexJob) int { return cmp.Compare(a.id.lastTS, b.id.lastTS) }
	if window > 0 {
		if err := s.a.View(ctx, list); err != nil {
			return 0, err
		}
		slices.SortStableFunc(todo, byReceipt)
		if len(todo) > 0 {
			// Row ts are receipt times in Unix nanoseconds, as the
			// receiver stamps them (archive.Row). The window ends at the
			// newest first receipt, not the newest last one: a restart
			// closes the epochs its predecessor left open, and their close
			// markers, stamped now, are sealed with the rows they close.
			// After a stop of over a window, the newest last receipt was
			// the restart's own, and every segment of the data before the
			// stop was left for after ready (a first one-series question
			// about it at 1 M series took ~19 ms instead of ~4).
			newest := todo[0].id.firstTS
			for _, j := range todo {
				newest = max(newest, j.id.firstTS)
			}
			cutoff := newest - window.Nanoseconds()
			old := sort.Search(len(todo), func(i int) bool { return todo[i].id.lastTS >= cutoff })
			if deferred, err = s.deferHistory(ctx, todo[:old]); err != nil {
				return deferred, err
			}
		}
	}
	err = s.a.View(ctx, func(tx *archive.ReadTx) error {
		if err := list(tx); err != nil {
			return err
		}
		slices.SortStableFunc(todo, byReceipt)
		// The deferred ones are skipped (a segment that failed to defer
		// is indexed now, which reports what is wrong with it as a
		// restart always did).
		now := todo[:0]
		for _, j := range todo {
			if !s.isDeferred(j.id) {
				now = append(now, j)
			}
		}
		_, err := s.indexJobs(ctx, tx, now, runtime.GOMAXPROCS(0), true)
		return err
	})
	return deferred, err
}

// deferHistory defers the segments of old: it reads the head of each
// one's index for its span (promsample.ParseIndexSpan), on GOMAXPROCS
// snapshots at once. Reading a head walks the segment's page chain past
// its bytes, which come first in its row: 0.2-1.4 ms a segment of a
// million series (the longer where the file's free pages were reused), a
// twentieth of indexing it. A segment whose head does not parse is not
// deferred. It returns how many it deferred.
func (s *store) deferHistory(ctx context.Context, old []indexJob) (int, error) {
	workers := min(runtime.GOMAXPROCS(0), max(1, len(old)))
	errs := make(chan error, workers)
	var n atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.a.View(ctx, func(tx *archive.ReadTx) error {
				for i := w; i < len(old); i += workers {
					if err := ctx.Err(); err != nil {
						return err
					}
					j := old[i]
					head, ok, err := tx.SegmentIndexHead(j.id.source, j.id.stream, j.id.seq, promsample.IndexSpanBytes)
					if err != nil {
						return err
					}
					if !ok {
						continue // gone since it was listed
					}
					minT, maxT, err := promsample.ParseIndexSpan(head)
					if err != nil {
						continue
					}
					s.idx.mu.Lock()
					if _, done := s.idx.segs[j.k][j.id]; !done {
						if s.idx.deferred == nil {
							s.idx.deferred = map[streamRef]map[segmentID]segSpan{}
						}
						if s.idx.deferred[j.k] == nil {
							s.idx.deferred[j.k] = map[segmentID]segSpan{}
						}
						s.idx.deferred[j.k][j.id] = segSpan{minT, maxT}
						n.Add(1)
					}
					s.idx.mu.Unlock()
				}
				return nil
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return int(n.Load()), err
		}
	}
	return int(n.Load()), nil
}

// indexJob is one segment to index.
type indexJob struct {
	k   streamRef
	id  segmentID
	raw []byte
	loc seriesindex.Loc
}

// indexJobs indexes the segments of todo not indexed yet, in its order,
// parsing and inserting their series tables on workers goroutines (each
// predicting a stream's series from the last table of it that goroutine
// indexed: tableIndexer) while this one reads them through tx. evict says
// whether their directories may push others out of the cache (else they
// are kept only where it has room). It returns how many it indexed.
func (s *store) indexJobs(ctx context.Context, tx *archive.ReadTx, todo []indexJob, workers int, evict bool) (int, error) {
	jobs := make(chan indexJob, workers)
	errs := make(chan error, workers)
	var done atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ti := newTableIndexer(s.x)
			for j := range jobs {
				x, err := ti.index(j.raw, j.loc, j.id.lastTS)
				if err != nil {
					select {
					case errs <- fmt.Errorf("segment %d: %w", j.id.seq, err):
					default:
					}
					continue
				}
				s.putDir(j.id, s.newDir(&x, evict), evict)
				s.idx.mu.Lock()
				s.idx.indexed(j.k, j.id, spanOf(&x))
				s.idx.mu.Unlock()
				done.Add(1)
			}
		}()
	}
	err := func() error {
		for _, j := range todo {
			if err := ctx.Err(); err != nil {
				return err
			}
			s.idx.mu.Lock()
			_, known := s.idx.segs[j.k][j.id]
			s.idx.mu.Unlock()
			if known {
				continue // a question indexed it meanwhile
			}
			raw, ok, err := tx.SegmentIndex(j.id.source, j.id.stream, j.id.seq)
			if err != nil {
				return err
			}
			if !ok {
				// Gone since it was listed (compacted, evicted): there
				// is nothing of it to index.
				s.idx.mu.Lock()
				delete(s.idx.deferred[j.k], j.id)
				s.idx.mu.Unlock()
				continue
			}
			if promsample.IndexHasTable(raw) {
				j.raw = raw
				select {
				case jobs <- j:
				case err := <-errs:
					return err
				}
				continue
			}
			// An index without a series table: indexed from the
			// segment's label columns, here (it needs the snapshot).
			sp, err := s.indexLegacy(tx, j.id, raw, j.loc)
			if err != nil {
				return fmt.Errorf("indexing segment %d: %w", j.id.seq, err)
			}
			s.idx.mu.Lock()
			s.idx.indexed(j.k, j.id, sp)
			s.idx.mu.Unlock()
			done.Add(1)
		}
		return nil
	}()
	close(jobs)
	wg.Wait()
	if err != nil {
		return int(done.Load()), err
	}
	select {
	case err := <-errs:
		return int(done.Load()), err
	default:
		return int(done.Load()), nil
	}
}

// followIdle: Follow syncs only while a question came within it. Keeping
// the tails decoded is read work, a quarter of the CPU of an ingest at
// 10 k series when nobody reads; a question after a quiet spell decodes
// the rows since the last sync itself (at most what is live: sealed rows
// leave the tail), and from then on Follow keeps up again. A dashboard
// refreshing every few minutes keeps it on.
const followIdle = 10 * time.Minute

// Follow keeps the index and the live tails current with the archive until
// ctx ends, syncing every interval while questions come (followIdle): a
// server runs it so that a question finds the rows appended since the last
// one already decoded, instead of decoding them itself.
func (q *Queryable) Follow(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if time.Since(time.Unix(0, q.s.asked.Load())) > followIdle {
				continue
			}
			if err := q.s.syncAll(ctx, nameConstraint{all: true}, noTime); err != nil && ctx.Err() == nil {
				q.s.opts.Logger.Warn("following the archive", "err", err)
			}
		}
	}
}
