package promread

import (
	"bytes"
	"context"
	"math"
	"math/rand"
	"testing"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// gogoResponse is the ReadResponse built the way gogo's marshaller wants it.
func gogoResponse(results [][]*series) *prompb.ReadResponse {
	resp := &prompb.ReadResponse{}
	for _, res := range results {
		qr := &prompb.QueryResult{}
		for _, sr := range res {
			ts := &prompb.TimeSeries{Labels: prompb.FromLabels(sr.lbls, nil)}
			for _, s := range sr.floats {
				ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: s.T, Value: s.V})
			}
			for _, h := range sr.hists {
				if h.H != nil {
					ts.Histograms = append(ts.Histograms, prompb.FromIntHistogram(h.T, h.H))
				} else {
					ts.Histograms = append(ts.Histograms, prompb.FromFloatHistogram(h.T, h.FH))
				}
			}
			qr.Timeseries = append(qr.Timeseries, ts)
		}
		resp.Results = append(resp.Results, qr)
	}
	return resp
}

// selectionOf wraps decoded series as a selection (one decoded piece each).
func selectionOf(res []*series) *selection {
	sel := &selection{mint: math.MinInt64, maxt: math.MaxInt64, budget: &budget{}}
	for _, sr := range res {
		pc := &pieces{lbls: sr.lbls}
		if len(sr.floats) > 0 {
			pc.floats = [][]promsample.Sample{sr.floats}
		}
		if len(sr.hists) > 0 {
			pc.hists = [][]promsample.Histogram{sr.hists}
		}
		sel.list = append(sel.list, pc)
	}
	return sel
}

// answerBytes encodes sels as a SAMPLES answer with par, on new encoders
// (encodeAnswer).
func answerBytes(t testing.TB, sels []*selection, par parallelism) []byte {
	t.Helper()
	a := samplesAnswer{sels: sels}
	for range max(1, par.workers) {
		a.encoders = append(a.encoders, &runEncoder{})
	}
	return encodeAnswer(t, &a, par)
}

// encodeAnswer encodes a (again, on its encoders as they are) and returns
// the compressed bytes, checking the announced length.
func encodeAnswer(t testing.TB, a *samplesAnswer, par parallelism) []byte {
	t.Helper()
	a.runs = nil
	if err := a.encode(context.Background(), par); err != nil {
		t.Fatal(err)
	}
	hdr, lits, err := a.header()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := a.writeTo(&buf, hdr, lits); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != a.compressedLen(hdr, lits) {
		t.Fatalf("wrote %d bytes, announced %d", buf.Len(), a.compressedLen(hdr, lits))
	}
	return buf.Bytes()
}

// encodeSamples encodes results and decompresses them with golang/snappy,
// the decoder Prometheus's remote-read client uses.
func encodeSamples(t *testing.T, results [][]*series) []byte {
	t.Helper()
	var sels []*selection
	for _, res := range results {
		sels = append(sels, selectionOf(res))
	}
	raw, err := snappy.Decode(nil, answerBytes(t, sels, parallelism{workers: 1}))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestSamplesEncoderMatchesGogo(t *testing.T) {
	var fl []promsample.Sample
	for i, bits := range specialFloats {
		if bits == 0x8000000000000000 {
			continue // -0.0: see TestSamplesEncoderKeepsNegativeZero
		}
		fl = append(fl, promsample.Sample{T: int64(i-3) * 1_000_000_007, V: math.Float64frombits(bits)})
	}
	fl = append(fl, promsample.Sample{T: 0, V: 0}, promsample.Sample{T: 1, V: 0}, promsample.Sample{T: 1 << 62, V: 1})
	h := testHistogram(3)
	results := [][]*series{
		{
			{lbls: ls("__name__", "a", "job", "x"), floats: fl},
			{lbls: ls("__name__", "b", "le", "+Inf"), hists: []promsample.Histogram{{T: 5, H: h}, {T: 6, FH: h.ToFloat(nil)}}},
			{lbls: ls("__name__", "c"), floats: fl[:1], hists: []promsample.Histogram{{T: 7, H: h}}},
		},
		{}, // a query with no answer
		{{lbls: ls("__name__", "d", "long", string(bytes.Repeat([]byte("v"), 300))), floats: fl[2:3]}},
	}
	got := encodeSamples(t, results)
	want, err := gogoResponse(results).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoded %d bytes, gogo %d; they differ", len(got), len(want))
	}
}

func TestSamplesEncoderKeepsNegativeZero(t *testing.T) {
	fl := []promsample.Sample{{T: 10, V: math.Copysign(0, -1)}, {T: 20, V: 0}, {T: 30, V: math.Float64frombits(0x7ff0000000000002)}}
	raw := encodeSamples(t, [][]*series{{{lbls: ls("__name__", "z"), floats: fl}}})
	var resp prompb.ReadResponse
	if err := resp.Unmarshal(raw); err != nil {
		t.Fatal(err)
	}
	var back []promsample.Sample
	for _, s := range resp.Results[0].Timeseries[0].Samples {
		back = append(back, promsample.Sample{T: s.Timestamp, V: s.Value})
	}
	sameBits(t, "decoded", back, fl)
}

// TestSamplesAnswerParallelMatchesModel: a large answer encoded on four
// goroutines in many small runs decodes (with golang/snappy) to exactly
// the bytes gogo marshals for the model's answer, as the one-goroutine
// encoding does.
func TestSamplesAnswerParallelMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	for round := 0; round < 6; round++ {
		mint, maxt := int64(rng.Intn(300_000)), int64(300_000+rng.Intn(900_000))
		if round == 0 {
			mint, maxt = math.MinInt64, math.MaxInt64
		}
		var sels []*selection
		var model [][]*series
		for q := 0; q < 1+round%3; q++ {
			sel, want := randomSelection(t, rng, 40+rng.Intn(300), mint, maxt)
			sels, model = append(sels, sel), append(model, want)
		}
		if round == 4 {
			sels, model = append(sels, nil), append(model, nil) // a query nothing matched
		}
		want, err := gogoResponse(model).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		// Runs of one series, of a few, of the default size (several
		// 64 KiB compression pieces each) and one run for everything.
		pars := []parallelism{{workers: 1}, {workers: 4, runSamples: 1 + rng.Intn(2000)},
			{workers: 2, runSamples: defaultParallelism().runSamples}, {workers: 1, runSamples: 1 << 30}}
		for _, par := range pars {
			got, err := snappy.Decode(nil, answerBytes(t, sels, par))
			if err != nil {
				t.Fatalf("round %d %+v: %v", round, par, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("round %d %+v: answer of %d bytes differs from gogo's %d", round, par, len(got), len(want))
			}
		}
	}
}

// TestSamplesAnswerBudget: the floats decoded on every goroutine count
// against the request's budget: over it, the answer is refused.
func TestSamplesAnswerBudget(t *testing.T) {
	checkBudget(t, rand.New(rand.NewSource(4)), func(sel *selection, par parallelism) error {
		a := samplesAnswer{sels: []*selection{sel}, encoders: []*runEncoder{{}, {}, {}}}
		return a.encode(context.Background(), par)
	})
}

func BenchmarkAppendSeries(b *testing.B) {
	fl := floats(1_796_028_150_000, 1_796_028_150_000+180*5000, 5000, func(t int64) float64 { return float64(t%977) * 0.37 })
	lbls := ls("__name__", "node_cpu_seconds_total", "env", "bench", "id", "3", "instance", "host-0042:9100", "job", "node", "zone", "zone-2")
	var e runEncoder
	b.SetBytes(int64(len(fl)))
	for b.Loop() {
		e.raw = e.raw[:0]
		if err := e.appendSeries(lbls, fl); err != nil {
			b.Fatal(err)
		}
	}
}

// TestEncoderFreeListIsBounded: the free list keeps at most
// maxIdleEncoders encoders and none that grew past its limits.
func TestEncoderFreeListIsBounded(t *testing.T) {
	f := newFixture(t)
	api, err := NewAPI(f.a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	es := api.getEncoders(maxIdleEncoders + 3)
	big := &runEncoder{arena: [][]byte{make([]byte, 0, maxPooledArena+1)}}
	api.putEncoders(append([]*runEncoder{big}, es...))
	if n := len(api.encoders); n != maxIdleEncoders {
		t.Fatalf("%d idle encoders, want %d", n, maxIdleEncoders)
	}
	for range maxIdleEncoders {
		if e := <-api.encoders; e == big {
			t.Fatal("an encoder past the limits was kept")
		}
	}
}

// TestSamplesAnswerAcrossArenaChunks: an answer whose compressed runs
// fill several of the arena's chunks decodes to exactly gogo's bytes,
// also when encoded again on the same encoders (into the first chunk,
// which resetArena keeps).
func TestSamplesAnswerAcrossArenaChunks(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	sel, model := randomSelection(t, rng, 3000, math.MinInt64, math.MaxInt64)
	want, err := gogoResponse([][]*series{model}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	a := samplesAnswer{sels: []*selection{sel}, encoders: []*runEncoder{{}, {}}}
	for round := range 2 {
		compressed := encodeAnswer(t, &a, parallelism{workers: 2, runSamples: 300})
		got, err := snappy.Decode(nil, compressed)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: answer of %d bytes differs from gogo's %d", round, len(got), len(want))
		}
		chunks := 0
		for _, e := range a.encoders {
			chunks += len(e.arena)
			for i, c := range e.arena[:max(0, len(e.arena)-1)] {
				if next := cap(e.arena[i+1]); next < min(2*cap(c), arenaChunk) {
					t.Fatalf("round %d: a chunk of %d bytes after one of %d", round, next, cap(c))
				}
			}
		}
		if chunks < 6 {
			t.Fatalf("round %d: %d chunks in all (%d compressed bytes): the test wants several per encoder", round, chunks, len(compressed))
		}
	}
}
