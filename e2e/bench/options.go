package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Scale is one data-set size and how often it is run.
type Scale struct {
	Series  int           `json:"series"`
	Samples int           `json:"samples_per_series"`
	Step    time.Duration `json:"step"`
	Rounds  int           `json:"rounds"` // each round runs every server once per shape
}

func (s Scale) String() string {
	return fmt.Sprintf("%dx%d/%s/%d", s.Series, s.Samples, s.Step, s.Rounds)
}

// parseScales reads "SERIESxSAMPLES/STEP/ROUNDS,...", e.g.
// "10000x720/10s/3,100000x120/15s/1".
func parseScales(v string) ([]Scale, error) {
	var out []Scale
	for part := range strings.SplitSeq(v, ",") {
		f := strings.Split(strings.TrimSpace(part), "/")
		if len(f) != 3 {
			return nil, fmt.Errorf("bench: scale %q: want SERIESxSAMPLES/STEP/ROUNDS", part)
		}
		ss, sp, ok := strings.Cut(f[0], "x")
		if !ok {
			return nil, fmt.Errorf("bench: scale %q: want SERIESxSAMPLES", f[0])
		}
		var s Scale
		var err error
		if s.Series, err = strconv.Atoi(ss); err != nil {
			return nil, fmt.Errorf("bench: scale %q: %w", part, err)
		}
		if s.Samples, err = strconv.Atoi(sp); err != nil {
			return nil, fmt.Errorf("bench: scale %q: %w", part, err)
		}
		if s.Step, err = time.ParseDuration(f[1]); err != nil {
			return nil, fmt.Errorf("bench: scale %q: %w", part, err)
		}
		if s.Rounds, err = strconv.Atoi(f[2]); err != nil {
			return nil, fmt.Errorf("bench: scale %q: %w", part, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// Options is the whole configuration of a benchmark run. The zero value of
// a field means its default (see withDefaults); Validate checks the
// result once, before anything starts.
type Options struct {
	Quick     bool     `json:"quick"`
	Scales    []Scale  `json:"scales"`
	PerSeries []int    `json:"per_series"` // samples per series per request, one shape each
	Servers   []string `json:"servers"`    // kind keys: dendro, vm, prometheus
	Batch     int      `json:"batch"`      // samples per request
	Senders   int      `json:"senders"`
	Sources   int      `json:"sources"` // distinct instance values
	Seed      uint64   `json:"seed"`

	// ReadsAt is the shape (a PerSeries value) whose runs also measure
	// read latency; every shape stores the same data, so once is enough.
	// -1: in every shape.
	ReadsAt int        `json:"reads_at"`
	Warm    WarmPolicy `json:"warm"`
	Idle    IdlePolicy `json:"idle"`

	Out           string `json:"-"` // directory of the JSON reports
	WorkDir       string `json:"-"` // parent of the servers' data directories; "" = the system's temp dir
	Keep          bool   `json:"-"` // keep the data directories
	Tree          string `json:"-"` // the module whose ./cmd/dendro-receiver is built; "" = the current directory's
	PrometheusBin string `json:"-"` // "" = prometheus from PATH
	VMBin         string `json:"-"` // "" = victoria-metrics from PATH
	Report        string `json:"-"` // a JSON report to print again instead of running
}

// fullScales is the full preset, sized so the whole run fits in 40
// minutes on 2 cores (see doc.go for the arithmetic). Three rounds at
// every scale: the figures that compare scales are medians on both sides.
// 1 M series get 30 samples each, the load the scale issue measured: with
// fewer, a large share of the samples are new series' first ones, and the
// run measures series churn more than a million active series.
func fullScales() []Scale {
	return []Scale{
		{Series: 10_000, Samples: 720, Step: 10 * time.Second, Rounds: 3},
		{Series: 100_000, Samples: 120, Step: 15 * time.Second, Rounds: 3},
		{Series: 1_000_000, Samples: 30, Step: 15 * time.Second, Rounds: 3},
	}
}

// quickScales is --quick: a smoke test of the harness, a few minutes.
func quickScales() []Scale {
	return []Scale{
		{Series: 10_000, Samples: 120, Step: 15 * time.Second, Rounds: 1},
		{Series: 100_000, Samples: 12, Step: 15 * time.Second, Rounds: 1},
	}
}

func (o Options) withDefaults() Options {
	if len(o.Scales) == 0 {
		o.Scales = fullScales()
		if o.Quick {
			o.Scales = quickScales()
		}
	}
	if len(o.PerSeries) == 0 {
		o.PerSeries = []int{1, 4}
	}
	if len(o.Servers) == 0 {
		o.Servers = []string{"dendro", "vm", "prometheus"}
	}
	if o.Batch == 0 {
		o.Batch = 2000
	}
	if o.Senders == 0 {
		o.Senders = 4
	}
	if o.Sources == 0 {
		o.Sources = 100
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.ReadsAt == 0 {
		o.ReadsAt = 1
	}
	if o.Warm.Max == 0 {
		o.Warm = WarmPolicy{Min: 3, Max: 20, Budget: 3 * time.Second, Cap: 20 * time.Second}
		if o.Quick {
			o.Warm = WarmPolicy{Min: 3, Max: 5, Budget: time.Second, Cap: 5 * time.Second}
		}
	}
	o.Idle = o.Idle.withDefaults()
	if o.Out == "" {
		o.Out = "bench-results"
	}
	return o
}

// Validate reports options no run can satisfy.
func (o Options) Validate() error {
	known := map[string]bool{}
	for _, k := range kinds() {
		known[k.key] = true
	}
	if len(o.Servers) == 0 || o.Servers[0] != "dendro" {
		return fmt.Errorf("bench: servers %v: dendro must come first, the ratios are to it", o.Servers)
	}
	seen := map[string]bool{}
	for _, s := range o.Servers {
		if !known[s] || seen[s] {
			return fmt.Errorf("bench: server %q: unknown or repeated (dendro, vm, prometheus)", s)
		}
		seen[s] = true
	}
	for _, s := range o.Scales {
		d := Dataset{Series: s.Series, Samples: s.Samples, Sources: o.Sources, StepMs: s.Step.Milliseconds()}
		if err := d.Validate(); err != nil {
			return fmt.Errorf("bench: scale %v: %w", s, err)
		}
		if s.Rounds <= 0 {
			return fmt.Errorf("bench: scale %v: rounds must be > 0", s)
		}
	}
	for _, p := range o.PerSeries {
		if err := (Layout{Batch: o.Batch, PerSeries: p, Senders: o.Senders}).Validate(); err != nil {
			return err
		}
	}
	if o.Warm.Min < 1 || o.Warm.Max < o.Warm.Min {
		return fmt.Errorf("bench: warm repetitions %d..%d", o.Warm.Min, o.Warm.Max)
	}
	return nil
}
