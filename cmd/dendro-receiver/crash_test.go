package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// buildBinary builds dendro-receiver into a temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "dendro-receiver")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, ".")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build: %v", err)
	}
	return bin
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

type server struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited; then err is set
	err    error
}

// startServer starts the binary on addr and path (sealing every 20 rows,
// logging warnings, then args) and returns once it is ready.
func startServer(t *testing.T, bin, addr, path string, args ...string) *server {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--web.listen-address=" + addr, "--archive.path=" + path, "--seal.max-rows=20", "--log.level=warn"}, args...)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, exited: make(chan struct{})}
	go func() { s.err = cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-s.exited })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("dendro-receiver did not become ready: %v", err)
		}
	}
}

// crashSample is the deterministic value of sample s of series i of
// request r of sender k: arbitrary float bits, and now and then a stale
// marker.
func crashSample(k, r, i, s int) float64 {
	if (r+i+s)%37 == 0 {
		return math.Float64frombits(0x7ff0000000000002)
	}
	x := uint64(k+1)*0x9e3779b97f4a7c15 ^ uint64(r)*0xbf58476d1ce4e5b9 ^ uint64(i)*0x94d049bb133111eb ^ uint64(s+1)
	return math.Float64frombits(x>>12 | 0x3ff0000000000000) // a float in [1, 2) with random mantissa bits
}

// TestSIGKILLUnderLoadLosesNothingAcknowledged: two senders write
// continuously and retry like Prometheus (5xx and transport errors, until a
// 2xx); the server is SIGKILLed mid-load and restarted on the same archive.
// Every acknowledged sample is then in the archive, bit-exact, once.
func TestSIGKILLUnderLoadLosesNothingAcknowledged(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBinary(t)
	addr := freePort(t)
	path := filepath.Join(t.TempDir(), "crash.db")
	srv := startServer(t, bin, addr, path)

	const senders, requests, series, perSeries = 2, 60, 50, 4
	base := time.Now().Add(-time.Hour).UnixMilli()
	var acked atomic.Int64
	var wg sync.WaitGroup
	failures := make(chan error, senders)
	for k := 0; k < senders; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			client := &http.Client{Timeout: 5 * time.Second}
			for r := 0; r < requests; r++ {
				var wr prompb.WriteRequest
				for i := 0; i < series; i++ {
					ts := prompb.TimeSeries{Labels: []prompb.Label{{Name: "__name__", Value: "crash_total"},
						{Name: "i", Value: fmt.Sprint(i)}, {Name: "sender", Value: fmt.Sprint(k)}}}
					for s := 0; s < perSeries; s++ {
						ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: base + int64(r*perSeries+s)*1000, Value: crashSample(k, r, i, s)})
					}
					wr.Timeseries = append(wr.Timeseries, ts)
				}
				raw, _ := wr.Marshal()
				body := snappy.Encode(nil, raw)
				for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
					req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/v1/write", bytes.NewReader(body))
					req.Header.Set("Content-Type", "application/x-protobuf")
					req.Header.Set("Content-Encoding", "snappy")
					resp, err := client.Do(req)
					if err == nil {
						resp.Body.Close()
						if resp.StatusCode/100 == 2 {
							acked.Add(1)
							break
						}
						if resp.StatusCode/100 == 4 {
							failures <- fmt.Errorf("sender %d request %d refused: %s", k, r, resp.Status)
							return
						}
					}
					if time.Now().After(deadline) {
						failures <- fmt.Errorf("sender %d request %d never acknowledged: %v", k, r, err)
						return
					}
				}
			}
		}(k)
	}
	// Kill mid-load, then restart on the same archive and port.
	for acked.Load() < requests/2 {
		time.Sleep(5 * time.Millisecond)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-srv.exited
	killedAt := acked.Load()
	if _, err := os.Stat(path + "-wal"); err != nil {
		t.Fatalf("a killed receiver leaves its -wal sidecar: %v", err)
	}
	srv = startServer(t, bin, addr, path)
	wg.Wait()
	close(failures)
	for err := range failures {
		t.Fatal(err)
	}
	if killedAt >= senders*requests {
		t.Fatalf("the kill came after the load (%d acked)", killedAt)
	}
	// Clean stop, then read the file.
	srv.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-srv.exited:
		if srv.err != nil {
			t.Fatalf("SIGTERM: %v", srv.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no clean exit within 10 s of SIGTERM")
	}
	a, err := archive.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	got, err := promsample.ReadArchive(context.Background(), a, promsample.AllTime())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != senders*series {
		t.Fatalf("read %d series, want %d", len(got), senders*series)
	}
	for _, s := range got {
		var k, i int
		fmt.Sscan(s.Labels.Get("sender"), &k)
		fmt.Sscan(s.Labels.Get("i"), &i)
		if len(s.Samples) != requests*perSeries {
			t.Fatalf("%s: %d samples, want %d (lost or duplicated)", s.Labels, len(s.Samples), requests*perSeries)
		}
		for n, smp := range s.Samples {
			r, j := n/perSeries, n%perSeries
			want := crashSample(k, r, i, j)
			if smp.T != base+int64(n)*1000 || math.Float64bits(smp.V) != math.Float64bits(want) {
				t.Fatalf("%s sample %d: %d %#x, want %d %#x", s.Labels, n, smp.T, math.Float64bits(smp.V),
					base+int64(n)*1000, math.Float64bits(want))
			}
		}
	}
	t.Logf("killed after %d of %d acknowledged requests; all %d samples present once, bit-exact",
		killedAt, senders*requests, senders*requests*series*perSeries)
}
