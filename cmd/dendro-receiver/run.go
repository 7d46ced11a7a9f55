package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/alecthomas/units"
	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	"github.com/dendro-receiver/dendro-receiver/membudget"
	promread "github.com/dendro-receiver/dendro-receiver/promql-read"
	"github.com/dendro-receiver/dendro-receiver/receiver"
	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

// sealBacklogBudget bounds how long a start seals the rows an earlier run
// left before it indexes the archive for reads (Ingester.SealBacklog).
const sealBacklogBudget = 5 * time.Second

// groupWait bounds how long a commit waits for requests still being
// decoded. A 2,000-sample request takes ~1 ms to decode and encode; with
// 4 senders (rwload) the wait cut the sidecar pages written 10-20% and the
// time spent committing ~15%, and added at most 2 ms to a request's
// latency. A lone sender never waits: its request is the only one.
const groupWait = 2 * time.Millisecond

// followEvery is how often the read side decodes the rows appended since
// it last looked (promread.Queryable.Follow), so that a question decodes
// at most that much of the live tail itself.
const followEvery = time.Second

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// config is what the flags say.
type config struct {
	web           *web.FlagConfig
	archivePath   string
	sourceHeader  string
	buckets       int
	retentionTime model.Duration
	retentionSize units.Base2Bytes
	diskReserve   units.Base2Bytes
	sealMaxRows   int64
	sealMaxBytes  units.Base2Bytes
	sealMaxAge    model.Duration
	compactRows   int64
	idleTimeout   model.Duration
	maxRequest    units.Base2Bytes
	maxDecoded    units.Base2Bytes
	writeTimeout  model.Duration
	shutdownWait  model.Duration
	log           promslog.Config

	queryMaxSamples int
	queryMaxConc    int
	queryTimeout    model.Duration
	queryCache      units.Base2Bytes
	queryWarmWindow model.Duration

	memoryLimit units.Base2Bytes

	forward forwardFlags // forward.go
}

func parseFlags(args []string, stdout io.Writer) (*config, bool, error) {
	c := &config{log: promslog.Config{}}
	app := kingpin.New("dendro-receiver", "A Prometheus remote-write receiver that keeps what it is sent in a dendro archive:\n"+
		"one SQLite file any local process can read while it is written, its history Parquet.\n\n"+commandsHelp)
	app.Writer(stdout)
	app.UsageWriter(stdout)
	app.Version(buildVersion())
	app.HelpFlag.Short('h')
	c.web = kingpinflag.AddFlags(app, "127.0.0.1:9201")
	app.Flag("archive.path", "The archive file. Created (with its directory) if missing; an existing archive is reopened "+
		"and its sources resumed. A file that is not a dendro archive is refused, never overwritten.").
		Default(filepath.Join("data", "dendro.db")).StringVar(&c.archivePath)
	app.Flag("source.header", "Request header naming the source (the sender, e.g. one Prometheus). Requests without it "+
		"belong to the source \"default\". Each source is one archive source; give every Prometheus its own name "+
		"(remote_write headers) rather than splitting by scrape target: cost grows with the streams a commit touches "+
		"(measured: 1 stream per commit 2.4 M samples/s at 33 B written per sample; 100 streams 384 k at 311 B).").
		Default("X-Scope-OrgID").StringVar(&c.sourceHeader)
	app.Flag("source.stream-buckets", "Streams each source's series are spread over, by metric name. More: cheaper "+
		"one-metric reads, dearer writes.").Default(fmt.Sprint(promsample.DefaultStreamBuckets)).IntVar(&c.buckets)
	app.Flag("retention.time", "Remove data received longer ago than this (0: keep).").Default("15d").SetValue(named("retention.time", &c.retentionTime))
	app.Flag("retention.size", "Cap the archive at this size by removing the oldest segments (0: no cap). Set, the oldest "+
		"segments also go early whenever less than --retention.disk-reserve is left for the archive on its disk, "+
		"so a filling disk costs history before it refuses a write. Units: KB, MB, GB...").
		Default("0").SetValue(named("retention.size", (*bytesValue)(&c.retentionSize)))
	app.Flag("retention.disk-reserve", "With --retention.size: the room (free disk plus free pages in the archive) to keep for the archive.").
		Default("64MiB").SetValue(named("retention.disk-reserve", (*bytesValue)(&c.diskReserve)))
	app.Flag("seal.max-rows", "Seal a stream's live rows into a Parquet segment after this many rows (requests); a seal takes at most this many.").
		Default(fmt.Sprint(archive.DefaultSealMaxRows)).Int64Var(&c.sealMaxRows)
	app.Flag("seal.max-bytes", "... or this many bytes of live rows (and takes at most this many).").Default("8MiB").SetValue(named("seal.max-bytes", (*bytesValue)(&c.sealMaxBytes)))
	app.Flag("seal.max-age", "... or when its oldest live row is this old.").Default("5m").SetValue(named("seal.max-age", &c.sealMaxAge))
	app.Flag("series.idle-timeout", "A series not written for this long drops its ingest state, as Prometheus's head drops "+
		"idle series; its data stays readable (0: never).").Default("1h").SetValue(named("series.idle-timeout", &c.idleTimeout))
	app.Flag("compact.target-rows", "Merge small segments up to this many rows (0: default, -1: off); segments with "+
		"series tables also past it, up to 64 MiB received within an hour.").
		Default("0").Int64Var(&c.compactRows)
	app.Flag("web.max-request-bytes", "Largest remote-write body accepted, compressed (413 above).").
		Default("32MiB").SetValue(named("web.max-request-bytes", (*bytesValue)(&c.maxRequest)))
	app.Flag("web.max-decoded-bytes", "Largest decoded remote-write message, as snappy declares it (413 above; checked "+
		"before allocating).").Default("256MiB").SetValue(named("web.max-decoded-bytes", (*bytesValue)(&c.maxDecoded)))
	app.Flag("web.write-timeout", "How long a write waits for the archive writer before it is answered 503 with Retry-After.").
		Default("30s").SetValue(named("web.write-timeout", &c.writeTimeout))
	app.Flag("web.shutdown-timeout", "How long a shutdown waits for in-flight requests.").Default("20s").SetValue(named("web.shutdown-timeout", &c.shutdownWait))
	app.Flag("query.max-samples", "Most samples one query or remote-read request may load into memory (answered with an error above).").
		Default(fmt.Sprint(promread.DefaultMaxSamples)).IntVar(&c.queryMaxSamples)
	app.Flag("query.max-concurrency", "Most queries and remote-read requests served at once.").
		Default(fmt.Sprint(promread.DefaultMaxConcurrency)).IntVar(&c.queryMaxConc)
	app.Flag("query.timeout", "Longest a query or remote-read request may run.").Default("2m").
		SetValue(named("query.timeout", &c.queryTimeout))
	app.Flag("query.cache-bytes", "Memory for caching what reads need of immutable segments between queries, an eighth of it for the pages and samples of series read one at a time (0: an eighth of what reads may hold under --memory.limit, at least 64MiB; at most half of it).").
		Default("0").SetValue(named("query.cache-bytes", (*bytesValue)(&c.queryCache)))
	app.Flag("query.warm-window", "At start, index the segments received within this long of the newest before reporting ready, and older history after (a query reaching it first indexes what it needs); 0: all before ready.").
		Default("1h").SetValue(named("query.warm-window", &c.queryWarmWindow))
	addForwardFlags(app, &c.forward)
	memDefault, memFrom := defaultMemoryLimit(os.ReadFile)
	app.Flag("memory.limit", fmt.Sprintf("The process's memory budget: the Go runtime's soft limit, the SQLite readers' page caches "+
		"and what reads may hold are all shares of it (default: %s).", memFrom)).
		Default(fmt.Sprintf("%dMiB", memDefault>>20)).SetValue(named("memory.limit", (*bytesValue)(&c.memoryLimit)))
	promslogflag.AddFlags(app, &c.log)
	// --help and --version print and then "terminate": run returns instead
	// of exiting the process, so main's cleanup (and tests) still run.
	terminated := false
	app.Terminate(func(int) { terminated = true })
	if _, err := app.Parse(args); err != nil {
		return nil, false, usage("%v", err)
	}
	if terminated {
		return nil, false, nil
	}
	if c.buckets < 1 || c.buckets > promsample.MaxStreamBuckets {
		return nil, false, usage("--source.stream-buckets must be in [1, %d]", promsample.MaxStreamBuckets)
	}
	if c.sealMaxRows < 1 || c.sealMaxBytes < 1 || c.sealMaxAge <= 0 {
		return nil, false, usage("--seal.max-rows, --seal.max-bytes and --seal.max-age must be positive")
	}
	if _, err := planMemory(int64(c.memoryLimit)); err != nil {
		return nil, false, usage("%v", err)
	}
	if c.retentionTime < 0 || c.retentionSize < 0 || c.diskReserve <= 0 {
		return nil, false, usage("--retention.time and --retention.size must not be negative, --retention.disk-reserve must be positive")
	}
	return c, true, nil
}

// namedValue prefixes a flag value's parse error with the flag's name:
// kingpin's own messages ("units: invalid lots") do not say which flag.
type namedValue struct {
	name string
	kingpin.Value
}

func named(name string, v kingpin.Value) kingpin.Value { return namedValue{name, v} }

func (v namedValue) Set(s string) error {
	if err := v.Value.Set(s); err != nil {
		return fmt.Errorf("--%s=%s: %w", v.name, s, err)
	}
	return nil
}

// bytesValue is a size flag (KB, MiB, GB... as units.ParseBase2Bytes reads).
type bytesValue units.Base2Bytes

func (b *bytesValue) Set(s string) error {
	v, err := units.ParseBase2Bytes(s)
	if err != nil {
		return err
	}
	*b = bytesValue(v)
	return nil
}
func (b *bytesValue) String() string { return units.Base2Bytes(*b).String() }

// checkArchivePath decides, before anything is created, whether the path
// can be served: an existing dendro archive, or a new file in a directory
// that exists or can be made.
func checkArchivePath(path string) (exists bool, err error) {
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir():
		return false, usage("--archive.path %s is a directory", path)
	case err == nil:
		s, err := archive.Sniff(path)
		if err != nil {
			return false, usage("--archive.path: %v", err)
		}
		if !s.Stamped {
			return false, usage("--archive.path %s is not a dendro archive; refusing to touch it", path)
		}
		if s.Version != archive.SchemaVersion {
			return false, usage("--archive.path %s is a dendro archive of schema version %d; this build reads %d",
				path, s.Version, archive.SchemaVersion)
		}
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		for d := filepath.Dir(path); ; d = filepath.Dir(d) {
			fi, err := os.Stat(d)
			if err == nil {
				if !fi.IsDir() {
					return false, usage("--archive.path: %s is not a directory", d)
				}
				if f, err := os.CreateTemp(d, ".dendro-probe-*"); err != nil {
					return false, usage("--archive.path: cannot create files in %s: %v", d, err)
				} else {
					f.Close()
					os.Remove(f.Name())
				}
				return false, nil
			}
			if !errors.Is(err, os.ErrNotExist) || d == filepath.Dir(d) {
				return false, usage("--archive.path: %v", err)
			}
		}
	default:
		return false, usage("--archive.path: %v", err)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, procs int) error {
	if len(args) > 0 && args[0] == "healthcheck" {
		return healthcheck(ctx, args[1:], stdout)
	}
	if cmd := subcommand(args); cmd != nil { // inspect, verify, ... (cmd_ops.go)
		return cmd(ctx, args[1:], stdout, stderr)
	}
	c, ok, err := parseFlags(args, stdout)
	if err != nil || !ok {
		return err
	}
	c.log.Writer = stderr
	logger := promslog.New(&c.log)

	// Validate everything that can be validated before creating anything.
	if *c.web.WebConfigFile != "" {
		if err := web.Validate(*c.web.WebConfigFile); err != nil {
			return usage("--web.config.file: %v", err)
		}
	}
	exists, err := checkArchivePath(c.archivePath)
	if err != nil {
		return err
	}
	fwd, err := newForwarding(c.forward, logger)
	if err != nil {
		return err
	}
	var listeners []net.Listener
	for _, addr := range *c.web.WebListenAddresses {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range listeners {
				l.Close()
			}
			return usage("--web.listen-address %s: %v", addr, err)
		}
		listeners = append(listeners, l)
	}

	enc := &promsample.Encoder{}
	policy := archive.SealPolicy{MaxRows: c.sealMaxRows, MaxBytes: int64(c.sealMaxBytes), MaxAge: time.Duration(c.sealMaxAge)}
	// The ingester sets it when seals must not wait for idle CPU (a disk
	// short of room); the writer's encoder reads it.
	urgency := &receiver.SealUrgency{}
	// DeferPrunes: the ingester seals due streams one after another and
	// then asks for one prune of them all (Ingester.SealDue). A seal takes
	// at most twice the policy's bytes, so that one behind the appends
	// holds a bounded amount of memory (see encodeprio.go); the ingester
	// closes an epoch once it reaches the policy, so the bound always
	// holds a closed epoch (receiver/epochs.go). Rows are not bounded: at
	// a million series an epoch holds a few thousand small rows.
	wopts := archive.WriterOptions{Encoder: enc, Logger: logger.With("component", "archive"), DeferPrunes: true,
		MaxSealBytes: 2*policy.WithDefaults().MaxBytes + 4<<20}
	if threadPriorities {
		enc.Opts.OwnThread = true
		wopts.EncodeOn = encodeAtIdlePriority(logger.With("component", "archive"), urgency.Urgent)
	}
	// A commit waits up to groupWait for requests the handler is still
	// decoding (receiver.Pending), to take them along.
	pending := &receiver.Pending{}
	wopts.Coming, wopts.GroupWait = pending.Count, groupWait
	fwd.writerOptions(&wopts)
	var w *archive.Writer
	if exists {
		w, err = archive.OpenWriter(c.archivePath, wopts)
	} else {
		if err = os.MkdirAll(filepath.Dir(c.archivePath), 0o755); err == nil {
			w, err = archive.CreateWriter(c.archivePath, wopts)
		}
	}
	if err != nil {
		for _, l := range listeners {
			l.Close()
		}
		if errors.Is(err, archive.ErrInUse) || errors.Is(err, archive.ErrNotAnArchive) ||
			errors.Is(err, archive.ErrUnsupportedSchema) || errors.Is(err, archive.ErrReadOnlyMedia) {
			return usage("--archive.path: %v", err)
		}
		return fmt.Errorf("opening the archive: %w", err)
	}
	// One memory budget (memory.go). The fixed shares, and the decoded-
	// segment cache (bounded by --query.cache-bytes), are reserved here
	// for the process's life; every question reserves from the rest what
	// its answer holds as it decodes (promql-read's Options.Memory).
	mem, _ := planMemory(int64(c.memoryLimit))
	defer applyGoMemoryLimit(mem.goLimit, os.Getenv)()
	budget := membudget.New(mem.limit)
	if qc := mem.queryCache(int64(c.queryCache)); qc != int64(c.queryCache) {
		if c.queryCache != 0 {
			logger.Warn("--query.cache-bytes is more than half of what reads may hold under --memory.limit; using that half",
				"query.cache-bytes", c.queryCache, "memory.limit", c.memoryLimit, "cache", units.Base2Bytes(qc))
		}
		c.queryCache = units.Base2Bytes(qc)
	}
	if _, err := budget.Reserve(ctx, mem.fixed+mem.ingest+mem.sqlite+mem.gcSlack+int64(c.queryCache)); err != nil {
		w.Close()
		return fmt.Errorf("reserving the fixed memory shares: %w", err)
	}
	reader, err := archive.OpenWithOptions(c.archivePath, archive.ReadOptions{
		MemoryBytes: mem.sqlite, MaxConns: mem.readerConns(c.queryMaxConc), Writer: w})
	if err != nil {
		w.Close()
		return fmt.Errorf("opening a read handle: %w", err)
	}
	// One series index for the process: the decoder finds requests'
	// series in it, the ingester names them by it, reads select with it.
	series := seriesindex.New()
	ing, err := receiver.NewIngester(ctx, receiver.IngestOptions{
		Writer: w, Reader: reader, Buckets: c.buckets, Series: series, IdleTimeout: idleTimeout(c.idleTimeout),
		Seal:              policy,
		Retention:         time.Duration(c.retentionTime),
		RetentionBytes:    int64(c.retentionSize),
		DiskReserve:       int64(c.diskReserve),
		Urgency:           urgency,
		CompactTargetRows: c.compactRows,
		WriteTimeout:      time.Duration(c.writeTimeout),
		Parallelism:       procs,
		Floors:            fwd.floors(),
		Logger:            logger.With("component", "ingest"),
	})
	if err != nil {
		reader.Close()
		w.Close()
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newArchiveCollector(w, reader, ing), newMemoryCollector(mem, budget))
	fwd.register(reg)
	h, err := receiver.NewHandler(ing, receiver.Options{
		MaxCompressedBytes: int64(c.maxRequest),
		MaxDecodedBytes:    int64(c.maxDecoded),
		SourceHeader:       c.sourceHeader,
		Logger:             logger.With("component", "write"),
		Registerer:         reg,
		Pending:            pending,
		Parallelism:        procs,
	})
	if err != nil {
		reader.Close()
		w.Close()
		return usage("%v", err)
	}

	api, err := promread.NewAPI(reader, promread.Options{
		MaxSamples:     c.queryMaxSamples,
		MaxConcurrency: c.queryMaxConc,
		Timeout:        time.Duration(c.queryTimeout),
		CacheBytes:     int64(c.queryCache),
		Logger:         logger.With("component", "read"),
		Series:         series,
		Memory:         budget,
		MemoryPerQuery: mem.reads - int64(c.queryCache),
		WarmWindow:     time.Duration(c.queryWarmWindow),
	})
	if err != nil {
		reader.Close()
		w.Close()
		return usage("%v", err)
	}

	reg.MustRegister(newQueryCacheCollector(api.Queryable()))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "dendro_read_index_deferred_segments",
		Help: "Segments not indexed for reads yet: history older than --query.warm-window, indexed after ready.",
	}, func() float64 { return float64(api.Queryable().Deferred()) }))

	var ready, warming atomic.Bool
	warming.Store(true)
	r := chi.NewRouter()
	r.Handle("/api/v1/write", h)
	api.Register(r) // /api/v1/read, /api/v1/query, ... (Prometheus's HTTP API)
	// ContinueOnError: one collector that cannot read (say /proc under a
	// hardened unit) must not blank every other metric of the scrape.
	r.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, ErrorHandling: promhttp.ContinueOnError,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}))
	// Go's profiles, where Prometheus serves them, so an operator can see
	// where a busy receiver spends its time (behind --web.config.file's
	// auth like every other path).
	r.Mount("/debug", middleware.Profiler())
	r.Get("/-/healthy", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "Healthy.\n") })
	// Ready: started, not shutting down, and the writer can commit. While
	// it cannot (a full disk, EIO), or writes are held for seals (a disk
	// short of room), writes are refused with 507/503, so a
	// load balancer or supervisor must not see a healthy server; the answer
	// says why, and turns 200 again by itself once writes go through.
	r.Get("/-/ready", func(rw http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			if warming.Load() {
				http.Error(rw, "Not ready: indexing the archive for reads (writes are taken).", http.StatusServiceUnavailable)
				return
			}
			http.Error(rw, "Not ready.", http.StatusServiceUnavailable)
			return
		}
		if err := cmp.Or(w.Health(), ing.Health()); err != nil {
			http.Error(rw, "Not ready: "+oneLine(err), http.StatusServiceUnavailable)
			return
		}
		io.WriteString(rw, "Ready.\n")
	})
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}

	// The forwarder reads the archive through its own snapshots: it needs
	// the archive and the writer open, not the read index.
	if err := fwd.start(ctx, reader, w); err != nil {
		reader.Close()
		w.Close()
		return err
	}

	bg, stopBG := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); ing.Run(bg) }()
	serveErr := make(chan error, len(listeners))
	for _, l := range listeners {
		go func(l net.Listener) { serveErr <- web.Serve(l, srv, c.web, logger) }(l)
	}
	logger.Info("memory budget", "limit", units.Base2Bytes(mem.limit), "go_soft_limit", units.Base2Bytes(mem.goLimit),
		"sqlite_readers", units.Base2Bytes(mem.sqlite), "reader_connections", mem.readerConns(c.queryMaxConc),
		"reads", units.Base2Bytes(mem.reads), "query_cache", c.queryCache)
	logger.Info("dendro-receiver serving", "version", buildVersion(), "archive", c.archivePath,
		"listen", strings.Join(*c.web.WebListenAddresses, ","), "created", !exists)

	// Writes are taken from here on: the ingester has resumed, and a
	// sender that restarted with us should not wait for reads to be
	// fast. Ready waits for the read index to hold what the archive
	// already holds of its recent history (the series tables of the
	// segments received within --query.warm-window of the newest, no
	// samples; the live tails decoded; the newest segments' layouts), so
	// that the first question a balanced reader sends about it costs what
	// any other does; the older history is indexed after (WarmHistory).
	// A question asked meanwhile is answered right, indexing what it
	// needs itself.
	warmed := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		started := time.Now()
		// The live rows an earlier run left fall due at once (the resume
		// counted them into the seal accounts), and at a million series
		// their seals take seconds. Sealed first, Warm indexes their
		// segments; sealed while it ran or after (Run's ticker), they
		// landed after its snapshot, and the first question indexed them
		// itself (a label-values ask 130-480 ms after a restart at 1 M
		// series, 2 ms the second time). The budget keeps a large backlog
		// from holding ready back for long: Run seals the rest.
		ing.SealBacklog(bg, sealBacklogBudget)
		err := api.Queryable().Warm(bg)
		if err == nil {
			if err := api.WarmEngine(bg); err != nil && bg.Err() == nil {
				logger.Debug("warming the query engine", "err", err)
			}
			logger.Info("indexed the archive: ready", "series", series.Len(), "took", time.Since(started).Round(time.Millisecond))
			wg.Add(2) // while this goroutine's count holds wg above zero
			go func() { defer wg.Done(); api.Queryable().Follow(bg, followEvery) }()
			go func() {
				defer wg.Done()
				// The history Warm left (--query.warm-window), after
				// ready: questions meanwhile index what they need.
				if api.Queryable().Deferred() == 0 {
					return
				}
				started := time.Now()
				n, err := api.Queryable().WarmHistory(bg)
				if err != nil && bg.Err() == nil {
					logger.Warn("indexing the archive's history", "err", err, "segments", n)
					return
				}
				logger.Info("indexed the archive's history", "segments", n, "series", series.Len(), "took", time.Since(started).Round(time.Millisecond))
			}()
			ready.Store(true)
		}
		warming.Store(false)
		warmed <- err
	}()

	// Serve until a signal, a listener's failure, or a failed Warm; a Warm
	// that succeeded only stops this select from waiting on it (warmedC).
	var runErr error
	warmedC := warmed
	for done := false; !done; {
		select {
		case <-ctx.Done():
			logger.Info("shutting down: finishing in-flight requests")
			done = true
		case err := <-serveErr:
			if !errors.Is(err, http.ErrServerClosed) {
				runErr = fmt.Errorf("serving: %w", err)
			}
			done = true
		case err := <-warmedC:
			warmedC = nil
			if err != nil && bg.Err() == nil {
				runErr = fmt.Errorf("indexing the archive: %w", err)
				done = true
			}
		}
	}
	// Shutdown order: stop taking requests and finish those in flight; stop
	// background work; finalize every source; close the read handle, then
	// the writer, which (being the last connection) folds the sidecar into
	// the file: one file at rest.
	ready.Store(false)
	sctx, cancel := context.WithTimeout(context.Background(), time.Duration(c.shutdownWait))
	if err := srv.Shutdown(sctx); err != nil {
		logger.Warn("in-flight requests did not finish in time", "err", err)
	}
	cancel()
	stopBG()
	wg.Wait()
	fwd.close()
	fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	if err := ing.Finalize(fctx); err != nil {
		logger.Warn("finalizing sources", "err", err)
	}
	cancel()
	reader.Close()
	if err := w.Close(); err != nil && runErr == nil {
		runErr = fmt.Errorf("closing the archive: %w", err)
	}
	logger.Info("stopped", "archive", c.archivePath)
	return runErr
}

// idleTimeout maps the flag to IngestOptions.IdleTimeout (0: never).
func idleTimeout(d model.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return time.Duration(d)
}

// healthcheck asks a running receiver's /-/ready (for container
// HEALTHCHECKs, where no curl exists).
func healthcheck(ctx context.Context, args []string, stdout io.Writer) error {
	app := kingpin.New("dendro-receiver healthcheck", "Exit 0 when the receiver at --url is ready.")
	app.Writer(stdout)
	url := app.Flag("url", "Readiness URL.").Default("http://127.0.0.1:9201/-/ready").String()
	if _, err := app.Parse(args); err != nil {
		return usage("%v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		return usage("--url: %v", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", *url, resp.Status)
	}
	return nil
}
