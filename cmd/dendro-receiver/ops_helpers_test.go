package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/archivecmd"
)

// The operator commands' tests run them against real archives: a real
// dendro-receiver serving (this test binary re-executed as a child, so it
// can be SIGKILLed) is sent real remote-write requests.

const childArgsEnv = "DENDRO_OPS_CHILD_ARGS"

// TestOpsServerChild is the child: it serves with the arguments in
// childArgsEnv until SIGTERM (a clean stop) or SIGKILL.
func TestOpsServerChild(t *testing.T) {
	raw := os.Getenv(childArgsEnv)
	if raw == "" {
		t.Skip("the child process of the operator command tests")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := run(ctx, strings.Split(raw, "\x1f"), os.Stdout, os.Stderr, runtime.GOMAXPROCS(0)); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	os.Exit(0)
}

type childServer struct {
	cmd    *exec.Cmd
	addr   string
	exited chan struct{}
	err    error
}

// serve starts a dendro-receiver child on path and waits until it is ready.
func serve(t *testing.T, path string, flags ...string) *childServer {
	t.Helper()
	addr := freePort(t)
	args := append([]string{"--web.listen-address=" + addr, "--archive.path=" + path, "--log.level=warn"}, flags...)
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpsServerChild$")
	cmd.Env = append(os.Environ(), childArgsEnv+"="+strings.Join(args, "\x1f"))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &childServer{cmd: cmd, addr: addr, exited: make(chan struct{})}
	go func() { s.err = cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-s.exited })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		select {
		case <-s.exited:
			t.Fatalf("the server exited before it was ready: %v", s.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not become ready: %v", err)
		}
	}
}

// stop ends the server with SIGTERM (clean: one file left) or SIGKILL.
func (s *childServer) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("the server did not exit on %v", sig)
	}
	if sig == syscall.SIGTERM && s.err != nil {
		t.Fatalf("the server's clean stop failed: %v", s.err)
	}
}

// The load: opsMetrics metrics of opsSeries series each; request r holds
// one sample of every series, at base + r*15 s.
const (
	opsMetrics = 4
	opsSeries  = 5
	opsStep    = 15_000 // ms
)

func opsValue(m, i, r int) float64 {
	if (m+i+r)%41 == 0 {
		return math.Float64frombits(0x7ff0000000000002) // a stale marker now and then
	}
	return float64(r*10+i) + float64(m)/4
}

// opsRequest is request r's body for the metrics named prefix_0...
func opsRequest(prefix string, r int, base int64) []byte {
	var wr prompb.WriteRequest
	for m := 0; m < opsMetrics; m++ {
		for i := 0; i < opsSeries; i++ {
			wr.Timeseries = append(wr.Timeseries, prompb.TimeSeries{
				Labels: []prompb.Label{{Name: "__name__", Value: fmt.Sprintf("%s_%d", prefix, m)},
					{Name: "instance", Value: fmt.Sprintf("host-%d:9100", i)}, {Name: "job", Value: "node"}},
				Samples: []prompb.Sample{{Timestamp: base + int64(r)*opsStep, Value: opsValue(m, i, r)}},
			})
		}
	}
	raw, err := wr.Marshal()
	if err != nil {
		panic(err)
	}
	return snappy.Encode(nil, raw)
}

// send posts one request and reports whether it was acknowledged.
func send(addr string, body []byte) error {
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/v1/write", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "snappy")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("write answered %s", resp.Status)
	}
	return nil
}

// sendN sends requests [from, to) of prefix one after another.
func sendN(t *testing.T, addr, prefix string, from, to int, base int64) {
	t.Helper()
	for r := from; r < to; r++ {
		if err := send(addr, opsRequest(prefix, r, base)); err != nil {
			t.Fatalf("request %d: %v", r, err)
		}
	}
}

// op runs an operator command in this process and returns its standard
// output (standard error goes to the test's log).
func op(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, &out, &errOut, runtime.GOMAXPROCS(0))
	if errOut.Len() > 0 {
		t.Logf("%v: stderr: %s", args, errOut.String())
	}
	return out.String(), err
}

// mustOp is op that must succeed.
func mustOp(t *testing.T, args ...string) string {
	t.Helper()
	out, err := op(t, args...)
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return out
}

// inspectJSONOf runs inspect --format=json.
func inspectJSONOf(t *testing.T, path string) inspectReport {
	t.Helper()
	out := mustOp(t, "inspect", "--archive.path="+path, "--format=json")
	var r inspectReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("inspect --format=json is not JSON: %v\n%s", err, out)
	}
	return r
}

// readOnlyView bind-mounts dir read-only at a new directory and returns
// it (unmounted at cleanup); it skips the test where mounts are refused.
func readOnlyView(t *testing.T, dir string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a read-only bind mount needs root")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "--bind", dir, mnt).CombinedOutput(); err != nil {
		t.Skipf("mount --bind refused (%v: %s)", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", mnt).Run() })
	if out, err := exec.Command("mount", "-o", "remount,ro,bind", mnt).CombinedOutput(); err != nil {
		t.Skipf("remount read-only refused (%v: %s)", err, out)
	}
	if err := os.WriteFile(filepath.Join(mnt, "probe"), nil, 0o644); err == nil || !errors.Is(err, syscall.EROFS) {
		t.Skipf("the mount is not read-only: %v", err)
	}
	return mnt
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitSealed waits until the server has sealed at least one segment in
// each of the load's streams.
func waitSealed(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		a, err := archive.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		r, err := archivecmd.Inspect(context.Background(), a)
		a.Close()
		if err != nil {
			t.Fatal(err)
		}
		sealed := 0
		for _, s := range r.Sources {
			for _, st := range s.Streams {
				if st.Segments > 0 {
					sealed++
				}
			}
		}
		if sealed >= opsMetrics || time.Now().After(deadline) {
			if sealed < opsMetrics {
				t.Fatalf("the server sealed %d streams in 20 s", sealed)
			}
			return
		}
	}
}
