package main

import (
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"

	promread "github.com/dendro-receiver/dendro-receiver/promql-read"
)

func queryCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	now := time.Now()
	app := newOpApp("query", "Evaluate a PromQL expression straight from the archive file, in this process and read-only, "+
		"while a server writes it: the answer /api/v1/query (at --time) or /api/v1/query_range (--start, --end, --step) "+
		"would give.",
		"dendro-receiver query --archive.path=/var/lib/dendro-receiver/dendro.db 'sum by (job) (rate(http_requests_total[5m]))' "+
			"--start=now-1h --end=now --step=1m --format=csv", stdout)
	expr := app.Arg("PROMQL", "The expression.").Required().String()
	at, atSet := app.addTime("time", "Evaluate an instant query at this time (default: now).", now)
	start, startSet := app.addTime("start", "A range query from this time...", now)
	end, endSet := app.addTime("end", "... to this time (default: now) ...", now)
	var step model.Duration
	app.Flag("step", "... every step (default: the range / 250, at least 1s).").SetValue(named("step", &step))
	format := app.addEnum("format", "table, json (the API's \"data\", as the server sends it) or csv.", "table", "json", "csv")
	lookback := app.Flag("lookback-delta", "PromQL's staleness window.").Default("5m").String()
	if ok, err := app.parse(args); !ok {
		return err
	}
	lb, err := model.ParseDuration(*lookback)
	if err != nil || lb <= 0 {
		return usage("query: --lookback-delta=%s: not a positive duration", *lookback)
	}
	ranged := *startSet || *endSet || step != 0
	switch {
	case ranged && *atSet:
		return usage("query: --time is for an instant query; --start, --end and --step for a range")
	case ranged && !*startSet:
		return usage("query: a range query needs --start")
	case ranged && !*endSet:
		*end = now
	case !*atSet:
		*at = now
	}
	a, err := openRead(*app.archivePath)
	if err != nil {
		return err
	}
	defer a.Close()
	// The engine the server runs, with its defaults; its index is built
	// as the question reads the archive (only the streams it names).
	api, err := promread.NewAPI(a, promread.Options{LookbackDelta: time.Duration(lb)})
	if err != nil {
		return err
	}
	var res promread.EvalResult
	if ranged {
		st := time.Duration(step)
		if st == 0 {
			st = max(time.Second, end.Sub(*start)/250).Round(time.Second)
		}
		res, err = api.Eval(ctx, *expr, *start, *end, st)
	} else {
		res, err = api.Eval(ctx, *expr, *at, time.Time{}, 0)
	}
	if errors.Is(err, promread.ErrBadRequest) {
		return usage("query: %v", err)
	}
	if err != nil {
		return fmt.Errorf("query: %w", err)
	}
	switch *format {
	case "json":
		_, err = fmt.Fprintf(stdout, "%s\n", res.JSON)
	case "csv":
		err = queryCSV(stdout, res.Value)
	default:
		err = queryTable(stdout, res.Value)
	}
	// On stderr: stdout is the answer, in the format asked for.
	for _, w := range res.Warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	for _, w := range res.Infos {
		fmt.Fprintln(stderr, "info:", w)
	}
	return err
}

// point is one value of a result, float or histogram.
type point struct {
	t int64
	f float64
	h *histogram.FloatHistogram
}

func (p point) value() string {
	if p.h != nil {
		return p.h.String()
	}
	return formatValue(p.f)
}

// formatValue writes a float as Prometheus does.
func formatValue(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	case math.IsNaN(f):
		return "NaN"
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

type resultSeries struct {
	labels labels.Labels
	points []point
}

// flatten turns any result into series of points.
func flatten(v any) []resultSeries {
	switch r := v.(type) {
	case promql.Vector:
		out := make([]resultSeries, len(r))
		for i, s := range r {
			out[i] = resultSeries{s.Metric, []point{{t: s.T, f: s.F, h: s.H}}}
		}
		return out
	case promql.Matrix:
		out := make([]resultSeries, len(r))
		for i, s := range r {
			ps := make([]point, 0, len(s.Floats)+len(s.Histograms))
			for _, p := range s.Floats {
				ps = append(ps, point{t: p.T, f: p.F})
			}
			for _, p := range s.Histograms {
				ps = append(ps, point{t: p.T, h: p.H})
			}
			slices.SortFunc(ps, func(a, b point) int { return cmp.Compare(a.t, b.t) })
			out[i] = resultSeries{s.Metric, ps}
		}
		return out
	case promql.Scalar:
		return []resultSeries{{labels.EmptyLabels(), []point{{t: r.T, f: r.V}}}}
	case promql.String:
		return nil
	}
	return nil
}

func queryTable(w io.Writer, v any) error {
	if s, ok := v.(promql.String); ok {
		_, err := fmt.Fprintln(w, s.V)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	series := flatten(v)
	if _, ok := v.(promql.Matrix); ok {
		for i, s := range series {
			if i > 0 {
				fmt.Fprintln(tw)
			}
			fmt.Fprintln(tw, s.labels.String())
			for _, p := range s.points {
				fmt.Fprintf(tw, "  %s\t%s\n", formatMS(p.t), p.value())
			}
		}
		return tw.Flush()
	}
	for _, s := range series {
		for _, p := range s.points {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", s.labels.String(), p.value(), formatMS(p.t))
		}
	}
	return tw.Flush()
}

// queryCSV writes one row per point: the timestamp, the value, then a
// column per label name any series has (empty where a series lacks it).
func queryCSV(w io.Writer, v any) error {
	cw := csv.NewWriter(w)
	if s, ok := v.(promql.String); ok {
		cw.Write([]string{"timestamp", "value"})
		cw.Write([]string{formatMS(s.T), s.V})
		cw.Flush()
		return cw.Error()
	}
	series := flatten(v)
	seen := map[string]bool{}
	for _, s := range series {
		s.labels.Range(func(l labels.Label) { seen[l.Name] = true })
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	cw.Write(append([]string{"timestamp", "value"}, names...))
	rec := make([]string, 2+len(names))
	for _, s := range series {
		for i, n := range names {
			rec[2+i] = s.labels.Get(n)
		}
		for _, p := range s.points {
			rec[0], rec[1] = formatMS(p.t), p.value()
			cw.Write(rec)
		}
	}
	cw.Flush()
	return cw.Error()
}
