package promread

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	"github.com/dendro-receiver/dendro-receiver/membudget"
	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

// store is the read core shared by the Queryable and the handlers.
type store struct {
	a     *archive.Archive
	x     *seriesindex.Index // Options.Series, or the store's own
	cache *cache
	// pages holds the verified pages of lone-series reads (segpages.go),
	// apart from cache so that they evict one another, never a directory
	// or a layout.
	pages *cache
	// names numbers the segments for both caches' keys (cache.go).
	names segNames
	opts  Options
	// idx is what the store has indexed of the archive (indexsync.go).
	idx indexState
	// asked is when a question last came (Unix ns): Follow keeps the
	// tails current only while questions come (followIdle).
	asked atomic.Int64
	// memos remembers catalog answers per connection and snapshot version
	// (see catalog).
	memos memos
	// lists remembers segment lists per segments epoch, for snapshots of
	// any version and connection (catalog.go).
	lists segmentLists
	// par is how answers are decoded and encoded on several goroutines.
	par parallelism
	// segmentsRead counts the segments whose pages a Select read, and
	// blobsOpened the BLOBs it opened to read them; seriesKept the series
	// answered from their kept samples (segseries.go). For tests.
	segmentsRead, blobsOpened, seriesKept atomic.Int64
}

// series is one series of an answer. Its slices may be shared with the
// cache and are read-only.
type series struct {
	lbls   labels.Labels
	floats []promsample.Sample // by T
	// rest are more floats, after floats, when materialize chained a
	// series' pieces instead of merging them (selectParams.chain): each
	// non-empty and starting after the one before ends. Only on series
	// without histograms; floatIterator walks them.
	rest      [][]promsample.Sample
	hists     []promsample.Histogram // by T
	exemplars []promsample.Exemplar  // by T
}

// budget counts what one question (a PromQL query, a remote-read
// request) holds, shared by all its Selects: samples against MaxSamples,
// and, with Options.Memory, their bytes against the process's memory
// budget (a reservation grown as the answer grows, released by release).
type budget struct {
	limit int64
	used  atomic.Int64

	mem  *membudget.Budget // nil: samples only
	most int64             // bytes one question may reserve
	mu   sync.Mutex
	res  *membudget.Reservation
	held int64 // bytes the pieces taken so far hold (an estimate)
}

func (s *store) newBudget() *budget {
	b := &budget{limit: int64(s.opts.MaxSamples), mem: s.opts.Memory, most: s.opts.MemoryPerQuery}
	if b.mem != nil && (b.most <= 0 || b.most > b.mem.Limit()) {
		b.most = b.mem.Limit()
	}
	return b
}

// What an answer holds, per sample it takes: a float is 16 bytes in its
// piece and 16 more once the pieces are merged (or encoded); a histogram
// is its struct and a few spans and buckets. Estimates: reservations are
// about the order of memory, not its bytes.
const (
	floatBytes     = 32
	histogramBytes = 320
	// memoryStep is the least a reservation grows by, so that a large
	// answer does not take the budget's lock for every piece.
	memoryStep = 1 << 20
)

// take counts floats and histograms a question is about to hold; it
// returns *SampleLimitError over MaxSamples, ErrTooMuchMemory over
// MemoryPerQuery, or ctx's error when the memory did not come in time.
func (b *budget) take(ctx context.Context, floats, hists int) error {
	if b == nil {
		return nil
	}
	if b.limit > 0 && b.used.Add(int64(floats+hists)) > b.limit {
		return &SampleLimitError{Limit: int(b.limit)}
	}
	if b.mem == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held += int64(floats)*floatBytes + int64(hists)*histogramBytes
	if b.held > b.most {
		return &MemoryLimitError{Need: b.held, Limit: b.most}
	}
	have := int64(0)
	if b.res != nil {
		have = b.res.Bytes()
	}
	if b.held <= have {
		return nil
	}
	grow := min(max(b.held-have, memoryStep), b.most-have)
	if b.res == nil {
		r, err := b.mem.Reserve(ctx, grow)
		if err != nil {
			return memoryErr(err, b)
		}
		b.res = r
		return nil
	}
	return memoryErr(b.res.Grow(ctx, grow), b)
}

// memoryErr turns a reservation's failure into the read path's errors.
func memoryErr(err error, b *budget) error {
	if err == nil {
		return nil
	}
	var ex *membudget.ExceedsError
	if errors.As(err, &ex) {
		return &MemoryLimitError{Need: b.held, Limit: b.most}
	}
	return fmt.Errorf("waiting for memory to read into: %w", err)
}

// release gives the question's memory back; its answer must no longer be
// held (or be about to be dropped).
func (b *budget) release() {
	if b == nil || b.mem == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.res != nil {
		b.res.Release()
		b.res = nil
	}
	b.held = 0
}

// selectParams is one Select.
type selectParams struct {
	mint, maxt int64 // sample time, Unix ms, inclusive
	matchers   []*labels.Matcher
	exemplars  bool // keep exemplars (query_exemplars)
	// labelsOnly answers which series have data in range, holding no
	// samples: series, labels and label-values questions over all time
	// cost memory per series, not per sample.
	labelsOnly bool
	// chain lets materialize hand a float series' pieces over as they
	// are (series.rest) when they follow each other in time, instead of
	// copying them into one slice: for the PromQL engine, which walks a
	// series through its iterator. Other callers read series.floats.
	chain  bool
	budget *budget
	// stats, when set, receives how many samples the pieces held before
	// merging (so a test can tell a seam that repeats rows from one the
	// de-duplication hides).
	stats *selectStats
}

type selectStats struct {
	rawSamples int
}

// nameConstraint is what the __name__ matchers allow: a finite set of
// metric names, or (all) anything.
type nameConstraint struct {
	all   bool
	names []string
	ms    []*labels.Matcher // the __name__ matchers
}

func constrainNames(ms []*labels.Matcher) nameConstraint {
	nc := nameConstraint{all: true}
	for _, m := range ms {
		if m.Name != labels.MetricName {
			continue
		}
		nc.ms = append(nc.ms, m)
		var set []string
		switch m.Type {
		case labels.MatchEqual:
			set = []string{m.Value}
		case labels.MatchRegexp:
			set = m.SetMatches()
		}
		if set == nil {
			continue
		}
		if nc.all {
			nc.all, nc.names = false, slices.Clone(set)
			continue
		}
		nc.names = slices.DeleteFunc(nc.names, func(n string) bool { return !slices.Contains(set, n) })
	}
	if !nc.all {
		nc.names = slices.DeleteFunc(nc.names, func(n string) bool { return !nc.matches(n) })
	}
	return nc
}

func (nc *nameConstraint) matches(name string) bool {
	for _, m := range nc.ms {
		if !m.Matches(name) {
			return false
		}
	}
	return true
}

func matchesAll(ms []*labels.Matcher, ls labels.Labels) bool {
	for _, m := range ms {
		if !m.Matches(ls.Get(m.Name)) {
			return false
		}
	}
	return true
}

// viewStreams runs eachStream in one new snapshot, with its catalog.
func (s *store) viewStreams(ctx context.Context, nc nameConstraint, fn func(c *catalog, src archive.SourceInfo, stream string, segs []archive.StreamSegment) error) error {
	return s.a.View(ctx, func(tx *archive.ReadTx) error {
		c, err := s.catalogFor(tx)
		if err != nil {
			return err
		}
		return eachStream(c, nc, func(src archive.SourceInfo, st string, segs []archive.StreamSegment) error {
			return fn(c, src, st, segs)
		})
	})
}

// eachStream calls fn, inside the snapshot of c, for every sample stream of
// every source that the name constraint nc allows, with that stream's
// sealed segments (catalog only, by seq; one catalog query per source).
func eachStream(c *catalog, nc nameConstraint, fn func(src archive.SourceInfo, stream string, segs []archive.StreamSegment) error) error {
	srcs, err := c.sources()
	if err != nil {
		return err
	}
	for _, src := range srcs {
		streams, err := sampleStreams(c, src, nc)
		if err != nil {
			return err
		}
		var all []archive.StreamSegment
		switch len(streams) {
		case 0:
			continue
		case 1: // a __name__ equality: one stream's catalog rows only
			all, err = c.segments(src.ID, streams[0])
		default:
			all, err = c.segments(src.ID, "")
		}
		if err != nil {
			return err
		}
		for _, st := range streams {
			if err := fn(src, st, streamRun(all, st)); err != nil {
				return err
			}
		}
	}
	return nil
}

// sampleStreams returns the streams of src a question with names must read:
// every sample stream when the metric names are not a finite set, else the
// streams promsample.StreamFor names under the source's recorded bucket
// count. A stream that does not exist simply answers nothing. This trusts
// "stream_buckets": a source whose bucket count changed without that
// metadata following would hide a metric's data in another stream.
func sampleStreams(c *catalog, src archive.SourceInfo, nc nameConstraint) ([]string, error) {
	if nc.all {
		all, err := c.streams(src.ID)
		if err != nil {
			return nil, err
		}
		// all may be shared with the catalog memo: filter a copy.
		return slices.DeleteFunc(slices.Clone(all), func(s string) bool { return !strings.HasPrefix(s, promsample.SampleStreamPrefix) }), nil
	}
	buckets, _ := strconv.Atoi(src.Metadata["stream_buckets"])
	want := make([]string, 0, len(nc.names))
	for _, n := range nc.names {
		want = append(want, promsample.StreamFor(n, buckets))
	}
	slices.Sort(want)
	return slices.Compact(want), nil
}

// selectSeries answers one Select from one snapshot, series sorted by labels.
func (s *store) selectSeries(ctx context.Context, p selectParams) ([]*series, error) {
	sel, err := s.selectPieces(ctx, p)
	if err != nil || sel == nil {
		return nil, err
	}
	out, err := materialize(ctx, sel, p.exemplars, p.chain, s.par)
	if err != nil {
		return nil, err
	}
	if p.stats != nil {
		p.stats.rawSamples = int(sel.raw.Load())
	}
	return out, nil
}

// selectPieces gathers one Select's pieces from one snapshot; nil when
// nothing can match. The index is first brought up to the snapshot for
// every stream the __name__ matchers allow; it then names the series that
// match (postings, every matcher type) and hold data in range, and only
// those are read: from each sealed segment of their stream that overlaps
// the range, their pages (segdir.go), and from the stream's live tail.
func (s *store) selectPieces(ctx context.Context, p selectParams) (*selection, error) {
	s.asked.Store(time.Now().UnixNano())
	if p.mint > p.maxt {
		return nil, nil
	}
	acc := newAccumulator(ctx, s.x, p.budget)
	nc := constrainNames(p.matchers)
	if !nc.all && len(nc.names) == 0 {
		return nil, nil
	}
	err := s.a.View(ctx, func(tx *archive.ReadTx) error {
		c, err := s.catalogFor(tx)
		if err != nil {
			return err
		}
		type work struct {
			src  archive.SourceID
			st   string
			segs []archive.StreamSegment
		}
		var todo []work
		err = eachStream(c, nc, func(src archive.SourceInfo, st string, segs []archive.StreamSegment) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			_, unlock, err := s.syncStream(c, src.ID, st, segs, timeRange{p.mint, p.maxt})
			if err != nil {
				return fmt.Errorf("source %d stream %s: %w", src.ID, st, err)
			}
			unlock()
			todo = append(todo, work{src.ID, st, segs})
			return nil
		})
		if err != nil {
			return err
		}
		refs := s.x.Select(p.matchers, p.mint, p.maxt)
		if len(refs) == 0 {
			return nil
		}
		acc.setRefs(refs)
		if p.labelsOnly {
			for i := range refs {
				acc.add(int32(i), nil, nil, nil, true, p)
			}
			return nil
		}
		byLoc := map[seriesindex.Loc][]qref{}
		for i, r := range refs {
			q := qref{r, int32(i)}
			if !s.x.MultiLoc(r) {
				l := s.x.FirstLoc(r)
				byLoc[l] = append(byLoc[l], q)
				continue
			}
			for _, l := range s.x.Locs(r) {
				byLoc[l] = append(byLoc[l], q)
			}
		}
		for _, w := range todo {
			rs := byLoc[s.x.Loc(int64(w.src), w.st)]
			if len(rs) == 0 {
				continue
			}
			if err := s.readStream(c, w.src, w.st, w.segs, rs, p, acc); err != nil {
				return fmt.Errorf("source %d stream %s: %w", w.src, w.st, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return acc.finish(p), nil
}

// readStream adds to acc what qs (sorted by ref) hold in range in one
// stream: its sealed segments in seq order, then its live tail.
func (s *store) readStream(c *catalog, src archive.SourceID, stream string, segs []archive.StreamSegment, qs []qref, p selectParams, acc *accumulator) error {
	k := streamRef{src, stream}
	var memo found
	for _, m := range segs {
		id := s.segID(src, m)
		if sp, ok := s.segSpan(k, id); ok && sp.outside(p.mint, p.maxt) {
			continue
		}
		// m is from c, this snapshot's catalog (or one of the same
		// version): its row id locates the segment (lazySegment).
		if err := s.readSegment(c.tx, id, m, qs, &memo, p, acc); err != nil {
			return err
		}
	}
	view, unlock, err := s.syncStream(c, src, stream, segs, timeRange{p.mint, p.maxt})
	if err != nil {
		return err
	}
	defer unlock()
	for _, q := range qs {
		err := view.read(q.ref, p.mint, p.maxt, func(fl []promsample.Sample, hs []promsample.Histogram, ex []promsample.Exemplar) error {
			if !p.exemplars {
				ex = nil
			}
			return acc.add(q.slot, fl, hs, ex, len(fl) > 0, p)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *store) segID(src archive.SourceID, m archive.StreamSegment) segmentID {
	return segmentID{path: s.a.Path(), source: src, stream: m.Stream, seq: m.Seq, rows: m.Rows,
		firstTS: m.FirstTS, lastTS: m.LastTS, size: m.Size}
}

// streamRef names one stream of one source.
type streamRef struct {
	src    archive.SourceID
	stream string
}

func (s *store) segmentBytes(tx *archive.ReadTx, id segmentID) ([]byte, error) {
	b, ok, err := tx.SegmentBytes(id.source, id.stream, id.seq)
	if err != nil {
		return nil, err
	}
	if !ok {
		// Inside one snapshot the catalog row just read cannot vanish.
		return nil, fmt.Errorf("segment %d listed but absent", id.seq)
	}
	return b, nil
}

func trimSamples(s []promsample.Sample, mint, maxt int64) []promsample.Sample {
	lo, _ := slices.BinarySearchFunc(s, mint, func(x promsample.Sample, t int64) int { return cmp.Compare(x.T, t) })
	hi := len(s)
	if maxt < math.MaxInt64 {
		hi, _ = slices.BinarySearchFunc(s, maxt+1, func(x promsample.Sample, t int64) int { return cmp.Compare(x.T, t) })
	}
	if lo >= hi {
		return nil
	}
	return s[lo:hi:hi]
}

func trimHists(s []promsample.Histogram, mint, maxt int64) []promsample.Histogram {
	lo, _ := slices.BinarySearchFunc(s, mint, func(x promsample.Histogram, t int64) int { return cmp.Compare(x.T, t) })
	hi := len(s)
	if maxt < math.MaxInt64 {
		hi, _ = slices.BinarySearchFunc(s, maxt+1, func(x promsample.Histogram, t int64) int { return cmp.Compare(x.T, t) })
	}
	if lo >= hi {
		return nil
	}
	return s[lo:hi:hi]
}

func trimExemplars(s []promsample.Exemplar, mint, maxt int64) []promsample.Exemplar {
	var out []promsample.Exemplar
	for _, e := range s {
		if e.T >= mint && e.T <= maxt {
			out = append(out, e)
		}
	}
	return out
}

func compareSample(a, b promsample.Sample) int {
	return cmp.Or(cmp.Compare(a.T, b.T), cmp.Compare(math.Float64bits(a.V), math.Float64bits(b.V)))
}

func sameSample(a, b promsample.Sample) bool {
	return a.T == b.T && math.Float64bits(a.V) == math.Float64bits(b.V)
}

// mergeSamples merges sorted pieces into one sorted slice without exact
// duplicates. One piece is returned as is (it is already canonical: the
// decoder sorts and de-duplicates).
func mergeSamples(ps [][]promsample.Sample) []promsample.Sample {
	switch len(ps) {
	case 0:
		return nil
	case 1:
		return ps[0]
	}
	n := 0
	disjoint := true // every piece starts after the one before ends
	for i, p := range ps {
		n += len(p)
		if i > 0 && len(p) > 0 && len(ps[i-1]) > 0 && p[0].T <= ps[i-1][len(ps[i-1])-1].T {
			disjoint = false
		}
	}
	out := make([]promsample.Sample, 0, n)
	for _, p := range ps {
		out = append(out, p...)
	}
	if disjoint && !slices.ContainsFunc(ps, func(p []promsample.Sample) bool { return len(p) == 0 }) {
		// Canonical pieces in time order with no shared timestamp: their
		// concatenation is canonical.
		return out
	}
	if !slices.IsSortedFunc(out, compareSample) {
		slices.SortFunc(out, compareSample)
	}
	return slices.CompactFunc(out, sameSample)
}

func sameHistogram(a, b promsample.Histogram) bool {
	if a.T != b.T {
		return false
	}
	switch {
	case a.H != nil && b.H != nil:
		return a.H.Equals(b.H)
	case a.FH != nil && b.FH != nil:
		return a.FH.Equals(b.FH)
	}
	return false
}

func mergeHists(ps [][]promsample.Histogram) []promsample.Histogram {
	switch len(ps) {
	case 0:
		return nil
	case 1:
		return ps[0]
	}
	var out []promsample.Histogram
	for _, p := range ps {
		out = append(out, p...)
	}
	slices.SortStableFunc(out, func(a, b promsample.Histogram) int { return cmp.Compare(a.T, b.T) })
	// Exact duplicates are adjacent only when a timestamp has at most a few
	// entries; compare within each run of equal timestamps.
	res := out[:0]
	for i := 0; i < len(out); {
		j := i + 1
		for j < len(out) && out[j].T == out[i].T {
			j++
		}
		start := len(res)
		for _, h := range out[i:j] {
			if !slices.ContainsFunc(res[start:], func(x promsample.Histogram) bool { return sameHistogram(x, h) }) {
				res = append(res, h)
			}
		}
		i = j
	}
	return res
}

func mergeExemplars(ps [][]promsample.Exemplar) []promsample.Exemplar {
	switch len(ps) {
	case 0:
		return nil
	case 1:
		return ps[0]
	}
	var out []promsample.Exemplar
	for _, p := range ps {
		out = append(out, p...)
	}
	c := func(a, b promsample.Exemplar) int {
		return cmp.Or(cmp.Compare(a.T, b.T), cmp.Compare(math.Float64bits(a.V), math.Float64bits(b.V)), labels.Compare(a.Labels, b.Labels))
	}
	slices.SortFunc(out, c)
	return slices.CompactFunc(out, func(a, b promsample.Exemplar) bool { return c(a, b) == 0 })
}
