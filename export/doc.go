// Package export writes what an archive holds as a Parquet dataset in a
// Hive-partitioned layout, the way out of dendro when its data must go
// somewhere a single host's SQLite file cannot: DuckDB, Spark, Trino,
// pandas or Polars read the directory as one table.
//
// # Layout
//
//	DIR/__name__=<metric>/date=<YYYY-MM-DD>/part-<selection>.parquet
//
// Partitioned by metric name, then by UTC day of the sample time, because
// that is what questions about metrics name: nearly every query selects
// one metric (PromQL cannot ask for a sample without one, and a metric's
// series share one set of labels, so each file has that metric's label
// columns and no others), and a time range (dashboards and reports ask
// for a window; a day is the granularity Hive tables of events use, and
// it keeps a file per metric per day, not per hour, which at 15-day
// retention and a thousand metrics is 15,000 files rather than 360,000).
// An engine prunes on both without opening a file. Label values (instance,
// job) are not partition keys: their cardinality would make a directory
// per target and files of a few hundred rows.
//
// A partition value is escaped as Hive escapes path names (%XX for
// " # % ' * / : = ? \ { [ ] ^, DEL and control characters), which DuckDB,
// Spark and Trino decode; a recording rule's "job:rate5m" is
// __name__=job%3Arate5m.
//
// # Columns
//
// Partition columns are not stored in the files (the Hive convention; the
// engines add them from the path). A file holds:
//
//	<label>...      STRING, optional (null: the series lacks the label); a
//	                label named "date", or whose name starts with "__", is
//	                stored as "__label__"+name, so no label can collide
//	                with a partition or a fixed column
//	__ts__          INT64 TIMESTAMP(MILLIS, UTC)
//	__value__       DOUBLE, the float sample, bit-exact (stale markers are
//	                the NaN 0x7ff0000000000002); null for a histogram
//	__h_count__     DOUBLE, a native histogram's count; null for a float
//	__h_sum__       DOUBLE, its sum
//	__histogram__   STRING, the histogram as the Prometheus HTTP API's JSON
//	                ({"count","sum","buckets":[[rule, lower, upper, count]]})
//
// Rows are sorted by series (labels), then time. Files of one metric can
// have different label columns on different days; read the dataset with
// DuckDB's union_by_name=true (Spark: mergeSchema; Trino maps by name).
//
// # What is exported
//
// The samples the query API sees: sealed segments and live tails alike,
// read through promql-read's Queryable in one snapshot per file, series of
// one label set merged across streams and sources, a sender's exact
// retries dropped. Exemplars and metadata are not exported.
//
// # Reruns
//
// A file's name is fixed by what the command selected (the matchers and
// the time range: <selection> is a hash of them), so the same command run
// again names the same files. A file that exists is skipped and reported;
// a file is written under a temporary name in its directory, flushed and
// renamed into place, so an interrupted export leaves whole files and
// temporary ones (".part-<selection>-*.tmp", which engines skip as hidden
// files and the next run of that file removes),
// never a half-written part. A rerun therefore finishes an interrupted
// export; it does not refresh a day whose file exists (delete the
// directory to export it again). Consecutive exports tile: the range is
// [start, end), end excluded.
package export
