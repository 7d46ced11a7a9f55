package main

import (
	"fmt"
	"strings"
)

// RunResult is one server's run over one load: everything measured, and
// whether it may be reported.
type RunResult struct {
	Server    string  `json:"server"` // kind key
	Dataset   Dataset `json:"dataset"`
	Layout    Layout  `json:"layout"`
	Round     int     `json:"round"`
	StartedAt string  `json:"started_at"`

	Send SendResult `json:"send"`
	// The CPU and write_bytes window: from just before the first request
	// to the end of the idle wait after the last answer.
	CPUSeconds float64    `json:"cpu_seconds"`
	WriteBytes int64      `json:"write_bytes"`
	PeakRSS    int64      `json:"peak_rss_bytes"` // VmHWM at the end of the idle wait
	Idle       IdleResult `json:"idle"`

	DiskIngestBytes int64 `json:"disk_bytes_after_ingest"` // right after the last answer
	DiskAfterBytes  int64 `json:"disk_bytes_after_flush"`  // after flush and a clean stop

	// Gauges are the server's own /metrics after the idle wait.
	Gauges         map[string]float64 `json:"gauges,omitempty"`
	RestartSeconds float64            `json:"restart_seconds"` // from exec to ready, on the stored data
	Reads          []ReadResult       `json:"reads,omitempty"`
	Verdict        Verdict            `json:"verdict"`
	Errors         []string           `json:"errors,omitempty"` // what went wrong outside the verdict
	// Phases is how long each step of the run took, in seconds, to see
	// where a run's time goes.
	Phases map[string]float64 `json:"phase_seconds"`
}

// OK reports whether the run's figures may be printed: every sample was
// acknowledged, read back and matched, and nothing else failed. Read
// latencies need their own query to have succeeded too.
func (r RunResult) OK() bool {
	return len(r.Errors) == 0 && r.Verdict.OK() && r.Send.Rejected == 0 && r.Send.Failed == 0 &&
		r.Send.Samples == r.Dataset.TotalSamples()
}

// Why says in one line why a run is not OK.
func (r RunResult) Why() string {
	var why []string
	why = append(why, r.Errors...)
	if r.Send.Rejected > 0 || r.Send.Failed > 0 {
		e := ""
		if len(r.Send.Errors) > 0 {
			e = " (" + r.Send.Errors[0] + ")"
		}
		why = append(why, fmt.Sprintf("%d samples refused, %d failed%s", r.Send.Rejected, r.Send.Failed, e))
	}
	if !r.Verdict.OK() {
		why = append(why, r.Verdict.Summary())
		if len(r.Verdict.Problems) > 0 {
			why = append(why, "e.g. "+r.Verdict.Problems[0])
		}
	}
	return strings.Join(why, "; ")
}

// perSample divides by the data set's sample count.
func (r RunResult) perSample(v float64) float64 { return v / float64(r.Dataset.TotalSamples()) }

// metric is one table row's figure, drawn from a run.
type metric struct {
	name   string
	better string // "higher" or "lower": which way is better, for the reader
	value  func(r RunResult) (float64, bool)
}

// ingestMetrics are the rows every OK run has.
func ingestMetrics() []metric {
	always := func(f func(RunResult) float64) func(RunResult) (float64, bool) {
		return func(r RunResult) (float64, bool) { return f(r), true }
	}
	return []metric{
		{"ingest, k samples/s", "higher", always(func(r RunResult) float64 { return r.Send.SamplesPerSecond() / 1e3 })},
		{"CPU, µs per sample (load + until idle)", "lower", always(func(r RunResult) float64 { return r.perSample(r.CPUSeconds) * 1e6 })},
		{"peak RSS (VmHWM), MiB", "lower", always(func(r RunResult) float64 { return float64(r.PeakRSS) / (1 << 20) })},
		{"written (write_bytes), B per sample", "lower", always(func(r RunResult) float64 { return r.perSample(float64(r.WriteBytes)) })},
		{"disk right after ingest, B per sample", "lower", always(func(r RunResult) float64 { return r.perSample(float64(r.DiskIngestBytes)) })},
		{"disk after flush + stop, B per sample", "lower", always(func(r RunResult) float64 { return r.perSample(float64(r.DiskAfterBytes)) })},
		{"busy after the last answer, s", "lower", always(func(r RunResult) float64 { return r.Idle.BusySeconds })},
		{"write request p99, ms", "lower", always(func(r RunResult) float64 { return r.Send.P99Ms })},
		// Only the runs that measure reads restart the server.
		{"restart to ready, s", "lower", func(r RunResult) (float64, bool) { return r.RestartSeconds, r.RestartSeconds > 0 }},
		{"read back bit-exact, %", "higher", always(func(r RunResult) float64 { return 100 * r.Verdict.ExactFraction() })},
	}
}

// readMetrics are the latency rows of the queries named in names.
func readMetrics(names []string) []metric {
	var out []metric
	for _, n := range names {
		find := func(r RunResult) (ReadResult, bool) {
			for _, rr := range r.Reads {
				if rr.Name == n && rr.Error == "" {
					return rr, true
				}
			}
			return ReadResult{}, false
		}
		out = append(out,
			metric{n + ": first after restart, ms", "lower", func(r RunResult) (float64, bool) { rr, ok := find(r); return rr.FirstMs, ok }},
			metric{n + ": warm p50, ms", "lower", func(r RunResult) (float64, bool) { rr, ok := find(r); return rr.P50Ms, ok }},
			metric{n + ": warm p99, ms", "lower", func(r RunResult) (float64, bool) { rr, ok := find(r); return rr.P99Ms, ok }},
		)
	}
	return out
}
