package forward

import (
	"math"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// seriesState is one series as an upstream's loop knows it: its labels
// and shard (immutable once made, so shards may read them), and what the
// loop last dispatched of it (the loop's alone).
//
// The dispatch filter is what keeps a series in timestamp order at the
// upstream: a float sample goes out only if its timestamp is after the
// last one dispatched (likewise histograms, and exemplars that carry a
// timestamp). Remote-write receivers refuse a sample older than the
// series' newest (Prometheus rolls back the whole request on the first
// one), so the filter is also what lets the forwarder read a unit again
// (a segment that holds rows it already sent as rows) without sending
// its samples twice. What it holds back is counted: exact duplicates (a
// sender's retry, stored twice) as "duplicate", anything else as
// "out_of_order".
type seriesState struct {
	lbls  labels.Labels
	hash  uint64
	shard int
	// rw1Labels is lbls encoded once as remote-write 1.0 TimeSeries.labels
	// fields, which every request of the series repeats (re-encoding them
	// from lbls cost a tenth of a drain's CPU). Immutable, like lbls.
	rw1Labels []byte

	lastT    int64 // newest float sample dispatched (Unix ms); valid when hasT
	lastBits uint64
	lastHT   int64 // newest histogram dispatched; valid when hasHT
	lastExT  int64 // newest exemplar with a timestamp dispatched
	hasT     bool
	hasHT    bool
	seen     time.Time // last dispatched or read, for forgetting idle series

	next *seriesState // hash collision chain
}

// seriesTable interns series by label hash (collisions chained and told
// apart by the labels themselves), so that a series read again (in the
// next row of its epoch, the next segment, after a seal) finds its filter.
// Owned by one upstream's loop.
type seriesTable struct {
	m      map[uint64]*seriesState
	shards int
}

func newSeriesTable(shards int) *seriesTable {
	return &seriesTable{m: map[uint64]*seriesState{}, shards: shards}
}

// get returns the series with labels ls, adding it on first sight.
func (t *seriesTable) get(ls labels.Labels, now time.Time) *seriesState {
	h := ls.Hash()
	for s := t.m[h]; s != nil; s = s.next {
		if labels.Equal(s.lbls, ls) {
			s.seen = now
			return s
		}
	}
	s := newSeriesState(ls, h, int(h%uint64(t.shards)))
	s.seen, s.next = now, t.m[h]
	t.m[h] = s
	return s
}

// newSeriesState makes a series' state, its wire labels included.
func newSeriesState(ls labels.Labels, hash uint64, shard int) *seriesState {
	return &seriesState{lbls: ls, hash: hash, shard: shard, rw1Labels: appendLabels(nil, 1, ls)}
}

func (t *seriesTable) len() int { return len(t.m) }

// forget drops series not seen since before; returns how many. A series
// forgotten and seen again starts with an empty filter, which costs at
// most a duplicate of what it had sent.
func (t *seriesTable) forget(before time.Time) int {
	n := 0
	for h, s := range t.m {
		var keep *seriesState
		for c := s; c != nil; {
			next := c.next
			if c.seen.Before(before) {
				n++
			} else {
				c.next = keep
				keep = c
			}
			c = next
		}
		if keep == nil {
			delete(t.m, h)
		} else {
			t.m[h] = keep
		}
	}
	return n
}

// filterCounts are what the dispatch filter held back.
type filterCounts struct {
	duplicate, outOfOrder int64
}

// filterSamples returns the samples of in (in order) that go out, appending
// them to dst (or returning in itself when all do), and advances s.
func (s *seriesState) filterSamples(dst, in []promsample.Sample, fc *filterCounts) []promsample.Sample {
	all := true
	for i, smp := range in {
		if !s.hasT || smp.T > s.lastT {
			s.lastT, s.lastBits, s.hasT = smp.T, f64bits(smp.V), true
			if !all {
				dst = append(dst, smp)
			}
			continue
		}
		if smp.T == s.lastT && f64bits(smp.V) == s.lastBits {
			fc.duplicate++
		} else {
			fc.outOfOrder++
		}
		if all {
			all = false
			dst = append(dst, in[:i]...)
		}
	}
	if all {
		return in
	}
	return dst
}

func (s *seriesState) filterHistograms(in []promsample.Histogram, fc *filterCounts) []promsample.Histogram {
	var out []promsample.Histogram
	all := true
	for i, h := range in {
		if !s.hasHT || h.T > s.lastHT {
			s.lastHT, s.hasHT = h.T, true
			if !all {
				out = append(out, h)
			}
			continue
		}
		if h.T == s.lastHT {
			fc.duplicate++
		} else {
			fc.outOfOrder++
		}
		if all {
			all = false
			out = append(out, in[:i]...)
		}
	}
	if all {
		return in
	}
	return out
}

// filterExemplars holds back exemplars at or before the last one sent. An
// exemplar without a timestamp (0: its sender gave none) always goes.
func (s *seriesState) filterExemplars(in []promsample.Exemplar, fc *filterCounts) []promsample.Exemplar {
	var out []promsample.Exemplar
	all := true
	for i, e := range in {
		if e.T == 0 || e.T > s.lastExT {
			if e.T != 0 {
				s.lastExT = e.T
			}
			if !all {
				out = append(out, e)
			}
			continue
		}
		fc.duplicate++
		if all {
			all = false
			out = append(out, in[:i]...)
		}
	}
	if all {
		return in
	}
	return out
}

func f64bits(v float64) uint64 { return math.Float64bits(v) }
