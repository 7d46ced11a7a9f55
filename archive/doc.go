// Package archive implements the dendro archive, format v4: one SQLite file
// (WAL mode) whose wal table is both the memtable and the write-ahead log,
// and whose sealed, immutable segments are opaque BLOBs made by a caller's
// SegmentEncoder. It knows SQLite and nothing of Prometheus, Parquet or
// HTTP: rows are opaque bytes keyed by (source, stream, ts), where ts is an
// int64 in the caller's unit (dendro-receiver uses Unix nanoseconds of
// receipt) over the whole signed range.
//
// The handles:
//
//   - Archive (Open) reads. It never writes, so it can be pointed at an
//     archive another process is writing, at a crashed one, or at one on
//     read-only media. Each question runs in one snapshot (View).
//   - Writer (CreateWriter, OpenWriter) is the one writer: a goroutine that
//     owns the only writing connection, fed by a channel of capacity one.
//     Readers in any process run beside it and never block it.
//   - WriteHandle (Create, OpenWrite) is the exclusive handle for recovery,
//     offline maintenance and tests; while it is open nothing else opens the
//     file.
//
// What a committed append means: Writer.AppendWait returns after the rows'
// transaction committed at synchronous=FULL. They are then on disk, they
// survive SIGKILL and power loss, and every reader that starts a snapshot
// afterwards sees them.
//
// What a failed write means: a transient failure (a full disk, EIO, a lock
// held elsewhere) never stops the writer. It retries on a backoff and,
// meanwhile, refuses writes at once with ErrCannotCommit (wrapping the
// SQLite error, so IsDiskFull tells a full disk); Writer.Health reports the
// outage until a commit succeeds again, which the writer notices by itself.
// Corruption (IsCorrupt) and other failures stop it for good
// (ErrWriterStopped). Errors are classified by SQLite result code, never by
// message text.
//
// Why one writer: SQLite has one write lock. A second writing connection
// waits on it for busy_timeout and then fails, which looks like a hang; and
// the writer caches each stream's next seq and sealed watermark, which a
// second writer would make wrong. So every mutation goes through the writer
// goroutine, the channel's single slot is the backpressure a slow disk
// exerts on callers, and that single slot also bounds what an unclean kill
// can lose to the message waiting in it and the one being committed.
//
// Why the seal seam needs no de-duplication: rows are append-only, and a
// stream reads as its segments in seq order followed by its live tail, the
// wal rows above the stream's own sealed watermark (MAX(last_ts) of its
// segments; every row when it has none). A row a segment holds is at or
// below that watermark, so it is never live; the prune that deletes such
// rows therefore runs after, and outside, the seal's transaction, as a
// background optimization with no correctness role. The one requirement is
// that a reader asks both questions, "which segments" and "which live rows",
// in one snapshot: two snapshots around a seal would see neither the new
// segment nor the rows it hides. View provides that snapshot.
//
// A seal may take only a stream's oldest live rows (WriterOptions
// MaxSealRows, MaxSealBytes): the watermark then stops at the last row it
// took, and the rows above stay live for the next seal, so bounded seals
// keep the same seam. They keep what a seal holds in memory fixed when the
// encoding falls behind the appends, which WriterOptions.EncodeOn lets a
// caller allow: the encoding is the writer's one long computation, and a
// caller may run it at a lower CPU priority than the commits.
//
// Reading a segment in place: ReadTx.OpenSegment gives a SegmentBlob, an
// io.ReaderAt over the BLOB through SQLite's incremental BLOB I/O, valid
// for the snapshot, so a reader of a few series fetches only their pages,
// not the segment. The catalog's caller_index (SegmentIndex) lets it plan
// without touching the BLOB at all. A read at offset X walks the BLOB's
// page chain up to X, cheaply where the pages are consecutive (the
// pointer map confirms the next one) and ~20x slower where they are not,
// so InsertSegment places a large segment in one run of pages at the end
// of the file rather than in the scattered free list (write.go, "Where a
// segment's pages go"). A reclaim (incremental_vacuum) moves the file's
// last pages into free ones and scatters them again; the clean stop's
// reclaim does, so the segments written last before a restart read
// slower than those written after it. Placement also gives way when the
// free list is long (a 1 M-series memtable's pruned rows), so readers see
// the file through a memory map (ReadOptions.MapBytes): a scattered link
// then costs a pointer, not a read call and a page copy. SQLite drops a
// connection's map whenever its next snapshot finds new commits, so while
// the writer commits, a connection reads through its page cache instead
// (readmap.go). A read handle skips the walk altogether where it can
// (blobpages.go): it reads the segment's pages itself (sqlite_dbpage),
// finding each next page as the following one or in a map of the
// archive's scattered links, and checks every link it uses against the
// snapshot's auto-vacuum pointer map, so a stale map costs a walk through
// SQLite, never a wrong byte. A handle that follows the writer keeps the
// chains its snapshots walked, and a later snapshot takes them unchecked
// where no reclaim (counted by the writer, as its segments changes are)
// and no schema change came between (blobchains.go).
//
// Knowing the segments have not changed: SQLite tells a reader that
// something was committed, not what, and under ingest every commit is wal
// rows. A read handle opened with its process's writer
// (ReadOptions.Writer) gives each snapshot a segments epoch
// (ReadTx.SegmentsEpoch) that moves only with commits that insert or
// delete segments, so a reader keeps what it listed of them across
// commits of rows (segments_epoch.go says why the epoch is exact).
//
// Ordering with the writer: AppendQueued returns once the writer's channel
// took a tick, before its commit, so a caller can order its own next
// message after it (the receiver closes an epoch this way without holding
// a lock across an fsync) and wait for the commit separately.
//
// Retention per stream: EvictStreamsBefore evicts the streams a predicate
// selects; with ReadTx.LiveSpans and LiveRowsBefore a caller evicts each
// stream only below its oldest live row, which is how the receiver keeps
// an eviction from cutting what a later live row still refers to.
//
// Caveat: a snapshot pins the sidecar frames it can see, so no checkpoint
// moves them while it is held and the -wal grows. Hold a snapshot for one
// answer, never for a reader's life (SegmentBytesAt reopens per fetch).
//
// Files: one at rest; the archive plus -wal and -shm while anyone has it
// open. A clean Writer.Close with no reader open leaves one file. After an
// unclean kill the sidecars hold every commit since the last checkpoint;
// any open reads them and OpenWrite folds them back in on close. A copy of
// the main file alone is stale by at most CheckpointInterval (plus the 4 MiB
// autocheckpoint); VacuumInto makes an exact copy while the writer runs.
//
// Out of order: a row at or below its stream's sealed watermark is dropped
// and counted (AppendResult, DroppedOutOfOrder). Unsealed rows may arrive in
// any order. AppendWait with stamp takes ts from the writer itself, so a
// caller that wants every row kept cannot lose one this way.
package archive
