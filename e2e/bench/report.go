package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Report is one benchmark run: what ran where, every run's measurements,
// and the table made of them. It is written as JSON, one file per run of
// the command, so runs can be compared.
type Report struct {
	Format    int          `json:"format"` // 1
	StartedAt time.Time    `json:"started_at"`
	Seconds   float64      `json:"seconds"`
	Args      []string     `json:"args"`
	Tree      string       `json:"tree"` // the dendro-receiver source: git describe, or why unknown
	Machine   Machine      `json:"machine"`
	Options   Options      `json:"options"`
	Servers   []ServerInfo `json:"servers"`
	Runs      []RunResult  `json:"runs"`
	Blocks    []Block      `json:"blocks"`
	Notes     []string     `json:"notes"`
	Failures  []string     `json:"failures,omitempty"` // why the command exits non-zero
}

// ServerInfo names one server and its binary; Skipped says why it did not
// run.
type ServerInfo struct {
	Key     string `json:"key"`
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	Binary  string `json:"binary,omitempty"`
	Skipped string `json:"skipped,omitempty"`
}

// Block is the table of one data set and request shape: a row per figure,
// a cell per server.
type Block struct {
	Title   string   `json:"title"`
	Dataset Dataset  `json:"dataset"`
	Layout  Layout   `json:"layout"`
	Rounds  int      `json:"rounds"`
	Servers []string `json:"servers"` // column order, kind keys
	Rows    []Row    `json:"rows"`
	// ReadBack says per server how the data came back.
	ReadBack []string `json:"read_back"`
	// State is each server's own figures after the first OK run's load
	// (its /metrics), e.g. how much dendro-receiver left unsealed.
	State []string `json:"state,omitempty"`
	// Refused lists the runs whose figures are left out, and why.
	Refused []string `json:"refused,omitempty"`
}

// Row is one figure across the servers.
type Row struct {
	Metric string `json:"metric"`
	Better string `json:"better"` // higher or lower
	Cells  []Cell `json:"cells"`
}

// Cell is one server's figure over its OK runs; N 0 means none.
type Cell struct {
	Server string  `json:"server"`
	N      int     `json:"n"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	// Ratio is this server's median over dendro-receiver's; 0 for
	// dendro-receiver itself or when either is missing.
	Ratio float64 `json:"ratio,omitempty"`
}

// buildBlocks groups runs by data set and shape, in the order they ran.
func buildBlocks(runs []RunResult, servers []ServerInfo) []Block {
	type key struct {
		series, samples int
		step            int64
		layout          Layout
	}
	var order []key
	groups := map[key][]RunResult{}
	for _, r := range runs {
		k := key{r.Dataset.Series, r.Dataset.Samples, r.Dataset.StepMs, r.Layout}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	names := map[string]string{}
	var cols []string
	for _, s := range servers {
		names[s.Key] = s.Name
		if s.Skipped == "" {
			cols = append(cols, s.Key)
		}
	}
	var blocks []Block
	for _, k := range order {
		rs := groups[k]
		b := Block{Dataset: rs[0].Dataset, Layout: k.layout, Servers: cols}
		b.Dataset.StartMs = 0 // each round has its own; the title is the same
		for _, r := range rs {
			b.Rounds = max(b.Rounds, r.Round+1)
		}
		b.Title = blockTitle(b)
		var readNames []string
		for _, r := range rs {
			for _, rr := range r.Reads {
				if !slices.Contains(readNames, rr.Name) {
					readNames = append(readNames, rr.Name)
				}
			}
		}
		for _, m := range append(ingestMetrics(), readMetrics(readNames)...) {
			row := Row{Metric: m.name, Better: m.better}
			some := false
			for _, s := range cols {
				var vs []float64
				for _, r := range rs {
					if r.Server != s || !r.OK() {
						continue
					}
					if v, ok := m.value(r); ok {
						vs = append(vs, v)
					}
				}
				c := summarize(s, vs)
				some = some || c.N > 0
				row.Cells = append(row.Cells, c)
			}
			if !some {
				continue
			}
			if row.Cells[0].N > 0 && row.Cells[0].Median != 0 {
				for n := 1; n < len(row.Cells); n++ {
					if row.Cells[n].N > 0 {
						row.Cells[n].Ratio = row.Cells[n].Median / row.Cells[0].Median
					}
				}
			}
			b.Rows = append(b.Rows, row)
		}
		for _, s := range cols {
			var exact, inexact, want int64
			var reader string
			var tol float64
			ok := 0
			for _, r := range rs {
				if r.Server != s {
					continue
				}
				if !r.OK() {
					b.Refused = append(b.Refused, fmt.Sprintf("%s, round %d: no figures: %s", names[s], r.Round+1, r.Why()))
					continue
				}
				ok++
				exact += r.Verdict.Exact
				inexact += r.Verdict.Inexact
				want += r.Verdict.SamplesExpected
				reader, tol = r.Verdict.Reader, r.Verdict.Tolerance
			}
			if ok == 0 {
				continue
			}
			line := fmt.Sprintf("%s: %d of %d runs verified by %s, every sample back, %.1f%% bit-exact", names[s], ok, countServer(rs, s), reader, 100*float64(exact)/float64(want))
			if inexact > 0 {
				line += fmt.Sprintf(", the rest within a relative %g", tol)
			}
			b.ReadBack = append(b.ReadBack, line)
			for _, r := range rs {
				if r.Server == s && r.OK() && len(r.Gauges) > 0 {
					b.State = append(b.State, fmt.Sprintf("%s after the load, round %d: %s", names[s], r.Round+1, gaugeText(r.Gauges)))
					break
				}
			}
		}
		blocks = append(blocks, b)
	}
	return blocks
}

// gaugeText is name=value pairs sorted by name.
func gaugeText(g map[string]float64) string {
	keys := make([]string, 0, len(g))
	for k := range g {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for n, k := range keys {
		keys[n] = k + " " + strconv.FormatFloat(g[k], 'f', -1, 64)
	}
	return strings.Join(keys, ", ")
}

func countServer(rs []RunResult, s string) int {
	n := 0
	for _, r := range rs {
		if r.Server == s {
			n++
		}
	}
	return n
}

func summarize(server string, vs []float64) Cell {
	c := Cell{Server: server, N: len(vs)}
	if len(vs) == 0 {
		return c
	}
	sort.Float64s(vs)
	c.Min, c.Max = vs[0], vs[len(vs)-1]
	if n := len(vs); n%2 == 1 {
		c.Median = vs[n/2]
	} else {
		c.Median = (vs[n/2-1] + vs[n/2]) / 2
	}
	return c
}

func blockTitle(b Block) string {
	shape := fmt.Sprintf("%d samples per series per request", b.Layout.PerSeries)
	if b.Layout.PerSeries == 1 {
		shape = "1 sample per series per request"
	}
	return fmt.Sprintf("%s series × %s samples at %s, %s (%s samples, %s per request, %d senders), %d round(s)",
		group(float64(b.Dataset.Series)), group(float64(b.Dataset.Samples)), time.Duration(b.Dataset.StepMs)*time.Millisecond,
		shape, short(float64(b.Dataset.TotalSamples())), group(float64(b.Layout.Batch)), b.Layout.Senders, b.Rounds)
}

// WriteTable prints the report as Markdown: a header, then per block a
// table whose cells are "median (min–max)" over the rounds and, for a
// peer, "×ratio" to dendro-receiver's median.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# dendro-receiver benchmark, %s (%s)\n\n", r.StartedAt.UTC().Format(time.RFC3339), r.Tree)
	p("Machine: %s.\n\n", r.Machine)
	var ran, skipped []string
	names := map[string]string{}
	for _, s := range r.Servers {
		names[s.Key] = s.Name
		if s.Skipped != "" {
			skipped = append(skipped, s.Name+": "+s.Skipped)
		} else {
			ran = append(ran, fmt.Sprintf("%s %s (%s)", s.Name, s.Version, s.Binary))
		}
	}
	p("Servers: %s.\n", strings.Join(ran, "; "))
	for _, s := range skipped {
		p("Skipped: %s.\n", s)
	}
	p("\nCells: median (min–max) over the rounds; ×: the peer's median over dendro-receiver's.\n")
	for _, bl := range r.Blocks {
		p("\n## %s\n\n", bl.Title)
		header := []string{"figure"}
		for _, s := range bl.Servers {
			header = append(header, names[s])
		}
		rows := [][]string{header}
		for _, row := range bl.Rows {
			line := []string{row.Metric}
			for _, c := range row.Cells {
				line = append(line, cellText(c))
			}
			rows = append(rows, line)
		}
		writeMarkdown(&b, rows)
		b.WriteString("\n")
		for _, l := range bl.ReadBack {
			p("- %s\n", l)
		}
		for _, l := range bl.State {
			p("- %s\n", l)
		}
		for _, l := range bl.Refused {
			p("- **%s**\n", l)
		}
	}
	writeGrowth(&b, r.Blocks, names)
	if len(r.Notes) > 0 {
		p("\n## How to read it\n\n")
		for _, n := range r.Notes {
			p("- %s\n", n)
		}
	}
	if len(r.Failures) > 0 {
		p("\n## FAILED\n\n")
		for _, f := range r.Failures {
			p("- %s\n", f)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// cellText is a cell as the table prints it.
func cellText(c Cell) string {
	if c.N == 0 {
		return "—"
	}
	s := num(c.Median)
	if c.N > 1 {
		s += " (" + num(c.Min) + "–" + num(c.Max) + ")"
	}
	if c.Ratio != 0 {
		s += fmt.Sprintf(" ×%s", ratio(c.Ratio))
	}
	return s
}

// writeMarkdown writes rows (the first is the header) as a Markdown
// table with padded columns, readable as text too.
func writeMarkdown(b *strings.Builder, rows [][]string) {
	width := make([]int, len(rows[0]))
	for _, r := range rows {
		for k, c := range r {
			width[k] = max(width[k], len([]rune(c)))
		}
	}
	line := func(r []string) {
		b.WriteString("|")
		for k, c := range r {
			pad := width[k] - len([]rune(c))
			if k == 0 {
				b.WriteString(" " + c + strings.Repeat(" ", pad) + " |")
			} else {
				b.WriteString(" " + strings.Repeat(" ", pad) + c + " |")
			}
		}
		b.WriteString("\n")
	}
	line(rows[0])
	b.WriteString("|")
	for k, w := range width {
		if k == 0 {
			b.WriteString(" " + strings.Repeat("-", w) + " |")
		} else {
			b.WriteString(" " + strings.Repeat("-", w-1) + ": |")
		}
	}
	b.WriteString("\n")
	for _, r := range rows[1:] {
		line(r)
	}
}

// num formats a figure with about three significant digits, grouping
// thousands.
func num(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 100:
		return group(v)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case a == 0:
		return "0"
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

func ratio(v float64) string {
	switch {
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v >= 0.1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'g', 2, 64)
}

// group is v rounded to an integer with thousands separated by commas.
func group(v float64) string {
	s := strconv.FormatFloat(math.Round(math.Abs(v)), 'f', 0, 64)
	for k := len(s) - 3; k > 0; k -= 3 {
		s = s[:k] + "," + s[k:]
	}
	if v < 0 {
		s = "-" + s
	}
	return s
}

// short is a count in k or M.
func short(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + " M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + " k"
	}
	return group(v)
}

// reprint prints the table of the JSON report at path, its blocks built
// again from its runs, and fails as the run did if any run was refused.
func reprint(path string, w io.Writer) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("bench: report: %w", err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("bench: report %s: %w", path, err)
	}
	r.Blocks = buildBlocks(r.Runs, r.Servers)
	r.Failures = failures(r.Runs, r.Servers)
	if err := r.WriteTable(w); err != nil {
		return err
	}
	if len(r.Failures) > 0 {
		return fmt.Errorf("bench: %d run(s) in %s were refused or failed", len(r.Failures), path)
	}
	return nil
}

// WriteJSON writes the report to dir/<start time>.json and returns the
// path.
func (r *Report) WriteJSON(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("bench: results: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", fmt.Errorf("bench: results: %w", err)
	}
	path := filepath.Join(dir, r.StartedAt.UTC().Format("20060102T150405Z")+".json")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("bench: results: %w", err)
	}
	return path, nil
}
