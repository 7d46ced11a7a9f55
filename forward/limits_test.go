package forward_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// Samples older than MaxAge are dropped, counted, not sent; the rest go.
func TestMaxAgeDropsWhatIsTooOld(t *testing.T) {
	up := newStub(t)
	opts := upstreamTo(up.url())
	opts.Upstreams[0].MaxAge = time.Hour
	n := openNode(t, tempPath(t), nodeOptions{fwd: opts, seal: archive.SealPolicy{MaxRows: 3}})
	old := gen{series: 10, perSeries: 2, base: time.Now().Add(-3 * time.Hour).UnixMilli(), step: 1000}
	fresh := gen{series: 10, perSeries: 2, base: time.Now().Add(-10 * time.Minute).UnixMilli(), step: 1000}
	for r := range 4 {
		n.write(t, old.request(r))
	}
	n.sealAll(t)
	for r := 4; r < 8; r++ {
		n.write(t, fresh.request(r))
	}
	var want []promsample.Series
	limit := time.Now().Add(-time.Hour).UnixMilli()
	for _, s := range archiveSeries(t, n.path) {
		var keep []promsample.Sample
		for _, smp := range s.Samples {
			if smp.T >= limit {
				keep = append(keep, smp)
			}
		}
		if len(keep) > 0 {
			s.Samples = keep
			want = append(want, s)
		}
	}
	eventually(t, 20*time.Second, func() string { return up.diff(want) })
	eventually(t, 5*time.Second, func() string {
		if got := n.stats(t).Dropped["too_old"]; got != int64(old.samples(4)) {
			return fmt.Sprintf("too_old %d, want %d", got, old.samples(4))
		}
		return ""
	})
}

// MaxSamplesPerSecond paces a backlog.
func TestMaxSamplesPerSecondPacesABacklog(t *testing.T) {
	up := newStub(t)
	opts := upstreamTo(up.url())
	opts.Upstreams[0].MaxSamplesPerSecond = 2000
	opts.Upstreams[0].Queue.MaxSamplesPerSend = 500
	n := openNode(t, tempPath(t), nodeOptions{fwd: opts})
	g := gen{series: 50, perSeries: 2, base: time.Now().Add(-time.Hour).UnixMilli(), step: 1000}
	start := time.Now()
	for r := range 60 { // 6,000 samples: at least 2 s at 2,000/s after the burst
		n.write(t, g.request(r))
	}
	eventually(t, 30*time.Second, func() string { return up.diff(archiveSeries(t, n.path)) })
	if el := time.Since(start); el < 1500*time.Millisecond {
		t.Errorf("6,000 samples at 2,000/s went in %v", el)
	}
}

// Time retention keeps what an upstream has not had acknowledged; once it
// has, retention takes it. Size retention takes it anyway, and the
// upstream counts what it lost.
func TestRetentionWaitsForTheUpstreamUnlessSizeForcesIt(t *testing.T) {
	up := newStub(t)
	var down atomic.Bool
	down.Store(true)
	up.respond = func(*decoded) (int, http.Header) {
		if down.Load() {
			return http.StatusServiceUnavailable, nil
		}
		return 0, nil
	}
	n := openNode(t, tempPath(t), nodeOptions{fwd: upstreamTo(up.url()), seal: archive.SealPolicy{MaxRows: 2},
		ingest: ingestOptions(time.Millisecond, 0)})
	g := gen{series: 10, perSeries: 2, base: time.Now().Add(-time.Hour).UnixMilli(), step: 1000}
	for r := range 6 {
		n.write(t, g.request(r))
	}
	n.sealAll(t)
	before := archiveSeries(t, n.path)
	time.Sleep(5 * time.Millisecond)
	if err := n.ing.EnforceRetention(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := diffArchives(before, archiveSeries(t, n.path)); d != "" {
		t.Fatalf("retention removed what the upstream has not had: %s", d)
	}
	down.Store(false)
	eventually(t, 20*time.Second, func() string { return up.diff(before) })
	eventually(t, 10*time.Second, func() string {
		if err := n.ing.EnforceRetention(context.Background()); err != nil {
			return err.Error()
		}
		if ss := archiveSeries(t, n.path); len(ss) != 0 {
			return fmt.Sprintf("%d series left after the upstream had everything", len(ss))
		}
		return ""
	})
}

// Size retention evicts what an upstream has not read yet; the upstream
// counts it as lost (reason "retention"), not silently.
func TestSizeRetentionCountsWhatAnUpstreamLoses(t *testing.T) {
	// A first node writes and seals the data, so that the second finds it
	// in segments it has not read (what it has read is in memory and
	// still goes out).
	path := tempPath(t)
	ok := newStub(t)
	first := openNode(t, path, nodeOptions{fwd: upstreamTo(ok.url()), seal: archive.SealPolicy{MaxRows: 2}})
	g := gen{series: 10, perSeries: 2, base: time.Now().Add(-time.Hour).UnixMilli(), step: 1000}
	for r := range 6 {
		first.write(t, g.request(r))
	}
	first.sealAll(t)
	all := archiveSeries(t, path)
	eventually(t, 20*time.Second, func() string { return ok.diff(all) })
	first.close(t)
	total := 0
	for _, s := range all {
		total += len(s.Samples)
	}

	down := newStub(t)
	down.respond = func(*decoded) (int, http.Header) { return http.StatusServiceUnavailable, nil }
	opts := upstreamTo(down.url())
	// A window of 10 samples: the forwarder reads little ahead of what the
	// upstream refuses.
	opts.Upstreams[0].Queue.Shards, opts.Upstreams[0].Queue.Capacity, opts.Upstreams[0].Queue.MaxSamplesPerSend = 1, 10, 10
	n := openNode(t, path, nodeOptions{fwd: opts, seal: archive.SealPolicy{MaxRows: 2}, ingest: ingestOptions(0, 1)})
	eventually(t, 10*time.Second, func() string {
		if r, _, _ := down.counts(); r == 0 {
			return "no request yet"
		}
		return ""
	})
	if err := n.ing.EnforceRetention(context.Background()); err != nil {
		t.Fatal(err)
	}
	if left := archiveSeries(t, path); len(left) != 0 {
		t.Fatalf("%d series left after size retention to 1 byte", len(left))
	}
	got := n.stats(t).Dropped["retention"]
	if got <= 0 || got > int64(total) {
		t.Errorf("%d samples counted as lost to size retention, want 1..%d: %v", got, total, n.stats(t).Dropped)
	}
	t.Logf("%d of %d samples counted as lost to size retention", got, total)
}
