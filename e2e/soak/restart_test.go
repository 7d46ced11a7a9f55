package soak

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"
)

var (
	restartRows  = flag.Int("restart.rows", 0, "live wal rows to restart with; 0 skips TestRestartTime")
	restartBin   = flag.String("restart.bin", "", "measure this binary instead of building ./cmd/dendro-receiver")
	restartBound = flag.Duration("restart.bound", 5*time.Second, "the longest a restart may take to be ready")
)

// TestRestartTime measures how long the binary takes from start to a 200
// on /-/ready with a large live tail: -restart.rows wal rows that no seal
// took (the seal policy is set out of reach), after a clean stop and after
// a kill -9, three times each, and fails above -restart.bound.
//
//	go test -run TestRestartTime -v ./e2e/soak/ -restart.rows=100000
func TestRestartTime(t *testing.T) {
	if *restartRows <= 0 {
		t.Skip("a measurement for a person to start: -restart.rows=100000")
	}
	dir := t.TempDir()
	bin := *restartBin
	if bin == "" {
		bin = filepath.Join(dir, "dendro-receiver")
		build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "../../cmd/dendro-receiver")
		build.Stderr = os.Stderr
		if err := build.Run(); err != nil {
			t.Fatalf("go build: %v", err)
		}
	}
	path := filepath.Join(dir, "restart.db")
	addr := freeAddr(t)
	base := "http://" + addr
	probes := 0
	// start returns when the server is ready, with how long it took to
	// acknowledge a first write (a probe series of its own) and to be
	// ready: a server takes writes before its read index is built.
	start := func() (cmd *exec.Cmd, wrote, ready time.Duration) {
		t.Helper()
		cmd = exec.Command(bin, "--web.listen-address="+addr, "--archive.path="+path, "--log.level=warn",
			"--seal.max-rows=1000000000", "--seal.max-bytes=64GiB", "--seal.max-age=1000h", "--retention.time=0")
		cmd.Stderr = os.Stderr
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		probes++
		probe := probeBody(t, probes)
		client := &http.Client{Timeout: time.Second}
		for deadline := t0.Add(5 * time.Minute); ; time.Sleep(2 * time.Millisecond) {
			if wrote == 0 {
				resp, err := client.Post(base+"/api/v1/write", "application/x-protobuf", bytes.NewReader(probe))
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode/100 == 2 {
						wrote = time.Since(t0)
					}
				}
			}
			resp, err := client.Get(base + "/-/ready")
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK && wrote > 0 {
					return cmd, wrote, time.Since(t0)
				}
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatalf("not ready within 5 minutes: %v", err)
			}
		}
	}
	stop := func(cmd *exec.Cmd, sig syscall.Signal) {
		cmd.Process.Signal(sig)
		cmd.Wait()
	}

	// The live tail: every request is one wal row per stream it touches.
	cmd, _, _ := start()
	d := dataSet{series: 1000, startMs: time.Now().Add(-time.Hour).UnixMilli() / 15000 * 15000, stepMs: 15000}
	l := &load{d: d, url: base + "/api/v1/write", fatal: make(chan error, 1)}
	client := &http.Client{Timeout: time.Minute}
	rows := 0
	for n := 0; rows < *restartRows; n++ {
		for s := range senders {
			for _, body := range d.round(s, n) {
				if err := l.send(client, body); err != nil {
					t.Fatal(err)
				}
			}
		}
		if n%100 == 99 {
			rows = int(scrape(t, base)["dendro_archive_wal_rows"])
		}
	}
	stop(cmd, syscall.SIGTERM)
	t.Logf("%d live wal rows written (%s)", rows, fileSizes(path))

	var clean, killed, cleanW, killedW []time.Duration
	for range 3 {
		cmd, w, took := start()
		clean, cleanW = append(clean, took), append(cleanW, w)
		stop(cmd, syscall.SIGKILL) // the next start recovers the sidecar
		cmd, w, took = start()
		killed, killedW = append(killed, took), append(killedW, w)
		stop(cmd, syscall.SIGTERM)
	}
	for _, d := range [][]time.Duration{clean, killed, cleanW, killedW} {
		slices.Sort(d)
	}
	t.Logf("first write acknowledged after a clean stop: %v; after kill -9: %v", cleanW, killedW)
	t.Logf("ready after a clean stop: %v; after kill -9: %v (%d live rows)", clean, killed, rows)
	if worst := max(clean[2], killed[2]); worst > *restartBound {
		t.Errorf("a restart took %v to be ready, more than %v", worst, *restartBound)
	}
}

// probeBody is a write request of one sample of a series no load writes.
func probeBody(t *testing.T, n int) []byte {
	wr := prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{
		Labels:  []prompb.Label{{Name: "__name__", Value: "restart_probe"}, {Name: "start", Value: strconv.Itoa(n)}},
		Samples: []prompb.Sample{{Timestamp: time.Now().UnixMilli(), Value: float64(n)}},
	}}}
	raw, err := wr.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return snappy.Encode(nil, raw)
}

func fileSizes(path string) string {
	s := ""
	for _, p := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			s += fmt.Sprintf("%s %s MiB ", filepath.Base(p), strconv.FormatFloat(float64(fi.Size())/(1<<20), 'f', 1, 64))
		}
	}
	return s
}
