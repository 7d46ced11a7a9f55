package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/forward"
	"github.com/dendro-receiver/dendro-receiver/receiver"
)

// Store and forward (issue 17): the --forward.* flags, and the forwarder's
// place in run's wiring. Everything here is nil-safe: without an upstream
// there is no forwarder and nothing changes.

type forwardFlags struct {
	urls     []string
	file     string
	protocol string
	maxRate  float64
	maxAge   model.Duration
	shards   int
	yield    model.Duration
}

func addForwardFlags(app *kingpin.Application, f *forwardFlags) {
	app.Flag("forward.url", "Forward everything the archive holds to this remote-write URL (repeatable): each upstream "+
		"gets every sample, across outages as long as the retention and across restarts, from a cursor kept in the archive. "+
		"Per-upstream settings (headers, auth, TLS, queues): --forward.config.file.").StringsVar(&f.urls)
	app.Flag("forward.config.file", "YAML file of upstreams to forward to, in the shape of Prometheus's remote_write "+
		"(url, name, protocol, headers, basic_auth, authorization, tls_config, queue_config, max_samples_per_second, max_age).").
		StringVar(&f.file)
	app.Flag("forward.protocol", "Protocol for --forward.url upstreams: rw1 (remote-write 1.0) or rw2 (2.0; an upstream "+
		"that answers 415 is sent 1.0).").Default("rw1").StringVar(&f.protocol)
	app.Flag("forward.max-samples-per-second", "Cap each upstream's send rate, so that a backlog draining after an "+
		"outage does not flood it (0: no cap).").Default("0").Float64Var(&f.maxRate)
	app.Flag("forward.max-age", "Drop (and count) samples older than this instead of sending them, for upstreams that "+
		"refuse old samples (Prometheus: older than its head; Mimir: 1h behind the tenant's newest). 0: send everything.").
		Default("0").SetValue(named("forward.max-age", &f.maxAge))
	app.Flag("forward.shards", "Parallel senders per --forward.url upstream (a series always goes to the same one).").
		Default(fmt.Sprint(forward.DefaultShards)).IntVar(&f.shards)
	app.Flag("forward.yield", "While the host's CPUs are saturated (Linux: /proc/stat), forward at a tenth of the pace, "+
		"leaving the CPU to ingest, as long as the lag stays under this; the upstream catches up afterwards, from segments. "+
		"0: never yield.").Default(defaultForwardYield.String()).SetValue(named("forward.yield", &f.yield))
}

// defaultForwardYield: on by default, because forwarding the live data as
// it arrives takes CPU from ingest on a host whose cores are all busy (on
// 2 cores, ingesting 10 k series and forwarding to a VictoriaMetrics on the
// same host: 0.57-0.65x the ingest rate alone without yielding, 0.81-0.89x
// with it; e2e/forwardbench). A minute of lag is what an upstream's
// dashboards and alerts tolerate; past it the forwarder goes at full pace
// whatever the CPU, and a backlog (an outage, a restart) is past it at once.
const defaultForwardYield = time.Minute

// forwarding is the forwarder in run's wiring; a nil *forwarding does
// nothing.
type forwarding struct {
	f   *forward.Forwarder
	log *slog.Logger
}

// newForwarding builds the forwarder the flags ask for; nil when none. A
// bad configuration is a usage error (exit 2), before anything is created.
func newForwarding(f forwardFlags, logger *slog.Logger) (*forwarding, error) {
	if len(f.urls) == 0 && f.file == "" {
		return nil, nil
	}
	if f.maxRate < 0 || f.maxAge < 0 || f.yield < 0 || f.shards < 1 {
		return nil, usage("--forward.max-samples-per-second, --forward.max-age and --forward.yield must not be negative, --forward.shards positive")
	}
	proto, err := forward.ParseProtocol(f.protocol)
	if err != nil {
		return nil, usage("--forward.protocol: %v", err)
	}
	defaults := forward.Upstream{MaxSamplesPerSecond: f.maxRate, MaxAge: time.Duration(f.maxAge)}
	var ups []forward.Upstream
	for _, u := range f.urls {
		up := defaults
		up.URL, up.Protocol, up.Queue.Shards = u, proto, f.shards
		ups = append(ups, up)
	}
	if f.file != "" {
		more, err := forward.LoadFile(f.file, defaults)
		if err != nil {
			return nil, usage("--forward.config.file: %v", err)
		}
		ups = append(ups, more...)
	}
	opts := forward.Options{Upstreams: ups, UserAgent: "dendro-receiver/" + buildVersion(), Logger: logger.With("component", "forward")}
	if threadPriorities {
		opts.OnThread = forwardAtLowPriority(logger)
	}
	if f.yield > 0 {
		opts.Yield, opts.Busy = time.Duration(f.yield), newHostCPU().saturated // never saturated but on Linux
	}
	fwd, err := forward.New(opts)
	if err != nil {
		return nil, usage("--forward: %v", err)
	}
	return &forwarding{f: fwd, log: logger}, nil
}

// forwardNice is the forwarder threads' nice value. Forwarding is the
// archive read back and sent on: as much CPU per sample as ingest, and
// none of it on a sender's path, which waits for its commit only. Below
// the ingest path's priority (nice 0), the kernel gives requests the CPU
// first; above the seal encoder's (19), forwarding goes ahead of seals.
// An upstream behind because the host has no CPU to spare shows as lag,
// and catches up when ingest pauses.
const forwardNice = 10

// forwardAtLowPriority is a forward.Options.OnThread that lowers the
// calling thread's priority to forwardNice; if it cannot, it says so once.
func forwardAtLowPriority(log *slog.Logger) func() {
	var once sync.Once
	return func() {
		if err := setThreadNice(forwardNice); err != nil {
			once.Do(func() { log.Warn("forwarding runs at normal CPU priority", "err", err) })
		}
	}
}

// writerOptions lets the writer's prune keep the rows an upstream reads
// as rows.
func (fw *forwarding) writerOptions(o *archive.WriterOptions) {
	if fw != nil {
		o.KeepWAL = fw.f.KeepWAL
	}
}

// floors keeps retention and compaction off what an upstream still needs.
func (fw *forwarding) floors() receiver.Floors {
	if fw == nil {
		return receiver.Floors{}
	}
	return receiver.Floors{Retention: fw.f.RetentionFloor, Evicting: fw.f.ForcedEviction, Compact: fw.f.CompactFloor}
}

func (fw *forwarding) register(reg *prometheus.Registry) {
	if fw != nil {
		reg.MustRegister(newForwardCollector(fw.f))
	}
}

func (fw *forwarding) start(ctx context.Context, r *archive.Archive, w *archive.Writer) error {
	if fw == nil {
		return nil
	}
	if threadPriorities && os.Getenv("GOMAXPROCS") == "" {
		// As for the encoder (encodeprio.go): a processor for the
		// low-priority threads, so that one the kernel has set aside holds
		// no processor the requests need.
		runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 1)
	}
	if err := fw.f.Start(ctx, r, w); err != nil {
		return fmt.Errorf("starting the forwarder: %w", err)
	}
	return nil
}

// close stops the forwarder and commits its cursors; before the ingester
// finalizes and the writer closes.
func (fw *forwarding) close() {
	if fw != nil {
		if err := fw.f.Close(); err != nil {
			fw.log.Warn("stopping the forwarder", "err", err)
		}
	}
}

// forwardCollector turns the forwarder's stats into metrics at scrape time.
type forwardCollector struct {
	f                                                 *forward.Forwarder
	samples, histograms, exemplars, failed, retried   *prometheus.Desc
	requests, resent, dropped, pending, inflight, lag *prometheus.Desc
	lastSuccess, backoff, held, info, flushes, yields *prometheus.Desc
}

func newForwardCollector(f *forward.Forwarder) *forwardCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("dendro_forward_"+name, help, append([]string{"upstream"}, labels...), nil)
	}
	return &forwardCollector{f: f,
		samples:     d("samples_sent_total", "Float samples the upstream acknowledged (2xx)."),
		histograms:  d("histograms_sent_total", "Native histogram samples the upstream acknowledged."),
		exemplars:   d("exemplars_sent_total", "Exemplars the upstream acknowledged."),
		failed:      d("samples_failed_total", "Samples (with histograms and exemplars) in requests that failed, once per attempt."),
		retried:     d("requests_retried_total", "Requests retried after a 5xx, 429 or transport error."),
		requests:    d("requests_total", "Requests sent."),
		resent:      d("samples_resent_total", "Samples sent again after a restart because they may have reached the upstream before it."),
		dropped:     d("samples_dropped_total", "Samples never sent, by reason (http_<status>: refused; too_old: --forward.max-age; retention: --retention.size removed them first; duplicate, out_of_order: behind the series' last sample sent).", "reason"),
		pending:     d("samples_pending", "Samples not yet acknowledged (estimated from the archive's rows)."),
		inflight:    d("samples_in_flight", "Samples dispatched to the senders and not finished."),
		lag:         d("lag_seconds", "Age by receipt time of the oldest data the upstream has not acknowledged; 0 when caught up."),
		lastSuccess: d("last_success_timestamp_seconds", "When the upstream last answered 2xx (0: never)."),
		backoff:     d("backoff_seconds", "The longest wait a sender is in before a retry (0: none)."),
		held:        d("held_streams", "Streams whose sealed rows the upstream keeps from the prune (it reads them as rows)."),
		info:        d("upstream_info", "The upstream's URL and the protocol sent now.", "url", "protocol"),
		flushes:     d("cursor_flushes_total", "Transactions of its own the forwarder asked the writer for, to commit a cursor no other commit carried."),
		yields:      d("yields_total", "Waits the forwarder made to leave a saturated host's CPU to ingest (--forward.yield)."),
	}
}

func (c *forwardCollector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

func (c *forwardCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.f.Stats() {
		counter := func(d *prometheus.Desc, v int64, lv ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{s.Name}, lv...)...)
		}
		gauge := func(d *prometheus.Desc, v float64, lv ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{s.Name}, lv...)...)
		}
		counter(c.samples, s.SamplesSent)
		counter(c.histograms, s.HistogramsSent)
		counter(c.exemplars, s.ExemplarsSent)
		counter(c.failed, s.Failed)
		counter(c.retried, s.Retried)
		counter(c.requests, s.Requests)
		counter(c.resent, s.Resent)
		counter(c.flushes, s.CursorFlushes)
		counter(c.yields, s.Yields)
		for reason, n := range s.Dropped {
			counter(c.dropped, n, reason)
		}
		gauge(c.pending, float64(s.Pending))
		gauge(c.inflight, float64(s.InFlight))
		gauge(c.lag, s.Lag.Seconds())
		last := 0.0
		if !s.LastSuccess.IsZero() {
			last = float64(s.LastSuccess.UnixNano()) / 1e9
		}
		gauge(c.lastSuccess, last)
		gauge(c.backoff, s.Backoff.Seconds())
		gauge(c.held, float64(s.HeldStreams))
		gauge(c.info, 1, s.URL, s.Protocol.String())
	}
}
