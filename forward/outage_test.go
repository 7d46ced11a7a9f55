package forward_test

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/forward"
)

// An upstream down for a while under steady ingest (seals and prunes
// going on, the forwarder letting go of the rows it held): once it is
// back, every sample arrives, each series in order, nothing dropped or
// sent twice, and the lag that rose falls back.
func TestAnOutageLosesNothingAndTheLagFallsBack(t *testing.T) {
	up := newStub(t)
	var down atomic.Bool
	up.respond = func(*decoded) (int, http.Header) {
		if down.Load() {
			return http.StatusServiceUnavailable, nil
		}
		return 0, nil
	}
	opts := upstreamTo(up.url())
	opts.MaxHeldRows = 30 // let go of held rows during the outage
	n := openNode(t, tempPath(t), nodeOptions{fwd: opts, seal: archive.SealPolicy{MaxRows: 15, MaxAge: 300 * time.Millisecond},
		background: true})
	g := gen{series: 25, perSeries: 2, exemplars: true, base: time.Now().Add(-time.Hour).UnixMilli(), step: 100}

	var wg sync.WaitGroup
	stop := make(chan struct{})
	var written atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for r := 0; ; r++ {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			n.write(t, g.request(r))
			written.Add(1)
		}
	}()
	// Conditions, not sleeps: under the race detector everything runs
	// several times slower, and a fixed outage may end before the
	// forwarder tried to send into it.
	eventually(t, 30*time.Second, func() string {
		if up.total() == 0 {
			return "nothing forwarded before the outage"
		}
		return ""
	})
	down.Store(true)
	outage, from := time.Now(), written.Load()
	var maxLag time.Duration
	// Down until the forwarder has retried into the outage, the lag has
	// passed a second, and the writes have gone on for at least 2.5 s and
	// 60 requests (seals of 15 rows, beyond the 30 rows the forwarder
	// holds: it lets go of them).
	eventually(t, 60*time.Second, func() string {
		st := n.stats(t)
		maxLag = max(maxLag, st.Lag)
		switch w := written.Load() - from; {
		case st.Retried == 0:
			return "no retry yet"
		case maxLag < time.Second:
			return fmt.Sprintf("lag %v", maxLag)
		case w < 60 || time.Since(outage) < 2500*time.Millisecond:
			return fmt.Sprintf("%d requests written in %v of outage", w, time.Since(outage))
		}
		return ""
	})
	down.Store(false)
	back := written.Load()
	eventually(t, 30*time.Second, func() string {
		if w := written.Load() - back; w < 20 {
			return fmt.Sprintf("%d requests written since the upstream came back", w)
		}
		return ""
	})
	close(stop)
	wg.Wait()
	t.Logf("outage of %v under %d requests; lag reached %v", time.Since(outage).Round(time.Millisecond), written.Load(), maxLag)
	eventually(t, 30*time.Second, func() string { return up.diff(archiveSeries(t, n.path)) })
	eventually(t, 5*time.Second, func() string {
		if l := n.stats(t).Lag; l != 0 {
			return fmt.Sprintf("lag %v after catching up", l)
		}
		return ""
	})
	_, dups, ooo := up.counts()
	st := n.stats(t)
	if dups != 0 || ooo != 0 || len(st.Dropped) != 0 {
		t.Errorf("%d duplicates, %d out of order, dropped %v", dups, ooo, st.Dropped)
	}
	if st.Retried == 0 {
		t.Error("nothing was retried during the outage")
	}
	t.Logf("stats %+v", st)
}

// A clean stop commits the cursor: the next start sends what was not
// acknowledged and nothing that was.
func TestARestartResumesAtTheCursor(t *testing.T) {
	up := newStub(t)
	var accept atomic.Int64
	accept.Store(3) // requests taken before the upstream goes down
	up.respond = func(*decoded) (int, http.Header) {
		if accept.Add(-1) < 0 {
			return http.StatusServiceUnavailable, nil
		}
		return 0, nil
	}
	path := tempPath(t)
	opts := upstreamTo(up.url())
	opts.Upstreams[0].Queue = forward.QueueConfig{Shards: 2, MaxSamplesPerSend: 40, MinBackoff: 5 * time.Millisecond,
		MaxBackoff: 20 * time.Millisecond, BatchSendDeadline: 20 * time.Millisecond}
	n := openNode(t, path, nodeOptions{fwd: opts, seal: archive.SealPolicy{MaxRows: 4}})
	g := gen{series: 20, perSeries: 2, base: time.Now().Add(-time.Hour).UnixMilli(), step: 1000}
	for r := range 10 {
		n.write(t, g.request(r))
		if r == 3 || r == 7 {
			n.sealAll(t)
		}
	}
	eventually(t, 10*time.Second, func() string {
		if up.total() == 0 || n.stats(t).Retried == 0 {
			return "waiting for some samples to go and the upstream to refuse the rest"
		}
		return ""
	})
	n.close(t)
	sent := up.total()
	accept.Store(1 << 30)
	n = openNode(t, path, nodeOptions{fwd: opts, seal: archive.SealPolicy{MaxRows: 4}})
	for r := 10; r < 14; r++ {
		n.write(t, g.request(r))
	}
	eventually(t, 20*time.Second, func() string { return up.diff(archiveSeries(t, n.path)) })
	// What was in flight at the stop is sent again, and counted: the
	// cursor is a low-water mark, so what one shard had acknowledged after
	// another shard's refused batch goes again too (the upstream has it
	// already). Nothing before the mark does.
	_, dups, ooo := up.counts()
	st := n.stats(t)
	if ooo != 0 || int64(dups) > st.Resent || st.Resent > 2*int64(opts.Upstreams[0].Queue.Shards*forward.DefaultCapacity) {
		t.Errorf("%d duplicates, %d out of order, %d resent after a clean restart (%d samples had gone before)",
			dups, ooo, st.Resent, sent)
	}
	t.Logf("%d samples had gone before the stop; %d resent, %d duplicates", sent, st.Resent, dups)
}
