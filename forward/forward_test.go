package forward_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	"github.com/dendro-receiver/dendro-receiver/forward"
)

// Everything the archive holds reaches the upstream, bit for bit, whether
// it was sealed before the forwarder read it, is the live tail, or was
// sealed while the forwarder was reading it as rows.
func TestEverySampleReachesTheUpstreamBitExact(t *testing.T) {
	for _, proto := range []forward.Protocol{forward.RW1, forward.RW2} {
		t.Run(proto.String(), func(t *testing.T) {
			up := newStub(t)
			opts := upstreamTo(up.url())
			opts.Upstreams[0].Protocol = proto
			n := openNode(t, tempPath(t), nodeOptions{fwd: opts, seal: archive.SealPolicy{MaxRows: 5}})
			g := gen{series: 30, perSeries: 3, histograms: true, exemplars: true, base: time.Now().Add(-time.Hour).UnixMilli(), step: 1000}
			for r := range 12 {
				n.write(t, g.request(r))
				if r == 4 || r == 9 {
					n.sealAll(t)
				}
			}
			eventually(t, 20*time.Second, func() string { return up.diff(archiveSeries(t, n.path)) })
			st := n.stats(t)
			if st.Protocol != proto {
				t.Errorf("protocol %v, want %v", st.Protocol, proto)
			}
			_, dups, ooo := up.counts()
			if dups != 0 || ooo != 0 {
				t.Errorf("the upstream saw %d duplicates and %d out-of-order samples", dups, ooo)
			}
			if len(st.Dropped) != 0 {
				t.Errorf("dropped %v", st.Dropped)
			}
			t.Logf("stats %+v", st)
		})
	}
}

// 5xx and 429 are retried, 429's Retry-After honoured, until the data
// goes through; nothing is lost or sent twice.
func TestFiveHundredsAndTooManyRequestsAreRetried(t *testing.T) {
	up := newStub(t)
	var mu sync.Mutex
	answers := []int{503, 500, 429, 503}
	var retryAfterAt time.Time
	var resumedAt time.Time
	up.respond = func(d *decoded) (int, http.Header) {
		mu.Lock()
		defer mu.Unlock()
		if len(answers) == 0 {
			if resumedAt.IsZero() {
				resumedAt = time.Now()
			}
			return 0, nil
		}
		a := answers[0]
		answers = answers[1:]
		if a == 429 {
			retryAfterAt = time.Now()
			return a, http.Header{"Retry-After": []string{"1"}}
		}
		return a, nil
	}
	opts := upstreamTo(up.url())
	opts.Upstreams[0].Queue.Shards = 1
	n := openNode(t, tempPath(t), nodeOptions{fwd: opts})
	g := gen{series: 10, perSeries: 2, base: time.Now().Add(-time.Minute).UnixMilli(), step: 1000}
	for r := range 3 {
		n.write(t, g.request(r))
	}
	eventually(t, 20*time.Second, func() string { return up.diff(archiveSeries(t, n.path)) })
	st := n.stats(t)
	if st.Retried < 4 || st.Failed == 0 {
		t.Errorf("retried %d, failed %d: want every refusal retried", st.Retried, st.Failed)
	}
	mu.Lock()
	if wait := resumedAt.Sub(retryAfterAt); wait < 900*time.Millisecond {
		t.Errorf("sent again %v after a 429 with Retry-After: 1", wait)
	}
	mu.Unlock()
	if _, dups, _ := up.counts(); dups != 0 {
		t.Errorf("%d duplicates", dups)
	}
	if len(st.Dropped) != 0 {
		t.Errorf("dropped %v", st.Dropped)
	}
}

// A 400 for one series drops that series' samples, counted with the
// reason, and every other series goes on.
func TestA400ForOneSeriesDropsOnlyItsSamples(t *testing.T) {
	up := newStub(t)
	up.respond = func(d *decoded) (int, http.Header) {
		if d.has("id", "7") {
			return http.StatusBadRequest, nil
		}
		return 0, nil
	}
	n := openNode(t, tempPath(t), nodeOptions{fwd: upstreamTo(up.url()), seal: archive.SealPolicy{MaxRows: 4}})
	g := gen{series: 20, perSeries: 2, base: time.Now().Add(-time.Minute).UnixMilli(), step: 1000}
	const requests = 10
	for r := range requests {
		n.write(t, g.request(r))
		if r == 5 {
			n.sealAll(t)
		}
	}
	var want []promsample.Series
	for _, s := range archiveSeries(t, n.path) {
		if s.Labels.Get("id") != "7" {
			want = append(want, s)
		}
	}
	eventually(t, 20*time.Second, func() string { return up.diff(want) })
	eventually(t, 5*time.Second, func() string {
		st := n.stats(t)
		if got := st.Dropped["http_400"]; got != int64(requests*g.perSeries) {
			return fmt.Sprintf("dropped %v, want http_400: %d", st.Dropped, requests*g.perSeries)
		}
		return ""
	})
}

// A 2.0 upstream that answers 415, or 2xx without the *-Written headers
// (a 1.0 receiver), is sent 1.0 from then on, and loses nothing.
func TestRW2FallsBackToRW1(t *testing.T) {
	for _, how := range []string{"415", "no headers"} {
		t.Run(how, func(t *testing.T) {
			up := newStub(t)
			if how == "415" {
				up.respond = func(d *decoded) (int, http.Header) {
					if d.v2 {
						return http.StatusUnsupportedMediaType, nil
					}
					return 0, nil
				}
			} else {
				up.noWritten = true
				up.respond = func(d *decoded) (int, http.Header) {
					if d.v2 {
						d.series = nil // a 1.0 receiver reads a 2.0 body as nothing
					}
					return 0, nil
				}
			}
			opts := upstreamTo(up.url())
			opts.Upstreams[0].Protocol = forward.RW2
			n := openNode(t, tempPath(t), nodeOptions{fwd: opts})
			g := gen{series: 10, perSeries: 2, base: time.Now().Add(-time.Minute).UnixMilli(), step: 1000}
			for r := range 4 {
				n.write(t, g.request(r))
			}
			eventually(t, 20*time.Second, func() string { return up.diff(archiveSeries(t, n.path)) })
			if st := n.stats(t); st.Protocol != forward.RW1 || len(st.Dropped) != 0 {
				t.Errorf("protocol %v, dropped %v", st.Protocol, st.Dropped)
			}
		})
	}
}

// The rows that anchor an epoch's series commit in any order (requests
// reserve their ids before they reach the writer): an epoch's first row
// may anchor ids 5-9 and the next one 0-4. Every sample still goes.
func TestAnEpochMayStartWithAnyIDs(t *testing.T) {
	up := newStub(t)
	fwd, err := forward.New(upstreamTo(up.url()))
	if err != nil {
		t.Fatal(err)
	}
	path := tempPath(t)
	w, err := archive.CreateWriter(path, archive.WriterOptions{Encoder: &promsample.Encoder{}, CheckpointInterval: -1, KeepWAL: fwd.KeepWAL})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx := context.Background()
	src, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"source": "x"}, Metadata: map[string]string{"stream_buckets": "1"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	stream := promsample.StreamFor("m", 1)
	series := func(from, to int) []labels.Labels {
		var out []labels.Labels
		for i := from; i < to; i++ {
			out = append(out, labels.FromStrings("__name__", "m", "id", fmt.Sprint(i)))
		}
		return out
	}
	var enc promsample.RowEncoder
	row := func(ts int64, first uint32, anchors []labels.Labels, locals []uint32, t0 int64) archive.Row {
		r := &promsample.AnchoredRow{Epoch: 77, FirstLocal: first, Anchors: anchors}
		for _, l := range locals {
			r.Series = append(r.Series, promsample.RowSeries{Local: l, Samples: []promsample.Sample{{T: t0, V: float64(l)}}})
		}
		b, err := enc.Append(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		return archive.Row{Stream: stream, TS: ts, Data: b}
	}
	all := []uint32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	rows := []archive.Row{
		row(10, 5, series(5, 10), []uint32{5, 6, 7, 8, 9}, 1000),
		row(20, 0, series(0, 5), []uint32{0, 1, 2, 3, 4}, 1000),
		row(30, 10, nil, all, 2000),
	}
	if res, err := w.AppendWait(ctx, []archive.SourceRows{{Source: src.ID(), Rows: rows}}, false); err != nil || res.Dropped() != 0 {
		t.Fatalf("append: %v %v", err, res)
	}
	r, err := archive.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := fwd.Start(ctx, r, w); err != nil {
		t.Fatal(err)
	}
	defer fwd.Close()
	eventually(t, 10*time.Second, func() string { return up.diff(archiveSeries(t, path)) })
	if st := fwd.Stats()[0]; len(st.Dropped) != 0 {
		t.Errorf("dropped %v", st.Dropped)
	}
}

// Concurrent senders: the requests of one epoch reach the writer in any
// order, so the row that starts an epoch may anchor ids other than 0.
// Every series still arrives whole, nothing counted as unresolvable.
func TestConcurrentSendersLoseNothing(t *testing.T) {
	up := newStub(t)
	n := openNode(t, tempPath(t), nodeOptions{fwd: upstreamTo(up.url()), seal: archive.SealPolicy{MaxRows: 8}, background: true})
	base := time.Now().Add(-time.Hour).UnixMilli()
	var wg sync.WaitGroup
	for k := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each sender owns its series, as Prometheus's shards do.
			g := gen{series: 40, perSeries: 2, base: base, step: 1000}
			for r := range 60 {
				wr := g.request(r)
				for i := range wr.Timeseries {
					wr.Timeseries[i].Labels = append(wr.Timeseries[i].Labels, prompb.Label{Name: "sender", Value: fmt.Sprint(k)})
				}
				n.write(t, wr)
			}
		}()
	}
	wg.Wait()
	eventually(t, 30*time.Second, func() string { return up.diff(archiveSeries(t, n.path)) })
	if st := n.stats(t); len(st.Dropped) != 0 {
		t.Errorf("dropped %v", st.Dropped)
	}
}
