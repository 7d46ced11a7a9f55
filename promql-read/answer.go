package promread

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// How a Select's answer is put together. The accumulator gathers, per
// series (by label set), the pieces each segment, live tail or source
// holds in range. A cached entry's floats stay packed in the piece (a
// packedRef): they are decoded only when the answer is used, by
// materialize for a storage.SeriesSet or by the SAMPLES encoder straight
// into protobuf, and then on several goroutines when the answer is large.

// packedRef is one series of a cached entry whose floats in the Select's
// range are not decoded yet.
type packedRef struct {
	e *metricEntry
	s *packedSeries
}

type pieces struct {
	any    bool // labelsOnly: the series has data in range
	lbls   labels.Labels
	floats [][]promsample.Sample // decoded pieces, each canonical and in range
	packed []packedRef           // packed pieces, canonical, not yet cut to the range
	hists  [][]promsample.Histogram
	ex     [][]promsample.Exemplar
}

// floatBound is an upper bound of the floats pc holds in [mint, maxt].
func (pc *pieces) floatBound(mint, maxt int64) int {
	n := 0
	for _, r := range pc.packed {
		n += r.e.countIn(r.s, mint, maxt)
	}
	for _, f := range pc.floats {
		n += len(f)
	}
	return n
}

// floatsInto appends to dst the floats of pc in [mint, maxt], merged:
// sorted by (T, value bits), exact duplicates dropped. raw is how many the
// pieces held before merging.
func (pc *pieces) floatsInto(mint, maxt int64, dst []promsample.Sample) (out []promsample.Sample, raw int, err error) {
	start := len(dst)
	// disjoint: every non-empty piece starts after the one before ends.
	// Each piece is canonical, so then their concatenation is.
	disjoint := true
	var u unpacker
	for _, r := range pc.packed {
		n0 := len(dst)
		if dst, err = u.floats(r.e, r.s, mint, maxt, dst); err != nil {
			return dst[:start], 0, err
		}
		if n0 > start && len(dst) > n0 && dst[n0].T <= dst[n0-1].T {
			disjoint = false
		}
	}
	for _, f := range pc.floats {
		if len(f) == 0 {
			continue
		}
		if len(dst) > start && f[0].T <= dst[len(dst)-1].T {
			disjoint = false
		}
		dst = append(dst, f...)
	}
	raw = len(dst) - start
	if disjoint {
		return dst, raw, nil
	}
	merged := dst[start:]
	if !slices.IsSortedFunc(merged, compareSample) {
		slices.SortFunc(merged, compareSample)
	}
	merged = slices.CompactFunc(merged, sameSample)
	return dst[:start+len(merged)], raw, nil
}

// accumulator gathers the pieces of each series of one Select.
type accumulator struct {
	byKey  map[string]*pieces
	order  []*pieces // as first seen
	key    []byte
	rest   []*labels.Matcher // addEntry's scratch
	idx    []int32           // addEntry's scratch
	budget *budget
	raw    int // decoded floats and histograms added (packed floats count when decoded)
}

func newAccumulator(b *budget) *accumulator {
	return &accumulator{byKey: map[string]*pieces{}, budget: b}
}

// addEntry adds the series of a cached metric entry that match p. With
// equality matchers on labels other than __name__, only the series in
// all of their postings are visited, never every series of the metric.
// Only the matchers the entry does not already answer are tested per
// series: not the __name__ ones (an entry holds one metric, and its name
// was matched to pick it: readStream), nor those the postings answered.
func (a *accumulator) addEntry(e *metricEntry, p selectParams) error {
	idx, ok, buf := e.postingsFor(p.matchers, a.idx)
	a.idx = buf[:0]
	rest := a.rest[:0]
	for _, m := range p.matchers {
		if m.Name != labels.MetricName && !byPostings(m) {
			rest = append(rest, m)
		}
	}
	a.rest = rest
	if ok {
		for _, k := range idx {
			if err := a.addIfMatch(e, &e.series[k], rest, p); err != nil {
				return err
			}
		}
		return nil
	}
	for k := range e.series {
		if err := a.addIfMatch(e, &e.series[k], rest, p); err != nil {
			return err
		}
	}
	return nil
}

func (a *accumulator) addIfMatch(e *metricEntry, sr *packedSeries, ms []*labels.Matcher, p selectParams) error {
	if !matchesAll(ms, sr.lbls) {
		return nil
	}
	return a.addPacked(e, sr, p)
}

// addPacked takes the part of a packed series in [p.mint, p.maxt]: its
// histograms and exemplars now, its floats as a packedRef.
func (a *accumulator) addPacked(e *metricEntry, sr *packedSeries, p selectParams) error {
	hs := trimHists(e.hists(sr), p.mint, p.maxt)
	var ex []promsample.Exemplar
	if p.exemplars {
		ex = trimExemplars(e.exemplars(sr), p.mint, p.maxt)
	}
	if p.labelsOnly {
		if len(hs)+len(ex) == 0 {
			var u unpacker
			ok, err := e.hasFloatsIn(&u, sr, p.mint, p.maxt)
			if err != nil || !ok {
				return err
			}
		}
		return a.addParts(sr.lbls, nil, nil, hs, ex, true, p)
	}
	var ref *packedRef
	if e.countIn(sr, p.mint, p.maxt) > 0 {
		ref = &packedRef{e: e, s: sr}
	}
	return a.addParts(sr.lbls, nil, ref, hs, ex, false, p)
}

// add takes the part of sr in [p.mint, p.maxt]; trim is false when sr is
// already restricted to it.
func (a *accumulator) add(sr *promsample.Series, p selectParams, trim bool) error {
	fl, hs, ex := sr.Samples, sr.Histograms, sr.Exemplars
	if trim {
		fl = trimSamples(fl, p.mint, p.maxt)
		hs = trimHists(hs, p.mint, p.maxt)
		ex = trimExemplars(ex, p.mint, p.maxt)
	}
	if !p.exemplars {
		ex = nil
	}
	return a.addParts(sr.Labels, fl, nil, hs, ex, len(fl) > 0, p)
}

// addParts records one piece of a series; hasFloats says the series has a
// float in range even when fl is not given (labelsOnly).
func (a *accumulator) addParts(lbls labels.Labels, fl []promsample.Sample, ref *packedRef, hs []promsample.Histogram, ex []promsample.Exemplar, hasFloats bool, p selectParams) error {
	if !hasFloats && ref == nil && len(fl)+len(hs)+len(ex) == 0 {
		return nil
	}
	if p.labelsOnly {
		a.key = lbls.Bytes(a.key[:0])
		if a.byKey[string(a.key)] == nil {
			pc := &pieces{lbls: lbls, any: true}
			a.byKey[string(a.key)] = pc
			a.order = append(a.order, pc)
		}
		return nil
	}
	if ref == nil && len(fl)+len(hs)+len(ex) == 0 {
		return nil
	}
	if err := a.budget.take(len(fl) + len(hs)); err != nil {
		return err
	}
	a.raw += len(fl) + len(hs)
	a.key = lbls.Bytes(a.key[:0])
	pc := a.byKey[string(a.key)]
	if pc == nil {
		pc = &pieces{lbls: lbls}
		a.byKey[string(a.key)] = pc
		a.order = append(a.order, pc)
	}
	if ref != nil {
		pc.packed = append(pc.packed, *ref)
	}
	if len(fl) > 0 {
		pc.floats = append(pc.floats, fl)
	}
	if len(hs) > 0 {
		pc.hists = append(pc.hists, hs)
	}
	if len(ex) > 0 {
		pc.ex = append(pc.ex, ex)
	}
	return nil
}

// selection is one Select's answer before its packed floats are decoded:
// every series with a piece in range, sorted by labels.
type selection struct {
	mint, maxt int64
	list       []*pieces
	budget     *budget
	raw        atomic.Int64 // as accumulator.raw, packed floats included once decoded
}

// finish sorts the series by labels. They usually come sorted already
// (one source, and each entry is sorted), so that is checked first.
func (a *accumulator) finish(p selectParams) *selection {
	cmp := func(x, y *pieces) int { return labels.Compare(x.lbls, y.lbls) }
	if !slices.IsSortedFunc(a.order, cmp) {
		slices.SortFunc(a.order, cmp)
	}
	sel := &selection{mint: p.mint, maxt: p.maxt, list: a.order, budget: a.budget}
	sel.raw.Store(int64(a.raw))
	return sel
}

// parallelism says when and how widely an answer is decoded and encoded
// on several goroutines.
type parallelism struct {
	workers int // goroutines per answer, the caller's included; <= 1: none
	// minSamples is the smallest answer (an upper bound of its floats)
	// worth more than one goroutine: below it, starting them costs more
	// than it saves.
	minSamples int
	// runSamples is about how many floats one unit of work (a run of
	// consecutive series) holds: small enough to balance the workers,
	// large enough to compress well as one snappy piece (see
	// samplesWriter).
	runSamples int
}

func defaultParallelism() parallelism {
	return parallelism{workers: min(runtime.GOMAXPROCS(0), 8), minSamples: 1 << 14, runSamples: 1 << 13}
}

// runs splits list into runs of consecutive series of about par.runSamples
// floats each (a series is never split): it returns the runs' ends.
func (par parallelism) runs(list []*pieces, mint, maxt int64) (ends []int, total int) {
	n := 0
	for i, pc := range list {
		b := pc.floatBound(mint, maxt) + 1 // + 1: labels and histograms cost too
		for _, h := range pc.hists {
			b += len(h)
		}
		n += b
		total += b
		if n >= par.runSamples {
			ends = append(ends, i+1)
			n = 0
		}
	}
	if n > 0 {
		ends = append(ends, len(list))
	}
	return ends, total
}

// width is how many goroutines an answer of total (bounded) floats gets.
func (par parallelism) width(total int) int {
	if par.workers <= 1 || total < par.minSamples {
		return 1
	}
	return par.workers
}

// parallel calls fn(w, i) once for every i in [0, n), on width
// goroutines (the caller's and width-1 more); w in [0, width) names the
// goroutine, so fn may keep per-goroutine state indexed by it. After an
// error (or ctx's end) no new i is started; it returns the error of the
// lowest failing i, or ctx's error. Every goroutine has returned when it
// returns.
func parallel(ctx context.Context, width, n int, fn func(w, i int) error) error {
	width = min(width, n)
	if width <= 1 {
		for i := 0; i < n; i++ {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := fn(0, i); err != nil {
				return err
			}
		}
		return nil
	}
	var (
		next    atomic.Int64
		stop    atomic.Bool
		mu      sync.Mutex
		firstI  = n
		firstEr error
		wg      sync.WaitGroup
	)
	work := func(w int) {
		for !stop.Load() {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			err := ctx.Err()
			if err == nil {
				err = fn(w, i)
			}
			if err != nil {
				stop.Store(true)
				mu.Lock()
				if i < firstI {
					firstI, firstEr = i, err
				}
				mu.Unlock()
				return
			}
		}
	}
	wg.Add(width - 1)
	for w := 1; w < width; w++ {
		go func() {
			defer wg.Done()
			work(w)
		}()
	}
	work(0)
	wg.Wait()
	return firstEr
}

// slab hands out slices of samples from larger allocations: one
// allocation for many series. A slice handed out is capped at its length
// and its part of the slab is never written again.
type slab struct {
	buf  []promsample.Sample
	next int
}

const (
	minSlab = 1 << 10
	maxSlab = 1 << 16
)

// alloc returns an empty slice with room for n samples. Small first
// requests get exactly what they ask (a one-series answer allocates its
// series only); later ones grow the slab, doubling up to maxSlab.
func (s *slab) alloc(n int) []promsample.Sample {
	if cap(s.buf)-len(s.buf) < n {
		if s.next == 0 {
			s.buf, s.next = make([]promsample.Sample, 0, n), minSlab
		} else {
			s.buf = make([]promsample.Sample, 0, max(n, s.next))
			s.next = min(2*s.next, maxSlab)
		}
	}
	return s.buf[len(s.buf) : len(s.buf) : len(s.buf)+n]
}

// used marks the first n samples of the last alloc as handed out.
func (s *slab) used(n int) { s.buf = s.buf[:len(s.buf)+n] }

// materialize decodes a selection into series (their floats in slabs, or
// shared with the pieces when a series has one decoded piece), on several
// goroutines when it is large. Series left with nothing in range are
// dropped, except labelsOnly ones.
func materialize(ctx context.Context, sel *selection, exemplars bool, par parallelism) ([]*series, error) {
	out := make([]*series, len(sel.list))
	ends, total := par.runs(sel.list, sel.mint, sel.maxt)
	width := par.width(total)
	slabs := make([]slab, width)
	err := parallel(ctx, width, len(ends), func(w, run int) error {
		lo := 0
		if run > 0 {
			lo = ends[run-1]
		}
		for i := lo; i < ends[run]; i++ {
			pc := sel.list[i]
			sr := &series{lbls: pc.lbls, hists: mergeHists(pc.hists)}
			if exemplars {
				sr.exemplars = mergeExemplars(pc.ex)
			}
			switch {
			case len(pc.packed) == 0 && len(pc.floats) == 1:
				sr.floats = pc.floats[0] // counted when added
			case len(pc.packed)+len(pc.floats) > 0:
				n := pc.floatBound(sel.mint, sel.maxt)
				buf := slabs[w].alloc(n)
				fl, raw, err := pc.floatsInto(sel.mint, sel.maxt, buf)
				if err != nil {
					return err
				}
				if len(fl) <= n {
					slabs[w].used(len(fl)) // else append moved it out
				}
				if err := takePacked(sel, pc, raw); err != nil {
					return err
				}
				sr.floats = fl[:len(fl):len(fl)]
			}
			if len(sr.floats)+len(sr.hists)+len(sr.exemplars) == 0 && !pc.any {
				continue
			}
			out[i] = sr
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(out, func(sr *series) bool { return sr == nil }), nil
}

// takePacked charges the floats decoded from pc's packed pieces (raw of
// all its floats, less the decoded pieces already charged when added).
func takePacked(sel *selection, pc *pieces, raw int) error {
	for _, f := range pc.floats {
		raw -= len(f)
	}
	sel.raw.Add(int64(raw))
	return sel.budget.take(raw)
}
