package promread

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

// Queryable is the storage.Queryable (and ChunkQueryable, ExemplarQueryable)
// over an archive. It is safe for concurrent use.
type Queryable struct {
	s *store
}

var (
	_ storage.Queryable         = (*Queryable)(nil)
	_ storage.ChunkQueryable    = (*Queryable)(nil)
	_ storage.ExemplarQueryable = (*Queryable)(nil)
	_ storage.Querier           = (*querier)(nil)
	_ storage.ChunkQuerier      = (*chunkQuerier)(nil)
	_ storage.ExemplarQuerier   = (*exemplarQuerier)(nil)
	_ chunkenc.Iterator         = (*iterator)(nil)
	_ chunkenc.Iterator         = (*floatIterator)(nil)
)

// NewQueryable returns a Queryable over a; opts is validated (defaults
// filled). The archive stays the caller's to close.
func NewQueryable(a *archive.Archive, opts Options) (*Queryable, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	x := opts.Series
	if x == nil {
		x = seriesindex.New()
	}
	pages := opts.CacheBytes / pageCacheShare
	return &Queryable{s: &store{a: a, x: x, cache: newCache(opts.CacheBytes - pages), pages: newCache(pages),
		opts: opts, par: defaultParallelism()}}, nil
}

// CacheStats describes the segment cache: its segments' directories,
// layouts and metadata (7/8 of Options.CacheBytes).
func (q *Queryable) CacheStats() CacheStats { return q.s.cache.stats() }

// PageCacheStats describes the cache of lone series' pages and samples
// (the other 1/8 of Options.CacheBytes; segpages.go, segseries.go).
func (q *Queryable) PageCacheStats() CacheStats { return q.s.pages.stats() }

// Querier returns a querier over [mint, maxt] (Unix ms, inclusive). It
// holds no snapshot: each Select takes its own. All Selects of one querier
// share one Options.MaxSamples budget, and one reservation of
// Options.Memory, released by Close (the PromQL engine closes its querier
// once the query is evaluated).
func (q *Queryable) Querier(mint, maxt int64) (storage.Querier, error) {
	return &querier{s: q.s, mint: mint, maxt: maxt, budget: q.s.newBudget()}, nil
}

// ChunkQuerier returns a querier whose series come as XOR (and histogram)
// chunks of at most 120 samples.
func (q *Queryable) ChunkQuerier(mint, maxt int64) (storage.ChunkQuerier, error) {
	return &chunkQuerier{querier{s: q.s, mint: mint, maxt: maxt, budget: q.s.newBudget()}}, nil
}

// ExemplarQuerier returns a querier of stored exemplars.
func (q *Queryable) ExemplarQuerier(ctx context.Context) (storage.ExemplarQuerier, error) {
	return &exemplarQuerier{ctx: ctx, s: q.s}, nil
}

type querier struct {
	s          *store
	mint, maxt int64 // Unix ms, inclusive
	budget     *budget
}

func (q *querier) Close() error {
	q.budget.release()
	return nil
}

func (q *querier) params(hints *storage.SelectHints, ms []*labels.Matcher) selectParams {
	p := selectParams{mint: q.mint, maxt: q.maxt, matchers: ms, budget: q.budget, chain: true}
	if hints != nil {
		// As Prometheus's TSDB querier does: the hints carry the range this
		// selector needs (offset, @ and lookback applied).
		p.mint, p.maxt = hints.Start, hints.End
		p.labelsOnly = hints.Func == "series"
	}
	return p
}

func (q *querier) Select(ctx context.Context, _ bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	got, err := q.s.selectSeries(ctx, q.params(hints, ms))
	if err != nil {
		return storage.ErrSeriesSet(err)
	}
	labelsOnly := hints != nil && hints.Func == "series"
	return &seriesSet{list: got, labelsOnly: labelsOnly}
}

func (q *querier) LabelValues(ctx context.Context, name string, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	vals, err := q.s.labelValues(ctx, q.mint, q.maxt, name, ms)
	if err != nil {
		return nil, nil, err
	}
	if hints != nil && hints.Limit > 0 && len(vals) > hints.Limit {
		vals = vals[:hints.Limit]
	}
	return vals, nil, nil
}

func (q *querier) LabelNames(ctx context.Context, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	names, err := q.s.labelNames(ctx, q.mint, q.maxt, ms)
	if err != nil {
		return nil, nil, err
	}
	if hints != nil && hints.Limit > 0 && len(names) > hints.Limit {
		names = names[:hints.Limit]
	}
	return names, nil, nil
}

type chunkQuerier struct{ querier }

func (q *chunkQuerier) Select(ctx context.Context, sort bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.ChunkSeriesSet {
	return storage.NewSeriesSetToChunkSet(q.querier.Select(ctx, sort, hints, ms...))
}

// labelValues answers label values from the series index, brought up to a
// snapshot first for the streams the __name__ matchers allow: postings
// name the series and their spans say which hold data in range (at the
// granularity of the segments and tails holding them, as Prometheus's
// blocks do).
func (s *store) labelValues(ctx context.Context, mint, maxt int64, name string, ms []*labels.Matcher) ([]string, error) {
	s.asked.Store(time.Now().UnixNano())
	if err := s.syncAll(ctx, constrainNames(ms), timeRange{mint, maxt}); err != nil {
		return nil, err
	}
	return s.x.LabelValues(name, ms, mint, maxt), nil
}

func (s *store) labelNames(ctx context.Context, mint, maxt int64, ms []*labels.Matcher) ([]string, error) {
	s.asked.Store(time.Now().UnixNano())
	if err := s.syncAll(ctx, constrainNames(ms), timeRange{mint, maxt}); err != nil {
		return nil, err
	}
	return s.x.LabelNames(ms, mint, maxt), nil
}

func onlyNameMatchers(ms []*labels.Matcher) bool {
	for _, m := range ms {
		if m.Name != labels.MetricName {
			return false
		}
	}
	return true
}

func sortedKeys(set map[string]struct{}) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// seriesSet iterates an answer.
type seriesSet struct {
	list       []*series
	i          int
	labelsOnly bool
}

func (ss *seriesSet) Next() bool {
	if ss.i >= len(ss.list) {
		return false
	}
	ss.i++
	return true
}

func (ss *seriesSet) At() storage.Series {
	sr := ss.list[ss.i-1]
	if ss.labelsOnly {
		return &seriesView{sr: &series{lbls: sr.lbls}}
	}
	return &seriesView{sr: sr}
}

func (ss *seriesSet) Err() error                        { return nil }
func (ss *seriesSet) Warnings() annotations.Annotations { return nil }

type seriesView struct{ sr *series }

func (v *seriesView) Labels() labels.Labels { return v.sr.lbls }

func (v *seriesView) Iterator(it chunkenc.Iterator) chunkenc.Iterator {
	if len(v.sr.hists) == 0 {
		// Most series: floats only, walked by the engine sample by
		// sample through this interface.
		if x, ok := it.(*floatIterator); ok {
			*x = floatIterator{fl: v.sr.floats, rest: v.sr.rest, i: -1}
			return x
		}
		return &floatIterator{fl: v.sr.floats, rest: v.sr.rest, i: -1}
	}
	if x, ok := it.(*iterator); ok {
		x.reset(v.sr)
		return x
	}
	x := &iterator{}
	x.reset(v.sr)
	return x
}

// floatIterator walks a series that has floats only: iterator without
// the histogram cursor.
type floatIterator struct {
	fl   []promsample.Sample   // the piece being walked
	rest [][]promsample.Sample // the pieces after it (series.rest)
	i    int                   // the current sample of fl; -1 before the first Next or Seek, len(fl) when done
}

func (it *floatIterator) Next() chunkenc.ValueType {
	if it.i+1 < len(it.fl) {
		it.i++
		return chunkenc.ValFloat
	}
	if it.i < len(it.fl) && it.nextPiece() {
		return chunkenc.ValFloat
	}
	it.i = len(it.fl)
	return chunkenc.ValNone
}

// nextPiece moves to the first sample of the next non-empty piece; false
// when there is none (it.fl is then the last piece).
func (it *floatIterator) nextPiece() bool {
	for len(it.rest) > 0 {
		it.fl, it.rest = it.rest[0], it.rest[1:]
		if len(it.fl) > 0 {
			it.i = 0
			return true
		}
	}
	return false
}

func (it *floatIterator) Seek(t unixMillis) chunkenc.ValueType {
	if it.i < 0 {
		it.i = 0
	}
	if it.i >= len(it.fl) {
		if it.i > 0 || !it.nextPiece() {
			// Done (a walk past the end leaves i == len(fl) > 0), or no
			// sample at all.
			it.i = len(it.fl)
			return chunkenc.ValNone
		}
	}
	// The pieces follow each other in time: skip those that end before t.
	for it.fl[len(it.fl)-1].T < t {
		if !it.nextPiece() {
			it.i = len(it.fl)
			return chunkenc.ValNone
		}
	}
	if it.fl[it.i].T < t {
		it.i += searchT(len(it.fl)-it.i, func(k int) bool { return it.fl[it.i+k].T >= t })
		if it.i >= len(it.fl) {
			return chunkenc.ValNone
		}
	}
	return chunkenc.ValFloat
}

func (it *floatIterator) At() (int64, float64) {
	s := it.fl[it.i]
	return s.T, s.V
}

func (it *floatIterator) AtHistogram(*histogram.Histogram) (int64, *histogram.Histogram) {
	return it.fl[it.i].T, nil
}

func (it *floatIterator) AtFloatHistogram(*histogram.FloatHistogram) (int64, *histogram.FloatHistogram) {
	return it.fl[it.i].T, nil
}

func (it *floatIterator) AtT() int64  { return it.fl[it.i].T }
func (it *floatIterator) AtST() int64 { return 0 }
func (it *floatIterator) Err() error  { return nil }

// iterator walks a series' floats and histograms together in time order.
type iterator struct {
	fl  []promsample.Sample
	hs  []promsample.Histogram
	fi  int // index of the current float, or next when cur is a histogram
	hi  int
	cur chunkenc.ValueType
	// curIsFloat says which cursor is current when cur != ValNone.
	started bool
}

func (it *iterator) reset(sr *series) {
	*it = iterator{fl: sr.floats, hs: sr.hists, fi: -1, hi: -1}
}

// pick chooses the current value from the next float (at fi) and the next
// histogram (at hi).
func (it *iterator) pick() chunkenc.ValueType {
	hasF, hasH := it.fi < len(it.fl), it.hi < len(it.hs)
	switch {
	case hasF && (!hasH || it.fl[it.fi].T <= it.hs[it.hi].T):
		it.cur = chunkenc.ValFloat
	case hasH:
		if it.hs[it.hi].H != nil {
			it.cur = chunkenc.ValHistogram
		} else {
			it.cur = chunkenc.ValFloatHistogram
		}
	default:
		it.cur = chunkenc.ValNone
	}
	return it.cur
}

func (it *iterator) Next() chunkenc.ValueType {
	if !it.started {
		it.started = true
		it.fi, it.hi = 0, 0
		return it.pick()
	}
	switch it.cur {
	case chunkenc.ValNone:
		return chunkenc.ValNone
	case chunkenc.ValFloat:
		it.fi++
	default:
		it.hi++
	}
	return it.pick()
}

// unixMillis is an alias, so Seek's parameter is an int64 as
// chunkenc.Iterator requires; the alias also keeps go vet's io.Seeker
// signature check (stdmethods) from mistaking this Seek for that one.
type unixMillis = int64

func (it *iterator) Seek(t unixMillis) chunkenc.ValueType {
	if it.started && it.cur != chunkenc.ValNone && it.AtT() >= t {
		return it.cur
	}
	if it.started && it.cur == chunkenc.ValNone {
		return chunkenc.ValNone
	}
	if !it.started {
		it.started = true
		it.fi, it.hi = 0, 0
	}
	it.fi += searchT(len(it.fl)-it.fi, func(i int) bool { return it.fl[it.fi+i].T >= t })
	it.hi += searchT(len(it.hs)-it.hi, func(i int) bool { return it.hs[it.hi+i].T >= t })
	return it.pick()
}

func searchT(n int, f func(int) bool) int {
	lo, hi := 0, n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if !f(m) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

func (it *iterator) At() (int64, float64) {
	s := it.fl[it.fi]
	return s.T, s.V
}

func (it *iterator) AtHistogram(h *histogram.Histogram) (int64, *histogram.Histogram) {
	x := it.hs[it.hi]
	if x.H == nil {
		return x.T, nil
	}
	if h == nil {
		return x.T, x.H.Copy() // the cached value is shared: never hand it out
	}
	x.H.CopyTo(h)
	return x.T, h
}

func (it *iterator) AtFloatHistogram(fh *histogram.FloatHistogram) (int64, *histogram.FloatHistogram) {
	x := it.hs[it.hi]
	if x.H != nil {
		return x.T, x.H.ToFloat(fh)
	}
	if fh == nil {
		return x.T, x.FH.Copy()
	}
	x.FH.CopyTo(fh)
	return x.T, fh
}

func (it *iterator) AtT() int64 {
	if it.cur == chunkenc.ValFloat {
		return it.fl[it.fi].T
	}
	return it.hs[it.hi].T
}

func (it *iterator) AtST() int64 { return 0 }
func (it *iterator) Err() error  { return nil }

// exemplarQuerier answers query_exemplars.
type exemplarQuerier struct {
	ctx context.Context
	s   *store
}

func (q *exemplarQuerier) Select(start, end int64, matcherSets ...[]*labels.Matcher) ([]exemplar.QueryResult, error) {
	byKey := map[string]*exemplar.QueryResult{}
	for _, ms := range matcherSets {
		got, err := q.s.selectSeries(q.ctx, selectParams{mint: start, maxt: end, matchers: ms, exemplars: true})
		if err != nil {
			return nil, err
		}
		for _, sr := range got {
			if len(sr.exemplars) == 0 {
				continue
			}
			k := sr.lbls.String()
			r := byKey[k]
			if r == nil {
				r = &exemplar.QueryResult{SeriesLabels: sr.lbls}
				byKey[k] = r
			}
			for _, e := range sr.exemplars {
				r.Exemplars = append(r.Exemplars, exemplar.Exemplar{Labels: e.Labels, Value: e.V, Ts: e.T, HasTs: true})
			}
		}
	}
	out := make([]exemplar.QueryResult, 0, len(byKey))
	for _, r := range byKey {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b exemplar.QueryResult) int {
		return strings.Compare(a.SeriesLabels.String(), b.SeriesLabels.String())
	})
	return out, nil
}
