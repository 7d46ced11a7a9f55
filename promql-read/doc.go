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
// one answer, never for a querier's life. Inside it, per source: the
// __name__ matchers pick the streams (all series of one metric live in the
// stream promsample.StreamFor names), each stream's sealed segments are
// planned from the catalog alone (the segment index's sample-time span and
// metric names; a row's archive ts is receipt time and says nothing about
// sample time), the segments that may match are decoded (or taken from the
// cache), and the live tail above the sealed watermark is decoded and
// filtered. Series with equal label sets, from any segment, the tail or any
// source, are one series: their samples are merged in time order and exact
// duplicates (same timestamp, same value bits) dropped; a late sample
// (received after newer ones) lands in its place.
//
// The cache (Options.CacheBytes, an LRU bounded by the entries' real
// sizes) holds only what cannot change: a sealed segment's parsed index and
// its series per metric (keyed by source, stream, seq, rows, receipt span
// and size, because compaction reuses a seq for the merged segment), and a
// stream's live tail merged per metric (keyed by the live set's count and
// ts span, which changes whenever the set does; a tail that only grew is
// extended from the previous one, and replaces it). Series are held packed:
// floats as Gorilla XOR chunks of at most 120 samples with their time
// spans (bit-exact, a few bytes per sample), with label postings for
// equality matchers, so a range read decodes only the chunks it overlaps
// and a one-series question never walks a metric's other series. The
// catalog answers a question needs (sources, the stream's segments, its
// live span) are remembered per connection and snapshot version
// (archive.ReadTx.Version), so a repeated question on an archive that has
// not changed costs BEGIN, one PRAGMA, ROLLBACK and map lookups; after a
// commit, three more statements. A first read of a metric in a segment
// decodes all of that metric's series there. A Select takes cached
// series as references and decodes their chunks only when the answer is
// used (answer.go), a large answer on several goroutines.
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
