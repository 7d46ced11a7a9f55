package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/dendro-receiver/dendro-receiver/export"
)

func exportCmd(ctx context.Context, args []string, stdout, _ io.Writer) error {
	now := time.Now()
	app := newOpApp("export", "Write every sample in range (sealed segments and live tails alike) into DIR as Parquet, "+
		"Hive-partitioned by metric and UTC day: DIR/__name__=<metric>/date=<YYYY-MM-DD>/part-<selection>.parquet, which "+
		"DuckDB, Spark and Trino read as one table. Rerun the same command to finish an interrupted export: files that "+
		"exist are skipped (and named). Reads only: safe while a server writes.",
		"dendro-receiver export --archive.path=/var/lib/dendro-receiver/dendro.db /srv/export --start=2024-05-01 --end=2024-06-01\n"+
			"  duckdb -c \"SELECT __name__, date, count(*) FROM read_parquet('/srv/export/**/*.parquet', hive_partitioning=true, "+
			"union_by_name=true) GROUP BY ALL\"", stdout)
	dir := app.Arg("DIR", "The dataset's directory (created if missing).").Required().String()
	match := app.Flag("match", "Only the series this selector matches (e.g. '{job=\"node\"}').").String()
	start, startSet := app.addTime("start", "From this sample time (inclusive; default: the oldest sample).", now)
	end, endSet := app.addTime("end", "To this sample time (exclusive, so consecutive exports tile; default: after the newest).", now)
	if ok, err := app.parse(args); !ok {
		return err
	}
	var ms []*labels.Matcher
	if *match != "" {
		var err error
		if ms, err = parser.NewParser(parser.Options{}).ParseMetricSelector(*match); err != nil {
			return usage("export: --match: %v", err)
		}
	}
	opts := export.Options{Matchers: ms, Start: -1 << 63, End: 1<<63 - 1}
	if *startSet {
		opts.Start = start.UnixMilli()
	}
	if *endSet {
		opts.End = end.UnixMilli()
	}
	if opts.End <= opts.Start {
		return usage("export: --end must be after --start")
	}
	a, err := openRead(*app.archivePath)
	if err != nil {
		return err
	}
	defer a.Close()
	p := newProgress(stdout, "export", "partitions")
	opts.Progress = p.fn()
	opts.Skipped = func(path string) {
		p.clear()
		fmt.Fprintln(stdout, "skipped (exists):", path)
	}
	rep, err := export.Export(ctx, a, *dir, opts)
	p.clear()
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	rate := ""
	if s := rep.Took.Seconds(); s > 0 && rep.Rows > 0 {
		rate = fmt.Sprintf(" (%.0f rows/s)", float64(rep.Rows)/s)
	}
	_, err = fmt.Fprintf(stdout, "exported %d rows into %d files (%s) in %s%s; %d files existed and were skipped\n",
		rep.Rows, rep.Files, humanBytes(rep.Bytes), rep.Took.Round(time.Millisecond), rate, rep.Skipped)
	return err
}
