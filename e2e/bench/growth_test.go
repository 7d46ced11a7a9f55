package main

import (
	"strings"
	"testing"
)

// cpuRun is a run that verified, of series × 100 samples sent perSeries
// at a time, that cost cpuMicros µs of CPU a sample.
func cpuRun(server string, series, perSeries, round int, cpuMicros float64) RunResult {
	r := okRun(server, round, 1e6, 100)
	r.Dataset.Series = series
	r.Layout.PerSeries = perSeries
	n := r.Dataset.TotalSamples()
	r.Send.Samples = n
	r.Verdict.SamplesExpected, r.Verdict.Exact = n, n
	r.CPUSeconds = cpuMicros * float64(n) / 1e6
	return r
}

func TestGrowthTables(t *testing.T) {
	refused := cpuRun("dendro", 1000, 1, 1, 99)
	refused.Verdict.Exact--
	refused.Verdict.Missing = 1
	runs := []RunResult{
		cpuRun("dendro", 10, 1, 0, 0.6), cpuRun("vm", 10, 1, 0, 1.0),
		cpuRun("dendro", 10, 1, 1, 0.4), cpuRun("vm", 10, 1, 1, 1.2),
		cpuRun("dendro", 10, 1, 2, 0.5), cpuRun("vm", 10, 1, 2, 0.8),
		// A shape that ran at one number of series has no growth table.
		cpuRun("dendro", 10, 4, 0, 0.3), cpuRun("vm", 10, 4, 0, 0.3),
		// The larger data set ran later but is a column after the smaller.
		cpuRun("dendro", 1000, 1, 0, 0.7), cpuRun("vm", 1000, 1, 0, 3.0),
		refused, // its 99 µs must not be in any figure
	}
	blocks := buildBlocks(runs, testServers)
	gs := growthTables(blocks)
	if len(gs) != 1 {
		t.Fatalf("%d growth tables, want 1 (only 1 per series ran at two sizes)", len(gs))
	}
	g := gs[0]
	if g.Layout.PerSeries != 1 || len(g.Columns) != 2 || g.Columns[0] != "10 × 100" || g.Columns[1] != "1 k × 100" {
		t.Fatalf("table of %+v, columns %q", g.Layout, g.Columns)
	}
	if len(g.Servers) != 2 || g.Servers[0] != "dendro" || g.Servers[1] != "vm" {
		t.Fatalf("servers %q", g.Servers)
	}
	for _, tc := range []struct {
		server, col   int
		n             int
		median, ratio float64
	}{
		{0, 0, 3, 0.5, 0}, // the base: no ratio
		{0, 1, 1, 0.7, 1.4},
		{1, 0, 3, 1.0, 0},
		{1, 1, 1, 3.0, 3.0}, // over VictoriaMetrics's own, not dendro-receiver's
	} {
		c := g.Cells[tc.server][tc.col]
		if c.N != tc.n || !near(c.Median, tc.median) || !near(c.Ratio, tc.ratio) {
			t.Errorf("%s at %s: %+v, want %d run(s), median %g, ratio %g", g.Servers[tc.server], g.Columns[tc.col], c, tc.n, tc.median, tc.ratio)
		}
	}

	rep := &Report{Servers: testServers, Runs: runs, Blocks: blocks}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	table := b.String()
	for _, want := range []string{
		"## As series grow: CPU, µs per sample (load + until idle), 1 sample per series per request",
		"| server          | 10 × 100 | 1 k × 100 |",
		"| dendro-receiver | 0.500 (0.400–0.600) | 0.700 ×1.40 |",
		"| VictoriaMetrics | 1.00 (0.800–1.20) | 3.00 ×3.00 |",
	} {
		if !strings.Contains(strings.Join(strings.Fields(table), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "As series grow: CPU, µs per sample (load + until idle), 4 samples") {
		t.Errorf("a growth table for a shape that ran at one size:\n%s", table)
	}
}
