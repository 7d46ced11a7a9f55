package forward_test

import (
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// While the host is saturated (Options.Busy) an upstream whose lag is
// under Options.Yield waits after each unit, and still gets everything.
func TestAnUpstreamYieldsToABusyHostAndStillGetsEverything(t *testing.T) {
	up := newStub(t)
	opts := upstreamTo(up.url())
	opts.Busy, opts.Yield = func() bool { return true }, time.Hour
	n := openNode(t, tempPath(t), nodeOptions{fwd: opts, seal: archive.SealPolicy{MaxRows: 4}})
	g := gen{series: 20, perSeries: 2, base: time.Now().Add(-time.Hour).UnixMilli(), step: 1000}
	for r := range 12 {
		n.write(t, g.request(r))
	}
	eventually(t, 30*time.Second, func() string { return up.diff(archiveSeries(t, n.path)) })
	if st := n.stats(t); st.Yields == 0 {
		t.Errorf("no yield to a host that is always busy: %+v", st)
	}
}

// Past Yield of lag it no longer waits.
func TestAnUpstreamDoesNotYieldPastItsLagBound(t *testing.T) {
	up := newStub(t)
	opts := upstreamTo(up.url())
	opts.Busy, opts.Yield = func() bool { return true }, time.Nanosecond
	n := openNode(t, tempPath(t), nodeOptions{fwd: opts, seal: archive.SealPolicy{MaxRows: 4}})
	g := gen{series: 20, perSeries: 2, base: time.Now().Add(-time.Hour).UnixMilli(), step: 1000}
	for r := range 12 {
		n.write(t, g.request(r))
	}
	eventually(t, 30*time.Second, func() string { return up.diff(archiveSeries(t, n.path)) })
	if st := n.stats(t); st.Yields != 0 {
		t.Errorf("%d yields with a lag bound of 1 ns", st.Yields)
	}
}
