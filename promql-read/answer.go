package promread

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

// How a Select's answer is put together. The accumulator gathers, per
// series (by its slot: its place in the question's refs), the pieces each segment, live
// tail or source holds in range; finish names them by their labels and
// sorts them; materialize (or the SAMPLES encoder, straight into protobuf)
// merges each series' pieces, on several goroutines when the answer is
// large.

type pieces struct {
	any    bool // labelsOnly: the series has data in range
	ref    seriesindex.Ref
	lbls   labels.Labels
	floats [][]promsample.Sample  // decoded pieces, each canonical and in range
	first  [4][]promsample.Sample // floats' first backing array (newPieces)
	hists  [][]promsample.Histogram
	ex     [][]promsample.Exemplar
}

// floatBound is an upper bound of the floats pc holds in [mint, maxt].
func (pc *pieces) floatBound(mint, maxt int64) int {
	n := 0
	for _, f := range pc.floats {
		n += len(f)
	}
	return n
}

// chained reports whether pc's floats are pieces that follow each other
// in time, each non-empty and starting after the one before ends: then
// they are, one after another, what floatsInto would merge them into
// (each piece is canonical and in range).
func (pc *pieces) chained() bool {
	for k, f := range pc.floats {
		if len(f) == 0 || k > 0 && f[0].T <= pc.floats[k-1][len(pc.floats[k-1])-1].T {
			return false
		}
	}
	return true
}

// floatsInto appends to dst the floats of pc in [mint, maxt], merged:
// sorted by (T, value bits), exact duplicates dropped. raw is how many the
// pieces held before merging.
func (pc *pieces) floatsInto(mint, maxt int64, dst []promsample.Sample) (out []promsample.Sample, raw int, err error) {
	start := len(dst)
	// disjoint: every non-empty piece starts after the one before ends.
	// Each piece is canonical, so then their concatenation is.
	disjoint := true
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
	ctx context.Context // the question's: a wait for memory ends with it
	x   *seriesindex.Index
	// refs are the question's series, and slots their pieces, by the same
	// place (a series' slot: qref). A piece is filed by that index, not by
	// a map probe: at a million series a map of a metric's 166,700 refs,
	// probed once per series and segment, missed the CPU cache on nearly
	// every probe (7% of the CPU of sum by (job) over an hour).
	refs   []seriesindex.Ref
	slots  []*pieces // nil: nothing added yet
	order  []*pieces // as first seen
	budget *budget
	raw    int // floats and histograms added
	// free is the rest of the last block of pieces allocated (newPieces),
	// and floats the slab the segments' floats are copied into (copyFloats):
	// a whole metric's answer is hundreds of thousands of series, each with
	// a piece from every segment, and allocating each on its own was a
	// third of that answer's allocations.
	free   []pieces
	floats slab
}

// piecesBlock is how many pieces newPieces allocates at once.
const piecesBlock = 256

// newPieces returns new, empty pieces of series ref.
func (a *accumulator) newPieces(ref seriesindex.Ref) *pieces {
	if len(a.free) == 0 {
		a.free = make([]pieces, min(piecesBlock, max(1, len(a.refs)-len(a.order))))
	}
	pc := &a.free[0]
	a.free = a.free[1:]
	pc.ref = ref
	pc.floats = pc.first[:0]
	return pc
}

// copyFloats returns a copy of fl from the accumulator's slab.
func (a *accumulator) copyFloats(fl []promsample.Sample) []promsample.Sample {
	out := append(a.floats.alloc(len(fl)), fl...)
	a.floats.used(len(fl))
	return out
}

// qref is one series of a question: its ref in the series index and its
// slot in the accumulator.
type qref struct {
	ref  seriesindex.Ref
	slot int32
}

func newAccumulator(ctx context.Context, x *seriesindex.Index, b *budget) *accumulator {
	return &accumulator{ctx: ctx, x: x, budget: b}
}

// setRefs gives the accumulator the question's series; the i-th is in
// slot i. Called once, before anything is added.
func (a *accumulator) setRefs(refs []seriesindex.Ref) {
	a.refs = refs
	a.slots = make([]*pieces, len(refs))
}

// add records one piece of the series in slot; hasFloats says the series
// has a float in range even when fl is not given (labelsOnly). The slices
// are the accumulator's from now on (read only).
func (a *accumulator) add(slot int32, fl []promsample.Sample, hs []promsample.Histogram, ex []promsample.Exemplar, hasFloats bool, p selectParams) error {
	if p.labelsOnly {
		if !hasFloats && len(fl)+len(hs)+len(ex) == 0 {
			return nil
		}
		if a.slots[slot] == nil {
			pc := a.newPieces(a.refs[slot])
			pc.any = true
			a.slots[slot] = pc
			a.order = append(a.order, pc)
		}
		return nil
	}
	if len(fl)+len(hs)+len(ex) == 0 {
		return nil
	}
	if err := a.budget.take(a.ctx, len(fl), len(hs)); err != nil {
		return err
	}
	a.raw += len(fl) + len(hs)
	pc := a.slots[slot]
	if pc == nil {
		pc = a.newPieces(a.refs[slot])
		a.slots[slot] = pc
		a.order = append(a.order, pc)
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

// selection is one Select's answer before its pieces are merged: every
// series with a piece in range, sorted by labels.
type selection struct {
	mint, maxt int64
	list       []*pieces
	budget     *budget
	raw        atomic.Int64 // as accumulator.raw
}

// finish names the series by their labels and sorts them.
func (a *accumulator) finish(p selectParams) *selection {
	var sb labels.ScratchBuilder
	for _, pc := range a.order {
		pc.lbls = a.x.LabelsWith(pc.ref, &sb)
	}
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
func materialize(ctx context.Context, sel *selection, exemplars, chain bool, par parallelism) ([]*series, error) {
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
			case len(pc.floats) == 1:
				sr.floats = pc.floats[0]
			case len(pc.floats) > 1 && chain && len(pc.hists) == 0 && pc.chained():
				// Handed over as they are: merging them was a copy of
				// every float of the answer into new memory (at 10 k
				// series, a third of the CPU of sum by (job) over an hour).
				sr.floats, sr.rest = pc.floats[0], pc.floats[1:]
			case len(pc.floats) > 1:
				n := pc.floatBound(sel.mint, sel.maxt)
				buf := slabs[w].alloc(n)
				fl, _, err := pc.floatsInto(sel.mint, sel.maxt, buf)
				if err != nil {
					return err
				}
				if len(fl) <= n {
					slabs[w].used(len(fl)) // else append moved it out
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
