// Package receiver is dendro's remote-write front door: it takes
// Prometheus Remote-Write 1.0 and 2.0 requests over HTTP, checks and
// decodes them into the promsample data model, hands them to a Sink, and
// answers with the status the sender's retry logic expects.
//
// Types:
//
//   - Handler, an http.Handler for POST /api/v1/write (mount it at any
//     path). It answers 204 only after Sink.Write returned nil, that is only
//     once the Sink reports the request durable.
//   - Sink, the one method the Handler needs from the archive side.
//   - Decoder, body (snappy block) -> validated Request; the Handler uses
//     one, tests, fuzzers and benchmarks use it directly.
//   - Options: one struct, zero value = defaults, validated once by
//     NewHandler or NewDecoder.
//   - Pending, optional: counts the requests between "body read" and "rows
//     queued for the archive writer", which the writer's group commit
//     waits for (archive.WriterOptions.Coming), so that requests sent
//     together share one commit and one fsync.
//   - Errors in errors.go; Status is the one error -> HTTP status mapping.
//
// # Protocol negotiation
//
// Content-Type picks the message, as the 2.0 spec says the receiver MUST:
// "application/x-protobuf" or ...;proto=prometheus.WriteRequest is 1.0,
// ...;proto=io.prometheus.write.v2.Request is 2.0, anything else
// (including no Content-Type) is 415. It is parsed with mime.ParseMediaType
// so optional whitespace and quoting are accepted; client_golang's
// ParseProtoMsg would read "; proto=..." (with a space) as 1.0 and lose the
// data. Content-Encoding must be snappy (case-insensitive); when it is
// absent the body is still decoded as a snappy block, as Prometheus's own
// receiver does: a body that is not snappy then fails with 400. Any other
// encoding is 415. The snappy block format is used, never the framed one.
//
// The two messages are told apart by content type only, but a body of the
// other kind is caught: a 1.0 request carrying the 2.0 fields 4/5
// (symbols, timeseries), or a 2.0 request carrying the 1.0 fields 1..3, is
// refused with 400 instead of decoding as an empty request and being
// acknowledged (the silent loss measured against Prometheus 2.42).
//
// # Limits and the snappy bomb
//
// The body is read through a LimitReader of MaxCompressedBytes+1 (32 MiB
// default), and refused with 413 without reading when Content-Length
// already says too much. The decoded length snappy declares in its header
// is checked against MaxDecodedBytes (256 MiB default, 413) and against what
// the compressed size can possibly expand to (21.3x at most: a 3-byte copy
// element yields 64 bytes; more is corrupt, 400) before the decode buffer is
// allocated, so a few bytes declaring gigabytes cost nothing. An empty body
// is 400; a snappy block of an empty message is a valid empty request,
// answered 204 without calling the Sink.
//
// # Validation (400, one-line reason, nothing written)
//
// A request is all or nothing: the first invalid element refuses the whole
// request with 400 and the Sink is not called (the spec allows ingesting
// the valid part; not doing so keeps a request one transaction, and the
// sender drops the batch either way).
//
//   - Labels of a series: at least one; names strictly increasing by
//     bytes (equal: duplicate, smaller: unsorted; both specs say MUST);
//     names non-empty and valid; values valid UTF-8; a non-empty __name__
//     that is a valid metric name. The 1.0 spec only says SHOULD for
//     __name__, but promsample.Series requires it and Prometheus refuses
//     such series too.
//   - Name syntax: 1.0 names must match the 1.0 spec's expressions
//     ([a-zA-Z_:][a-zA-Z0-9_:]* for metric names, [a-zA-Z_][a-zA-Z0-9_]* for
//     label names); Options.AllowUTF8NamesV1 relaxes that to any UTF-8, as
//     Prometheus 3 does. 2.0 allows any non-empty valid UTF-8 name.
//   - A label with an empty value is dropped, not refused: in Prometheus's
//     data model an empty value means no label (senders MUST NOT send one;
//     Prometheus never does).
//   - Native histograms (integer, float, custom buckets schema -53) go
//     through Validate; a reserved exponential schema 9..52 is first reduced
//     to 8, as Prometheus does. Exemplar labels are checked like series
//     labels but sorted rather than required sorted; no __name__.
//   - 2.0: symbols[0] must be ""; every ref must index the symbol table;
//     labels_refs must have even length; a series must not have both samples
//     and histograms, and must have at least one sample, histogram or
//     exemplar (proto comments of 2.0-rc.5 allow exemplar-only series).
//     Metadata help/unit refs are range-checked.
//   - 1.0: a TimeSeries with labels but nothing else is validated and then
//     dropped (nothing to store). Metadata entries need a valid metric
//     family name.
//
// Not checked here: timestamps (how old or how far in the future; the
// archive's business), label count and length limits, sample order.
//
// # Output
//
// Request.Series are in wire order and may repeat a label set (Prometheus
// sends a series' exemplars in their own entries). Float values keep their
// bits (stale markers, NaN payloads). 2.0 start timestamps are dropped
// (promsample has no field for them yet). 2.0 per-series metadata becomes
// promsample.Metadata named by the series' __name__ (2.0 has no family
// name), deduplicated per request, first wins; 1.0 WriteRequest.metadata
// entries are converted as they come. Nothing in a Request aliases the
// body. Its Series slice and float samples are pooled: the Handler hands
// them back (Decoder.Recycle) once the Sink's Write returns, so a Sink must
// not keep them; labels, histograms, exemplars and metadata it may keep.
//
// # Sources
//
// A source is the sender. Its name comes from the X-Scope-OrgID header
// (Options.SourceHeader), the tenant header of Cortex, Mimir, Thanos and
// Loki, set in Prometheus with remote_write.headers; without the header the
// source is "default". A header, not a path parameter: one URL serves every
// sender, the Handler needs no router, and the value is validated in one
// place (one value, 1..128 bytes of printable ASCII without space, else
// 400).
//
// # Status codes
//
// classify in errors.go is the only mapping: 204 on success; 400 for
// malformed and invalid requests, a bad source header and ErrRejected
// from the Sink; 405 (with Allow: POST) for other methods; 413 too large;
// 415 unsupported type or encoding; 503 (ErrUnavailable, a deadline, a
// cancelled context) and 507 (ErrDiskFull) with Retry-After; 500 without
// Retry-After for anything unknown, and for a Sink that returns nil having
// written less than the request held (2.0 forbids a 2xx on a partial
// write). Prometheus retries every 5xx forever and drops on 4xx, so only
// what a retry can never fix is 4xx.
//
// 2.0 answers carry X-Prometheus-Remote-Write-{Samples,Histograms,
// Exemplars}-Written on every answer after negotiation succeeded, errors
// included (the spec makes them mandatory then; 0 when nothing was written,
// else what the Sink reported). 1.0 answers carry none. No
// X-Prometheus-Remote-Write-Version is sent back.
//
// # Observability
//
// Metrics (registered on Options.Registerer, no globals):
// dendro_receiver_requests_total{protocol,code},
// dendro_receiver_requests_refused_total{reason},
// dendro_receiver_{received,written}_total{kind} and
// dendro_receiver_rejected_total{kind,reason} for samples, histograms and
// exemplars (received = valid requests handed to the Sink; a request
// refused before it validated has no element count and shows in
// requests_refused_total only), dendro_receiver_request_duration_seconds
// {protocol} and dendro_receiver_request_size_bytes{stage=compressed|
// decoded}. Every refusal is logged at debug level with its reason, source
// and peer; at most one per 10 s is repeated at warn (4xx) or error (5xx).
//
// # Memory
//
// The hot path is 1.0. Its labels and samples are read by a small
// hand-written protobuf reader (wire.go) straight into the result: label
// strings alias the decode buffer only until the labels.ScratchBuilder
// (in unsafe-add mode) copies them, samples land in one slab per request
// sized by a skip-only counting pass. A series' labels are looked up in
// the process's one series index (package seriesindex, shared with the
// Ingester and the read path; series.go): the series predicted to follow
// the previous one, else by a hash of the wire bytes, compared with the
// wire without building labels. A sender repeats the same series every
// scrape, so in the steady state a known series costs a probe and a
// comparison, and the index grows with the active series, not up to a
// fixed bound; only a new series is decoded, validated and added.
// Histograms, exemplar payloads and metadata use the gogo decoders of
// their sub-messages. FuzzDecodeV1 checks the reader against gogo's
// decoder bit for bit. The compressed body and
// the snappy output buffers are pooled (sync.Pool, up to 8 MiB each), as
// are the per-decoder scratch builders; the slices handed to the Sink are
// never reused. 2.0 uses the gogo decoder (its strings are copies) over a
// pooled writev2.Request.
//
// # The Ingester
//
// Ingester is the Sink over an archive.Writer. It routes each series to
// its source's stream (promsample.StreamFor), writes each stream's share
// of a request as one anchored row (row format 2: epochs.go says how a
// series' labels travel once per seal period and stream, and the three
// rules that keep the live tail decodable from the rows alone), and
// returns only once the writer reports the rows committed. Per series it
// keeps, in the series index, the stamp of the row that anchored it and
// when it was last written; a series idle for IngestOptions.IdleTimeout
// drops that state (as Prometheus's head drops idle series), and its next
// sample anchors it again.
//
// Run does the background work: seals by policy (seal.go; a seal closes
// the epochs of the streams it seals first), time and size retention and
// compaction (retention.go), and the disk reserve on a goroutine of its
// own, with a ballast file that a full disk releases so that seals and
// evictions can still commit (ballast.go). Retention never evicts a live
// row: it seals the streams whose live rows reach past the cutoff first,
// and where that seal cannot commit, each such stream is evicted only
// below its oldest live row, so no epoch is cut.
package receiver
