// Package promsample is the bridge between Prometheus data and the dendro
// archive: the row codec the receiver appends with, the SegmentEncoder that
// turns a stream's rows into a Parquet segment any Parquet reader can
// query, and the reader the read path answers queries with.
//
// # Streams
//
// A source's series are spread over DefaultStreamBuckets streams by a hash
// of the metric name: StreamFor(name, buckets) = "samples/%02x". All series
// of one metric, and that metric's metadata, live in one stream, so a query
// with a __name__ matcher reads one stream. SplitBatch cuts one request
// into its per-stream Batches; each becomes one wal row. The bucket count
// trades write cost (rows touched per commit) against read cost (bytes of a
// stream per one-series query); see DefaultStreamBuckets for the figures.
//
// # Rows
//
// One wal row = one remote-write request's data for one (source, stream) =
// one Batch, written by EncodeBatch (or BatchEncoder.Append, which reuses
// buffers) and read by DecodeBatch (or BatchDecoder). A row's archive ts is
// the receipt time in Unix ns; the samples keep their own timestamps (Unix
// ms) inside the row, so lateness never drops a sample. A row is a version
// byte and an S2 block holding a string table (each label name and value
// once), then per series the label references, samples (timestamp deltas,
// integers as zigzag varints, other values as raw IEEE bits), native
// histograms, exemplars, and the batch's metadata. Every float keeps its
// bits (stale markers, NaN payloads, -0, subnormals); timestamps cover the
// int64 range. Every count read is bounded by the bytes left and a row by
// MaxBatchBytes, so corrupt input gives an error, never a panic or an
// unbounded allocation.
//
// That is row format 1, which carries every series' label set in every
// row. The receiver writes format 2 (rowv2.go: AnchoredRow, RowEncoder,
// RowDecoder, AppendEpochClose): a row belongs to an epoch of its stream
// and names a series by a local id; the first row of the epoch that holds
// a series carries its labels (the anchor), later rows only the id. An
// epoch never straddles a segment (the Encoder seals closed epochs only,
// and the writer starts a new one at every seal), so the live tail above a
// watermark starts at an epoch's first row and decodes from the rows
// alone, in any process. The leading version byte tells the formats apart;
// both decode, and one segment may be sealed from rows of both.
//
// # Segments
//
// Encoder.Encode decodes a stream's rows and writes ONE Parquet file
// (arrow-go's low-level parquet/file writer; LZ4_RAW; no dictionaries).
// Segment.Rows/FirstTS/LastTS count and span the wal rows (receipt ts); the
// sample-time span is in the Index (Segment.Index, the catalog's
// caller_index; also in the footer). Rows are sorted by metric name, then
// label set, then sample timestamp, then value bits; exact duplicates (same
// series, timestamp and value bits: a sender's retry) are dropped, so two
// samples with one timestamp and different values both survive.
//
// Columns (label columns are named after their label; a label whose name
// starts with "__" is stored as "__label__"+name):
//
//	__name__     STRING, required, DELTA_BYTE_ARRAY
//	<label>...   STRING, optional (null = label absent), DELTA_BYTE_ARRAY
//	__ts__       INT64 TIMESTAMP(MILLIS, UTC), DELTA_BINARY_PACKED
//	__value__    DOUBLE, BYTE_STREAM_SPLIT: a float sample not on the integer path
//	__int__      INT64, DELTA_BINARY_PACKED: k, the value is k / coalesce(__div__, 1)
//	__div__      DOUBLE: the divisor, 10^p or 2^-e; null means 1
//	__hist__     BYTE_ARRAY: one native histogram, in the row codec's histogram encoding
//	__h_count__  DOUBLE: that histogram's count, for SQL
//	__h_sum__    DOUBLE: that histogram's sum, for SQL
//
// Each row is a float sample (exactly one of __value__ and __int__ set) or
// a histogram (__hist__ set). The integer path: a series' divisor is the
// one that puts most of its samples on exact integers (1 for counters;
// 100 for 2-decimal gauges such as node_cpu_seconds_total; 2^-12 for byte
// counts in 4 KiB pages); a value goes on it when k = v*div is an integer
// within ±2^53 and k/div reproduces v's exact bits (IEEE division is
// correctly rounded, and so is DuckDB's). Delta-encoded integers are what
// makes counters cheap: DELTA_BINARY_PACKED stores a counter's increments
// in a few bits, where an IEEE double costs ~6 bytes even byte-split. A
// DuckDB user writes:
//
//	SELECT __name__, instance, __ts__,
//	       coalesce(__value__, __int__ / coalesce(__div__, 1)) AS value
//	FROM 'segment.parquet'
//	WHERE __name__ = 'http_requests_total' AND __hist__ IS NULL;
//
// The delta-encoded columns start a new page at a series boundary when the
// jump between two series would widen a whole DELTA block by more than a
// page costs (see pageCostBytes); statistics are kept only for the string
// columns. Row groups hold about DefaultRowGroupRows rows, cut at series
// (or metric) boundaries; a series longer than 4x that is cut into pieces
// the reader joins.
//
// Offset indexes and page index: the value columns (PagedColumns) start a
// page at every series boundary and the file carries their column and
// offset indexes, so a reader of a few series seeks to their pages.
//
// The Index (index.go) comes in two formats. Format 1, in every footer,
// is the summary: sample-time span, counts, metric names, row groups.
// Format 2, the catalog's caller_index, adds the series table
// (seriestable.go: each series' labels, Parquet row count and SeriesHash,
// in row order, ~10 bytes a series) and the xxhash64 of the page index and
// of every page of the paged columns. An archive's series index is rebuilt
// at open from the series tables alone, no sample read; a one-series read
// finds its rows from the table and decodes only its pages, each checked
// against its sum first.
//
// Footer key-value metadata: KeyEncoder (EncoderVersion), KeyMinTime and
// KeyMaxTime (sample-time span, decimal ms), KeySegmentIndex (the Index,
// base64), KeyExtras (exemplars and metadata as a base64 row-codec Batch:
// they are few, and keeping them out of the row stream keeps every data
// row a sample), and KeyDataChecksum (xxhash64 of the bytes before the
// footer, verified before any page is decoded: arrow-go's decoder can loop
// forever on some corrupt pages).
//
// # Sealing
//
// A seal holds a whole segment's series at once, and at high cardinality
// (a seal of a few hundred thousand series of a few samples each) what
// it holds per series, not per sample, is the seal's memory: the receiver
// runs it beside everything else it holds live. So a series is kept as
// ids, not strings: the rows' strings are interned once in a table the
// row decoder and the collector share (collect.go), and a series is its
// label ids, its name's id and its samples packed into a shared arena
// (packed.go) by 4-byte addresses. Sorting, the label columns and the
// series table work from the ids' ranks; a labels.Labels is built only
// where one is handed out (readers, exemplar extras). The series table is
// built before the row groups and takes the series' ids, so the seal never
// holds two copies of them; every buffer whose size is known is sized
// once. BenchmarkSealMemory measures the live bytes per series at the
// fullest points.
//
// # Reading
//
// ReadSegment(bytes, Query) returns the matching series (labels sorted,
// series in (metric, labels) order) with samples, histograms and exemplars
// in [MinT, MaxT] (Unix ms, inclusive). It decodes only the row groups
// whose metric names and time span (from the footer's Index) can match,
// the label columns of those, and the value columns only when a series
// there matched. SegmentReader (segread.go) reads chosen series through an
// io.ReaderAt (an archive BLOB, read in place) with a format-2 index and
// the segment's SegmentLayout (seglayout.go: footer, page index and row
// starts, read once and shareable, so a caller that keeps it reads only
// those series' pages, and of the value columns only the ones their rows
// use). ReadRows gives
// the same answer as ReadSegment from live wal rows without building
// Parquet (the live tail), through the same canonicalization.
// ReadSegmentMetadata / ReadRowsMetadata return metadata; ParseIndex and
// ReadSegmentIndex the Index. Encoder.Merge (archive.SegmentMerger)
// re-canonicalizes consecutive segments into one: Rows = their sum,
// FirstTS of the first, LastTS of the last. Segments whose indexes carry
// series tables are merged as a stream (mergestream.go): each table lists
// its segment's series in row order with their row counts, so a merge
// walks the inputs' tables and rows side by side and writes the least
// series of them at each step, holding a row group of each input rather
// than every series of them all; a merge's memory is then its output's
// bytes, and compaction can make a stream's hour one or a few segments at
// a million series (archive.MergeBudget), where decoding its inputs whole
// it merged pairs.
//
// Caveats: a label with an empty value is absent (Prometheus semantics); a
// series without __name__ is stored with an empty __name__. Decoded Batches
// and Series own their memory: nothing the decoder keeps refers to it, and
// an append to one series' samples never writes into another's (the
// series ReadSegment decodes from one row group share one sample array,
// each cut to its own part with its capacity). Encoder keeps only spare
// buffers between calls and is safe for concurrent use (use it by
// pointer); BatchEncoder and BatchDecoder are not.
package promsample
