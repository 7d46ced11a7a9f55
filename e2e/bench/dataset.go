package main

import (
	"fmt"
	"math"
	"strconv"

	"github.com/prometheus/prometheus/prompb"
)

// Dataset is the data the benchmark writes: a pure function of its fields,
// so the sender and the verifier agree on every label, timestamp and float
// bit without sharing state, and two runs of the benchmark write the same
// bytes.
//
// Series i has the sorted labels
//
//	__name__ = metricKinds[(i / Sources) % 6].name
//	env      = "bench"
//	id       = i / (6 * Sources)
//	instance = "host-NNNN:9100", NNNN = i % Sources
//	job      = jobs[instance % 3]
//	zone     = "zone-" + instance % 4
//
// and Samples samples at StartMs, StartMs+StepMs, ... (milliseconds since
// the Unix epoch, the remote-write clock).
type Dataset struct {
	Series  int    `json:"series"`
	Samples int    `json:"samples_per_series"`
	Sources int    `json:"sources"`  // distinct instance values
	StartMs int64  `json:"start_ms"` // timestamp of sample 0, ms since the epoch
	StepMs  int64  `json:"step_ms"`  // interval between a series' samples, ms
	Seed    uint64 `json:"seed"`
}

// metricKind says how a metric's values move.
type metricKind int

const (
	counterInt    metricKind = iota // integer increments: exact small integers
	counterFloat                    // fractional increments: arbitrary float bits
	gaugeBytes                      // integer random walk in 4 KiB steps
	gaugeSmallInt                   // small integer random walk, many repeats
	gaugeFloat                      // float random walk: arbitrary float bits
	constantOne                     // always 1
)

// metrics is the fixed set of metric names: a series' name is
// metrics[(i/Sources)%len(metrics)].
var metrics = [...]struct {
	name string
	kind metricKind
}{
	{"http_requests_total", counterInt},
	{"node_cpu_seconds_total", counterFloat},
	{"process_resident_memory_bytes", gaugeBytes},
	{"queue_depth", gaugeSmallInt},
	{"temperature_celsius", gaugeFloat},
	{"build_info", constantOne},
}

var jobs = [...]string{"api", "node", "db"}

// Validate reports a data set the generator cannot produce.
func (d Dataset) Validate() error {
	switch {
	case d.Series <= 0:
		return fmt.Errorf("bench: dataset: series %d, want > 0", d.Series)
	case d.Samples <= 0:
		return fmt.Errorf("bench: dataset: samples %d, want > 0", d.Samples)
	case d.Sources <= 0:
		return fmt.Errorf("bench: dataset: sources %d, want > 0", d.Sources)
	case d.StepMs <= 0:
		return fmt.Errorf("bench: dataset: step %d ms, want > 0", d.StepMs)
	}
	return nil
}

// TotalSamples is Series × Samples.
func (d Dataset) TotalSamples() int64 { return int64(d.Series) * int64(d.Samples) }

// MaxMs is the timestamp of the last sample, inclusive.
func (d Dataset) MaxMs() int64 { return d.StartMs + int64(d.Samples-1)*d.StepMs }

// coords splits series i into its metric, instance and id.
func (d Dataset) coords(i int) (metric, instance, id int) {
	instance = i % d.Sources
	rest := i / d.Sources
	return rest % len(metrics), instance, rest / len(metrics)
}

// seriesOf is the inverse of coords.
func (d Dataset) seriesOf(metric, instance, id int) int {
	return (id*len(metrics)+metric)*d.Sources + instance
}

func instanceName(instance int) string { return fmt.Sprintf("host-%04d:9100", instance) }

// Labels is series i's label set, sorted by name as remote-write requires.
func (d Dataset) Labels(i int) []prompb.Label {
	m, inst, id := d.coords(i)
	return []prompb.Label{
		{Name: "__name__", Value: metrics[m].name},
		{Name: "env", Value: "bench"},
		{Name: "id", Value: strconv.Itoa(id)},
		{Name: "instance", Value: instanceName(inst)},
		{Name: "job", Value: jobs[inst%len(jobs)]},
		{Name: "zone", Value: "zone-" + strconv.Itoa(inst%4)},
	}
}

// Index maps a label set back to its series, reading labels with get; ok is
// false unless the n labels are exactly those of a series of d.
func (d Dataset) Index(get func(name string) string, n int) (int, bool) {
	if n != 6 {
		return 0, false
	}
	m := -1
	for k := range metrics {
		if metrics[k].name == get("__name__") {
			m = k
		}
	}
	var inst int
	if _, err := fmt.Sscanf(get("instance"), "host-%d:9100", &inst); err != nil || m < 0 || inst < 0 || inst >= d.Sources {
		return 0, false
	}
	id, err := strconv.Atoi(get("id"))
	if err != nil || id < 0 {
		return 0, false
	}
	i := d.seriesOf(m, inst, id)
	if i >= d.Series {
		return 0, false
	}
	for _, l := range d.Labels(i) {
		if get(l.Name) != l.Value {
			return 0, false
		}
	}
	return i, true
}

// SeriesWith counts the series of metric (an index into metrics) that
// satisfy keep(instance, id): what a query's answer must hold.
func (d Dataset) SeriesWith(metric int, keep func(instance, id int) bool) int {
	n := 0
	for i := range d.Series {
		if m, inst, id := d.coords(i); m == metric && keep(inst, id) {
			n++
		}
	}
	return n
}

// Timestamp is sample j's timestamp (every series shares them).
func (d Dataset) Timestamp(j int) int64 { return d.StartMs + int64(j)*d.StepMs }

// splitmix64 is a fully specified PRNG (Steele, Lea, Flood 2014), so the
// values never change with the Go version or math/rand's algorithms.
type splitmix64 uint64

func (s *splitmix64) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// unit is uniform in [0, 1) with 53 bits.
func (s *splitmix64) unit() float64 { return float64(s.next()>>11) / (1 << 53) }

func (s *splitmix64) below(n uint64) uint64 { return s.next() % n }

// normal is approximately standard normal (the sum of four uniforms,
// scaled): cheap and deterministic.
func (s *splitmix64) normal() float64 {
	return (s.unit() + s.unit() + s.unit() + s.unit() - 2) * math.Sqrt(3)
}

// Values yields series i's values in time order.
type Values struct {
	kind  metricKind
	rng   splitmix64
	v     float64
	j     int
	stepS float64
}

// Values starts series i's value sequence.
func (d Dataset) Values(i int) *Values {
	m, _, _ := d.coords(i)
	seed := splitmix64(d.Seed*0x2545f4914f6cdd1d ^ uint64(i))
	return &Values{kind: metrics[m].kind, rng: splitmix64(seed.next()), stepS: float64(d.StepMs) / 1000}
}

// Next is the next sample's value.
func (g *Values) Next() float64 {
	r := &g.rng
	if g.j == 0 {
		switch g.kind {
		case counterInt:
			g.v = float64(r.below(1_000_000))
		case counterFloat:
			g.v = r.unit() * 1e6
		case gaugeBytes:
			g.v = float64(100_000_000 + r.below(100_000_000))
		case gaugeSmallInt:
			g.v = float64(r.below(100))
		case gaugeFloat:
			g.v = 20 + 40*r.unit()
		case constantOne:
			g.v = 1
		}
	} else {
		switch g.kind {
		case counterInt:
			g.v += float64(r.below(50))
		case counterFloat:
			g.v += r.unit() * g.stepS
		case gaugeBytes:
			g.v = math.Max(4096, g.v+4096*(float64(r.below(2001))-1000))
		case gaugeSmallInt:
			g.v = math.Max(0, g.v+float64(r.below(7))-3)
		case gaugeFloat:
			g.v += 0.25 * r.normal()
		}
	}
	g.j++
	return g.v
}

// All is series i's complete value sequence, in vs[:0].
func (d Dataset) All(i int, vs []float64) []float64 {
	vs = vs[:0]
	g := d.Values(i)
	for range d.Samples {
		vs = append(vs, g.Next())
	}
	return vs
}
