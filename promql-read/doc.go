// Package promread answers Prometheus's questions from a dendro archive:
// remote-read (POST /api/v1/read, SAMPLES and STREAMED_XOR_CHUNKS) and the
// Prometheus HTTP query API that Grafana speaks (query, query_range,
// series, labels, label values, metadata, query_exemplars, buildinfo),
// evaluated by github.com/prometheus/prometheus/promql over a
// storage.Queryable implemented on the archive.
//
// The types:
//
//   - Queryable (NewQueryable) is the storage.Queryable, ChunkQueryable and
//     ExemplarQueryable over an *archive.Archive.
//   - API (NewAPI) holds the engine, the limits and the handlers; Register
//     mounts them on a chi router, Handler returns them as an http.Handler.
//   - Options configures both; its zero value means the defaults.
//
// How a question is answered. Every Select runs in ONE archive snapshot
// (archive.View), taken when the Select is called and released before it
// returns: the snapshot pins the archive's -wal sidecar, so it is held for
// one answer, never for a querier's life.
//
// The series index (package seriesindex, indexsync.go) picks the series:
// every matcher, of every type and on every label (__name__ regexes
// included), is answered from its postings (label name, value, series),
// and each series knows the streams and receipt spans that hold its data.
// The index is derived state: Warm builds it at start from every sealed
// segment's series table (promsample's format-2 index, no sample read)
// and every live tail, or from the recent segments' alone, deferring the
// older history (Options.WarmWindow) to the questions whose ranges reach
// it and to WarmHistory; Follow (while questions come: followIdle), and
// each Select for the streams it reads, keep it current with the
// archive's commits (a segment is indexed once
// per process; a tail takes the rows appended since). The label and series
// endpoints answer from it alone.
//
// Then, per stream the chosen series live in: the sealed segments whose
// sample-time span and series may match are planned from the catalog, and
// a segment with a series table is read in place (the BLOB through an
// io.ReaderAt, promsample.SegmentReader): the series are found in its
// directory (segdir.go: the table's row counts and page sums, and the
// series' hashes sorted) and only their pages are decoded, each checked
// against its sum; the segment's layout (footer, page index, row starts)
// is cached beside the directory, so a question does not walk to the end
// of the BLOB for it, and so are the verified pages of a series read on its
// own (segpages.go), so that asking again opens no BLOB at all. A segment
// from before index format 2 is read whole.
// The live tail above the sealed watermark (tail.go) is decoded once, row
// by row as rows arrive, into per-series packed samples (delta-of-delta
// timestamps, XOR values, bit-exact), and a Select takes just its series.
// Series with equal label sets, from any segment, the tail or any source,
// are one series: their samples are merged in time order and exact
// duplicates (same timestamp, same value bits) dropped; a late sample
// (received after newer ones) lands in its place (answer.go).
//
// The cache (Options.CacheBytes, an LRU bounded by the entries' real
// sizes) holds only what cannot change: a sealed segment's directory,
// layout, metadata and lone series' pages and decoded samples
// (segseries.go), keyed by source, stream, seq,
// rows, receipt span and size
// (compaction reuses a seq for the merged segment). The catalog answers a
// question needs (sources, the stream's segments, its live span) are
// remembered per connection and snapshot version (archive.ReadTx.Version),
// so a repeated question on an archive that has not changed costs BEGIN,
// one PRAGMA, ROLLBACK and map lookups. The segment lists are also kept
// per segments epoch (archive.ReadTx.SegmentsEpoch, on a handle that
// follows the writer), which only seals, compactions and evictions move:
// under ingest, where every commit is a new version, a question lists no
// segments until one of those (catalog.go).
//
// Memory: a question (a PromQL query, a remote-read request) counts the
// samples it holds against Options.MaxSamples and, with Options.Memory,
// reserves their bytes from the process's budget as its answer grows (32
// B a float, 320 B a histogram, in 1 MiB steps), released when the
// question ends. A question that would hold more than MemoryPerQuery is
// refused at once (MemoryLimitError: 422, like Prometheus's too many
// samples); one that finds the budget taken by others waits for it, and
// gets 503 if its context ends first.
//
// Caveats:
//
//   - Samples with the same timestamp and different values are both kept
//     (the encoder keeps both; Prometheus's TSDB would have refused the
//     second).
//   - Stream pruning trusts the source's "stream_buckets" metadata: a
//     __name__ matcher reads only the stream StreamFor names under that
//     count. If a source's bucket count changed without that metadata
//     following, a metric's data sits in another stream and is not found.
//   - Slices handed out by a SeriesSet may be shared with the cache: they
//     are read-only.
package promread
