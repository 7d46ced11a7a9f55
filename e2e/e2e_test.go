package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
)

// exporterSeries is how many series exposition serves (histogram: five
// buckets, _sum, _count).
const exporterSeries = 2 + 1 + 2 + 6 + 7 + 1

// ephemeralScrapes is how many scrapes serve e2e_ephemeral.
const ephemeralScrapes = 8

// scenario is one dendro-receiver fed by one Prometheus that scrapes itself
// and the exporter.
type scenario struct {
	bin     string
	logDir  string
	archive string // the archive file; alone in its directory
	d       *dendro
	prom    *prometheus
	exp     *exporter
}

// setup starts the exporter, dendro-receiver (with extra flags) and
// Prometheus, in that order; cleanups stop them in reverse.
func setup(t *testing.T, extra ...string) *scenario {
	t.Helper()
	bin := needBinary(t)
	promBin := requireTool(t, "prometheus", "prometheus")
	s := &scenario{bin: bin, logDir: t.TempDir(), archive: filepath.Join(t.TempDir(), "archive", "dendro.db")}
	s.exp = startExporter(t)
	s.d = startDendro(t, bin, freeAddr(t), s.archive, s.logDir, extra...)
	s.prom = startPrometheus(t, promBin, s.exp.addr(), s.d.addr, s.logDir)
	return s
}

// waitScrapes waits until the exporter has been scraped n times in all.
func (s *scenario) waitScrapes(t *testing.T, n int64) {
	t.Helper()
	// 1 s scrape interval: n scrapes take n s, plus Prometheus's start-up
	// and scrape offset.
	poll(t, time.Duration(n)*time.Second+30*time.Second, 100*time.Millisecond, fmt.Sprintf("%d scrapes of the exporter", n), func() (bool, string) {
		got := s.exp.scrapes.Load()
		return got >= n, fmt.Sprintf("%d scrapes", got)
	})
}

// selectors are the series compared: everything Prometheus scrapes, from
// the exporter and from itself.
var selectors = []string{`{job="exporter"}`, `{job="prometheus"}`}

// compareWithPrometheus takes a moment Q, reads from Prometheus every raw
// sample of selectors up to Q, and waits until the archive holds each one
// with T <= Q-5s bit-exact; it fails listing what is missing at the
// deadline. The 5 s margin leaves the last scrapes time to be committed in
// Prometheus (1 s timeout) and sent (1 s batch deadline). It returns the
// last archive read.
func (s *scenario) compareWithPrometheus(t *testing.T, timeout time.Duration) *archived {
	t.Helper()
	ctx := context.Background()
	q := time.Now()
	cutoff := q.Add(-5 * time.Second).UnixMilli()
	want := map[string][]sample{}
	for _, sel := range selectors {
		got, err := s.prom.rawSamples(ctx, sel, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			t.Fatalf("Prometheus holds no series for %s", sel)
		}
		for k, v := range got {
			want[k] = v
		}
	}
	e2e := 0
	for k, v := range want {
		if strings.HasPrefix(k, `{__name__="e2e_`) {
			e2e++
			if n := countUpTo(v, cutoff); n < 5 {
				t.Fatalf("Prometheus holds only %d samples of %s up to the cutoff; the scrapes are not running", n, k)
			}
		}
	}
	if e2e != exporterSeries {
		t.Fatalf("Prometheus holds %d exporter series, want %d", e2e, exporterSeries)
	}
	var last *archived
	var compared int
	poll(t, timeout, 250*time.Millisecond, "every sample Prometheus holds is in the archive, bit-exact", func() (bool, string) {
		got, err := readArchive(ctx, s.archive)
		if err != nil {
			return false, err.Error()
		}
		last = got
		n, problems := missing(want, got, cutoff)
		compared = n
		return len(problems) == 0, fmt.Sprintf("%d of %d samples (%d series, cutoff %d) missing or different:\n%s",
			len(problems), n, len(want), cutoff, summarize(problems, 15))
	})
	t.Logf("compared %d samples of %d series up to %s: all in the archive (%d sources, %d segments, %d live rows)",
		compared, len(want), time.UnixMilli(cutoff).Format(time.RFC3339Nano), last.Sources, last.Segments, last.LiveRows)
	return last
}

func countUpTo(ss []sample, cutoff int64) int {
	n := 0
	for _, s := range ss {
		if s.T <= cutoff {
			n++
		}
	}
	return n
}

// TestPrometheusRemoteWritesEverySample: after 15 scrape rounds, every
// sample Prometheus stored for itself and the exporter is in the archive
// with the same labels (job and instance included), timestamp and value
// bits, read across sealed segments and the live tail.
func TestPrometheusRemoteWritesEverySample(t *testing.T) {
	t.Parallel()
	// Seal every 8 requests per stream so the comparison reads Parquet
	// segments and the live tail, not only one of them.
	s := setup(t, "--seal.max-rows=8")
	s.waitScrapes(t, 15)
	got := s.compareWithPrometheus(t, 60*time.Second)
	if got.Sources != 1 {
		t.Errorf("archive has %d sources, want 1 (one Prometheus, no tenant header)", got.Sources)
	}
	if got.Segments == 0 {
		t.Errorf("no sealed segments after 15 s with --seal.max-rows=8: the comparison read only the live tail")
	}
	if len(got.Conflicts) > 0 {
		t.Errorf("timestamps with two different values:\n%s", summarize(got.Conflicts, 15))
	}
}

// TestKillAndRestartLosesNothing: SIGKILL dendro-receiver while Prometheus
// sends, keep it down while Prometheus scrapes three more rounds and
// records failed sends, restart it on the same archive and port; then
// Prometheus's retries fill the gap: every sample it holds is archived,
// the source resumed (still one), and no timestamp carries two values.
func TestKillAndRestartLosesNothing(t *testing.T) {
	t.Parallel()
	s := setup(t, "--seal.max-rows=8")
	s.waitScrapes(t, 5)
	ctx := context.Background()
	poll(t, 30*time.Second, 250*time.Millisecond, "exporter samples in the archive", func() (bool, string) {
		got, err := readArchive(ctx, s.archive)
		if err != nil {
			return false, err.Error()
		}
		return len(got.Series) > exporterSeries, fmt.Sprintf("%d series", len(got.Series))
	})
	retriedBefore, err := s.prom.scalar(ctx, `sum(prometheus_remote_storage_samples_retried_total)`)
	if err != nil {
		t.Fatal(err)
	}

	s.d.kill(t)
	if code, why := s.d.exitCode(); why == "" {
		t.Fatalf("dendro-receiver exited with %d before the SIGKILL reached it", code)
	}
	down := s.exp.scrapes.Load()
	s.waitScrapes(t, down+3)
	poll(t, 30*time.Second, 250*time.Millisecond, "Prometheus retrying sends to the killed receiver", func() (bool, string) {
		v, err := s.prom.scalar(ctx, `sum(prometheus_remote_storage_samples_retried_total)`)
		if err != nil {
			return false, err.Error()
		}
		return v > retriedBefore, fmt.Sprintf("samples retried %v (before the kill %v)", v, retriedBefore)
	})

	s.d = startDendro(t, s.bin, s.d.addr, s.archive, s.logDir, "--seal.max-rows=8")
	s.waitScrapes(t, s.exp.scrapes.Load()+5)
	got := s.compareWithPrometheus(t, 90*time.Second)
	if got.Sources != 1 {
		t.Errorf("archive has %d sources after the restart, want 1 (the source resumed)", got.Sources)
	}
	if len(got.Conflicts) > 0 {
		t.Errorf("timestamps with two different values after the restart:\n%s", summarize(got.Conflicts, 15))
	}
}

// TestSIGTERMLeavesOneSoundFile: SIGTERM while Prometheus sends; the
// receiver exits 0 within 10 s, leaving only the archive file in its
// directory; sqlite3 finds dendro's header stamp, page layout and an intact
// database; every segment BLOB, written out by sqlite3, opens in
// parquet-go (a reader independent of the encoder's arrow-go) with rows
// that all decode. The container HEALTHCHECK subcommand answers 0 while
// the receiver is ready and non-zero once it is gone.
func TestSIGTERMLeavesOneSoundFile(t *testing.T) {
	t.Parallel()
	sqlite := requireTool(t, "sqlite3", "sqlite3")
	s := setup(t, "--seal.max-rows=4")
	s.waitScrapes(t, 8)
	ctx := context.Background()
	poll(t, 30*time.Second, 250*time.Millisecond, "sealed segments in the archive", func() (bool, string) {
		got, err := readArchive(ctx, s.archive)
		if err != nil {
			return false, err.Error()
		}
		return got.Segments > 0 && len(got.Series) > exporterSeries, fmt.Sprintf("%d segments, %d series", got.Segments, len(got.Series))
	})
	healthURL := "--url=http://" + s.d.addr + "/-/ready"
	if out, err := exec.Command(s.bin, "healthcheck", healthURL).CombinedOutput(); err != nil {
		t.Errorf("dendro-receiver healthcheck against a ready receiver: %v\n%s", err, out)
	}

	start := time.Now()
	s.d.signal(syscall.SIGTERM)
	if !s.d.waitExit(10 * time.Second) {
		t.Fatalf("dendro-receiver still running 10 s after SIGTERM")
	}
	if code, why := s.d.exitCode(); code != 0 {
		t.Fatalf("dendro-receiver exited with %d %s after SIGTERM, want 0", code, why)
	}
	t.Logf("dendro-receiver exited 0 %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	if out, err := exec.Command(s.bin, "healthcheck", healthURL).CombinedOutput(); err == nil {
		t.Errorf("dendro-receiver healthcheck succeeded against a stopped receiver:\n%s", out)
	}

	// Before anything else opens the file (which recreates the sidecars).
	entries, err := os.ReadDir(filepath.Dir(s.archive))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{filepath.Base(s.archive)}) {
		t.Fatalf("archive directory holds %q after SIGTERM, want only %q", names, filepath.Base(s.archive))
	}

	out, err := exec.Command(sqlite, s.archive,
		"PRAGMA application_id; PRAGMA user_version; PRAGMA page_size; PRAGMA auto_vacuum; PRAGMA integrity_check").CombinedOutput()
	if err != nil {
		t.Fatalf("sqlite3 pragmas: %v\n%s", err, out)
	}
	if got, want := strings.Fields(string(out)), []string{"1684368996", "4", "4096", "2", "ok"}; !slices.Equal(got, want) {
		t.Errorf("sqlite3 application_id, user_version, page_size, auto_vacuum, integrity_check = %q, want %q", got, want)
	}

	segDir := t.TempDir()
	out, err = exec.Command(sqlite, s.archive, fmt.Sprintf(
		`SELECT writefile(printf('%s/seg-%%d-%%s-%%d.parquet', source_id, hex(stream), seq), bytes) FROM segments; SELECT count(*) FROM segments;`,
		segDir)).CombinedOutput()
	if err != nil {
		t.Fatalf("sqlite3 writefile: %v\n%s", err, out)
	}
	lines := strings.Fields(string(out))
	nseg, err := strconv.Atoi(lines[len(lines)-1])
	if err != nil {
		t.Fatalf("sqlite3 writefile output %q: %v", out, err)
	}
	files, err := filepath.Glob(filepath.Join(segDir, "*.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	if nseg == 0 || len(files) != nseg {
		t.Fatalf("sqlite3 wrote %d segment files, the archive has %d segments (want > 0 and equal)", len(files), nseg)
	}
	var total int64
	for _, f := range files {
		n, err := parquetRows(f)
		if err != nil {
			t.Errorf("%s: %v", filepath.Base(f), err)
			continue
		}
		if n == 0 {
			t.Errorf("%s: no rows", filepath.Base(f))
		}
		total += n
	}
	t.Logf("%d segments, %d Parquet rows, all readable by parquet-go", nseg, total)

	// And the project's own reader agrees the archive is whole.
	got, err := readArchive(ctx, s.archive)
	if err != nil {
		t.Fatal(err)
	}
	if got.Sources != 1 || len(got.Conflicts) > 0 {
		t.Errorf("after SIGTERM: %d sources (want 1), conflicts:\n%s", got.Sources, summarize(got.Conflicts, 15))
	}
}

// parquetRows opens a Parquet file with parquet-go, reads every row of every
// row group, and returns the count, checking it against the footer's.
func parquetRows(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return 0, fmt.Errorf("parquet-go open: %w", err)
	}
	var read int64
	buf := make([]parquet.Row, 256)
	for i, rg := range pf.RowGroups() {
		rows := rg.Rows()
		var n int64
		for {
			k, err := rows.ReadRows(buf)
			n += int64(k)
			if err == io.EOF {
				break
			}
			if err != nil {
				rows.Close()
				return 0, fmt.Errorf("row group %d: read rows: %w", i, err)
			}
		}
		rows.Close()
		if n != rg.NumRows() {
			return 0, fmt.Errorf("row group %d: read %d rows, footer says %d", i, n, rg.NumRows())
		}
		read += n
	}
	if read != pf.NumRows() {
		return 0, fmt.Errorf("read %d rows, footer says %d", read, pf.NumRows())
	}
	return read, nil
}

// scalar evaluates expr at the current time and returns the value of its
// one-element vector result.
func (p *prometheus) scalar(ctx context.Context, expr string) (float64, error) {
	code, body, err := httpGet(ctx, p.url+"/api/v1/query?"+url.Values{"query": {expr}}.Encode())
	if err != nil {
		return 0, err
	}
	if code != 200 {
		return 0, fmt.Errorf("query %s: %d %s", expr, code, body)
	}
	var resp struct {
		Data struct {
			Result []struct {
				Value [2]json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return 0, err
	}
	if len(resp.Data.Result) != 1 {
		return 0, fmt.Errorf("query %s: %d results, want 1", expr, len(resp.Data.Result))
	}
	var s string
	if err := json.Unmarshal(resp.Data.Result[0].Value[1], &s); err != nil {
		return 0, err
	}
	return strconv.ParseFloat(s, 64)
}
