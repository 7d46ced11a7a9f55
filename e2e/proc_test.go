package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// proc is one child process the test started. Its output goes to a log
// file, whose tail is printed when the test fails.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when Wait returned
	waitErr error         // valid after done
}

// startProc starts bin with args, logging to a file under logDir. At
// cleanup a still-running process is stopped (SIGTERM, then SIGKILL after
// stopGrace) and reaped.
func startProc(t *testing.T, name, logDir string, stopGrace time.Duration, bin string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(logDir, fmt.Sprintf("%s-%d.log", name, time.Now().UnixNano()))
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	t.Logf("started %s (pid %d): %s %s", name, cmd.Process.Pid, filepath.Base(bin), strings.Join(args, " "))
	t.Cleanup(func() {
		if !p.exited() {
			p.signal(syscall.SIGTERM)
			if !p.waitExit(stopGrace) {
				t.Logf("%s (pid %d) still running %v after SIGTERM; SIGKILL", name, cmd.Process.Pid, stopGrace)
				p.signal(syscall.SIGKILL)
				<-p.done
			}
		}
		if t.Failed() {
			t.Logf("--- last lines of %s log (%s) ---\n%s", name, logPath, tail(logPath, 40))
		}
	})
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) signal(sig syscall.Signal) {
	// Signal only this process, by its pid, and only while it is ours to
	// signal: after Wait returned, the pid may belong to someone else.
	if !p.exited() {
		_ = p.cmd.Process.Signal(sig)
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitExit reports whether the process exited within d.
func (p *proc) waitExit(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// kill sends SIGKILL and reaps the process.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	p.signal(syscall.SIGKILL)
	if !p.waitExit(10 * time.Second) {
		t.Fatalf("%s (pid %d) did not die on SIGKILL", p.name, p.pid())
	}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freeAddr returns a loopback address with a port that was free a moment
// ago: listen on port 0, take the port, close.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// poll calls cond every interval until it reports true or timeout passes,
// then fails the test with what and cond's last detail. It is how these
// tests wait: on a condition, with a deadline, never on a bare sleep.
func poll(t *testing.T, timeout, interval time.Duration, what string, cond func() (ok bool, detail string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %s", what, timeout, detail)
		}
		time.Sleep(interval)
	}
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

// httpGet returns the status and body of a GET.
func httpGet(ctx context.Context, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// waitReady polls url until it answers 200, failing early if p exits.
func waitReady(t *testing.T, p *proc, url string, timeout time.Duration) {
	t.Helper()
	poll(t, timeout, 50*time.Millisecond, p.name+" ready at "+url, func() (bool, string) {
		if p.exited() {
			t.Fatalf("%s exited during startup (%v); log:\n%s", p.name, p.waitErr, tail(p.logPath, 40))
		}
		code, body, err := httpGet(context.Background(), url)
		if err != nil {
			return false, err.Error()
		}
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, bytes.TrimSpace(body))
	})
}

// exitCode is the process's exit status, or -1 with a reason when it did
// not exit normally (killed by a signal).
func (p *proc) exitCode() (int, string) {
	if p.waitErr == nil {
		return 0, ""
	}
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return -1, "killed by " + ws.Signal().String()
		}
		return ee.ExitCode(), ""
	}
	return -1, p.waitErr.Error()
}
