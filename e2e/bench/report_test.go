package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// okRun is a run that verified, with the given ingest rate and peak RSS.
func okRun(server string, round int, samplesPerSec float64, rssMiB int64) RunResult {
	d := Dataset{Series: 10, Samples: 100, Sources: 10, StepMs: 15000}
	n := d.TotalSamples()
	return RunResult{
		Server: server, Dataset: d, Layout: Layout{Batch: 2000, PerSeries: 1, Senders: 4}, Round: round,
		Send:       SendResult{Samples: n, Seconds: float64(n) / samplesPerSec},
		CPUSeconds: 0.001, PeakRSS: rssMiB << 20,
		Verdict: Verdict{Reader: "remote-read", SamplesExpected: n, Exact: n},
		Reads:   []ReadResult{{Name: "label values (instance)", FirstMs: 10, P50Ms: 2, P99Ms: 3, Warm: 5}},
	}
}

var testServers = []ServerInfo{
	{Key: "dendro", Name: "dendro-receiver", Version: "devel", Binary: "built from the tree"},
	{Key: "vm", Name: "VictoriaMetrics", Version: "Debian 1.79.5", Binary: "/usr/bin/victoria-metrics"},
	{Key: "prometheus", Name: "Prometheus", Skipped: "prometheus not found on PATH"},
}

func TestBlocksMedianRangeAndRatio(t *testing.T) {
	refused := okRun("dendro", 3, 9e9, 1)
	refused.Verdict.Exact--
	refused.Verdict.Missing = 1
	runs := []RunResult{
		okRun("dendro", 0, 1000e3, 80), okRun("vm", 0, 500e3, 200),
		okRun("dendro", 1, 3000e3, 90), okRun("vm", 1, 700e3, 190),
		okRun("dendro", 2, 2000e3, 85), okRun("vm", 2, 600e3, 210),
		refused, // its 9e9 samples/s must not be in any figure
	}
	blocks := buildBlocks(runs, testServers)
	if len(blocks) != 1 {
		t.Fatalf("%d blocks, want 1", len(blocks))
	}
	b := blocks[0]
	if len(b.Servers) != 2 || b.Servers[1] != "vm" {
		t.Fatalf("columns %v: a skipped server has none", b.Servers)
	}
	row := func(name string) Row {
		for _, r := range b.Rows {
			if r.Metric == name {
				return r
			}
		}
		t.Fatalf("no row %q in %+v", name, b.Rows)
		return Row{}
	}
	ingest := row("ingest, k samples/s")
	d, v := ingest.Cells[0], ingest.Cells[1]
	if d.N != 3 || !near(d.Median, 2000) || !near(d.Min, 1000) || !near(d.Max, 3000) {
		t.Errorf("dendro ingest cell %+v, want 3 runs, 2000 (1000–3000)", d)
	}
	if v.N != 3 || !near(v.Median, 600) || !near(v.Ratio, 0.3) {
		t.Errorf("vm ingest cell %+v, want 600, ratio 0.3", v)
	}
	if rss := row("peak RSS (VmHWM), MiB").Cells[1]; !near(rss.Median, 200) || !near(rss.Ratio, 200.0/85) {
		t.Errorf("vm RSS cell %+v", rss)
	}
	if len(b.Refused) != 1 || !strings.Contains(b.Refused[0], "round 4") || !strings.Contains(b.Refused[0], "1 missing") {
		t.Errorf("refused %q", b.Refused)
	}
	if f := failures(runs, testServers); len(f) != 1 {
		t.Errorf("failures %q, want the one refused run", f)
	}
}

func near(a, b float64) bool { return a-b < 1e-9*max(1, b) && b-a < 1e-9*max(1, b) }

func TestTableAndJSON(t *testing.T) {
	runs := []RunResult{okRun("dendro", 0, 2064e3, 84), okRun("vm", 0, 1813e3, 200)}
	rep := &Report{
		Format: 1, StartedAt: time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC), Tree: "commit b4fef0d",
		Machine: Machine{CPUs: 2, MemBytes: 24 << 30, LoadStart: [3]float64{0.5, 0.4, 0.3}},
		Servers: testServers, Runs: runs, Notes: []string{"a note"},
	}
	rep.Blocks = buildBlocks(rep.Runs, rep.Servers)
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	table := b.String()
	for _, want := range []string{
		"2 CPUs", "24.0 GiB memory", "load average at start 0.50 0.40 0.30",
		"Skipped: Prometheus: prometheus not found on PATH",
		"## 10 series × 100 samples at 15s, 1 sample per series per request (1 k samples, 2,000 per request, 4 senders), 1 round(s)",
		"| figure ", "| dendro-receiver |", "VictoriaMetrics |",
		"| ingest, k samples/s ", " 2,064 |", " 1,813 ×0.88 |",
		"label values (instance): warm p50, ms", "- a note",
		"dendro-receiver: 1 of 1 runs verified by remote-read, every sample back, 100.0% bit-exact",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "FAILED") {
		t.Errorf("a table without failures says FAILED:\n%s", table)
	}
	// Every line of a table has the same width: the columns are padded.
	var widths []int
	for line := range strings.SplitSeq(table, "\n") {
		if strings.HasPrefix(line, "|") {
			widths = append(widths, len([]rune(line)))
		}
	}
	for _, w := range widths {
		if w != widths[0] {
			t.Fatalf("table lines of widths %v", widths)
		}
	}

	dir := t.TempDir()
	path, err := rep.WriteJSON(filepath.Join(dir, "results"))
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != "20261201T190000Z.json" {
		t.Errorf("report written to %s", path)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Runs) != 2 || len(back.Blocks) != 1 || len(back.Blocks[0].Rows) != len(rep.Blocks[0].Rows) {
		t.Fatalf("JSON round trip: %d runs, %d blocks", len(back.Runs), len(back.Blocks))
	}
	got := back.Blocks[0].Rows[0].Cells[1]
	if got.Server != "vm" || !near(got.Median, 1813) || !near(got.Ratio, 1813.0/2064) {
		t.Errorf("JSON ingest cell of vm: %+v", got)
	}

	// --report prints the same table again from the file.
	var again strings.Builder
	if err := run(context.Background(), []string{"--report", path}, &again, io.Discard); err != nil {
		t.Fatal(err)
	}
	if again.String() != table {
		t.Errorf("--report printed\n%s\nwant\n%s", again.String(), table)
	}
}

func TestNumberFormats(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 0.0421: "0.042", 3.14159: "3.14", 42.42: "42.4", 2064.4: "2,064", 1234567: "1,234,567", -1500: "-1,500"} {
		if got := num(v); got != want {
			t.Errorf("num(%v) = %q, want %q", v, got, want)
		}
	}
	for v, want := range map[float64]string{0.00038: "0.00038", 0.34: "0.34", 1.15: "1.15", 645.2: "645.2"} {
		if got := ratio(v); got != want {
			t.Errorf("ratio(%v) = %q, want %q", v, got, want)
		}
	}
}
