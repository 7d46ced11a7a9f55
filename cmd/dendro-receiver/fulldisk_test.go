package main

// A disk that fills and empties again, with the built binary and senders
// that retry like Prometheus: the server is never restarted, answers 507 or
// 503 while it cannot commit, is not ready meanwhile, and comes back by
// itself; every acknowledged sample is in the archive afterwards, and the
// archive passes integrity_check.
//
// Two real faults: a tmpfs that fills up (ENOSPC: SQLITE_FULL), where the
// test may mount one (root), and, everywhere, the server's RLIMIT_FSIZE
// lowered under it (EFBIG: SQLITE_IOERR_WRITE, or SQLITE_FULL on a short
// write), which refuses every write that would grow a file as a full disk
// does. Go ignores the SIGXFSZ that comes with it.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"
	"golang.org/x/sys/unix"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// fillLoad is what the senders of a fill test send: senders x requests
// requests of series x perSeries samples (arbitrary float bits), each
// sender in order, every request retried until it is answered 2xx.
type fillLoad struct {
	senders, requests, series, perSeries int
	base                                 int64 // ms of the first sample
}

func (l fillLoad) body(k, r int) []byte {
	var wr prompb.WriteRequest
	for i := 0; i < l.series; i++ {
		ts := prompb.TimeSeries{Labels: []prompb.Label{{Name: "__name__", Value: "fill_total"},
			{Name: "i", Value: strconv.Itoa(i)}, {Name: "sender", Value: strconv.Itoa(k)}}}
		for s := 0; s < l.perSeries; s++ {
			ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: l.base + int64(r*l.perSeries+s)*1000, Value: crashSample(k, r, i, s)})
		}
		wr.Timeseries = append(wr.Timeseries, ts)
	}
	raw, _ := wr.Marshal()
	return snappy.Encode(nil, raw)
}

// fillRun is one run's record: acknowledged requests per sender (in order),
// and the refusals (507 and 503) the senders met.
type fillRun struct {
	acked             []atomic.Int64
	full, unavailable atomic.Int64
	firstAcks         chan struct{} // closed after 50 acknowledged requests
	refusals          chan struct{} // one value per refusal (dropped when full)
	errs              chan error
}

// send runs the senders until every request is acknowledged (or one is
// refused with a 4xx, or the deadline passes).
func (l fillLoad) send(url string, run *fillRun, deadline time.Time) *sync.WaitGroup {
	var wg sync.WaitGroup
	var total atomic.Int64
	var once sync.Once
	for k := 0; k < l.senders; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			client := &http.Client{Timeout: 30 * time.Second}
			for r := 0; r < l.requests; r++ {
				body := l.body(k, r)
				backoff := 20 * time.Millisecond
				for {
					req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
					req.Header.Set("Content-Type", "application/x-protobuf")
					req.Header.Set("Content-Encoding", "snappy")
					resp, err := client.Do(req)
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						switch {
						case resp.StatusCode/100 == 2:
							run.acked[k].Add(1)
							if total.Add(1) == 50 {
								once.Do(func() { close(run.firstAcks) })
							}
						case resp.StatusCode == http.StatusInsufficientStorage:
							run.full.Add(1)
						case resp.StatusCode == http.StatusServiceUnavailable:
							run.unavailable.Add(1)
						default:
							run.errs <- fmt.Errorf("sender %d request %d: %s", k, r, resp.Status)
							return
						}
						if resp.StatusCode/100 == 2 {
							break
						}
						select {
						case run.refusals <- struct{}{}:
						default:
						}
						if resp.Header.Get("Retry-After") == "" {
							run.errs <- fmt.Errorf("sender %d request %d: %s without Retry-After", k, r, resp.Status)
							return
						}
					}
					if time.Now().After(deadline) {
						run.errs <- fmt.Errorf("sender %d request %d never acknowledged (last: %v)", k, r, err)
						return
					}
					time.Sleep(backoff) // the sender's own backoff, as Prometheus's
					backoff = min(2*backoff, 500*time.Millisecond)
				}
			}
		}(k)
	}
	return &wg
}

// scrape returns the value of a metric of the server at addr, or NaN.
func scrape(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return math.NaN()
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return math.NaN()
}

func readiness(addr string) (int, string) {
	resp, err := http.Get("http://" + addr + "/-/ready")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// mountTmpfs mounts a tmpfs of size at a fresh directory, unmounted at
// cleanup, and skips the test where mounting is not allowed.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v): the rlimit case covers refused writes", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, 0) })
	return dir
}

func remountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_REMOUNT, "size="+size); err != nil {
		t.Fatalf("growing the tmpfs: %v", err)
	}
}

func setFileSizeLimit(t *testing.T, pid int, limit uint64) {
	t.Helper()
	rl := unix.Rlimit{Cur: limit, Max: unix.RLIM_INFINITY}
	if err := unix.Prlimit(pid, unix.RLIMIT_FSIZE, &rl, nil); err != nil {
		t.Fatalf("prlimit: %v", err)
	}
}

func archiveFilesSize(path string) uint64 {
	var n uint64
	for _, p := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			n = max(n, uint64(fi.Size()))
		}
	}
	return n
}

func TestADiskThatFillsAndEmptiesAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBinary(t)
	load := fillLoad{senders: 2, requests: 600, series: 500, perSeries: 4, base: time.Now().Add(-time.Hour).UnixMilli()}
	t.Run("tmpfs", func(t *testing.T) {
		dir := mountTmpfs(t, "6m")
		fillAndEmpty(t, bin, filepath.Join(dir, "fill.db"), load, nil, func(int) { remountTmpfs(t, dir, "512m") })
	})
	t.Run("tmpfs, --retention.size", func(t *testing.T) {
		dir := mountTmpfs(t, "40m")
		big := load
		big.requests = 2500 // about 40 MB of archive
		evictBeforeRefusing(t, bin, filepath.Join(dir, "fill.db"), big, false)
	})
	t.Run("tmpfs, --retention.size, the CPU taken by others", func(t *testing.T) {
		// Seals starved of CPU (the encoder runs at nice 19) let the live
		// rows fill the disk: then no seal can commit and there is nothing
		// to evict, and every write was refused for good, also once the
		// CPU was free again. Now writes may be refused a while, until
		// the seals have made room, and then go on.
		dir := mountTmpfs(t, "40m")
		big := load
		big.requests = 2500
		takeTheCPU(t)
		evictBeforeRefusing(t, bin, filepath.Join(dir, "fill.db"), big, true)
	})
	t.Run("rlimit", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "fill.db")
		fillAndEmpty(t, bin, path, load,
			func(pid int) { setFileSizeLimit(t, pid, archiveFilesSize(path)+1<<20) },
			func(pid int) { setFileSizeLimit(t, pid, unix.RLIM_INFINITY) })
	})
}

// fillAndEmpty runs load against a server on path until its writes are
// refused (limit, when set, makes them so once 50 requests are in), holds
// that for 40 refusals, lets space return (grow) and checks everything the
// package comment promises.
func fillAndEmpty(t *testing.T, bin, path string, load fillLoad, limit, grow func(pid int)) {
	addr := freePort(t)
	srv := startServer(t, bin, addr, path)
	pid := srv.cmd.Process.Pid
	run := &fillRun{acked: make([]atomic.Int64, load.senders), firstAcks: make(chan struct{}),
		refusals: make(chan struct{}, 1000), errs: make(chan error, load.senders)}
	wg := load.send("http://"+addr+"/api/v1/write", run, time.Now().Add(4*time.Minute))
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	if limit != nil {
		select {
		case <-run.firstAcks:
		case <-done:
			t.Fatal("the senders finished before 50 requests were acknowledged")
		}
		limit(pid)
	}
	// Full: at least 40 refusals (the writer used to stop for good after
	// 30 dropped ticks), and readiness and writer_up say so meanwhile.
	sawNotReady, sawDown := false, false
	for n := 0; n < 40; {
		select {
		case <-run.refusals:
			n++
		case <-done:
			t.Fatalf("every request was acknowledged: the disk never filled (%d refusals; the archive is %d bytes)", n, archiveFilesSize(path))
		case err := <-run.errs:
			t.Fatal(err)
		}
		if code, body := readiness(addr); code == http.StatusServiceUnavailable && strings.Contains(body, "cannot commit") {
			sawNotReady = true
		}
		if scrape(t, addr, "dendro_writer_up") == 0 && scrape(t, addr, "dendro_writer_outage_seconds") > 0 {
			sawDown = true
		}
	}
	for deadline := time.Now().Add(30 * time.Second); !sawNotReady || !sawDown; time.Sleep(20 * time.Millisecond) {
		if code, body := readiness(addr); code == http.StatusServiceUnavailable && strings.Contains(body, "cannot commit") {
			sawNotReady = true
		}
		if scrape(t, addr, "dendro_writer_up") == 0 {
			sawDown = true
		}
		if time.Now().After(deadline) {
			t.Fatalf("while writes were refused: not-ready seen %v, writer_up 0 seen %v", sawNotReady, sawDown)
		}
	}
	code, body := readiness(addr)
	t.Logf("full: %d refusals so far (%d x 507, %d x 503); /-/ready %d %q",
		run.full.Load()+run.unavailable.Load(), run.full.Load(), run.unavailable.Load(), code, body)

	grow(pid)
	select {
	case <-done:
	case err := <-run.errs:
		t.Fatal(err)
	}
	close(run.errs)
	for err := range run.errs {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if code, _ := readiness(addr); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			code, body := readiness(addr)
			t.Fatalf("not ready again after space returned: %d %q", code, body)
		}
	}
	select {
	case <-srv.exited:
		t.Fatalf("the server exited: %v", srv.err)
	default:
	}
	if srv.cmd.Process.Pid != pid {
		t.Fatal("the server was restarted")
	}
	if up, outages := scrape(t, addr, "dendro_writer_up"), scrape(t, addr, "dendro_writer_outages_total"); up != 1 || outages < 1 {
		t.Errorf("after the outage: dendro_writer_up %v, dendro_writer_outages_total %v", up, outages)
	}
	srv.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-srv.exited:
		if srv.err != nil {
			t.Fatalf("SIGTERM: %v", srv.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no clean exit within 30 s of SIGTERM")
	}
	checkFillArchive(t, path, load, nil)
	t.Logf("%d refusals (%d x 507, %d x 503), then all %d requests acknowledged; every sample read back exact; integrity_check ok",
		run.full.Load()+run.unavailable.Load(), run.full.Load(), run.unavailable.Load(), load.senders*load.requests)
}

// takeTheCPU runs a busy loop at normal priority on every CPU until the
// test ends, as other work on a busy host would.
func takeTheCPU(t *testing.T) {
	t.Helper()
	for range runtime.NumCPU() {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
}

// evictBeforeRefusing runs load against a server whose --retention.size
// (1 GiB) is far above what its filesystem holds: when less than the disk
// reserve (16 MiB) is left, the oldest segments go and the writes go on.
// With mayRefuse, some writes may be refused meanwhile (507), but every
// one must be acknowledged in the end: the archive never stays full.
func evictBeforeRefusing(t *testing.T, bin, path string, load fillLoad, mayRefuse bool) {
	addr := freePort(t)
	srv := startServer(t, bin, addr, path, "--retention.size=1GiB", "--retention.disk-reserve=16MiB")
	run := &fillRun{acked: make([]atomic.Int64, load.senders), firstAcks: make(chan struct{}),
		refusals: make(chan struct{}, 1000), errs: make(chan error, load.senders)}
	load.send("http://"+addr+"/api/v1/write", run, time.Now().Add(4*time.Minute)).Wait()
	close(run.errs)
	for err := range run.errs {
		t.Fatal(err)
	}
	segs, bytes := scrape(t, addr, "dendro_ingest_early_evicted_segments_total"), scrape(t, addr, "dendro_ingest_early_evicted_bytes_total")
	if !(segs > 0) {
		t.Fatalf("the disk filled and no segment was evicted early (%v)", segs)
	}
	if n := run.full.Load(); n > 0 && !mayRefuse {
		t.Errorf("%d writes refused as disk full: the reserve did not keep room", n)
	}
	if code, body := readiness(addr); code != http.StatusOK {
		t.Errorf("not ready after the run: %d %q", code, body)
	}
	srv.cmd.Process.Signal(syscall.SIGTERM)
	<-srv.exited
	if srv.err != nil {
		t.Fatalf("SIGTERM: %v", srv.err)
	}
	kept := map[string]int{}
	checkFillArchive(t, path, load, kept)
	lost := 0
	for _, first := range kept {
		lost += first
	}
	if lost == 0 {
		t.Error("early eviction deleted segments but every sample is still there")
	}
	t.Logf("%d segments (%.1f MiB) evicted early, %d samples of the oldest gone from %d series; %d refusals (%d x 507, %d x 503) in %d requests; the rest read back exact",
		int(segs), bytes/(1<<20), lost, len(kept), run.full.Load()+run.unavailable.Load(), run.full.Load(), run.unavailable.Load(), load.senders*load.requests)
}

// checkFillArchive verifies the archive at path (integrity_check included)
// and that every series holds its samples exactly. With keptFrom nil every
// sample of load must be there; otherwise each series may have lost a
// prefix (early eviction takes the oldest), and keptFrom receives, per
// series, the index of its first sample present.
func checkFillArchive(t *testing.T, path string, load fillLoad, keptFrom map[string]int) {
	t.Helper()
	a, err := archive.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rep, err := a.Verify(context.Background(), archive.Full)
	if err != nil || !rep.Sound() {
		t.Fatalf("verify: %v %v", err, rep.Problems)
	}
	got, err := promsample.ReadArchive(context.Background(), a, promsample.AllTime())
	if err != nil {
		t.Fatal(err)
	}
	if keptFrom == nil && len(got) != load.senders*load.series {
		t.Fatalf("read %d series, want %d", len(got), load.senders*load.series)
	}
	total := load.requests * load.perSeries
	for _, s := range got {
		k, _ := strconv.Atoi(s.Labels.Get("sender"))
		i, _ := strconv.Atoi(s.Labels.Get("i"))
		first := total - len(s.Samples)
		if keptFrom == nil && first != 0 || first < 0 {
			t.Fatalf("%s: %d samples, want %d (lost or duplicated)", s.Labels, len(s.Samples), total)
		}
		if keptFrom != nil {
			keptFrom[s.Labels.String()] = first
		}
		for j, smp := range s.Samples {
			n := first + j
			r, p := n/load.perSeries, n%load.perSeries
			want := crashSample(k, r, i, p)
			if smp.T != load.base+int64(n)*1000 || math.Float64bits(smp.V) != math.Float64bits(want) {
				t.Fatalf("%s sample %d: %d %#x, want %d %#x", s.Labels, n, smp.T, math.Float64bits(smp.V),
					load.base+int64(n)*1000, math.Float64bits(want))
			}
		}
	}
}
