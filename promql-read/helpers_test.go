package promread

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

const testBuckets = 8

// fixture is a real archive under t.TempDir: one writer, one read handle.
// It writes rows as the receiver does: anchored (row format 2), a stream's
// series named once per epoch, epochs closed before every seal; with v1
// set, self-contained format-1 rows, as the receiver wrote before.
type fixture struct {
	t      testing.TB
	path   string
	w      *archive.Writer
	a      *archive.Archive
	srcs   map[string]archive.SourceID
	v1     bool
	epochs map[streamRef]*fixtureEpoch
	enc    promsample.RowEncoder
	rows   int // rows appended, close markers included
}

type fixtureEpoch struct {
	id     uint64
	locals map[string]uint32
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	return newFixtureAt(t, t.TempDir())
}

func newFixtureAt(t testing.TB, dir string) *fixture {
	return newFixtureClock(t, dir, nil)
}

// newFixtureClock is newFixtureAt with the writer's clock: rows are
// stamped with now (nil: time.Now).
func newFixtureClock(t testing.TB, dir string, now func() time.Time) *fixture {
	path := filepath.Join(dir, "test.dendro")
	w, err := archive.CreateWriter(path, archive.WriterOptions{Encoder: &promsample.Encoder{}, CheckpointInterval: -1, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	// As the server opens it: following the writer, so that its
	// questions keep segment lists per segments epoch (catalog.go).
	a, err := archive.OpenWithOptions(path, archive.ReadOptions{Writer: w})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, path: path, w: w, a: a, srcs: map[string]archive.SourceID{}, epochs: map[streamRef]*fixtureEpoch{}}
	t.Cleanup(func() {
		a.Close()
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	})
	return f
}

func (f *fixture) source(name string) archive.SourceID {
	f.t.Helper()
	if id, ok := f.srcs[name]; ok {
		return id
	}
	src, err := f.w.AddSource(context.Background(), archive.SourceSpec{
		Labels:   map[string]string{"source": name},
		Metadata: map[string]string{"stream_buckets": fmt.Sprint(testBuckets)},
	}, "")
	if err != nil {
		f.t.Fatal(err)
	}
	f.srcs[name] = src.ID()
	return src.ID()
}

// write appends one request's worth of data as the receiver does: one row
// per stream, receipt time stamped by the writer.
func (f *fixture) write(src string, b promsample.Batch) {
	f.t.Helper()
	id := f.source(src)
	var rows []archive.Row
	for _, p := range promsample.SplitBatch(&b, testBuckets) {
		var data []byte
		var err error
		if f.v1 {
			data, err = promsample.EncodeBatch(&p.Batch)
		} else {
			data, err = f.anchored(id, p.Stream, &p.Batch)
		}
		if err != nil {
			f.t.Fatal(err)
		}
		rows = append(rows, archive.Row{Stream: p.Stream, Data: data})
	}
	res, err := f.w.AppendWait(context.Background(), []archive.SourceRows{{Source: id, Rows: rows}}, true)
	if err != nil {
		f.t.Fatal(err)
	}
	f.rows += len(rows)
	if res.Dropped() != 0 {
		f.t.Fatalf("append dropped %d rows: %v", res.Dropped(), res.Err())
	}
}

// anchored encodes b as a format-2 row of its stream's current epoch.
func (f *fixture) anchored(src archive.SourceID, stream string, b *promsample.Batch) ([]byte, error) {
	k := streamRef{src, stream}
	ep := f.epochs[k]
	if ep == nil {
		ep = &fixtureEpoch{id: uint64(len(f.epochs))*1000 + 1, locals: map[string]uint32{}}
		f.epochs[k] = ep
	}
	r := promsample.AnchoredRow{Epoch: ep.id, FirstLocal: uint32(len(ep.locals)), Metadata: b.Metadata}
	for _, sr := range b.Series {
		key := sr.Labels.String()
		local, ok := ep.locals[key]
		if !ok {
			local = uint32(len(ep.locals))
			ep.locals[key] = local
			r.Anchors = append(r.Anchors, sr.Labels)
		}
		r.Series = append(r.Series, promsample.RowSeries{Local: local, Samples: sr.Samples, Histograms: sr.Histograms, Exemplars: sr.Exemplars})
	}
	return f.enc.Append(nil, &r)
}

// seal closes the open epochs of src's streams and seals every stream.
func (f *fixture) seal(src string) {
	f.t.Helper()
	id := f.source(src)
	var streams []string
	if err := f.a.View(context.Background(), func(tx *archive.ReadTx) error {
		var err error
		streams, err = tx.Streams(id)
		return err
	}); err != nil {
		f.t.Fatal(err)
	}
	var markers []archive.Row
	for k, ep := range f.epochs {
		if k.src == id {
			markers = append(markers, archive.Row{Stream: k.stream, Data: promsample.AppendEpochClose(nil, ep.id)})
			ep.id += 7
			clear(ep.locals)
		}
	}
	if len(markers) > 0 {
		if _, err := f.w.AppendWait(context.Background(), []archive.SourceRows{{Source: id, Rows: markers}}, true); err != nil {
			f.t.Fatal(err)
		}
		f.rows += len(markers)
	}
	if _, err := f.w.SealWait(context.Background(), id, streams); err != nil {
		f.t.Fatal(err)
	}
}

// specialFloats are the values whose bits a lossy path would change.
var specialFloats = []uint64{
	0x7ff0000000000002, // Prometheus's stale marker
	0x7ff8000000000001, // a NaN with another payload
	0x7ff8000000000000, // the usual NaN
	0xfff8000000000000, // a negative NaN
	math.Float64bits(math.Inf(1)),
	math.Float64bits(math.Inf(-1)),
	1,                  // the smallest subnormal
	0x000fffffffffffff, // the largest subnormal
	0x8000000000000000, // -0.0
	0,                  // +0.0
}

// ls builds labels, dropping empty values as the receiver does.
func ls(kv ...string) labels.Labels {
	b := labels.NewScratchBuilder(len(kv) / 2)
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] != "" {
			b.Add(kv[i], kv[i+1])
		}
	}
	b.Sort()
	return b.Labels()
}

func floats(from, to, step int64, v func(t int64) float64) []promsample.Sample {
	var out []promsample.Sample
	for t := from; t <= to; t += step {
		out = append(out, promsample.Sample{T: t, V: v(t)})
	}
	return out
}

var staleNaN = math.Float64frombits(value.StaleNaN)

func testHistogram(i int) *histogram.Histogram {
	return &histogram.Histogram{
		Schema: 0, Count: uint64(10 + 2*i), Sum: float64(i) * 1.5, ZeroThreshold: 0.001, ZeroCount: 2,
		PositiveSpans:   []histogram.Span{{Offset: 0, Length: 2}},
		PositiveBuckets: []int64{int64(4 + i), -1},
		NegativeSpans:   []histogram.Span{{Offset: 1, Length: 1}},
		NegativeBuckets: []int64{1},
	}
}

// expected is the expected content: series by labels string.
type expected map[string]*series

func (m expected) add(lbls labels.Labels, fl []promsample.Sample, hs []promsample.Histogram) {
	k := lbls.String()
	s := m[k]
	if s == nil {
		s = &series{lbls: lbls}
		m[k] = s
	}
	s.floats = mergeSamples([][]promsample.Sample{s.floats, fl})
	if len(hs) > 0 {
		s.hists = append(s.hists, hs...)
		slices.SortStableFunc(s.hists, func(a, b promsample.Histogram) int { return int(a.T - b.T) })
	}
}

// selectModel returns the expected answer of matchers over [mint, maxt].
func (m expected) selectModel(mint, maxt int64, ms ...*labels.Matcher) []*series {
	var out []*series
	for _, s := range m {
		if !matchesAll(ms, s.lbls) {
			continue
		}
		r := &series{lbls: s.lbls, floats: trimSamples(s.floats, mint, maxt), hists: trimHists(s.hists, mint, maxt)}
		if len(r.floats)+len(r.hists) > 0 {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *series) int { return labels.Compare(a.lbls, b.lbls) })
	return out
}

// equalSeries compares bit-exactly (NaN payloads included).
func equalSeries(t testing.TB, what string, want, got []*series) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%s: %d series, want %d:\n got  %v\n want %v", what, len(got), len(want), names(got), names(want))
	}
	for i := range want {
		w, g := want[i], got[i]
		if !labels.Equal(w.lbls, g.lbls) {
			t.Fatalf("%s: series %d is %s, want %s", what, i, g.lbls, w.lbls)
		}
		if len(w.floats) != len(g.floats) {
			t.Fatalf("%s: %s has %d floats, want %d", what, w.lbls, len(g.floats), len(w.floats))
		}
		for k := range w.floats {
			if w.floats[k].T != g.floats[k].T || math.Float64bits(w.floats[k].V) != math.Float64bits(g.floats[k].V) {
				t.Fatalf("%s: %s float %d is %v, want %v", what, w.lbls, k, g.floats[k], w.floats[k])
			}
		}
		if len(w.hists) != len(g.hists) {
			t.Fatalf("%s: %s has %d histograms, want %d", what, w.lbls, len(g.hists), len(w.hists))
		}
		for k := range w.hists {
			if !sameHistogram(w.hists[k], g.hists[k]) {
				t.Fatalf("%s: %s histogram %d differs: got %+v want %+v", what, w.lbls, k, g.hists[k], w.hists[k])
			}
		}
	}
}

func names(ss []*series) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.lbls.String())
	}
	return out
}

// standardData writes a mixed data set over two sources: sealed segments,
// a live tail, a stale marker, native histograms, late samples, metadata and
// exemplars, and the same series from both sources (merged on read).
func standardData(f *fixture) expected {
	m := expected{}
	put := func(src string, b promsample.Batch) {
		f.write(src, b)
		for _, s := range b.Series {
			m.add(s.Labels, s.Samples, s.Histograms)
		}
	}
	// Hour one, sealed: 15 s steps from t=0.
	var b promsample.Batch
	for i := 0; i < 4; i++ {
		b.Series = append(b.Series, promsample.Series{
			Labels:  ls("__name__", "http_requests_total", "job", "api", "instance", fmt.Sprint("i", i), "env", []string{"prod", "dev", "prod", ""}[i]),
			Samples: floats(0, 3600_000, 15_000, func(t int64) float64 { return float64(t/1000)*float64(i+1) + float64(i) }),
		})
	}
	b.Series = append(b.Series, promsample.Series{
		Labels:  ls("__name__", "temperature", "room", "a"),
		Samples: append(floats(0, 1800_000, 15_000, func(t int64) float64 { return 20 + float64(t%7)/3 }), promsample.Sample{T: 1815_000, V: staleNaN}),
	})
	b.Series = append(b.Series, promsample.Series{
		Labels:    ls("__name__", "latency_seconds", "job", "api"),
		Samples:   floats(0, 3600_000, 60_000, func(t int64) float64 { return 0.25 }),
		Exemplars: []promsample.Exemplar{{Labels: ls("trace_id", "abc"), T: 60_000, V: 0.3}},
	})
	b.Metadata = []promsample.Metadata{{MetricFamily: "http_requests_total", Type: "counter", Help: "Requests.", Unit: ""}}
	var hs []promsample.Histogram
	for i := 0; i < 240; i++ {
		hs = append(hs, promsample.Histogram{T: int64(i) * 15_000, H: testHistogram(i)})
	}
	b.Series = append(b.Series, promsample.Series{Labels: ls("__name__", "rpc_duration_seconds", "job", "api"), Histograms: hs})
	put("alpha", b)
	f.seal("alpha")

	// The same series from a second source: merged with alpha's.
	put("beta", promsample.Batch{Series: []promsample.Series{{
		Labels:  ls("__name__", "http_requests_total", "job", "api", "instance", "i0", "env", "prod"),
		Samples: floats(3600_000, 3900_000, 15_000, func(t int64) float64 { return float64(t/1000) * 1 }),
	}}})
	f.seal("beta")

	// Hour two, live (not sealed), and a late backlog for hour one that
	// arrives after it: receipt time later, sample time earlier.
	put("alpha", promsample.Batch{Series: []promsample.Series{
		{Labels: ls("__name__", "http_requests_total", "job", "api", "instance", "i1", "env", "dev"),
			Samples: floats(3615_000, 7200_000, 15_000, func(t int64) float64 { return float64(t/1000)*2 + 1 })},
		{Labels: ls("__name__", "late_metric", "job", "batch"),
			Samples: floats(600_000, 900_000, 10_000, func(t int64) float64 { return float64(t) })},
		{Labels: ls("__name__", "temperature", "room", "b"),
			Samples:    floats(3600_000, 7200_000, 30_000, func(t int64) float64 { return 18.5 }),
			Histograms: []promsample.Histogram{{T: 7230_000, FH: testHistogram(3).ToFloat(nil)}}},
	}})
	return m
}

func sameBits(t *testing.T, what string, got, want []promsample.Sample) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d samples, want %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i].T != want[i].T || math.Float64bits(got[i].V) != math.Float64bits(want[i].V) {
			t.Fatalf("%s: sample %d is (%d, %#x), want (%d, %#x)", what, i, got[i].T, math.Float64bits(got[i].V), want[i].T, math.Float64bits(want[i].V))
		}
	}
}

// floatsNamed counts the float samples one Select of metric name finds,
// over all time.
func floatsNamed(t testing.TB, q *Queryable, name string) int {
	t.Helper()
	got, err := q.s.selectSeries(context.Background(), selectParams{mint: math.MinInt64, maxt: math.MaxInt64,
		matchers: []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", name)}, stats: &selectStats{}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, sr := range got {
		n += len(sr.floats)
	}
	return n
}
