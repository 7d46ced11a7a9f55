package forward

import (
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/common/config"
)

// Protocol is the remote-write version an upstream is sent.
type Protocol int

const (
	// RW1 is remote-write 1.0: prometheus.WriteRequest. The zero value's.
	RW1 Protocol = iota
	// RW2 is remote-write 2.0: io.prometheus.write.v2.Request, with its
	// symbol table and per-series metadata. An upstream that answers 415,
	// or 2xx without the *-Written headers, is sent RW1 from then on.
	RW2
)

func (p Protocol) String() string {
	if p == RW2 {
		return "rw2"
	}
	return "rw1"
}

// ParseProtocol reads "rw1"/"rw2", or the protobuf message names
// Prometheus's remote_write.protobuf_message takes.
func ParseProtocol(s string) (Protocol, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "rw1", "1", "1.0", "prometheus.writerequest":
		return RW1, nil
	case "rw2", "2", "2.0", "io.prometheus.write.v2.request":
		return RW2, nil
	}
	return RW1, fmt.Errorf("%w: protocol %q (want rw1 or rw2)", ErrConfig, s)
}

// Defaults, as Prometheus's remote_write queue_config has them where it
// has one.
const (
	DefaultMaxSamplesPerSend = 2000
	DefaultShards            = 4
	DefaultCapacity          = 10000
	DefaultBatchSendDeadline = 5 * time.Second
	DefaultMinBackoff        = 30 * time.Millisecond
	DefaultMaxBackoff        = 5 * time.Second
	DefaultRemoteTimeout     = 30 * time.Second
	DefaultPollInterval      = 500 * time.Millisecond
	DefaultCursorInterval    = 100 * time.Millisecond
	// DefaultMaxHeldRows: a stream's sealed rows an upstream keeps from
	// the prune (see archive.WriterOptions.KeepWAL). A seal takes at
	// most about two epochs' worth (2 x 900 rows by default), so an
	// upstream that keeps up never comes near it; one that falls further
	// behind lets them go and reads the segments instead.
	DefaultMaxHeldRows = 8192
)

// QueueConfig sizes one upstream's queues, as Prometheus's queue_config.
// The zero value of every field means its default.
type QueueConfig struct {
	// Shards send in parallel; a series always goes to the same shard
	// (by the hash of its labels), so its samples go out in order.
	Shards int
	// Capacity is how many samples (and histograms and exemplars) each
	// shard may hold queued and in flight. Shards x Capacity is the
	// upstream's window: what a kill -9 can make it send again is at most
	// twice that (the window in flight and the window written ahead).
	Capacity int
	// MaxSamplesPerSend bounds one request.
	MaxSamplesPerSend int
	// BatchSendDeadline sends a partial batch after this long. A caught-up
	// upstream sends as soon as it has read everything there is, without
	// waiting for it.
	BatchSendDeadline time.Duration
	// MinBackoff, MaxBackoff: a failed send is retried after MinBackoff,
	// doubling up to MaxBackoff, or after the upstream's Retry-After.
	MinBackoff, MaxBackoff time.Duration
}

// Upstream is one remote-write destination.
type Upstream struct {
	// Name identifies the upstream: its cursor in the archive is keyed by
	// it, so renaming an upstream starts it over. "" means the URL without
	// credentials, query or fragment.
	Name string
	URL  string
	// Protocol to send; an RW2 upstream that turns out to speak only 1.0
	// is sent RW1.
	Protocol Protocol
	// Headers are added to every request (X-Scope-OrgID, for instance).
	// The remote-write protocol's own headers cannot be overridden.
	Headers map[string]string
	// HTTP is authentication (basic, authorization/bearer, OAuth2), TLS and
	// proxy settings, as Prometheus's remote_write http_config.
	HTTP config.HTTPClientConfig
	// Timeout bounds one request; 0 means DefaultRemoteTimeout.
	Timeout time.Duration
	Queue   QueueConfig
	// MaxSamplesPerSecond caps the send rate (samples, histograms and
	// exemplars), so that a backlog draining after an outage does not
	// flood the upstream; 0 means no cap.
	MaxSamplesPerSecond float64
	// MaxAge drops samples older than this (by their own timestamp) instead
	// of sending them, for upstreams that refuse old samples (Prometheus:
	// older than its head; Mimir: more than 1 h older than the tenant's
	// newest); dropped samples are counted (reason "too_old"). 0 sends
	// everything.
	MaxAge time.Duration
}

// Options configures a Forwarder. The zero value of every field but
// Upstreams means its default.
type Options struct {
	Upstreams []Upstream
	// UserAgent is sent with every request; "" means "dendro-receiver".
	UserAgent string
	// PollInterval is how often an upstream that has sent everything looks
	// for new rows; 0 means DefaultPollInterval.
	PollInterval time.Duration
	// CursorInterval is how often acknowledged progress is staged for the
	// writer's next commit; 0 means DefaultCursorInterval.
	CursorInterval time.Duration
	// MaxHeldRows bounds, per stream, the sealed rows an upstream keeps
	// from the prune; 0 means DefaultMaxHeldRows.
	MaxHeldRows int
	Logger      *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Busy, if set, reports whether the host's CPUs are saturated (cmd
	// reads /proc/stat; it is called once a unit, so it must be cheap).
	// While it does, and an upstream's lag is under Yield, the upstream
	// forwards at a tenth of its pace (after each unit it waits nine times
	// what the unit took, at most yieldMaxWait), leaving the CPU to
	// ingest: forwarding can wait, and an upstream that catches up later
	// reads segments, half the CPU a sample of reading the live tail. 0
	// Yield, or nil Busy, never yields.
	Busy  func() bool
	Yield time.Duration
	// OnThread, if set, is called first on each of the forwarder's
	// goroutines that do its work (an upstream's loop and shards, a
	// segment read ahead), each locked to its OS thread for its whole life
	// (the thread ends with it): a caller can lower the thread's CPU
	// priority there, so that the ingest path gets the CPU first and
	// forwarding what it leaves (cmd/dendro-receiver does, on Linux). It
	// must not block.
	OnThread func()
}

func (o *Options) setDefaults() error {
	if len(o.Upstreams) == 0 {
		return fmt.Errorf("%w: no upstream", ErrConfig)
	}
	if o.UserAgent == "" {
		o.UserAgent = "dendro-receiver"
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.CursorInterval <= 0 {
		o.CursorInterval = DefaultCursorInterval
	}
	if o.MaxHeldRows <= 0 {
		o.MaxHeldRows = DefaultMaxHeldRows
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	names := map[string]bool{}
	for i := range o.Upstreams {
		u := &o.Upstreams[i]
		if err := u.setDefaults(); err != nil {
			return err
		}
		if names[u.Name] {
			return fmt.Errorf("%w: two upstreams are named %q (their cursors would collide)", ErrConfig, u.Name)
		}
		names[u.Name] = true
	}
	return nil
}

func (u *Upstream) setDefaults() error {
	p, err := url.Parse(u.URL)
	if err != nil {
		return fmt.Errorf("%w: upstream URL %q: %v", ErrConfig, u.URL, err)
	}
	if (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return fmt.Errorf("%w: upstream URL %q: want http(s)://host/path", ErrConfig, u.URL)
	}
	if u.Name == "" {
		c := *p
		c.User, c.RawQuery, c.Fragment = nil, "", ""
		u.Name = c.String()
	}
	if u.Protocol != RW1 && u.Protocol != RW2 {
		return fmt.Errorf("%w: upstream %s: protocol %d", ErrConfig, u.Name, u.Protocol)
	}
	for k := range u.Headers {
		switch http := strings.ToLower(k); {
		case http == "content-type", http == "content-encoding", http == "user-agent",
			strings.HasPrefix(http, "x-prometheus-remote-write-"):
			return fmt.Errorf("%w: upstream %s: header %s is the protocol's own", ErrConfig, u.Name, k)
		}
	}
	if err := u.HTTP.Validate(); err != nil {
		return fmt.Errorf("%w: upstream %s: %v", ErrConfig, u.Name, err)
	}
	if u.Timeout <= 0 {
		u.Timeout = DefaultRemoteTimeout
	}
	q := &u.Queue
	if q.Shards <= 0 {
		q.Shards = DefaultShards
	}
	if q.MaxSamplesPerSend <= 0 {
		q.MaxSamplesPerSend = DefaultMaxSamplesPerSend
	}
	if q.Capacity <= 0 {
		q.Capacity = DefaultCapacity
	}
	q.Capacity = max(q.Capacity, q.MaxSamplesPerSend)
	if q.BatchSendDeadline <= 0 {
		q.BatchSendDeadline = DefaultBatchSendDeadline
	}
	if q.MinBackoff <= 0 {
		q.MinBackoff = DefaultMinBackoff
	}
	if q.MaxBackoff <= 0 {
		q.MaxBackoff = DefaultMaxBackoff
	}
	q.MaxBackoff = max(q.MaxBackoff, q.MinBackoff)
	if u.MaxSamplesPerSecond < 0 || u.MaxAge < 0 {
		return fmt.Errorf("%w: upstream %s: negative rate or age limit", ErrConfig, u.Name)
	}
	return nil
}

// window is how many items the upstream may have dispatched and not yet
// acknowledged.
func (u *Upstream) window() int64 { return int64(u.Queue.Shards) * int64(u.Queue.Capacity) }
