// Command bench measures dendro-receiver beside VictoriaMetrics and
// Prometheus on one machine, under the same remote-write load, and reports
// only figures whose data it read back whole:
//
//	go run ./e2e/bench            # the full run: 10 k, 100 k and 1 M series, under 40 minutes on 2 cores
//	go run ./e2e/bench --quick    # 10 k and 100 k, one round, a few minutes: CI's smoke test
//
// Users choose a remote-write target by its numbers, and those numbers
// move with the number of series, so the benchmark lives in the repository
// where anyone can rerun it, rather than in scripts beside it.
//
// # What a run does
//
// It builds ./cmd/dendro-receiver from the tree (CGO_ENABLED=0, as the
// Dockerfile does) and finds victoria-metrics and prometheus on PATH (the
// Debian packages: VictoriaMetrics 1.79, Prometheus 2.42 with
// --web.enable-remote-write-receiver); a missing peer is skipped with a
// note, never replaced. For each scale, for each request shape (1 and 4
// samples per series per request), it encodes the load once (Dataset,
// Layout, Encode) and, for each round, runs every server once, in
// alternation, each round starting with the next server, so that the
// machine's drift and the position in the order hit all alike. A run
// (measure) is:
//
//  1. start the server fresh: a new data directory, a free loopback port;
//  2. send the load: 4 senders, series sharded over them, 2,000 samples a
//     request, remote-write 1.0 (protobuf, snappy), retried on 5xx;
//  3. wait until the server is idle (IdlePolicy), reading utime+stime,
//     write_bytes and VmHWM from /proc before the load and then;
//  4. flush (VictoriaMetrics /internal/force_flush; Prometheus a TSDB
//     snapshot with its head; dendro-receiver has nothing to flush: it
//     seals by policy);
//  5. in the runs of the shape --reads-at names (1 sample per series per
//     request: every shape stores the same data): stop, measure the data
//     directory, restart, ask each latency query once (the first ask
//     after a restart), then each warm (WarmPolicy), then read every
//     sample back (Verify) and stop; in the other runs: read back, stop,
//     measure the data directory.
//
// # What "verified" means
//
// Verify reads every series back (remote-read, SAMPLES response, for
// dendro-receiver and Prometheus; /api/v1/export for VictoriaMetrics,
// which has no remote-read) and compares each sample with the generator:
// timestamp equal, float bits equal (exact), or for VictoriaMetrics, which
// keeps ~12 significant decimal digits, within a relative 1e-11 (inexact,
// and the bit-exact share is reported). A missing, extra, duplicated or
// changed sample refuses the run: its figures are left out of the table,
// a line says why, and the command exits 1. The latency queries check the
// shape of their answers too (how many values, series, points).
//
// # The full preset, and why these sizes
//
// 10,000 series × 720 samples at 10 s (2 h, 7.2 M samples); 100,000 × 120
// at 15 s (30 min, 12 M); 1,000,000 × 30 at 15 s (7.5 min, 30 M); three
// rounds each. Three, because this kind of machine is shared and noisy:
// one run of a server drifts by a fifth from the next, and a figure that
// compares scales (how CPU per sample grows with series, the growth
// tables) needs a median on both sides, not one run against three. At
// b4fef0d one round at 100 k and 1 M had to do (37 minutes, Prometheus
// ingesting 40-50 k samples/s and dendro-receiver's reads taking seconds);
// at 41db255 that run took 12 minutes, so three rounds everywhere fit
// (cc49b65 took 25, with 1 M × 12). Every sample is read back, which costs
// about as much again as the ingest, so 1 M series had 12 samples until
// 1 M × 30, the load the scale issue measured, was shown to fit too (10 k
// and 1 M × 30 alone took 28 minutes, Prometheus's 1 M runs of 1 sample
// per series per request 3.4 each; the preset on d7caed8, 36). With 12,
// one sample in 12 was a new series' first: the run measured series
// creation as much as appends, a churn no host with a million active
// series sees (their series live for hours), and CPU per sample at 1 M
// came out 1.55-1.62× that at 10 k against 1.32-1.43× with 30; --scales
// 10000x720/10s/3,1000000x12/15s/3 still asks for it. The spans stay under 3 h so
// Prometheus never compacts its head during a run (its CPU would land
// outside the window at random) and "after flush" means the same for every
// scale. --scales changes all of it.
//
// # Caveats
//
//   - The machine is shared: the load average at the start and end is in
//     the header; compare ratios within one run more than absolute figures.
//   - "First after restart" is each query's first ask after a process
//     restart, in the table's order; the OS page cache is warm.
//   - VictoriaMetrics gets nocache=1 on /api/v1/query and query_range,
//     which turns its rollup result cache off for repeats.
//   - CPU counts the server process only; the benchmark's own CPU (the
//     sender, the verifier) competes on the same cores, alike for all.
//
// The report is printed as Markdown tables (median, min–max over rounds,
// each peer's ratio to dendro-receiver), then, per request shape, how each
// server's CPU per sample grows with series (its median at each scale over
// its own at the fewest), and written as JSON to
// bench-results/<start time>.json (--out), every run's figures included.
//
// Files: dataset.go (the generator), plan.go (requests), send.go,
// readclient.go (remote-read, export), verify.go, server.go (the three
// servers as processes; target is the seam the tests' fakes use),
// procstat.go and idle.go (/proc), queries.go (latency), results.go and
// report.go (rows, table, JSON), growth.go (the growth tables), bench.go
// (the run loop), options.go, machine.go, main.go (flags).
package main
