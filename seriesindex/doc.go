// Package seriesindex is dendro-receiver's one series index: every series
// the process knows, each label set held once under a stable Ref, with the
// postings that answer label matchers.
//
// One Index per archive serves both directions:
//
//   - Ingest. The remote-write decoder finds a request's series by hash
//     (Find, with SeriesHash over the wire's labels, or Next, the series
//     that followed the previous one last time) and compares labels
//     without building them; a series already known costs a probe and a
//     comparison. The ingester keeps, per series, the stamp of the epoch
//     row that anchored it (Anchor, SetAnchor: see promsample's rowv2.go)
//     and when it was last written (Touch), so that series idle for longer
//     than a configured time drop their ingest state (Idle).
//   - Reads. Postings (label name -> value -> sorted Refs) answer every
//     matcher type on every label, __name__ included (Select, LabelNames,
//     LabelValues); each series records where its data lives (its Loc:
//     source and stream) and the sample-time span of that data (Observe),
//     so a question touches only the streams, and the segments, that can
//     hold it.
//
// The index is derived state, never the only copy of anything. It is
// rebuilt at open from what the archive holds (each segment's catalog index
// carries its series table, so an open reads indexes, not samples, plus
// the live tail's anchors) and kept current as the archive changes: rows
// appended and decoded, seals, compaction (the same series move between
// segments), and retention (Remove for series whose data is gone). A series
// that ingest created and whose rows have not been read back has no span
// (Span's ok is false) and is invisible to reads: they only see data the
// archive committed.
//
// Cost per series (measured in BenchmarkMemory): the label set as symbol
// pairs (4 bytes a name or value; strings are interned once), a 72-byte
// entry, a hash-table slot, and 4 bytes per label in the postings.
//
// An Index is safe for concurrent use: lookups take a shard's read lock,
// additions a shard's and the postings' write locks, and the per-series
// fields the ingester and readers update are atomics.
package seriesindex
