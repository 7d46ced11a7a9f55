package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// target is one server under test as a run drives it: the process kinds
// below, or the tests' fakes over httptest.
type target interface {
	// Start starts the server on its data directory (empty the first
	// time) and returns once it answers ready.
	Start(ctx context.Context) error
	// Stop stops it gracefully and waits for the process to exit.
	Stop(ctx context.Context) error
	PID() int
	BaseURL() string // http://127.0.0.1:PORT, valid after Start
	// Flush asks the server to put what it holds in its final on-disk
	// form, where it has a way to (see the kinds' flush).
	Flush(ctx context.Context) error
	// DiskBytes is the size of the data as stored now; after says the
	// flush and stop happened (the kinds' afterBytes).
	DiskBytes(after bool) (int64, error)
	// Reader is how to read raw samples back, its name, and the relative
	// tolerance its values need.
	Reader(client *http.Client) (rawReader, string, float64)
	// Gauges are the server's own figures worth keeping with a run.
	Gauges(ctx context.Context, client *http.Client) map[string]float64
}

// kind describes how to run one server program.
type kind struct {
	key       string // dendro, vm, prometheus: what --servers names
	name      string // in the table
	readyPath string
	export    bool    // raw reads through VictoriaMetrics's export API, not remote-read
	tolerance float64 // relative, for the values it returns
	// args is the command line for data directory dir and listen address
	// addr; setup prepares dir before the first start.
	args  func(dir, addr string) []string
	setup func(dir string) error
	// flush puts the data in its final form; afterBytes measures it once
	// flushed and stopped, ingestBytes right after the load.
	flush       func(ctx context.Context, client *http.Client, base string) error
	ingestBytes func(dir string) (int64, error)
	afterBytes  func(dir string) (int64, error)
	gauges      []string // metric names to keep from /metrics
}

// vmTolerance is the relative difference accepted from VictoriaMetrics,
// which keeps ~12 significant decimal digits of a float.
const vmTolerance = 1e-11

// kinds are the servers the benchmark knows, in table order.
func kinds() []kind {
	return []kind{
		{
			key: "dendro", name: "dendro-receiver", readyPath: "/-/ready",
			args: func(dir, addr string) []string {
				return []string{"--archive.path=" + filepath.Join(dir, "dendro.db"), "--web.listen-address=" + addr, "--log.level=warn"}
			},
			// dendro-receiver seals by policy and has nothing to flush; a
			// SIGTERM checkpoints the SQLite sidecars into the one file.
			flush:       func(context.Context, *http.Client, string) error { return nil },
			ingestBytes: func(dir string) (int64, error) { return treeBytes(dir, "log") },
			afterBytes:  func(dir string) (int64, error) { return treeBytes(dir, "log") },
			gauges: []string{"dendro_archive_wal_rows", "dendro_archive_segments", "dendro_writer_seals_total",
				"dendro_writer_seals_behind_total", "dendro_writer_rows_dropped_total", "dendro_writer_compactions_total"},
		},
		{
			key: "vm", name: "VictoriaMetrics", readyPath: "/health", export: true, tolerance: vmTolerance,
			args: func(dir, addr string) []string {
				return []string{"-storageDataPath=" + filepath.Join(dir, "data"), "-httpListenAddr=" + addr, "-loggerLevel=WARN"}
			},
			// force_flush makes the in-memory parts searchable files; the
			// background merges go on by themselves. data/cache holds
			// caches saved at shutdown, not data.
			flush: func(ctx context.Context, client *http.Client, base string) error {
				return get(ctx, client, base+"/internal/force_flush")
			},
			ingestBytes: func(dir string) (int64, error) { return treeBytes(filepath.Join(dir, "data"), "cache") },
			afterBytes:  func(dir string) (int64, error) { return treeBytes(filepath.Join(dir, "data"), "cache") },
			gauges:      []string{"vm_rows{type=\"storage/big\"}", "vm_rows{type=\"storage/small\"}", "vm_parts{type=\"storage/big\"}", "vm_parts{type=\"storage/small\"}"},
		},
		{
			key: "prometheus", name: "Prometheus", readyPath: "/-/ready",
			setup: func(dir string) error {
				// No scrape targets, not even itself: the TSDB holds only
				// what the benchmark writes.
				return os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte("global:\n  scrape_interval: 15s\nscrape_configs: []\n"), 0o644)
			},
			args: func(dir, addr string) []string {
				return []string{"--config.file=" + filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path=" + filepath.Join(dir, "data"),
					"--web.listen-address=" + addr, "--web.enable-remote-write-receiver", "--web.enable-admin-api", "--log.level=warn"}
			},
			// The head lives in memory and the WAL until it is 3 h wide;
			// a snapshot with the head writes it as one block, the size a
			// compaction would give it. "After" is that block alone.
			flush: func(ctx context.Context, client *http.Client, base string) error {
				return post(ctx, client, base+"/api/v1/admin/tsdb/snapshot?skip_head=false")
			},
			ingestBytes: func(dir string) (int64, error) { return treeBytes(filepath.Join(dir, "data"), "snapshots") },
			afterBytes:  func(dir string) (int64, error) { return treeBytes(filepath.Join(dir, "data", "snapshots")) },
			gauges:      []string{"prometheus_tsdb_head_series", "prometheus_tsdb_head_samples_appended_total", "prometheus_tsdb_out_of_order_samples_total", "prometheus_tsdb_compactions_total"},
		},
	}
}

// process is a kind running as a child process on loopback.
type process struct {
	kind    kind
	bin     string
	dir     string // data directory, the process's own
	logPath string
	base    string
	cmd     *exec.Cmd
	done    chan struct{} // closed once the process was reaped
	waitErr error         // valid once done is closed
	starts  int
}

var _ target = (*process)(nil)

func newProcess(k kind, bin, dir string) (*process, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: %s: %w", k.name, err)
	}
	if k.setup != nil {
		if err := k.setup(dir); err != nil {
			return nil, fmt.Errorf("bench: %s setup: %w", k.name, err)
		}
	}
	return &process{kind: k, bin: bin, dir: dir, logPath: filepath.Join(dir, "log")}, nil
}

// startTimeout bounds a start: Prometheus replays its WAL before it is
// ready, a minute and more at a million series.
const startTimeout = 5 * time.Minute

func (p *process) Start(ctx context.Context) error {
	if p.cmd != nil && !p.exited() {
		return fmt.Errorf("bench: %s already running (pid %d)", p.kind.name, p.PID())
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("bench: %s log: %w", p.kind.name, err)
	}
	p.starts++
	fmt.Fprintf(logf, "=== bench: start %d at %s\n", p.starts, time.Now().Format(time.RFC3339))
	cmd := exec.Command(p.bin, p.kind.args(p.dir, addr)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a ^C to the benchmark reaches the benchmark,
	// which stops the server in order, not the server directly.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("bench: start %s: %w", p.kind.name, err)
	}
	p.cmd, p.done, p.base = cmd, make(chan struct{}), "http://"+addr
	go func() {
		p.waitErr = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if p.exited() {
			return fmt.Errorf("bench: %s exited while starting (%v); log %s:\n%s", p.kind.name, p.waitErr, p.logPath, tail(p.logPath, 15))
		}
		if err := get(ctx, client, p.base+p.kind.readyPath); err == nil {
			return nil
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			p.kill()
			return fmt.Errorf("bench: %s not ready: %w", p.kind.name, ctx.Err())
		}
	}
}

// stopGrace is how long a SIGTERM may take before SIGKILL.
const stopGrace = 2 * time.Minute

func (p *process) Stop(ctx context.Context) error {
	if p.cmd == nil || p.exited() {
		return p.exitErr()
	}
	// Signal by pid only while the process is ours: once reaped, the pid
	// may be someone else's.
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.exitErr()
	case <-time.After(stopGrace):
		p.kill()
		return fmt.Errorf("bench: %s ignored SIGTERM for %v; killed", p.kind.name, stopGrace)
	case <-ctx.Done():
		p.kill()
		return ctx.Err()
	}
}

// kill sends SIGKILL and reaps the process.
func (p *process) kill() {
	if p.cmd != nil && !p.exited() {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitErr says how a stopped process ended; a clean exit after SIGTERM is
// nil.
func (p *process) exitErr() error {
	if p.cmd == nil || p.waitErr == nil {
		return nil
	}
	return fmt.Errorf("bench: %s exited: %w; log %s:\n%s", p.kind.name, p.waitErr, p.logPath, tail(p.logPath, 15))
}

func (p *process) PID() int        { return p.cmd.Process.Pid }
func (p *process) BaseURL() string { return p.base }

func (p *process) Flush(ctx context.Context) error {
	return p.kind.flush(ctx, &http.Client{Timeout: 10 * time.Minute}, p.base)
}

func (p *process) DiskBytes(after bool) (int64, error) {
	if after {
		return p.kind.afterBytes(p.dir)
	}
	return p.kind.ingestBytes(p.dir)
}

func (p *process) Reader(client *http.Client) (rawReader, string, float64) {
	if p.kind.export {
		return vmExport{client: client, url: p.base + "/api/v1/export"}, "export", p.kind.tolerance
	}
	return remoteRead{client: client, url: p.base + "/api/v1/read"}, "remote-read", p.kind.tolerance
}

func (p *process) Gauges(ctx context.Context, client *http.Client) map[string]float64 {
	return scrapeGauges(ctx, client, p.base+"/metrics", p.kind.gauges)
}

// freeAddr is a loopback address whose port was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("bench: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// treeBytes is the apparent size of every regular file under dir, leaving
// out the top-level entries named in skip. A missing dir is 0 bytes.
func treeBytes(dir string, skip ...string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if filepath.Dir(path) == dir {
			for _, s := range skip {
				if d.Name() == s {
					if d.IsDir() {
						return filepath.SkipDir
					}
					return nil
				}
			}
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked: a server's temp file
			}
			if err != nil {
				return err
			}
			total += info.Size()
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("bench: size of %s: %w", dir, err)
	}
	return total, nil
}

func get(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	_, err = do(client, req)
	return err
}

func post(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	_, err = do(client, req)
	return err
}

// scrapeGauges reads the named series (name, or name{labels} exactly as
// exposed) from a Prometheus text exposition; missing ones are left out.
func scrapeGauges(ctx context.Context, client *http.Client, url string, names []string) map[string]float64 {
	if len(names) == 0 {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil
	}
	body, err := do(client, req)
	if err != nil {
		return nil
	}
	out := map[string]float64{}
	for line := range strings.SplitSeq(string(body), "\n") {
		for _, n := range names {
			if rest, ok := strings.CutPrefix(line, n+" "); ok {
				var v float64
				if _, err := fmt.Sscan(rest, &v); err == nil {
					out[n] = v
				}
			}
		}
	}
	return out
}

// tail is the last n lines of a file, for error messages.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// decodeJSON decodes a Prometheus API answer's data field, failing on a
// status other than success.
func decodeJSON(body []byte, data any) error {
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("bench: API answer: %w", err)
	}
	if env.Status != "success" {
		return fmt.Errorf("bench: API answer: status %q: %s", env.Status, env.Error)
	}
	if err := json.Unmarshal(env.Data, data); err != nil {
		return fmt.Errorf("bench: API answer data: %w", err)
	}
	return nil
}
