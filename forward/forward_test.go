package forward_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

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
