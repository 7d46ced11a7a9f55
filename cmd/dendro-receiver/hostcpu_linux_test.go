package main

import "testing"

func TestCPUTicksReadsProcStat(t *testing.T) {
	idle, total, err := cpuTicks()
	if err != nil {
		t.Fatal(err)
	}
	if total == 0 || idle > total {
		t.Fatalf("idle %d of %d ticks", idle, total)
	}
	h := newHostCPU()
	h.saturated() // the first look only records
	if h.at.IsZero() {
		t.Fatal("the first look recorded nothing")
	}
}
