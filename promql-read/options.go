package promread

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/dendro-receiver/dendro-receiver/membudget"
	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

// Options configures a Queryable and an API. The zero value of every field
// means its default; Validate (called by NewQueryable and NewAPI) fills them.
type Options struct {
	// MaxSamples caps the samples one Select, one PromQL query or one
	// remote-read request (SAMPLES mode; per metric batch in streamed mode)
	// may load. 0 means 50,000,000, Prometheus's own default.
	MaxSamples int
	// MaxConcurrency caps the queries (API and remote-read requests) that
	// run at once; the others wait for a slot up to Timeout. 0 means 20.
	MaxConcurrency int
	// Timeout bounds one query or remote-read request. 0 means 2 minutes
	// (Prometheus's --query.timeout).
	Timeout time.Duration
	// LookbackDelta is PromQL's staleness window. 0 means 5 minutes.
	LookbackDelta time.Duration
	// CacheBytes bounds the cache of decoded segment data (immutable, keyed
	// by segment identity): 7/8 for directories, layouts and metadata, 1/8
	// for the pages of series read one at a time (segpages.go). 0 means
	// 256 MiB; negative disables the cache.
	CacheBytes int64
	// MaxBytesInFrame bounds one streamed remote-read frame. 0 means 1 MiB,
	// Prometheus's default.
	MaxBytesInFrame int
	// Version is reported by /api/v1/status/buildinfo. "" means "2.53.0",
	// a Prometheus version Grafana treats as fully featured.
	Version string
	// Logger receives what cannot reach a client (a streamed remote-read
	// that fails after its status was sent); nil discards.
	Logger *slog.Logger
	// Series is the series index reads resolve matchers with. A server
	// shares the one its ingest writes through; nil means one of the
	// Queryable's own, built from the archive as questions read it (Warm
	// builds all of it).
	Series *seriesindex.Index
	// Memory, when set, is the process's memory budget: every question
	// (a PromQL query, a remote-read request) reserves from it what its
	// answer holds as it decodes, in steps of memoryStep, and releases it
	// when answered. A reservation that does not fit waits for others to
	// release, as long as the question's context allows (answered 503 when
	// it runs out); one larger than MemoryPerQuery is refused at once
	// (422, like a query over MaxSamples).
	Memory *membudget.Budget
	// MemoryPerQuery is the most one question may reserve from Memory;
	// 0 means Memory's whole limit.
	MemoryPerQuery int64
	// WarmWindow bounds what Queryable.Warm indexes before it returns:
	// the segments whose rows were received within WarmWindow of the
	// newest segment's first row (row ts read as Unix nanoseconds, the
	// receiver's receipt times; the first, since a restart's own rows are
	// sealed with the ones before the stop). Of the older ones it learns only their
	// time spans (from the head of each index), so that a question can
	// tell which it needs: a question whose range reaches them indexes
	// those it overlaps itself, and WarmHistory indexes the rest. A
	// restart then waits for the recent history, not for all of it,
	// which at a million series is seconds per hour kept. 0 means Warm
	// indexes everything (what a caller that never runs WarmHistory
	// needs).
	WarmWindow time.Duration
}

// Defaults.
const (
	DefaultMaxSamples      = 50_000_000
	DefaultMaxConcurrency  = 20
	DefaultTimeout         = 2 * time.Minute
	DefaultLookbackDelta   = 5 * time.Minute
	DefaultCacheBytes      = 256 << 20
	DefaultMaxBytesInFrame = 1 << 20
	DefaultVersion         = "2.53.0"
)

// Validate fills defaults and refuses nonsense.
func (o *Options) Validate() error {
	if o.MaxSamples == 0 {
		o.MaxSamples = DefaultMaxSamples
	}
	if o.MaxConcurrency == 0 {
		o.MaxConcurrency = DefaultMaxConcurrency
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.LookbackDelta == 0 {
		o.LookbackDelta = DefaultLookbackDelta
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = DefaultCacheBytes
	}
	if o.MaxBytesInFrame == 0 {
		o.MaxBytesInFrame = DefaultMaxBytesInFrame
	}
	if o.Version == "" {
		o.Version = DefaultVersion
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.MaxSamples < 0:
		return fmt.Errorf("promread: MaxSamples %d is negative", o.MaxSamples)
	case o.MaxConcurrency < 0:
		return fmt.Errorf("promread: MaxConcurrency %d is negative", o.MaxConcurrency)
	case o.WarmWindow < 0:
		return fmt.Errorf("promread: WarmWindow %v is negative", o.WarmWindow)
	case o.Timeout < 0 || o.LookbackDelta < 0:
		return fmt.Errorf("promread: Timeout and LookbackDelta must be positive")
	case o.MaxBytesInFrame < 1024:
		return fmt.Errorf("promread: MaxBytesInFrame %d is below 1 KiB", o.MaxBytesInFrame)
	}
	return nil
}
