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
// Cost per series (BenchmarkMemory: ~102 bytes at a million rwload-shaped
// series, from 189 when entries held pointers): the live heap is what
// sizes the receiver, and the index is most of it, so every part is
// pointer-free where it can be (the garbage collector neither scans nor
// keeps alive what the index holds) and grows without copying itself.
//
//   - A 64-byte entry, in chunks of 4,096 that never move.
//   - The label set as symbol ids (strings are interned once), encoded as
//     uvarints after a count of labels, in an arena of 64 KiB chunks at
//     64-bit offsets: names and the commonest values are interned first
//     and take a byte, so rwload's six labels take 14 bytes. The space of
//     a removed series is kept with its Ref (readers may hold that for
//     ReuseAfter) and goes back when the Ref is reused, for the next
//     series of the same encoded length.
//   - An 8-byte hash-table slot (a 32-bit tag of the hash and the Ref; the
//     entry holds the full hash) at 35-70% load: ~16 bytes.
//   - Its Ref in the posting list of each label: 4 bytes in a short list;
//     a long list keeps its Refs in containers of 65,536, a bitmap for a
//     value most series have (a bit or two a series) and an array of
//     uint16 for a rarer one (2 bytes).
//
// An Index is safe for concurrent use: lookups take a shard's read lock,
// additions a shard's and the postings' write locks, and the per-series
// fields the ingester and readers update are atomics.
package seriesindex
