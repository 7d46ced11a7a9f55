package main

import (
	"context"
	"runtime/debug"
	"testing"
)

func TestGCTargetFollowsTheLiveHeap(t *testing.T) {
	for _, c := range []struct {
		live uint64
		cur  int
		want int
	}{
		{0, gcPercentSmall, gcPercentSmall},
		{20 << 20, gcPercentLarge, gcPercentSmall}, // ingest-sized: back to small
		{gcSmallBelow, gcPercentSmall, gcPercentSmall},
		{gcSmallBelow, gcPercentLarge, gcPercentLarge}, // between: unchanged
		{gcLargeAbove - 1, gcPercentSmall, gcPercentSmall},
		{gcLargeAbove, gcPercentSmall, gcPercentLarge},
		{gcLargeAbove + 1, gcPercentLarge, gcPercentLarge}, // the headroom stays 64 MiB, in steps of 10
		{90 << 20, gcPercentLarge, 70},
		{80 << 20, gcPercentLarge, 80},
		{100 << 20, 80, 60},
		{2 * gcLargeAbove, gcPercentLarge, gcPercentFloor},
		{1 << 30, gcPercentSmall, gcPercentFloor}, // a million series' index and seals
		{gcSmallBelow, 60, 60},                    // between: unchanged
		{20 << 20, gcPercentFloor, gcPercentSmall},
	} {
		if got := gcTarget(c.live, c.cur); got != c.want {
			t.Errorf("gcTarget(%d MiB, %d) = %d, want %d", c.live>>20, c.cur, got, c.want)
		}
	}
}

// With GOGC in the environment the tuner leaves the runtime alone; without
// it, the small target applies from the start.
func TestTuneGCRespectsGOGC(t *testing.T) {
	prev := debug.SetGCPercent(77)
	defer debug.SetGCPercent(prev)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	tuneGC(ctx, func(k string) string {
		if k == "GOGC" {
			return "77"
		}
		return ""
	})
	if got := debug.SetGCPercent(77); got != 77 {
		t.Fatalf("GOGC set: the tuner changed the GC percent to %d", got)
	}
	tuneGC(ctx, func(string) string { return "" })
	if got := debug.SetGCPercent(77); got != gcPercentSmall {
		t.Fatalf("GOGC unset: GC percent %d, want %d", got, gcPercentSmall)
	}
}
