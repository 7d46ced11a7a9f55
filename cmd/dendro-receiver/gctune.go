package main

import (
	"context"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// The receiver's garbage-collector target. Go's default (GOGC=100) lets the
// heap grow to twice what is live before collecting; ingesting, the live
// heap is small (~20 MB at 10,000 series: label caches, requests in flight,
// the segment being sealed) and that headroom was a third of the process's
// peak RSS. So while the live heap is small the collector runs at 50%;
// once queries make it large (their samples and the read cache), at Go's
// 100%, where a tighter target would cost reads CPU (-5% whole-metric
// remote-read throughput measured at 30). 50 rather than the 30
// VictoriaMetrics runs at: since the seals' and reads' copies were cut,
// 30 cost ~1.2 s of marking per 14.4 M samples ingested against ~0.75 s at
// 50 (4% of the receiver's CPU) for 2-5 MiB less peak RSS.
//
// Above that, the headroom stops growing with the live heap: it is
// gcLargeAbove (64 MiB) until the live heap is twice that, then half the
// live heap (GOGC 50). A heap that large is the series index and the seals
// of a million active series, where GOGC 100 doubled a ~150 MB live heap
// into the process's peak (rwload, 1 M series x 12, 1 sample per series
// per request: 457 MiB peak RSS at 100, 351 at 50). Marking it is cheap:
// the index's entries, label pairs and hash table hold no pointers. Reads
// on that 1 M-series archive (sum by (job) of a rate over 1 h, a count
// over 50 k series, a one-series query_range; 9 warm asks each, twice)
// took the same time at 50 and 100 within the noise, with 610 against
// 780 MiB peak RSS.
//
// A GOGC in the environment turns the tuning off: the operator's value
// stands.
const (
	gcPercentSmall = 50
	gcPercentLarge = 100
	// The live heap above which the large target applies, and below which
	// the small one returns (hysteresis: no flapping around one value).
	gcLargeAbove = 64 << 20
	gcSmallBelow = 48 << 20
	// gcPercentFloor bounds the large target from below: the headroom of a
	// very large live heap stays half of it.
	gcPercentFloor = 50
	gcTuneEvery    = time.Second
)

// gcTarget returns the GC percent for a live heap, given the current one.
func gcTarget(live uint64, cur int) int {
	switch {
	case live >= gcLargeAbove:
		// A headroom of gcLargeAbove: the percent falls as the live heap
		// grows, in steps of 10 (a target that moves by a few bytes is
		// not set again), down to the floor.
		p := math.Round(float64(gcPercentLarge) * gcLargeAbove / float64(live) / 10)
		return max(int(p)*10, gcPercentFloor)
	case live < gcSmallBelow:
		return gcPercentSmall
	}
	return cur
}

// tuneGC sets the GC percent from the live heap every gcTuneEvery until
// ctx ends. It does nothing when getenv("GOGC") is set.
func tuneGC(ctx context.Context, getenv func(string) string) {
	if getenv("GOGC") != "" {
		return
	}
	cur := gcPercentSmall
	debug.SetGCPercent(cur)
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	t := time.NewTicker(gcTuneEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return // not this runtime's metric: leave the setting alone
		}
		if next := gcTarget(sample[0].Value.Uint64(), cur); next != cur {
			debug.SetGCPercent(next)
			cur = next
		}
	}
}
