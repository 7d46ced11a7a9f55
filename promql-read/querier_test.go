package promread

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

func TestQuerierLabelsAndChunks(t *testing.T) {
	f := newFixture(t)
	want := standardData(f)
	q, _ := NewQueryable(f.a, Options{})
	ctx := context.Background()
	querier, _ := q.Querier(0, math.MaxInt64)
	vals, _, err := querier.LabelValues(ctx, "room", nil)
	if err != nil || !slices.Equal(vals, []string{"a", "b"}) {
		t.Fatalf("room values %v %v", vals, err)
	}
	vals, _, _ = querier.LabelValues(ctx, "__name__", nil, mustMatcher(labels.MatchRegexp, "__name__", "l.*"))
	if !slices.Equal(vals, []string{"late_metric", "latency_seconds"}) {
		t.Fatalf("names %v", vals)
	}
	names, _, _ := querier.LabelNames(ctx, nil, mustMatcher(labels.MatchEqual, "__name__", "temperature"))
	if !slices.Equal(names, []string{"__name__", "room"}) {
		t.Fatalf("label names %v", names)
	}
	// Func "series" asks for labels only.
	ss := querier.Select(ctx, true, &storage.SelectHints{Start: 0, End: math.MaxInt64, Func: "series"}, mustMatcher(labels.MatchEqual, "__name__", "temperature"))
	got := readAll(t, ss)
	if len(got) != 2 || len(got[0].floats)+len(got[1].floats) != 0 {
		t.Fatalf("series-only select: %v", names)
	}
	// The chunk querier's chunks hold the same samples.
	cq, _ := q.ChunkQuerier(0, math.MaxInt64)
	ms := []*labels.Matcher{mustMatcher(labels.MatchRegexp, "__name__", "temperature|rpc_duration_seconds")}
	cs := cq.Select(ctx, true, nil, ms...)
	var fromChunks []*series
	for cs.Next() {
		s := &series{lbls: cs.At().Labels()}
		it := cs.At().Iterator(nil)
		for it.Next() {
			m := it.At()
			ci := m.Chunk.Iterator(nil)
			for typ := ci.Next(); typ != chunkenc.ValNone; typ = ci.Next() {
				switch typ {
				case chunkenc.ValFloat:
					tt, v := ci.At()
					s.floats = append(s.floats, promsample.Sample{T: tt, V: v})
				case chunkenc.ValHistogram:
					tt, h := ci.AtHistogram(nil)
					h.CounterResetHint = 0
					s.hists = append(s.hists, promsample.Histogram{T: tt, H: h})
				case chunkenc.ValFloatHistogram:
					tt, h := ci.AtFloatHistogram(nil)
					h.CounterResetHint = 0
					s.hists = append(s.hists, promsample.Histogram{T: tt, FH: h})
				}
			}
		}
		fromChunks = append(fromChunks, s)
	}
	equalSeries(t, "chunks", want.selectModel(0, math.MaxInt64, ms...), fromChunks)
}

// TestCacheSurvivesCompaction: a merged segment takes the seq of the first
// segment of its run, so a cache keyed by seq alone would answer from the
// old segment's data.
func TestCacheSurvivesCompaction(t *testing.T) {
	f := newFixture(t)
	lbl := ls("__name__", "c", "job", "x")
	for i := int64(0); i < 4; i++ {
		f.write("s", promsample.Batch{Series: []promsample.Series{{Labels: lbl, Samples: floats(i*100_000, i*100_000+99_000, 1000, func(t int64) float64 { return float64(t) })}}})
		f.seal("s")
	}
	q, _ := NewQueryable(f.a, Options{})
	read := func() int {
		querier, _ := q.Querier(0, math.MaxInt64)
		got := readAll(t, querier.Select(context.Background(), true, nil, mustMatcher(labels.MatchEqual, "__name__", "c")))
		if len(got) != 1 {
			t.Fatalf("%d series", len(got))
		}
		return len(got[0].floats)
	}
	if n := read(); n != 400 {
		t.Fatalf("before compaction: %d samples", n)
	}
	res, err := f.w.Compact(context.Background(), f.source("s"), promsample.StreamFor("c", testBuckets), 100, &promsample.Encoder{})
	if err != nil || res.Merges == 0 {
		t.Fatalf("compact: %+v %v", res, err)
	}
	var segs int
	f.a.View(context.Background(), func(tx *archive.ReadTx) error {
		m, err := tx.SegmentMetas(f.source("s"), promsample.StreamFor("c", testBuckets))
		segs = len(m)
		return err
	})
	if segs != 1 {
		t.Fatalf("%d segments after compaction", segs)
	}
	if n := read(); n != 400 {
		t.Fatalf("after compaction: %d samples", n)
	}
}
