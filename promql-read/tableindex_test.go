package promread

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

// tablesOf writes one sealed segment per element of ids (the series
// up{id=...} it holds, one sample each) and returns the catalog indexes of
// the stream's segments, in seq order.
func tablesOf(t *testing.T, ids ...[]int) [][]byte { return tablesOfMetric(t, "up", ids...) }

// tablesOfMetric is tablesOf with series of metric name.
func tablesOfMetric(t *testing.T, name string, ids ...[]int) [][]byte {
	t.Helper()
	f := newFixture(t)
	for k, set := range ids {
		var b promsample.Batch
		for _, i := range set {
			b.Series = append(b.Series, promsample.Series{Labels: ls("__name__", name, "id", fmt.Sprint(i)),
				Samples: []promsample.Sample{{T: int64(1000 * (k + 1)), V: float64(i)}}})
		}
		f.write("a", b)
		f.seal("a")
	}
	var out [][]byte
	if err := f.a.View(context.Background(), func(tx *archive.ReadTx) error {
		streams, err := tx.Streams(f.source("a"))
		if err != nil {
			return err
		}
		if len(streams) != 1 {
			return fmt.Errorf("%d streams, want 1", len(streams))
		}
		metas, err := tx.SegmentMetas(f.source("a"), streams[0])
		for _, m := range metas {
			out = append(out, m.Index)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(out) != len(ids) {
		t.Fatalf("%d segments, want %d", len(out), len(ids))
	}
	return out
}

func upTo(n int, skip ...int) []int {
	var out []int
	for i := range n {
		if !containsInt(skip, i) {
			out = append(out, i)
		}
	}
	return out
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// indexWith indexes raws into a new index, with one tableIndexer for all
// (prediction from table to table), or one for each (none); mangle, if
// set, runs on the indexer before each table after the first.
func indexWith(t *testing.T, raws [][]byte, shared bool, mangle func(*tableIndexer)) (*seriesindex.Index, int) {
	t.Helper()
	x := seriesindex.New()
	loc := x.Loc(1, "s")
	ti := newTableIndexer(x)
	predicted := 0
	for i, raw := range raws {
		if !shared {
			ti = newTableIndexer(x)
		} else if i > 0 && mangle != nil {
			mangle(ti)
		}
		if _, err := ti.index(raw, loc, int64(i+1)); err != nil {
			t.Fatal(err)
		}
		predicted += ti.predicted
		ti.predicted = 0
	}
	return x, predicted
}

// sameIndex checks that got holds exactly want's series, with the same spans.
func sameIndex(t *testing.T, what string, got, want *seriesindex.Index, series []labels.Labels) {
	t.Helper()
	if got.Len() != want.Len() || got.Len() != len(series) {
		t.Fatalf("%s: %d series, want %d (%d expected)", what, got.Len(), want.Len(), len(series))
	}
	for _, s := range series {
		rg, rw := got.Get(s), want.Get(s)
		if rg == 0 || rw == 0 {
			t.Fatalf("%s: %v missing (%d, %d)", what, s, rg, rw)
		}
		a0, a1, aok := got.Span(rg)
		b0, b1, bok := want.Span(rw)
		if a0 != b0 || a1 != b1 || aok != bok || !aok {
			t.Fatalf("%s: %v spans [%d,%d] %v, want [%d,%d] %v", what, s, a0, a1, aok, b0, b1, bok)
		}
	}
}

// TestTableIndexerPredicts: indexing a stream's tables one after another
// finds most series by the last table's order, and gives the index an
// indexer per table would: the same series with the same spans, across a
// series that left and one that arrived between segments. A wrong
// prediction is never taken, and a table that does not parse changes
// nothing.
func TestTableIndexerPredicts(t *testing.T) {
	raws := tablesOf(t, upTo(100), append(upTo(100, 10), 100), upTo(100))
	var series []labels.Labels
	for i := range 101 {
		series = append(series, ls("__name__", "up", "id", fmt.Sprint(i)))
	}
	want, none := indexWith(t, raws, false, nil)
	if none != 0 {
		t.Fatalf("%d predicted with an indexer per table", none)
	}
	got, predicted := indexWith(t, raws, true, nil)
	// The second table: all but the series that arrived; the third: all
	// but the one that came back.
	if predicted < 2*99-2 {
		t.Fatalf("%d series predicted of %d", predicted, 2*100)
	}
	sameIndex(t, "predicted", got, want, series)
	if r := got.Get(series[100]); r != 0 {
		if lo, hi, _ := got.Span(r); lo != 2000 || hi != 2000 {
			t.Fatalf("id=100 spans [%d,%d], want its one segment's [2000,2000]", lo, hi)
		}
	}

	// Every prediction points at the neighbour's Ref: each is refused, and
	// the index is the same.
	wrong, predicted := indexWith(t, raws, true, func(ti *tableIndexer) {
		for _, lt := range ti.last {
			lt.refs = append(append([]seriesindex.Ref(nil), lt.refs[1:]...), lt.refs[0])
		}
	})
	if predicted != 0 {
		t.Fatalf("%d wrong predictions taken", predicted)
	}
	sameIndex(t, "wrong predictions", wrong, want, series)

	// A truncated table: an error, and the index as it was.
	x := seriesindex.New()
	loc := x.Loc(1, "s")
	ti := newTableIndexer(x)
	if _, err := ti.index(raws[0], loc, 1); err != nil {
		t.Fatal(err)
	}
	n := x.Len()
	lo, hi, _ := x.Span(x.Get(series[5]))
	for _, cut := range []int{len(raws[1]) - 1, len(raws[1]) / 2, len(raws[1]) - 9} {
		if _, err := ti.index(raws[1][:cut], loc, 2); err == nil {
			t.Fatalf("a table cut at %d of %d parsed", cut, len(raws[1]))
		}
		if x.Len() != n || x.Get(series[100]) != 0 {
			t.Fatalf("a table that did not parse added series: %d, want %d", x.Len(), n)
		}
		if a, b, _ := x.Span(x.Get(series[5])); a != lo || b != hi {
			t.Fatalf("a table that did not parse widened a span: [%d,%d], was [%d,%d]", a, b, lo, hi)
		}
	}
	if _, err := ti.index(raws[2], loc, 3); err != nil {
		t.Fatal(err)
	}
	if a, b, _ := x.Span(x.Get(series[5])); a != 1000 || b != 3000 {
		t.Fatalf("after a whole table: [%d,%d], want [1000,3000]", a, b)
	}

	// Tables of two streams in turn: each is predicted from its own
	// stream's last table.
	other := tablesOfMetric(t, "down", upTo(100))
	y := seriesindex.New()
	ti = newTableIndexer(y)
	for k, raw := range [][]byte{raws[0], other[0], raws[1]} {
		if _, err := ti.index(raw, y.Loc(1, []string{"s", "t", "s"}[k]), int64(k+1)); err != nil {
			t.Fatal(err)
		}
	}
	if ti.predicted < 98 {
		t.Fatalf("across two streams, %d series predicted, want 98", ti.predicted)
	}

	// A last table found longer ago than predictFor predicts nothing
	// (its Refs may have been removed and handed to other series since).
	z := seriesindex.New()
	ti = newTableIndexer(z)
	if _, err := ti.index(raws[0], z.Loc(1, "s"), 1); err != nil {
		t.Fatal(err)
	}
	for _, lt := range ti.last {
		lt.at = lt.at.Add(-predictFor - time.Second)
	}
	if _, err := ti.index(raws[1], z.Loc(1, "s"), 2); err != nil {
		t.Fatal(err)
	}
	if ti.predicted != 0 || z.Len() != 101 {
		t.Fatalf("from a stale table: %d predicted, %d series", ti.predicted, z.Len())
	}
}
