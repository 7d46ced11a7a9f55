package promread

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// TestFloatIteratorMatchesIterator: on float-only series the float
// iterator answers every Next and Seek as the general iterator does
// (equal timestamps, seeks backwards, past the end, on empty series).
func TestFloatIteratorMatchesIterator(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for round := 0; round < 500; round++ {
		fl, ts := randomFloats(rng)
		sr := &series{floats: fl}
		f := (&seriesView{sr: sr}).Iterator(nil)
		if _, ok := f.(*floatIterator); !ok {
			t.Fatalf("a float-only series got a %T", f)
		}
		var g iterator
		g.reset(sr)
		sameAnswers(t, rng, f, &g, 30, ts, fmt.Sprintf("round %d", round))
	}
}

// randomFloats returns up to 39 float samples with timestamps that repeat
// or move on by 1 or 2, and the last timestamp reached.
func randomFloats(rng *rand.Rand) ([]promsample.Sample, int64) {
	var fl []promsample.Sample
	ts := int64(rng.Intn(100))
	for i := rng.Intn(40); i > 0; i-- {
		fl = append(fl, promsample.Sample{T: ts, V: float64(i)})
		ts += int64(rng.Intn(3)) // 0: an equal timestamp
	}
	return fl, ts
}

// sameAnswers calls Next or Seek (to a time up to maxT+9) ops times on f
// and g alike and fails unless they answer the same.
func sameAnswers(t *testing.T, rng *rand.Rand, f, g chunkenc.Iterator, ops int, maxT int64, what string) {
	t.Helper()
	for op := 0; op < ops; op++ {
		var a, b chunkenc.ValueType
		if rng.Intn(2) == 0 {
			a, b = f.Next(), g.Next()
		} else {
			at := int64(rng.Intn(int(maxT) + 10))
			a, b = f.Seek(at), g.Seek(at)
		}
		if a != b {
			t.Fatalf("%s op %d: %v, want %v", what, op, a, b)
		}
		if a == chunkenc.ValNone {
			continue
		}
		ft, fv := f.At()
		gt, gv := g.At()
		if ft != gt || fv != gv || f.AtT() != g.AtT() {
			t.Fatalf("%s op %d: (%d, %v), want (%d, %v)", what, op, ft, fv, gt, gv)
		}
	}
}

// TestChainedFloatIteratorMatchesOneSlice: a float series handed over as
// pieces that follow each other (series.rest) answers every Next and Seek
// as the same floats in one slice do, also through a reused iterator.
func TestChainedFloatIteratorMatchesOneSlice(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	var reused chunkenc.Iterator
	for round := 0; round < 500; round++ {
		fl, ts := randomFloats(rng)
		// Cut where the time moves on, as chained requires.
		var cut [][]promsample.Sample
		lo := 0
		for i := 1; i < len(fl); i++ {
			if fl[i].T > fl[i-1].T && rng.Intn(3) == 0 {
				cut = append(cut, fl[lo:i])
				lo = i
			}
		}
		if lo < len(fl) {
			cut = append(cut, fl[lo:])
		}
		pc := &pieces{floats: cut}
		if len(cut) > 0 && !pc.chained() {
			t.Fatalf("round %d: pieces cut where the time moves on are not chained", round)
		}
		sr := &series{}
		if len(cut) > 0 {
			sr.floats, sr.rest = cut[0], cut[1:]
		}
		f := (&seriesView{sr: sr}).Iterator(reused)
		reused = f
		g := (&seriesView{sr: &series{floats: fl}}).Iterator(nil)
		sameAnswers(t, rng, f, g, 40, ts, fmt.Sprintf("round %d (%d pieces)", round, len(cut)))
	}
}

// TestChainedRequiresPiecesInOrder: pieces that overlap, touch at one
// timestamp, or include an empty one are merged, not chained.
func TestChainedRequiresPiecesInOrder(t *testing.T) {
	s := func(ts ...int64) []promsample.Sample {
		var out []promsample.Sample
		for _, t := range ts {
			out = append(out, promsample.Sample{T: t})
		}
		return out
	}
	for _, c := range []struct {
		name   string
		floats [][]promsample.Sample
		want   bool
	}{
		{"in order", [][]promsample.Sample{s(1, 2), s(3), s(7, 9)}, true},
		{"the same timestamp across a seam", [][]promsample.Sample{s(1, 2), s(2, 3)}, false},
		{"overlapping", [][]promsample.Sample{s(1, 5), s(3, 7)}, false},
		{"out of order", [][]promsample.Sample{s(5, 6), s(1, 2)}, false},
		{"an empty piece", [][]promsample.Sample{s(1), nil, s(3)}, false},
	} {
		if got := (&pieces{floats: c.floats}).chained(); got != c.want {
			t.Errorf("%s: chained = %v, want %v", c.name, got, c.want)
		}
	}
}
