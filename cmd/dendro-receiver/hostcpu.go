package main

import (
	"sync"
	"time"
)

// hostCPU tells the forwarder whether the host's CPUs are saturated
// (forward.Options.Busy, --forward.yield): the share of CPU time spent
// idle, over every CPU, since the last look, taken at most every
// hostCPUEvery (the forwarder asks once a unit).
type hostCPU struct {
	mu          sync.Mutex
	at          time.Time
	idle, total uint64 // cumulative CPU ticks at the last look
	busy        bool
}

const (
	hostCPUEvery = 250 * time.Millisecond
	// saturatedIdle: less idle than this share of the CPUs is saturated.
	// Ingest alone rarely takes every core (its requests wait for their
	// commit); with an upstream forwarded to on the same host, or other
	// load, the forwarder is what can wait.
	saturatedIdle = 0.15
)

func newHostCPU() *hostCPU { return &hostCPU{} }

// saturated reports whether the host's CPUs were saturated over the last
// look; nil where the host's CPU use cannot be read (cpuTicks).
func (h *hostCPU) saturated() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if now.Sub(h.at) < hostCPUEvery {
		return h.busy
	}
	idle, total, err := cpuTicks()
	if err != nil {
		h.busy = false // cannot tell: never yield on a guess
		return false
	}
	if !h.at.IsZero() && total > h.total {
		h.busy = float64(idle-h.idle)/float64(total-h.total) < saturatedIdle
	}
	h.at, h.idle, h.total = now, idle, total
	return h.busy
}
