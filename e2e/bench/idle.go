package main

import (
	"context"
	"time"
)

// IdlePolicy says when a server counts as idle after a load: its CPU rate
// over the last Window stayed below MaxCores, checked every Poll, for at
// most Cap. Work a server does after answering (dendro-receiver's seals,
// VictoriaMetrics's merges, Prometheus's head work) is counted up to that
// point.
type IdlePolicy struct {
	Window   time.Duration
	MaxCores float64 // CPU seconds per second
	Poll     time.Duration
	Cap      time.Duration
}

// withDefaults fills zero fields: 3 s under 5% of one core, polled every
// 250 ms, at most 3 minutes.
func (p IdlePolicy) withDefaults() IdlePolicy {
	if p.Window <= 0 {
		p.Window = 3 * time.Second
	}
	if p.MaxCores <= 0 {
		p.MaxCores = 0.05
	}
	if p.Poll <= 0 {
		p.Poll = 250 * time.Millisecond
	}
	if p.Cap <= 0 {
		p.Cap = 3 * time.Minute
	}
	return p
}

// IdleResult says how the wait ended.
type IdleResult struct {
	Seconds float64 `json:"seconds"` // from the call to idle (or to the cap)
	Reached bool    `json:"reached"` // false: the cap ended the wait
	// BusySeconds is from the call to the end of the last poll interval
	// in which the process used at least MaxCores: how long its work
	// lagged the load.
	BusySeconds float64 `json:"busy_seconds"`
}

// waitIdle polls pid until it is idle by p, the cap passes or ctx ends,
// and returns the process's state at that moment.
func waitIdle(ctx context.Context, pid int, p IdlePolicy) (procSample, IdleResult, error) {
	p = p.withDefaults()
	type point struct {
		at  time.Time
		cpu float64
	}
	start := time.Now()
	var hist []point
	var busy time.Duration
	tick := time.NewTicker(p.Poll)
	defer tick.Stop()
	for {
		s, err := readProc(pid)
		if err != nil {
			return s, IdleResult{}, err
		}
		now := time.Now()
		if n := len(hist); n > 0 && (s.CPUSeconds-hist[n-1].cpu)/now.Sub(hist[n-1].at).Seconds() >= p.MaxCores {
			busy = now.Sub(start)
		}
		hist = append(hist, point{now, s.CPUSeconds})
		// The oldest point at least Window ago.
		k := -1
		for n := len(hist) - 1; n >= 0; n-- {
			if now.Sub(hist[n].at) >= p.Window {
				k = n
				break
			}
		}
		if k >= 0 {
			hist = hist[k:]
			rate := (s.CPUSeconds - hist[0].cpu) / now.Sub(hist[0].at).Seconds()
			if rate < p.MaxCores {
				return s, IdleResult{Seconds: now.Sub(start).Seconds(), Reached: true, BusySeconds: busy.Seconds()}, nil
			}
		}
		if now.Sub(start) >= p.Cap {
			return s, IdleResult{Seconds: now.Sub(start).Seconds(), BusySeconds: busy.Seconds()}, nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return s, IdleResult{Seconds: time.Since(start).Seconds(), BusySeconds: busy.Seconds()}, ctx.Err()
		}
	}
}
