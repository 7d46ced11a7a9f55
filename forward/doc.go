// Package forward sends what a dendro archive holds to remote-write
// upstreams: store and forward. The archive is the buffer: every sample
// the receiver acknowledged is already on disk, so the forwarder keeps no
// queue of its own on disk, only a cursor per upstream, and reads what to
// send from the archive (its sealed segments and its live tail) through
// short snapshots, like any other reader.
//
// Types: Forwarder (New, Start, Close, Stats, and the floor methods the
// archive's writer and the ingester consult), Options and Upstream (one
// destination: URL, protocol, headers, auth and TLS as Prometheus's
// remote_write has them, queue sizes, rate and age limits), UpstreamStats.
// LoadFile and ParseConfig read the YAML file form of the upstreams.
//
// # The cursor
//
// An upstream's progress is a position per (source, stream), kept in the
// source's metadata (see cursor.go for why there and not in caller_rows,
// and for the format). It has two halves. p, the acknowledged position,
// moves only when the upstream answered 2xx for everything before it (a
// low-water mark over the shards: what one shard had acknowledged after
// another's unfinished batch is behind it). h, the written-ahead
// position, is committed before anything past it is dispatched. After a
// kill -9 the forwarder resumes at p; what lies between p and h is what
// may have been sent already: it is sent again and counted as resent.
// Each stream's h runs about a window and a half (Shards x Capacity items
// a window) ahead of that stream's dispatch: the next window is staged
// once half the last is sent, so that its commit overlaps the sending
// (over rows read ahead, their items are estimated by the upstream's
// average row, so a stream of larger rows runs further).
// At most a window is in flight, so a kill -9 makes an upstream receive
// again what was in flight, what one shard had acknowledged past another's
// unfinished batch (p is their low-water mark), and what was acknowledged
// since the cursor's last commit; the forwarder counts that and what each
// stream's h ran ahead as resent: with a backlog of many streams
// dispatched in turn, about a window and a half for each.
//
// The count covers every duplicate only if a restart finds the units the
// cursor names as the previous process read them. So the floors the
// forwarder publishes (below) never rise above what the cursor last
// staged needs, and a restart reads a segment that now holds rows it may
// have sent as rows (sealed since) as those rows, which the floors held
// from the prune. Only where they were let go of all the same
// (MaxHeldRows) is such a segment read whole, and all of it counts as
// resent.
//
// Every cursor write is a writer transaction; so they are staged
// (archive.Writer.StageMetadata) and ride on the writer's next commit of
// any kind, and the forwarder asks for a commit of its own (FlushStaged)
// only when it waits for one (h), or half a window has been acknowledged
// since the last stage, and the archive is quiet for 2 ms. While ingest
// runs, cursors cost no fsync of their own; a drain costs one per half
// window.
//
// # Reading order
//
// Each stream is read as its units in receipt order: a sealed segment
// (its rows' samples, series by series), or a wal row (one request's
// share of the stream). Streams go forward together: the next unit is the
// one, over every stream, received first. Rows are committed in ts order
// per stream (the writer stamps and commits them in one order), so a
// reader that has read up to ts never later finds a row below it.
//
// Backlog first, not fresh first: after an outage the oldest data goes
// out first, and fresh data waits behind it. Each series then reaches
// the upstream in timestamp order, which every remote-write receiver
// requires without an out-of-order window (Prometheus refuses a sample
// older than the series' newest and rolls back the whole request), and
// all streams move together, so an upstream's "newest" (Prometheus's
// head, Mimir's tenant maximum) tracks the data being sent rather than
// jumping to the present. The cost is freshness during catch-up: an
// upstream that also gets fresh data from elsewhere, or that refuses
// samples older than a window (Mimir: 1 h behind the tenant's newest,
// Prometheus: older than its head), should get MaxAge just inside that
// window, so what it would refuse is dropped and counted ("too_old")
// rather than answered with 400s; with an out-of-order window (Mimir's
// out_of_order_time_window, Prometheus's tsdb.out_of_order_time_window)
// larger than the outage, nothing needs dropping. MaxSamplesPerSecond
// keeps a draining backlog from flooding the upstream.
//
// A row of format 2 names its series by ids its epoch's first rows anchor
// (promsample/rowv2.go). The live tail above a stream's watermark always
// starts an epoch, so reading it from its first row resolves every id.
// The forwarder keeps the open epoch's series in memory; a restart inside
// an epoch reads the epoch again from its first row (the cursor's e). A
// seal may take an epoch the forwarder is still sending row by row,
// together with rows it has not read: the segment then straddles its
// place. A segment is sorted by series, so which of its samples were
// sent cannot be told from it; the forwarder reads the straddled rows as
// rows instead, and the writer's prune keeps them for it
// (archive.WriterOptions.KeepWAL: the rows from the epoch's first row
// on). A forwarder that falls further behind than MaxHeldRows lets go of
// them and reads the straddling segment; its per-series dispatch filter
// (below) holds back what it already sent. Only a kill -9 while it is
// that far behind loses the exact place: the segment then goes again
// whole (counted as resent).
//
// Per series, samples go out in timestamp order: the dispatch filter
// sends a sample only if it is after the series' last one sent (counting
// what it holds back: "duplicate" for a sender's retry the archive holds
// twice, "out_of_order" otherwise).
//
// # Sharding and batching
//
// A series always goes to the same shard (hash of its labels modulo
// Shards); a shard batches up to MaxSamplesPerSend and sends one request
// at a time, so a series' samples reach the upstream in order while the
// shards send in parallel. A shard sends a partial batch when the reader
// has read everything there is (a caught-up upstream is not made to wait
// for a full batch) or after BatchSendDeadline. The reader dispatches at
// most one window ahead of the acknowledgments: memory is bounded, and
// so is what a kill -9 sends again.
//
// # Failures
//
// 5xx, 429 and transport errors are retried, forever, after Retry-After
// or an exponential backoff (MinBackoff doubling to MaxBackoff); an
// upstream that is down costs its own shards' sleep and nothing else:
// each upstream has its own loop, shards and snapshots, and a snapshot is
// never held across a send. Other 4xx are never retried as they are: the
// shard halves the request down to the series refused, drops and counts
// those samples ("http_<status>", one log line at most every 10 s) and
// sends the rest (see shard.go). A 2.0 upstream that answers 415, or 2xx
// without the *-Written headers, is sent 1.0 from then on.
//
// # Retention
//
// Time retention never deletes what an upstream has not had
// acknowledged: RetentionFloor is the least receipt ts a source's
// streams still need (raised by MaxAge: what is too old to be sent is not
// needed), and the ingester evicts below min(cutoff, floor). Size
// retention (--retention.size) must keep the archive within its bound and
// goes below the floor; ForcedEviction, called first, counts per upstream
// the samples it takes that were not sent ("retention") and logs them.
// Compaction does not merge a stream's segments while an upstream's place
// is in them (CompactFloor): the cursor names a segment by its span, and
// a merged one has another.
//
// Caveats: a series' dispatch filter is kept per upstream in memory (about
// 100 bytes a series), and forgotten after two hours without a sample.
// Series are identified by a 64-bit hash of their labels, checked against
// the labels themselves. Lag is measured by receipt time.
package forward
