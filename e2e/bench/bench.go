package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// Run runs the benchmark o describes, prints the table to stdout and
// progress to stderr, writes the JSON report, and returns an error when
// any run was refused or failed.
func Run(ctx context.Context, o Options, args []string, stdout, stderr io.Writer) error {
	o = o.withDefaults()
	if err := o.Validate(); err != nil {
		return err
	}
	logf := func(format string, a ...any) {
		fmt.Fprintf(stderr, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
	}
	work, err := os.MkdirTemp(o.WorkDir, "dendro-bench-")
	if err != nil {
		return fmt.Errorf("bench: work dir: %w", err)
	}
	if !o.Keep {
		defer os.RemoveAll(work)
	}
	rep := &Report{Format: 1, StartedAt: time.Now(), Args: args, Options: o, Machine: describeMachine(work)}
	rep.Tree = treeVersion(o.Tree)
	logf("machine: %s", rep.Machine)

	bins, infos, err := findServers(ctx, o, work, logf)
	if err != nil {
		return err
	}
	rep.Servers = infos
	rep.Notes = notes()

	var targets []kind
	for _, k := range kinds() {
		if bins[k.key] != "" {
			targets = append(targets, k)
		}
	}
	runID := 0
	for _, sc := range o.Scales {
		for _, per := range o.PerSeries {
			d := Dataset{Series: sc.Series, Samples: sc.Samples, Sources: o.Sources, StepMs: sc.Step.Milliseconds(), Seed: o.Seed}
			// The data ends a minute before now: Prometheus accepts a fresh
			// series at any time, VictoriaMetrics hides the last 30 s from
			// queries (-search.latencyOffset).
			now := time.Now().UnixMilli()
			d.StartMs = (now-time.Minute.Milliseconds())/d.StepMs*d.StepMs - int64(d.Samples-1)*d.StepMs
			l := Layout{Batch: o.Batch, PerSeries: per, Senders: o.Senders}
			t0 := time.Now()
			ld, err := Encode(d, l)
			if err != nil {
				return err
			}
			logf("%s series × %s samples, %d per series per request: %d requests, %.0f MiB encoded in %.1f s",
				group(float64(d.Series)), group(float64(d.Samples)), per, ld.Requests(), float64(ld.Bytes())/(1<<20), time.Since(t0).Seconds())
			debug.FreeOSMemory() // the encoder's garbage is not the servers' to compete with
			for round := range sc.Rounds {
				// Servers alternate, starting one later each round, so that
				// drift on the machine and the position in the order hit
				// every server alike.
				for n := range targets {
					k := targets[(n+round)%len(targets)]
					dir := filepath.Join(work, fmt.Sprintf("%03d-%s", runID, k.key))
					runID++
					res := runOne(ctx, k, bins[k.key], dir, ld, round, o, per == o.ReadsAt || o.ReadsAt < 0, logf)
					rep.Runs = append(rep.Runs, res)
					if !o.Keep {
						os.RemoveAll(dir)
					}
					if err := ctx.Err(); err != nil {
						return err
					}
				}
			}
			ld = nil
			runtime.GC()
		}
	}
	rep.Machine.LoadEnd = loadAvg()
	rep.Seconds = time.Since(rep.StartedAt).Seconds()
	rep.Blocks = buildBlocks(rep.Runs, rep.Servers)
	rep.Failures = failures(rep.Runs, rep.Servers)
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	path, err := rep.WriteJSON(o.Out)
	if err != nil {
		return err
	}
	logf("results in %s; %.1f minutes", path, rep.Seconds/60)
	if len(rep.Failures) > 0 {
		return fmt.Errorf("bench: %d run(s) refused or failed; their figures are not in the table", len(rep.Failures))
	}
	return nil
}

// runOne is one server over one load, started fresh in dir.
func runOne(ctx context.Context, k kind, bin, dir string, ld *Load, round int, o Options, reads bool, logf func(string, ...any)) RunResult {
	p, err := newProcess(k, bin, dir)
	if err != nil {
		return RunResult{Server: k.key, Dataset: ld.Dataset, Layout: ld.Layout, Round: round, Errors: []string{err.Error()}}
	}
	defer p.kill()
	logf("%s, round %d: %s series × %s samples, %d per series per request", k.name, round+1, group(float64(ld.Dataset.Series)), group(float64(ld.Dataset.Samples)), ld.Layout.PerSeries)
	res := measure(ctx, p, ld, round, o, reads)
	res.Server = k.key
	if res.OK() {
		logf("%s: %.0f k samples/s, %.2f µs CPU per sample, verified (%s)", k.name, res.Send.SamplesPerSecond()/1e3, res.perSample(res.CPUSeconds)*1e6, res.Verdict.Summary())
	} else {
		logf("%s: REFUSED: %s", k.name, res.Why())
	}
	return res
}

// measure drives one target through a run: start, load, wait for idle,
// flush, then with reads: stop, restart, reads, read-back, stop; without:
// read-back, stop. Every step's failure is recorded; a failed start ends
// the run.
func measure(ctx context.Context, t target, ld *Load, round int, o Options, reads bool) RunResult {
	res := RunResult{Dataset: ld.Dataset, Layout: ld.Layout, Round: round, StartedAt: time.Now().UTC().Format(time.RFC3339), Phases: map[string]float64{}}
	fail := func(step string, err error) { res.Errors = append(res.Errors, step+": "+err.Error()) }
	last := time.Now()
	phase := func(name string) {
		now := time.Now()
		res.Phases[name] += now.Sub(last).Seconds()
		last = now
	}
	defer phase("stop")
	if err := t.Start(ctx); err != nil {
		fail("start", err)
		return res
	}
	writer := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
		MaxIdleConnsPerHost: 2 * ld.Layout.Senders, DisableCompression: true, Proxy: nil}}
	defer writer.CloseIdleConnections()
	before, err := readProc(t.PID())
	if err != nil {
		fail("proc", err)
		return res
	}
	phase("start")
	res.Send = Send(ctx, writer, t.BaseURL()+"/api/v1/write", ld)
	phase("send")
	if res.DiskIngestBytes, err = t.DiskBytes(false); err != nil {
		fail("disk after ingest", err)
	}
	after, idle, err := waitIdle(ctx, t.PID(), o.Idle)
	if err != nil {
		fail("idle", err)
		return res
	}
	res.Idle = idle
	phase("idle")
	res.CPUSeconds = after.CPUSeconds - before.CPUSeconds
	res.WriteBytes = after.WriteBytes - before.WriteBytes
	res.PeakRSS = after.PeakRSS
	api := &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 4, Proxy: nil}}
	defer api.CloseIdleConnections()
	res.Gauges = t.Gauges(ctx, api)
	if err := t.Flush(ctx); err != nil {
		fail("flush", err)
	}
	phase("flush")
	rd, readerName, tol := t.Reader(api)
	if !reads {
		// No latencies to measure: read back on the running server,
		// then stop it and measure what a clean stop leaves.
		res.Verdict = Verify(ctx, rd, readerName, ld.Dataset, tol)
		phase("verify")
		if err := t.Stop(ctx); err != nil {
			fail("stop", err)
		}
		if res.DiskAfterBytes, err = t.DiskBytes(true); err != nil {
			fail("disk after flush", err)
		}
		return res
	}
	if err := t.Stop(ctx); err != nil {
		fail("stop", err)
	}
	if res.DiskAfterBytes, err = t.DiskBytes(true); err != nil {
		fail("disk after flush", err)
	}
	phase("stop")
	api.CloseIdleConnections()
	t0 := time.Now()
	if err := t.Start(ctx); err != nil {
		fail("restart", err)
		return res
	}
	res.RestartSeconds = time.Since(t0).Seconds()
	phase("restart")
	rd, readerName, tol = t.Reader(api) // the restart moved it to a new port
	// VictoriaMetrics is the one read by export, and the one with a
	// rollup result cache to turn off.
	res.Reads = measureReads(ctx, api, t.BaseURL(), rd, latencyQueries(ld.Dataset), readerName == "export", o.Warm)
	for _, r := range res.Reads {
		if r.Error != "" {
			fail("read "+r.Name, errors.New(r.Error))
		}
	}
	phase("reads")
	// The read-back comes after the reads, so that it warms no cache
	// before the first asks, and after a restart, so that it checks what
	// survived a clean stop.
	res.Verdict = Verify(ctx, rd, readerName, ld.Dataset, tol)
	phase("verify")
	if err := t.Stop(ctx); err != nil {
		fail("final stop", err)
	}
	return res
}

// failures lists every refused run, for the exit status.
func failures(runs []RunResult, servers []ServerInfo) []string {
	names := map[string]string{}
	for _, s := range servers {
		names[s.Key] = s.Name
	}
	var out []string
	for _, r := range runs {
		if !r.OK() {
			out = append(out, fmt.Sprintf("%s, %s series × %s samples, %d per series per request, round %d: %s",
				names[r.Server], group(float64(r.Dataset.Series)), group(float64(r.Dataset.Samples)), r.Layout.PerSeries, r.Round+1, r.Why()))
		}
	}
	return out
}

// findServers builds dendro-receiver from the tree and finds the peers'
// binaries; a missing peer is skipped with a note, never replaced.
func findServers(ctx context.Context, o Options, work string, logf func(string, ...any)) (map[string]string, []ServerInfo, error) {
	bins := map[string]string{}
	var infos []ServerInfo
	want := map[string]bool{}
	for _, s := range o.Servers {
		want[s] = true
	}
	for _, k := range kinds() {
		if !want[k.key] {
			continue
		}
		info := ServerInfo{Key: k.key, Name: k.name}
		switch k.key {
		case "dendro":
			bin, err := buildDendro(ctx, o.Tree, work)
			if err != nil {
				return nil, nil, err
			}
			info.Binary = "built from the tree"
			info.Version = versionOf(ctx, bin, "--version")
			bins[k.key] = bin
		case "vm":
			info.Binary, info.Skipped = lookPeer(o.VMBin, "victoria-metrics")
			info.Version = debVersion(ctx, "victoria-metrics")
		case "prometheus":
			info.Binary, info.Skipped = lookPeer(o.PrometheusBin, "prometheus")
			if info.Skipped == "" {
				info.Version = versionOf(ctx, info.Binary, "--version")
			}
		}
		if info.Skipped != "" {
			logf("%s skipped: %s", k.name, info.Skipped)
		} else if k.key != "dendro" {
			bins[k.key] = info.Binary
		}
		infos = append(infos, info)
	}
	return bins, infos, nil
}

// lookPeer finds a peer's binary: the flag's path, else the Debian
// package's command on PATH.
func lookPeer(flagPath, command string) (path, skipped string) {
	if flagPath != "" {
		if _, err := os.Stat(flagPath); err != nil {
			return "", err.Error()
		}
		return flagPath, ""
	}
	p, err := exec.LookPath(command)
	if err != nil {
		return "", fmt.Sprintf("%s not found on PATH (apt-get install -y %s)", command, command)
	}
	return p, ""
}

// buildDendro builds ./cmd/dendro-receiver of tree into dir, statically,
// as the Dockerfile does.
func buildDendro(ctx context.Context, tree, dir string) (string, error) {
	out := filepath.Join(dir, "dendro-receiver")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/dendro-receiver")
	cmd.Dir = tree
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("bench: go build ./cmd/dendro-receiver: %w\n%s", err, b)
	}
	return out, nil
}

// versionOf is the first line a binary prints for flag.
func versionOf(ctx context.Context, bin, flag string) string {
	b, err := exec.CommandContext(ctx, bin, flag).CombinedOutput()
	if err != nil {
		return "unknown"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return line
}

// debVersion is an installed Debian package's version: VictoriaMetrics's
// Debian build prints an empty version of its own.
func debVersion(ctx context.Context, pkg string) string {
	b, err := exec.CommandContext(ctx, "dpkg-query", "-W", "-f=${Version}", pkg).Output()
	if err != nil || len(b) == 0 {
		return "unknown"
	}
	return "Debian " + strings.TrimSpace(string(b))
}

// treeVersion describes the source built: its commit, and whether it had
// changes.
func treeVersion(tree string) string {
	cmd := exec.Command("git", "describe", "--always", "--dirty", "--abbrev=12")
	cmd.Dir = tree
	b, err := cmd.Output()
	if err != nil {
		return "not a git checkout"
	}
	return "commit " + strings.TrimSpace(string(b))
}

// notes say what each figure means; the table and the JSON carry them.
func notes() []string {
	return []string{
		"Each server runs alone, fresh (new data directory, new loopback port) for every run; servers alternate, each round starting with the next one.",
		"Ingest: samples acknowledged (2xx) over the wall time from the first request to the last answer. Requests are remote-write 1.0 (protobuf, snappy), encoded before the clock starts.",
		"CPU and written bytes: utime+stime from /proc/PID/stat and write_bytes from /proc/PID/io, from just before the first request until the server is idle (under 5% of a core for 3 s, at most 3 minutes), so work that lags the load, such as seals and merges, is counted. Busy after the last answer: until the end of the last 250 ms in which the server used 5% of a core or more.",
		"Peak RSS: VmHWM at the end of that wait.",
		"Disk right after ingest: the data directory at the last answer (dendro-receiver: the archive with its -wal and -shm sidecars; VictoriaMetrics: without data/cache; Prometheus: WAL and head chunks).",
		"Disk after flush + stop: dendro-receiver has no flush (it seals by policy: 900 rows, 8 MiB or 5 minutes a stream) and a SIGTERM leaves one file, holding in its wal table what was not sealed yet (see its state line); VictoriaMetrics: /internal/force_flush, then SIGTERM, without data/cache; Prometheus: the block of a TSDB snapshot with the head (/api/v1/admin/tsdb/snapshot?skip_head=false), the size a compaction gives the head, without the WAL.",
		"Reads, measured in the runs of one request shape (every shape stores the same data): after a clean restart each query is asked once in the table's order (first after restart; the OS page cache stays warm), then each is repeated warm (3 to 20 times within 3 s; a query slower than that fewer times, down to once after 20 s); p99 of so few is near the maximum. The one-hour window ends at the data's last sample. VictoriaMetrics gets nocache=1 on /api/v1/query and /api/v1/query_range (its rollup result cache would otherwise answer the repeats) and has no remote-read: its raw-read rows are /api/v1/export.",
		"Read-back: every sample is read back (remote-read SAMPLES; VictoriaMetrics /api/v1/export), after the restart and the reads where reads were measured, else on the running server after the flush, and compared to the generator: float bits for dendro-receiver and Prometheus, a relative 1e-11 for VictoriaMetrics, which keeps ~12 decimal digits. A run with a sample missing, extra, duplicated or changed has no figures, and the command exits 1.",
	}
}
