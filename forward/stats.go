package forward

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"
)

// Reasons samples are not sent (UpstreamStats.Dropped keys). A refusal by
// the upstream is "http_<status>" (400, 413, ...).
const (
	// reasonTooOld: older than the upstream's MaxAge.
	reasonTooOld = "too_old"
	// reasonDuplicate: the same timestamp and value as the series' last
	// sample sent (a sender's retry the archive holds twice, or a unit read
	// again after a seal). The upstream has it.
	reasonDuplicate = "duplicate"
	// reasonOutOfOrder: at or before the series' last sample sent, with
	// another value: every remote-write receiver refuses it.
	reasonOutOfOrder = "out_of_order"
	// reasonUnresolvable: a row names a series by an id no row read
	// anchors (its epoch's first rows are gone).
	reasonUnresolvable = "unresolvable"
	// reasonRetention: --retention.size removed it before it was sent.
	reasonRetention = "retention"
	// reasonPartial: a remote-write 2.0 upstream answered 2xx but its
	// *-Written headers say it wrote less than it was sent.
	reasonPartial = "partial_write"
	// reasonExemplars: exemplars a 2.0 upstream did not write (it still
	// wrote the request's samples: exemplar storage is optional there).
	reasonExemplars = "exemplar_not_written"
)

// counters are an upstream's statistics, written by its loop and shards.
type counters struct {
	samples, histograms, exemplars atomic.Int64 // acknowledged (2xx)
	failed                         atomic.Int64 // items in requests that failed (each attempt)
	retried                        atomic.Int64 // requests retried
	requests                       atomic.Int64 // requests sent
	resent                         atomic.Int64 // items dispatched again after a restart
	lastSuccess                    atomic.Int64 // Unix ns of the last 2xx
	lagNS                          atomic.Int64
	pending                        atomic.Int64
	inflight                       atomic.Int64
	heldStreams                    atomic.Int64
	flushes                        atomic.Int64 // cursor commits asked of the writer (FlushStaged)
	yields                         atomic.Int64 // waits left to ingest (Options.Busy)

	mu      sync.Mutex
	dropped map[string]int64
}

func (c *counters) drop(reason string, n int64) {
	if n <= 0 {
		return
	}
	c.mu.Lock()
	c.dropped[reason] += n
	c.mu.Unlock()
}

// UpstreamStats is one upstream's statistics (Forwarder.Stats).
type UpstreamStats struct {
	Name string
	URL  string // without credentials
	// Protocol is what is sent now (RW1 after a fallback from RW2).
	Protocol Protocol
	// Acknowledged by the upstream (2xx).
	SamplesSent, HistogramsSent, ExemplarsSent int64
	// Failed counts samples (with histograms and exemplars) in requests
	// that failed, once per attempt; Retried counts requests retried.
	Failed, Retried, Requests int64
	// Resent counts what was dispatched again after a restart because it
	// may have reached the upstream before it: an upper bound of the
	// duplicates a kill -9 caused.
	Resent int64
	// Dropped counts what will never be sent, by reason.
	Dropped map[string]int64
	// Pending estimates the samples not yet acknowledged: those in flight
	// exactly, those still in the archive from the samples per row read
	// so far.
	Pending int64
	// InFlight counts items dispatched to the shards and not finished.
	InFlight int64
	// Lag is the age (by receipt time) of the oldest data not yet
	// acknowledged; 0 when caught up.
	Lag time.Duration
	// LastSuccess is when the upstream last answered 2xx (zero: never).
	LastSuccess time.Time
	// Backoff is the longest wait a shard is in before a retry (0: none).
	Backoff time.Duration
	// HeldStreams counts streams whose sealed rows the upstream keeps from
	// the prune.
	HeldStreams int64
	// CursorFlushes counts the transactions of its own the upstream asked
	// the writer for, to commit a written-ahead cursor when no other
	// commit came to carry it.
	CursorFlushes int64
	// Yields counts the waits the upstream made to leave a saturated
	// host's CPU to ingest (Options.Busy, Options.Yield).
	Yields int64
}

func (u *upstream) snapshot() UpstreamStats {
	c := &u.stats
	s := UpstreamStats{Name: u.cfg.Name, URL: u.shownURL, Protocol: Protocol(u.proto.Load()),
		SamplesSent: c.samples.Load(), HistogramsSent: c.histograms.Load(), ExemplarsSent: c.exemplars.Load(),
		Failed: c.failed.Load(), Retried: c.retried.Load(), Requests: c.requests.Load(), Resent: c.resent.Load(),
		Pending: c.pending.Load(), InFlight: c.inflight.Load(), Lag: time.Duration(c.lagNS.Load()),
		HeldStreams: c.heldStreams.Load(), CursorFlushes: c.flushes.Load(), Yields: c.yields.Load()}
	if t := c.lastSuccess.Load(); t != 0 {
		s.LastSuccess = time.Unix(0, t)
	}
	for _, sh := range u.shards {
		s.Backoff = max(s.Backoff, time.Duration(sh.backoff.Load()))
	}
	c.mu.Lock()
	s.Dropped = maps.Clone(c.dropped)
	c.mu.Unlock()
	return s
}
