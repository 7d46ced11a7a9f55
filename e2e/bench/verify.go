package main

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/prometheus/prompb"
)

// Verdict is what reading a data set back found. A server's figures are
// reported only when OK: a fast server that lost a sample has no figure.
type Verdict struct {
	Reader          string   `json:"reader"` // remote-read or export
	Tolerance       float64  `json:"tolerance"`
	SeriesExpected  int      `json:"series_expected"`
	SeriesFound     int      `json:"series_found"`
	SamplesExpected int64    `json:"samples_expected"`
	Exact           int64    `json:"exact"`   // same timestamp, same float bits
	Inexact         int64    `json:"inexact"` // same timestamp, value within Tolerance (relative)
	Missing         int64    `json:"missing"`
	Extra           int64    `json:"extra"` // samples at timestamps, or in series, the data set does not have
	Duplicates      int64    `json:"duplicates"`
	Mismatched      int64    `json:"mismatched"` // value off by more than Tolerance
	Seconds         float64  `json:"seconds"`
	Error           string   `json:"error,omitempty"` // the read itself failed
	Problems        []string `json:"problems,omitempty"`
}

// OK reports whether every sample came back once, at its timestamp, with
// its value, and nothing else did.
func (v Verdict) OK() bool {
	return v.SamplesExpected > 0 && v.Error == "" && v.Missing == 0 && v.Extra == 0 && v.Duplicates == 0 && v.Mismatched == 0 &&
		v.Exact+v.Inexact == v.SamplesExpected
}

// ExactFraction is the share of samples that kept their float bits.
func (v Verdict) ExactFraction() float64 {
	if v.SamplesExpected == 0 {
		return 0
	}
	return float64(v.Exact) / float64(v.SamplesExpected)
}

// Summary is one line saying what was wrong, or that nothing was.
func (v Verdict) Summary() string {
	if v.Error != "" {
		return "read-back failed: " + v.Error
	}
	s := fmt.Sprintf("%d of %d samples back (%d bit-exact, %d within %g)", v.Exact+v.Inexact, v.SamplesExpected, v.Exact, v.Inexact, v.Tolerance)
	if !v.OK() {
		s += fmt.Sprintf("; %d missing, %d extra, %d duplicate, %d mismatched", v.Missing, v.Extra, v.Duplicates, v.Mismatched)
	}
	return s
}

// verifyConcurrency is how many read-back queries are in flight: the
// machine has 2 cores, the server needs one.
const verifyConcurrency = 2

// Verify reads every series of d back through rd, one query per metric
// and instance over the whole data range (one step wider on both sides),
// and compares each sample with the generator. tol is the relative
// difference accepted as inexact; 0 demands the same float bits.
func Verify(ctx context.Context, rd rawReader, readerName string, d Dataset, tol float64) Verdict {
	start := time.Now()
	// One query failing for good fails the verdict: stop the others.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := &checker{d: d, tol: tol, seen: make([]bool, d.Series), cancel: cancel}
	c.v = Verdict{Reader: readerName, Tolerance: tol, SeriesExpected: d.Series, SamplesExpected: d.TotalSamples()}

	queries := make(chan rawQuery)
	go func() {
		defer close(queries)
		for _, q := range verifyQueries(d) {
			select {
			case queries <- q:
			case <-ctx.Done():
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for range verifyConcurrency {
		wg.Go(func() {
			var vs []float64
			for q := range queries {
				found, err := readRetrying(ctx, rd, q)
				if err != nil {
					c.fail(fmt.Errorf("%s: %w", selector(q.matchers), err))
					continue
				}
				for _, s := range found {
					vs = c.check(s, vs)
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		c.fail(err) // kept only if nothing failed before
	}
	for i, ok := range c.seen {
		if !ok {
			c.v.Missing += int64(d.Samples)
			c.problem("series %d %s: not returned", i, labelString(labelMap(d.Labels(i))))
		}
	}
	c.v.Seconds = time.Since(start).Seconds()
	return c.v
}

// verifyQueries select every series of d once: one query per metric and
// job, over the whole data range and one step more on both sides. Whole
// metrics in a few large answers cost every server less than many small
// ones (dendro-receiver keeps a metric's series together, so a selective
// query scans the metric).
func verifyQueries(d Dataset) []rawQuery {
	var qs []rawQuery
	for m := range min(len(metrics), (d.Series+d.Sources-1)/d.Sources) {
		for j := range min(len(jobs), d.Sources) {
			qs = append(qs, rawQuery{
				matchers: []matcher{{"__name__", metrics[m].name}, {"job", jobs[j]}},
				startMs:  d.StartMs - d.StepMs,
				endMs:    d.MaxMs() + d.StepMs,
			})
		}
	}
	return qs
}

// readRetrying retries a failed read twice: a verdict should not hang on
// one dropped connection, but a server that keeps failing fails.
func readRetrying(ctx context.Context, rd rawReader, q rawQuery) ([]rawSeries, error) {
	var err error
	for attempt := range 3 {
		if attempt > 0 {
			select {
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		var found []rawSeries
		if found, _, err = rd.read(ctx, q); err == nil {
			return found, nil
		}
	}
	return nil, err
}

// checker accumulates a Verdict from concurrent reads.
type checker struct {
	d    Dataset
	tol  float64
	mu   sync.Mutex
	seen []bool // by series index: returned already
	v    Verdict
	// cancel stops the remaining reads once one failed.
	cancel context.CancelFunc
}

func (c *checker) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.v.Error == "" {
		c.v.Error = err.Error()
	}
	if c.cancel != nil {
		c.cancel()
	}
}

// problem records an example of what is wrong; call with c.mu held or
// before the readers start or after they end.
func (c *checker) problem(format string, args ...any) {
	if len(c.v.Problems) < 10 {
		c.v.Problems = append(c.v.Problems, fmt.Sprintf(format, args...))
	}
}

// check compares one returned series with the data set; vs is scratch
// space, returned for reuse.
func (c *checker) check(s rawSeries, vs []float64) []float64 {
	i, ok := c.d.Index(func(n string) string { return s.labels[n] }, len(s.labels))
	c.mu.Lock()
	defer c.mu.Unlock()
	if !ok {
		c.v.Extra += int64(len(s.ts))
		c.problem("unexpected series %s (%d samples)", labelString(s.labels), len(s.ts))
		return vs
	}
	if c.seen[i] {
		c.v.Duplicates += int64(len(s.ts))
		c.problem("series %d returned twice", i)
		return vs
	}
	c.seen[i] = true
	c.v.SeriesFound++
	// Readers may return a series' samples in any order; sort a copy by
	// time, keeping duplicates adjacent.
	order := make([]int, len(s.ts))
	for k := range order {
		order[k] = k
	}
	sort.SliceStable(order, func(a, b int) bool { return s.ts[order[a]] < s.ts[order[b]] })
	vs = c.d.All(i, vs)
	var exact, inexact, missing, extra, dups, mism int64
	j := 0 // next expected sample
	for n, k := range order {
		t, v := s.ts[k], s.vs[k]
		if n > 0 && s.ts[order[n-1]] == t {
			dups++
			continue
		}
		for j < len(vs) && c.d.Timestamp(j) < t {
			j++
			missing++
		}
		if j == len(vs) || c.d.Timestamp(j) != t {
			extra++
			continue
		}
		switch sameBits, within := compare(vs[j], v, c.tol); {
		case sameBits:
			exact++
		case within:
			inexact++
		default:
			mism++
			if mism == 1 {
				c.problem("series %d ts %d: want %v (%#016x), got %v (%#016x)", i, t, vs[j], math.Float64bits(vs[j]), v, math.Float64bits(v))
			}
		}
		j++
	}
	missing += int64(len(vs) - j)
	if missing+extra+dups > 0 {
		c.problem("series %d: %d missing, %d extra, %d duplicate of %d", i, missing, extra, dups, len(vs))
	}
	c.v.Exact += exact
	c.v.Inexact += inexact
	c.v.Missing += missing
	c.v.Extra += extra
	c.v.Duplicates += dups
	c.v.Mismatched += mism
	return vs
}

// compare says whether got has want's float bits, or else is within the
// relative tolerance tol of it.
func compare(want, got, tol float64) (sameBits, within bool) {
	if math.Float64bits(want) == math.Float64bits(got) {
		return true, true
	}
	if tol <= 0 || math.IsNaN(want) || math.IsNaN(got) || math.IsInf(want, 0) || math.IsInf(got, 0) {
		return false, false
	}
	return false, math.Abs(want-got) <= tol*math.Max(math.Abs(want), math.Abs(got))
}

// labelString formats a label set sorted by name, as PromQL prints it.
func labelString(l map[string]string) string {
	ms := make([]matcher, 0, len(l))
	for k, v := range l {
		ms = append(ms, matcher{k, v})
	}
	sort.Slice(ms, func(a, b int) bool { return ms[a].name < ms[b].name })
	return selector(ms)
}

// labelMap is labels as a map.
func labelMap(labels []prompb.Label) map[string]string {
	m := make(map[string]string, len(labels))
	for _, l := range labels {
		m[l.Name] = l.Value
	}
	return m
}
