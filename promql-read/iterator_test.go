package promread

import (
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
		var fl []promsample.Sample
		ts := int64(rng.Intn(100))
		for i := rng.Intn(40); i > 0; i-- {
			fl = append(fl, promsample.Sample{T: ts, V: float64(i)})
			ts += int64(rng.Intn(3)) // 0: an equal timestamp
		}
		sr := &series{floats: fl}
		f := (&seriesView{sr: sr}).Iterator(nil)
		if _, ok := f.(*floatIterator); !ok {
			t.Fatalf("a float-only series got a %T", f)
		}
		var g iterator
		g.reset(sr)
		for op := 0; op < 30; op++ {
			var a, b chunkenc.ValueType
			if rng.Intn(2) == 0 {
				a, b = f.Next(), g.Next()
			} else {
				at := int64(rng.Intn(int(ts) + 10))
				a, b = f.Seek(at), g.Seek(at)
			}
			if a != b {
				t.Fatalf("round %d op %d: %v, want %v", round, op, a, b)
			}
			if a == chunkenc.ValNone {
				continue
			}
			ft, fv := f.At()
			gt, gv := g.At()
			if ft != gt || fv != gv || f.AtT() != g.AtT() {
				t.Fatalf("round %d op %d: (%d, %v), want (%d, %v)", round, op, ft, fv, gt, gv)
			}
		}
	}
}
