package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, err)
		}
		var u usageError
		if errors.As(err, &u) || errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError is a bad command line: exit status 2.
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

// run parses args into Options and runs the benchmark.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.Report != "" {
		return reprint(o.Report, stdout)
	}
	if o.Tree == "" {
		if o.Tree, err = moduleRoot(ctx); err != nil {
			return err
		}
	}
	return Run(ctx, o, args, stdout, stderr)
}

func parseFlags(args []string, stderr io.Writer) (Options, error) {
	var o Options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run ./e2e/bench [flags]\n\n"+
			"Builds dendro-receiver from the tree, runs it, VictoriaMetrics and Prometheus one at a time\n"+
			"under the same remote-write load, verifies every sample, and prints the table (see doc.go).\n\n")
		fs.PrintDefaults()
	}
	scales := fs.String("scales", "", "data sets as SERIESxSAMPLES/STEP/ROUNDS,... (default: the full preset "+scalesString(fullScales())+"; --quick: "+scalesString(quickScales())+")")
	perSeries := fs.String("per-series", "1,4", "request shapes: samples per series per request")
	servers := fs.String("servers", "dendro,vm,prometheus", "servers to run, dendro first")
	fs.BoolVar(&o.Quick, "quick", false, "the smoke-test preset: 10 k and 100 k series, one round, a few minutes")
	fs.IntVar(&o.Batch, "batch", 2000, "samples per remote-write request")
	fs.IntVar(&o.Senders, "senders", 4, "concurrent senders (series sharded over them)")
	fs.IntVar(&o.Sources, "sources", 100, "distinct instance label values")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the values")
	fs.IntVar(&o.ReadsAt, "reads-at", 1, "measure read latency in the runs of this --per-series shape (-1: every run)")
	warmMax := fs.Int("warm", 0, "most warm repetitions of each read (default 20; --quick 5)")
	fs.DurationVar(&o.Idle.Cap, "idle-cap", 3*time.Minute, "longest wait for a server to become idle after a load")
	fs.StringVar(&o.Out, "out", "bench-results", "directory for the JSON report (one file per run)")
	fs.StringVar(&o.WorkDir, "work-dir", "", "where the servers' data directories go (default: the system temp dir)")
	fs.BoolVar(&o.Keep, "keep", false, "keep the data directories and logs")
	fs.StringVar(&o.Tree, "tree", "", "module root to build ./cmd/dendro-receiver from (default: the current module)")
	fs.StringVar(&o.PrometheusBin, "prometheus", "", "Prometheus binary (default: prometheus on PATH)")
	fs.StringVar(&o.VMBin, "victoria-metrics", "", "VictoriaMetrics binary (default: victoria-metrics on PATH)")
	fs.StringVar(&o.Report, "report", "", "print the table of this JSON report again, from its runs, and run nothing")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, usageError{err}
	}
	if fs.NArg() > 0 {
		return o, usageError{fmt.Errorf("bench: unexpected arguments %q", fs.Args())}
	}
	var err error
	if *scales != "" {
		if o.Scales, err = parseScales(*scales); err != nil {
			return o, usageError{err}
		}
	}
	for p := range strings.SplitSeq(*perSeries, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return o, usageError{fmt.Errorf("bench: --per-series %q: %w", *perSeries, err)}
		}
		o.PerSeries = append(o.PerSeries, n)
	}
	for s := range strings.SplitSeq(*servers, ",") {
		o.Servers = append(o.Servers, strings.TrimSpace(s))
	}
	if *warmMax > 0 {
		o.Warm = WarmPolicy{Min: min(3, *warmMax), Max: *warmMax, Budget: 3 * time.Second, Cap: 20 * time.Second}
	}
	if err := o.withDefaults().Validate(); err != nil {
		return o, usageError{err}
	}
	return o, nil
}

func scalesString(ss []Scale) string {
	parts := make([]string, len(ss))
	for k, s := range ss {
		parts[k] = s.String()
	}
	return strings.Join(parts, ",")
}

// moduleRoot is the directory of the go.mod the go command sees from here.
func moduleRoot(ctx context.Context) (string, error) {
	b, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("bench: go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(b))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("bench: not inside a Go module; run from the repository or pass --tree")
	}
	return filepath.Dir(mod), nil
}
