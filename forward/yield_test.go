package forward_test

import (
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// While the host is saturated (Options.Busy) an upstream whose lag is
// under Options.Yield waits after each unit, and still gets everything;
// past Yield of lag it no longer waits.
func TestAnUpstreamYieldsToABusyHostWithinItsLagBound(t *testing.T) {
	for _, tc := range []struct {
		name   string
		yield  time.Duration
		yields bool
	}{
		{"lag under the bound: yields, still gets everything", time.Hour, true},
		{"lag past the bound: no yield", time.Nanosecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newStub(t)
			opts := upstreamTo(up.url())
			opts.Busy, opts.Yield = func() bool { return true }, tc.yield
			n := openNode(t, tempPath(t), nodeOptions{fwd: opts, seal: archive.SealPolicy{MaxRows: 4}})
			g := gen{series: 20, perSeries: 2, base: time.Now().Add(-time.Hour).UnixMilli(), step: 1000}
			for r := range 12 {
				n.write(t, g.request(r))
			}
			eventually(t, 30*time.Second, func() string { return up.diff(archiveSeries(t, n.path)) })
			st := n.stats(t)
			if tc.yields && st.Yields == 0 {
				t.Errorf("no yield to a host that is always busy: %+v", st)
			}
			if !tc.yields && st.Yields != 0 {
				t.Errorf("%d yields with a lag bound of %v", st.Yields, tc.yield)
			}
		})
	}
}
