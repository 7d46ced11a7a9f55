package soak

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

var (
	soakDuration  = flag.Duration("soak.duration", 0, "how long the load runs; 0 skips the soak")
	soakRetention = flag.Duration("soak.retention", 10*time.Minute, "the server's --retention.time")
	soakSeries    = flag.Int("soak.series", 100_000, "series in the load")
	soakStep      = flag.Duration("soak.step", 15*time.Second, "each series' sample interval, in sample time")
	soakAccel     = flag.Float64("soak.accel", 4, "sample time runs this many times faster than real time")
	soakOut       = flag.String("soak.out", "", "also write the per-minute table to this file")
	soakDir       = flag.String("soak.dir", "", "keep the archive and the server's log here (default: a temporary directory)")
	soakArgs      = flag.String("soak.args", "", "more server flags, space separated")
)

func TestMain(m *testing.M) {
	if os.Getenv("SOAK_ROLE") == "reader" {
		os.Exit(runReader())
	}
	os.Exit(m.Run())
}

// minute is one row of the run's table.
type minute struct {
	at                                time.Duration
	fileMiB, sidecarMiB, rssMiB, heap float64
	freePages, segments, walRows      int64
	seals, compactions, evicted, ckpt float64 // during the minute
	writeP99, readP99                 time.Duration
	rate                              float64 // acknowledged samples/s
	outage                            float64
}

func TestSoak(t *testing.T) {
	if *soakDuration <= 0 {
		t.Skip("a long run for a person to start: -soak.duration=30m (see the package comment)")
	}
	dir := *soakDir
	if dir == "" {
		dir = t.TempDir()
	}
	bin := filepath.Join(dir, "dendro-receiver")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "../../cmd/dendro-receiver")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		t.Fatalf("go build: %v", err)
	}
	path := filepath.Join(dir, "soak.db")
	addr := freeAddr(t)
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	args := []string{"--web.listen-address=" + addr, "--archive.path=" + path, "--log.level=warn",
		"--retention.time=" + soakRetention.String()}
	args = append(args, strings.Fields(*soakArgs)...)
	srv := exec.Command(bin, args...)
	srv.Stdout, srv.Stderr = logf, logf
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	// exited is closed once the server has exited, with its error in srvErr.
	exited := make(chan struct{})
	var srvErr error
	go func() { srvErr = srv.Wait(); close(exited) }()
	defer func() {
		srv.Process.Kill()
		<-exited
	}()
	base := "http://" + addr
	waitReady(t, base)

	d := dataSet{series: *soakSeries, stepMs: soakStep.Milliseconds()}
	wallStart := time.Now().Add(time.Second)
	// Sample time starts an hour back, so that none of it is in the future
	// for the run's first hour of sample time.
	d.startMs = wallStart.Add(-time.Hour).UnixMilli() / d.stepMs * d.stepMs
	l := &load{d: d, url: base + "/api/v1/write", wallStart: wallStart,
		every: time.Duration(float64(*soakStep) / *soakAccel), fatal: make(chan error, senders)}
	t.Logf("load: %d series, a sample each per %v of sample time, %.0f samples/s; retention %v; %v; archive %s",
		d.series, *soakStep, float64(d.series)/l.every.Seconds(), *soakRetention, *soakDuration, path)

	reader, readLines := startReader(t, d, wallStart, base+"/api/v1/read", path)
	ctx, stopLoad := context.WithCancel(context.Background())
	senders := l.run(ctx)

	var table []minute
	var readErrs []string
	prev := map[string]float64{}
	lastAcked, lastAt := int64(0), time.Now()
	tick := time.NewTicker(time.Minute)
	end := time.After(*soakDuration)
	begin := time.Now()
run:
	for {
		select {
		case err := <-l.fatal:
			t.Fatal(err)
		case <-exited:
			t.Fatalf("the server exited: %v", srvErr)
		case <-end:
			break run
		case <-tick.C:
		}
		m := scrape(t, base)
		reads := readLines.take()
		readErrs = append(readErrs, reads.errs...)
		acked := l.acked.Load()
		row := minute{at: time.Since(begin).Round(time.Second),
			fileMiB: m["dendro_archive_file_bytes"] / (1 << 20), sidecarMiB: m["dendro_archive_sidecar_bytes"] / (1 << 20),
			rssMiB: m["process_resident_memory_bytes"] / (1 << 20), heap: m["go_memstats_heap_inuse_bytes"] / (1 << 20),
			freePages: int64(m["dendro_archive_free_pages"]), segments: int64(m["dendro_archive_segments"]),
			walRows:  int64(m["dendro_archive_wal_rows"]),
			writeP99: percentile(l.takeLatencies(), 0.99), readP99: percentile(reads.series, 0.99),
			rate:   float64(acked-lastAcked) / time.Since(lastAt).Seconds(),
			outage: m["dendro_writer_outages_total"],
		}
		delta := func(name string) float64 { v := m[name] - prev[name]; prev[name] = m[name]; return v }
		row.seals, row.compactions = delta("dendro_writer_seals_total"), delta("dendro_writer_compactions_total")
		row.evicted, row.ckpt = delta("dendro_writer_evicted_segments_total"), delta("dendro_writer_checkpoints_total")
		lastAcked, lastAt = acked, time.Now()
		table = append(table, row)
		t.Logf("%s", formatRow(row))
	}
	stopLoad()
	senders.Wait()
	reader.Process.Signal(syscall.SIGTERM)
	reader.Wait()
	readErrs = append(readErrs, readLines.take().errs...)
	text := formatTable(table)
	t.Logf("per minute:\n%s", text)
	if *soakOut != "" {
		if err := os.WriteFile(*soakOut, []byte(text), 0o644); err != nil {
			t.Error(err)
		}
	}
	if len(readErrs) > 0 {
		t.Errorf("the reader process found %d problems, the first: %s", len(readErrs), readErrs[0])
	}

	// Plateaus: the last third of the run no higher than the middle third,
	// within a margin. The retention window is reached within the first
	// third at the defaults (10 minutes of 30).
	col := func(f func(minute) float64) []float64 {
		out := make([]float64, len(table))
		for i, r := range table {
			out[i] = f(r)
		}
		return out
	}
	plateau(t, "file size (MiB)", col(func(r minute) float64 { return r.fileMiB }), 0.15, 4)
	plateau(t, "RSS (MiB)", col(func(r minute) float64 { return r.rssMiB }), 0.20, 16)
	plateau(t, "segments", col(func(r minute) float64 { return float64(r.segments) }), 0.20, 8)

	verifyRetained(t, l, base+"/api/v1/read")

	srv.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		if srvErr != nil {
			t.Fatalf("the server's clean stop: %v", srvErr)
		}
	case <-time.After(time.Minute):
		t.Fatal("no clean stop within a minute of SIGTERM")
	}
	a, err := archive.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rep, err := a.Verify(context.Background(), archive.Full)
	if err != nil || !rep.Sound() {
		t.Fatalf("verify after the run: %v %v", err, rep.Problems)
	}
	t.Log("integrity_check ok after a clean stop")
}

// plateau fails the test when the largest value of the last third of vals
// exceeds the largest of the middle third by more than frac and slack.
func plateau(t *testing.T, what string, vals []float64, frac, slack float64) {
	t.Helper()
	n := len(vals)
	if n < 6 {
		t.Logf("%s: %d minutes are too few to judge a plateau", what, n)
		return
	}
	mid, last := maxOf(vals[n/3:2*n/3]), maxOf(vals[2*n/3:])
	if last > mid*(1+frac)+slack {
		t.Errorf("%s grew without a plateau: at most %.1f in the middle third of the run, %.1f in the last", what, mid, last)
		return
	}
	t.Logf("%s: at most %.1f in the middle third of the run, %.1f in the last: a plateau", what, mid, last)
}

func maxOf(v []float64) float64 {
	m := math.Inf(-1)
	for _, x := range v {
		m = math.Max(m, x)
	}
	return m
}

// verifyRetained reads every metric back through remote-read and checks
// that each series holds an unbroken, bit-exact run of its rounds that
// ends with its shard's last round and begins no later than the first
// round sent within the retention window of the read: retention removes
// the oldest rounds and nothing else.
func verifyRetained(t *testing.T, l *load, url string) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Minute}
	last := make([]int, senders)
	rounds := make([][]roundRec, senders)
	for s := range senders {
		rounds[s] = l.roundsOf(s)
		last[s] = len(rounds[s]) - 1
	}
	seen := make([]bool, l.d.series)
	var samples, lostOld int
	for m := range metrics {
		q := time.Now()
		got, err := remoteRead(context.Background(), client, url, l.d.startMs, l.d.startMs+int64(max(last[0], last[1], last[2], last[3])+1)*l.d.stepMs,
			eqMatcher("__name__", "soak_metric_"+strconv.Itoa(m)))
		if err != nil {
			t.Fatal(err)
		}
		// Received within the window as the read began: the round's first
		// request was sent after q - retention.
		mustFrom := make([]int, senders)
		for s := range senders {
			mustFrom[s] = len(rounds[s])
			for n, r := range rounds[s] {
				if r.start.After(q.Add(-*soakRetention)) {
					mustFrom[s] = n
					break
				}
			}
		}
		for _, ts := range got {
			id, rs, err := l.d.checkSeries(ts)
			if err != nil {
				t.Fatal(err)
			}
			s := id % senders
			seen[id] = true
			if len(rs) == 0 {
				continue
			}
			first := rs[0]
			if rs[len(rs)-1] != last[s] || len(rs) != last[s]-first+1 {
				t.Fatalf("series %d: rounds %d..%d with %d present, want an unbroken run ending at %d", id, first, rs[len(rs)-1], len(rs), last[s])
			}
			if first > mustFrom[s] {
				t.Fatalf("series %d: its rounds begin at %d, but %d..%d were received within the retention window", id, first, mustFrom[s], first-1)
			}
			samples += len(rs)
			lostOld += first
		}
	}
	for id, ok := range seen {
		if !ok {
			t.Fatalf("series %d is missing", id)
		}
	}
	t.Logf("read back %d samples of %d series, every one exact; %d older samples gone to retention, oldest first", samples, l.d.series, lostOld)
}

// readerLines gathers the reader process's lines.
type readerLines struct {
	mu sync.Mutex
	readings
}

// readings are the reader's latencies and problems.
type readings struct {
	series, metrics []time.Duration
	errs            []string
}

// take returns and forgets what was gathered so far.
func (r *readerLines) take() readings {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.readings
	r.readings = readings{}
	return out
}

func startReader(t *testing.T, d dataSet, wallStart time.Time, url, path string) (*exec.Cmd, *readerLines) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SOAK_ROLE=reader", "SOAK_SERIES="+strconv.Itoa(d.series),
		"SOAK_START_MS="+strconv.FormatInt(d.startMs, 10), "SOAK_STEP_MS="+strconv.FormatInt(d.stepMs, 10),
		"SOAK_WALL_START_NS="+strconv.FormatInt(wallStart.UnixNano(), 10), "SOAK_ACCEL="+strconv.FormatFloat(*soakAccel, 'g', -1, 64),
		"SOAK_READ_URL="+url, "SOAK_ARCHIVE="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	lines := &readerLines{}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 0 {
				continue
			}
			lines.mu.Lock()
			switch f[0] {
			case "series", "metric":
				ms, _ := strconv.Atoi(f[1])
				if f[0] == "series" {
					lines.series = append(lines.series, time.Duration(ms)*time.Millisecond)
				} else {
					lines.metrics = append(lines.metrics, time.Duration(ms)*time.Millisecond)
				}
			case "err":
				lines.errs = append(lines.errs, sc.Text())
			}
			lines.mu.Unlock()
		}
	}()
	return cmd, lines
}

func formatRow(r minute) string {
	return fmt.Sprintf("| %5.0f | %8.1f | %8d | %6d | %8d | %7.1f | %7.1f | %7.1f | %5.0f | %5.0f | %6.0f | %5.0f | %7.1f | %7.1f | %8.0f |",
		r.at.Minutes(), r.fileMiB, r.freePages, r.segments, r.walRows, r.sidecarMiB, r.rssMiB, r.heap,
		r.seals, r.compactions, r.evicted, r.ckpt, float64(r.writeP99.Microseconds())/1000, float64(r.readP99.Microseconds())/1000, r.rate)
}

func formatTable(rows []minute) string {
	var b strings.Builder
	b.WriteString("| min | file MiB | free pages | segments | wal rows | sidecar MiB | RSS MiB | heap MiB | seals | compactions | evicted segs | checkpoints | write p99 ms | read p99 ms | samples/s |\n")
	b.WriteString("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range rows {
		b.WriteString(formatRow(r) + "\n")
	}
	return b.String()
}

// scrape returns the server's unlabeled metrics by name.
func scrape(t *testing.T, base string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Logf("scrape: %v", err)
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && !strings.HasPrefix(f[0], "#") {
			if v, err := strconv.ParseFloat(f[1], 64); err == nil {
				out[f[0]] = v
			}
		}
	}
	return out
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitReady(t *testing.T, base string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(base + "/-/ready")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server is not ready after a minute: %v", err)
		}
	}
}
