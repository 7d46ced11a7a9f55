package forward_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// TestDrainRate (FORWARD_DRAIN=series,samples) measures how fast a backlog
// drains to an upstream that only counts, and the process CPU and
// allocations per sample of the drain alone. FORWARD_DRAIN_NULL=1 makes the
// upstream read and discard the body (no decoding), so that the CPU is the
// forwarder's; FORWARD_DRAIN_CPUPROFILE and FORWARD_DRAIN_MEMPROFILE write
// profiles of the drain alone.
func TestDrainRate(t *testing.T) {
	spec := os.Getenv("FORWARD_DRAIN")
	if spec == "" {
		t.Skip("set FORWARD_DRAIN=series,samples")
	}
	var series, samples int
	fmt.Sscanf(spec, "%d,%d", &series, &samples)
	var got atomic.Int64
	null := os.Getenv("FORWARD_DRAIN_NULL") != ""
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if null {
			io.Copy(io.Discard, r.Body)
			w.WriteHeader(204)
			return
		}
		b, _ := io.ReadAll(r.Body)
		raw, _ := snappy.Decode(nil, b)
		var wr prompb.WriteRequest
		if err := wr.Unmarshal(raw); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		n := 0
		for _, ts := range wr.Timeseries {
			n += len(ts.Samples)
		}
		got.Add(int64(n))
		w.WriteHeader(204)
	}))
	defer sink.Close()
	var down atomic.Bool
	down.Store(true)
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			w.WriteHeader(503)
			return
		}
		sink.Config.Handler.ServeHTTP(w, r)
	}))
	defer gate.Close()
	opts := upstreamTo(gate.URL)
	opts.Upstreams[0].Queue.MinBackoff, opts.Upstreams[0].Queue.MaxBackoff = 10*time.Millisecond, 10*time.Millisecond
	if v, err := strconv.Atoi(os.Getenv("FORWARD_DRAIN_HELD")); err == nil {
		opts.MaxHeldRows = v
	}
	n := openNode(t, tempPath(t), nodeOptions{fwd: opts, background: true})
	start := time.Now()
	const per = 4
	base := time.Now().Add(-48 * time.Hour).UnixMilli()
	for r := 0; r < samples/per; r++ {
		for lo := 0; lo < series; lo += 2000 / per {
			wr := &prompb.WriteRequest{}
			for i := lo; i < min(lo+2000/per, series); i++ {
				ts := prompb.TimeSeries{Labels: []prompb.Label{{Name: "__name__", Value: "bench_metric_" + strconv.Itoa(i%20)},
					{Name: "instance", Value: fmt.Sprintf("host-%04d:9100", i/20)}, {Name: "job", Value: "node"}}}
				for s := range per {
					j := r*per + s
					ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: base + int64(j)*5000, Value: float64(i*j%1000) * 0.25})
				}
				wr.Timeseries = append(wr.Timeseries, ts)
			}
			n.write(t, wr)
		}
	}
	n.sealAll(t)
	total := int64(series * samples)
	t.Logf("loaded %d samples in %v", total, time.Since(start))
	var segs int64
	n.r.View(t.Context(), func(tx *archive.ReadTx) error {
		srcs, _ := tx.Sources()
		m, _ := tx.SourceSegmentMetas(srcs[0].ID)
		segs = int64(len(m))
		return nil
	})
	t.Logf("%d segments", segs)
	sent := func() int64 {
		if null {
			return n.stats(t).SamplesSent
		}
		return got.Load()
	}
	runtime.GC()
	if p := os.Getenv("FORWARD_DRAIN_CPUPROFILE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	if os.Getenv("FORWARD_DRAIN_MEMPROFILE") != "" {
		runtime.MemProfileRate = 64 << 10
	}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0 := cpuTime()
	start = time.Now()
	down.Store(false)
	for sent() < total {
		time.Sleep(10 * time.Millisecond)
		if time.Since(start) > 5*time.Minute {
			t.Fatalf("only %d of %d", got.Load(), total)
		}
	}
	el := time.Since(start)
	cpu := cpuTime() - cpu0
	runtime.ReadMemStats(&ms1)
	if p := os.Getenv("FORWARD_DRAIN_MEMPROFILE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		pprof.Lookup("allocs").WriteTo(f, 0)
	}
	t.Logf("drain: %.0f CPU ns/sample, %.3f allocs/sample, %.1f B/sample, %d GCs",
		float64(cpu)/float64(total), float64(ms1.Mallocs-ms0.Mallocs)/float64(total),
		float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(total), ms1.NumGC-ms0.NumGC)
	t.Logf("drained %d samples in %v: %.0f samples/s; stats %+v", total, el, float64(total)/el.Seconds(), n.stats(t))
}

// cpuTime is the process' user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
