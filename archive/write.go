package archive

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
)

// WriteTx is one write transaction. It is valid only inside the function
// given to Update (or the writer's own transactions) and must not be used
// from other goroutines. It embeds the snapshot reads, which see the
// transaction's own writes.
type WriteTx struct {
	ReadTx
	insertWAL *sql.Stmt // optional prepared statement (the writer's hot path)
	// segsChanged: a statement inserted or deleted segments rows
	// (changeSegments), so the commit moves the writer's epoch.
	segsChanged bool
}

// update runs fn in one IMMEDIATE transaction on conn: committed when fn
// returns nil, rolled back otherwise (and when the commit itself fails).
// segs, when not nil, is the writer's segments epoch, which a commit that
// changes segments moves before and after its COMMIT (segments_epoch.go).
func update(ctx context.Context, conn *sql.Conn, insertWAL *sql.Stmt, segs *segmentsEpoch, fn func(*WriteTx) error) (err error) {
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return sqlErr("begin", err)
	}
	defer func() {
		if err != nil {
			conn.ExecContext(context.Background(), "ROLLBACK")
		}
	}()
	tx := &WriteTx{ReadTx: ReadTx{ctx: ctx, q: conn}, insertWAL: insertWAL}
	if err := fn(tx); err != nil {
		return err
	}
	if segs != nil && tx.segsChanged {
		// Odd from here until COMMIT has returned: a reader whose snapshot
		// starts meanwhile may or may not see this commit, and must not
		// claim an epoch.
		segs.begin()
		defer segs.end()
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return sqlErr("commit", err)
	}
	return nil
}

// Update runs fn in one transaction on the write handle.
func (h *WriteHandle) Update(ctx context.Context, fn func(*WriteTx) error) error {
	return update(ctx, h.conn, nil, nil, fn)
}

func (tx *WriteTx) exec(what, query string, args ...any) (int64, error) {
	res, err := tx.q.ExecContext(tx.ctx, query, args...)
	if err != nil {
		return 0, sqlErr(what, err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// MintUUID returns a random (version 4) UUID from SQLite's randomblob, so
// no other random source is needed.
func (tx *ReadTx) MintUUID() (string, error) {
	var b []byte
	if err := tx.q.QueryRowContext(tx.ctx, "SELECT randomblob(16)").Scan(&b); err != nil {
		return "", sqlErr("mint uuid", err)
	}
	if len(b) != 16 {
		return "", fmt.Errorf("archive: randomblob(16) returned %d bytes", len(b))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32], nil
}

func jsonObject(m map[string]string) (string, error) {
	if m == nil {
		m = map[string]string{}
	}
	b, err := json.Marshal(m)
	return string(b), err
}

// InsertSource adds a source and returns its id and uuid. An empty uuid
// mints a fresh one.
func (tx *WriteTx) InsertSource(spec SourceSpec, uuid string) (SourceID, string, error) {
	if uuid == "" {
		var err error
		if uuid, err = tx.MintUUID(); err != nil {
			return 0, "", err
		}
	}
	labels, err := jsonObject(spec.Labels)
	if err != nil {
		return 0, "", fmt.Errorf("archive: source labels: %w", err)
	}
	meta, err := jsonObject(spec.Metadata)
	if err != nil {
		return 0, "", fmt.Errorf("archive: source metadata: %w", err)
	}
	res, err := tx.q.ExecContext(tx.ctx, `INSERT INTO sources (labels, metadata, complete, clock_anchor_wall_ns, uuid)
		VALUES (?1, ?2, 0, ?3, ?4)`, labels, meta, spec.ClockAnchorWallNS, uuid)
	if err != nil {
		return 0, "", sqlErr("insert source", err)
	}
	id, err := res.LastInsertId()
	return SourceID(id), uuid, err
}

// InsertSegment records a segment at seq, its BLOB in one run of pages
// (placeContiguously).
func (tx *WriteTx) InsertSegment(source SourceID, stream string, seq int64, seg *Segment) error {
	placed, err := tx.placeContiguously(source, stream, len(seg.Bytes))
	if err != nil {
		return err
	}
	if _, err := tx.changeSegments("insert segment", `INSERT INTO segments (source_id, stream, seq, rows, first_ts, last_ts, bytes, caller_index)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)`, source, stream, seq, seg.Rows, seg.FirstTS, seg.LastTS, nonNilBytes(seg.Bytes), seg.Index); err != nil {
		return err
	}
	if placed {
		_, err = tx.changeSegments("insert segment: free the placeholder", `DELETE FROM segments WHERE source_id = ?1 AND stream = ?2 AND seq = ?3`,
			source, stream, placeholderSeq)
	}
	return err
}

// Where a segment's pages go.
//
// A BLOB larger than a page is a chain of overflow pages, and a read at
// offset X of it (SegmentBlob) follows the chain from its start: for each
// page, SQLite guesses that the next one is the page after it and checks
// the guess in the auto-vacuum pointer map (~0.15 µs a page, measured on
// an archive of 1 M series), and only when the guess is wrong reads the
// page itself to learn where the chain goes (~3 µs a page: a pread and a
// page-cache slot). So a segment whose pages are consecutive reads ~20x
// faster than one whose pages are scattered.
//
// SQLite takes a new page from the free list when there is one (the page
// nearest the previous, among the most recently freed) and from the end of
// the file otherwise. The free list is mostly the pages of pruned wal rows,
// a few pages each, interleaved with other streams' rows still live: a
// segment written into them came out with 27% of its links broken
// (measured with dbstat on a 1 M-series load; 62% after a clean stop's
// reclaim). So before a large segment is inserted, a placeholder row of
// zeros takes every free page, the segment goes to the end of the file in
// one run, and the placeholder is deleted in the same transaction: the
// free pages are free again, for the wal rows that do not care where they
// lie, and nobody ever sees the placeholder.
//
// The cost is the placeholder's pages, written once more (a page a
// transaction dirtied is written at its commit). Segments no longer eat
// the free list, so wal rows do, and it stays short: on a 1 M-series load
// it held ~200 pages at a seal against ~1,050 of the segment (without
// placement: ~1,280, the segment taking them). The placeholder is skipped
// when the free list holds more than twice the pages the segment needs, so
// a seal writes at most three times its segment (after an eviction or
// compaction freed whole segments the free pages come in long runs, which
// a segment written into them mostly keeps), and for small segments.
const (
	placeholderSeq      = math.MinInt64 // never a segment's seq
	placeholderMinBytes = 64 << 10
)

// placeContiguously inserts the placeholder before a segment of size
// bytes of source's stream when the free list would scatter it, and says
// whether it did.
func (tx *WriteTx) placeContiguously(source SourceID, stream string, size int) (bool, error) {
	if size < placeholderMinBytes {
		return false, nil
	}
	pageSize, err := pragmaInt(tx.ctx, tx.q, "page_size")
	if err != nil {
		return false, err
	}
	free, err := pragmaInt(tx.ctx, tx.q, "freelist_count")
	if err != nil || free == 0 || free > 2*int64(size)/(pageSize-4) {
		return false, err
	}
	// An overflow page holds pageSize-4 bytes; the row's first bytes sit in
	// its B-tree leaf. About right is enough: a page too few leaves one
	// free page for the segment, one too many extends the file by a page.
	_, err = tx.changeSegments("insert segment: placeholder", `INSERT INTO segments (source_id, stream, seq, rows, first_ts, last_ts, bytes)
		VALUES (?1, ?2, ?3, 0, 0, 0, zeroblob(?4))`, source, stream, placeholderSeq, free*(pageSize-4))
	return err == nil, err
}

// nonNilBytes keeps an empty BLOB from binding as NULL (bytes is NOT NULL).
func nonNilBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// DeleteSegment removes one segment (compaction deletes and inserts in one
// transaction).
func (tx *WriteTx) DeleteSegment(source SourceID, stream string, seq int64) error {
	_, err := tx.changeSegments("delete segment", `DELETE FROM segments WHERE source_id = ?1 AND stream = ?2 AND seq = ?3`, source, stream, seq)
	return err
}

// InsertWALRows appends rows of one source. A duplicate (stream, ts)
// violates the wal primary key and fails the call with a constraint error.
func (tx *WriteTx) InsertWALRows(source SourceID, rows []Row) error {
	for i := range rows {
		r := &rows[i]
		var err error
		if tx.insertWAL != nil {
			_, err = tx.insertWAL.ExecContext(tx.ctx, source, r.Stream, r.TS, r.WallOffset, nonNilBytes(r.Data))
		} else {
			_, err = tx.q.ExecContext(tx.ctx, insertWALSQL, source, r.Stream, r.TS, r.WallOffset, nonNilBytes(r.Data))
		}
		if err != nil {
			return sqlErr(fmt.Sprintf("insert wal row (source %d, stream %q, ts %d)", source, r.Stream, r.TS), err)
		}
	}
	return nil
}

const insertWALSQL = `INSERT INTO wal (source_id, stream, ts, wall_offset, row) VALUES (?1, ?2, ?3, ?4, ?5)`

// InsertClockOffset records a clock observation; the first value recorded
// at a ts wins.
func (tx *WriteTx) InsertClockOffset(source SourceID, ts, offsetNS int64) error {
	_, err := tx.exec("insert clock offset", `INSERT OR IGNORE INTO clock_offsets (source_id, ts, offset_ns) VALUES (?1, ?2, ?3)`,
		source, ts, offsetNS)
	return err
}

// MarkComplete marks a source finalized.
func (tx *WriteTx) MarkComplete(source SourceID) error { return tx.setComplete(source, 1) }

// MarkIncomplete marks a source as being written again.
func (tx *WriteTx) MarkIncomplete(source SourceID) error { return tx.setComplete(source, 0) }

func (tx *WriteTx) setComplete(source SourceID, v int) error {
	n, err := tx.exec("mark complete", `UPDATE sources SET complete = ?2 WHERE id = ?1`, source, v)
	if err == nil && n == 0 {
		err = fmt.Errorf("no source with id %d: %w", source, ErrNoSource)
	}
	return err
}

// PatchMetadata merges patch into a source's metadata: keys in the patch
// replace, every other key is kept.
func (tx *WriteTx) PatchMetadata(source SourceID, patch map[string]string) error {
	s, err := tx.Source(source)
	if err != nil {
		return err
	}
	for k, v := range patch {
		s.Metadata[k] = v
	}
	return tx.SetMetadata(source, s.Metadata)
}

// SetMetadata replaces a source's whole metadata map.
func (tx *WriteTx) SetMetadata(source SourceID, m map[string]string) error {
	meta, err := jsonObject(m)
	if err != nil {
		return err
	}
	n, err := tx.exec("update metadata", `UPDATE sources SET metadata = ?2 WHERE id = ?1`, source, meta)
	if err == nil && n == 0 {
		err = fmt.Errorf("no source with id %d: %w", source, ErrNoSource)
	}
	return err
}

// PruneWAL deletes a stream's wal rows at or below upto; idempotent. It is
// an optimization with no correctness role: the live predicate already hides
// every row a segment covers.
func (tx *WriteTx) PruneWAL(source SourceID, stream string, upto int64) (int64, error) {
	return tx.exec("prune wal", `DELETE FROM wal WHERE source_id = ?1 AND stream = ?2 AND ts <= ?3`, source, stream, upto)
}

// pruneTarget is one stream's share of pruneStreams.
type pruneTarget struct {
	source SourceID
	stream string
	upto   int64
}

// prunePerStatement bounds the streams one pruneStreams statement names
// (SQLite allows 500 terms in a compound SELECT).
const prunePerStatement = 100

// pruneStreams is PruneWAL for many streams at once, in rowid order. The
// streams' rows were appended interleaved, so the table's pages each hold
// rows of several streams. One PruneWAL per stream walks the whole sealed
// range once per stream, and a page emptied by the last of them has been
// rewritten by each; with the writer's small page cache every such pass
// spills its pages to the sidecar again. Deleting the union in rowid order
// empties each page in one visit.
func (tx *WriteTx) pruneStreams(targets []pruneTarget) (int64, error) {
	var total int64
	for len(targets) > 0 {
		chunk := targets[:min(len(targets), prunePerStatement)]
		targets = targets[len(chunk):]
		var q strings.Builder
		args := make([]any, 0, 3*len(chunk))
		q.WriteString("DELETE FROM wal WHERE rowid IN (")
		for i, t := range chunk {
			if i > 0 {
				q.WriteString(" UNION ALL ")
			}
			fmt.Fprintf(&q, "SELECT rowid FROM wal WHERE source_id = ?%d AND stream = ?%d AND ts <= ?%d", 3*i+1, 3*i+2, 3*i+3)
			args = append(args, t.source, t.stream, t.upto)
		}
		q.WriteString(")")
		n, err := tx.exec("prune wal", q.String(), args...)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// Evicted reports what a retention pass removed.
type Evicted struct {
	Segments int64
	WALRows  int64
	// LiveRows counts deleted wal rows that no segment held: data lost
	// because sealing lagged behind eviction.
	LiveRows   int64
	CallerRows int64
}

// EvictBefore removes everything of a source wholly older than cutoff: the
// segments whose newest row is below it (a segment straddling the cutoff is
// kept whole), and wal rows, clock offsets and caller rows below it.
// math.MaxInt64 evicts everything.
func (tx *WriteTx) EvictBefore(source SourceID, cutoff int64) (ev Evicted, err error) {
	// Count live rows before any delete: deleting segments lowers
	// watermarks and would make shadowed rows look live.
	if err = tx.q.QueryRowContext(tx.ctx, `SELECT COUNT(*) FROM wal WHERE source_id = ?1 AND ts < ?2 AND `+liveRow,
		source, cutoff).Scan(&ev.LiveRows); err != nil {
		return ev, sqlErr("evict: count live rows", err)
	}
	if ev.Segments, err = tx.changeSegments("evict segments", `DELETE FROM segments WHERE source_id = ?1 AND last_ts < ?2`, source, cutoff); err != nil {
		return ev, err
	}
	// Same transaction: the deleted segments must not un-shadow wal rows
	// they covered.
	if ev.WALRows, err = tx.exec("evict wal", `DELETE FROM wal WHERE source_id = ?1 AND ts < ?2`, source, cutoff); err != nil {
		return ev, err
	}
	if _, err = tx.exec("evict clock offsets", `DELETE FROM clock_offsets WHERE source_id = ?1 AND ts < ?2`, source, cutoff); err != nil {
		return ev, err
	}
	ev.CallerRows, err = tx.exec("evict caller rows", `DELETE FROM caller_rows WHERE source_id = ?1 AND ts < ?2`, source, cutoff)
	return ev, err
}

// EvictStreamsBefore is EvictBefore for the streams remove selects (the
// predicate names what is removed). Clock offsets are cut at the oldest row
// the source still holds anywhere, so surviving streams keep theirs.
func (tx *WriteTx) EvictStreamsBefore(source SourceID, cutoff int64, remove func(stream string) bool) (ev Evicted, err error) {
	names, err := tx.strings(`SELECT stream FROM segments WHERE source_id = ?1 UNION SELECT stream FROM wal WHERE source_id = ?1
		UNION SELECT stream FROM caller_rows WHERE source_id = ?1 ORDER BY 1`, source)
	if err != nil {
		return ev, err
	}
	for _, name := range names {
		if !remove(name) {
			continue
		}
		var live int64
		if err = tx.q.QueryRowContext(tx.ctx, `SELECT COUNT(*) FROM wal WHERE `+liveStream+` AND ts < ?3`, source, name, cutoff).Scan(&live); err != nil {
			return ev, sqlErr("evict: count live rows", err)
		}
		ev.LiveRows += live
		n, err := tx.changeSegments("evict segments", `DELETE FROM segments WHERE source_id = ?1 AND stream = ?2 AND last_ts < ?3`, source, name, cutoff)
		if err != nil {
			return ev, err
		}
		ev.Segments += n
		if n, err = tx.exec("evict wal", `DELETE FROM wal WHERE source_id = ?1 AND stream = ?2 AND ts < ?3`, source, name, cutoff); err != nil {
			return ev, err
		}
		ev.WALRows += n
		if n, err = tx.exec("evict caller rows", `DELETE FROM caller_rows WHERE source_id = ?1 AND stream = ?2 AND ts < ?3`, source, name, cutoff); err != nil {
			return ev, err
		}
		ev.CallerRows += n
	}
	_, err = tx.exec("evict clock offsets", `DELETE FROM clock_offsets WHERE source_id = ?1 AND ts < COALESCE(
		(SELECT MIN(m) FROM (SELECT MIN(first_ts) AS m FROM segments WHERE source_id = ?1
			UNION ALL SELECT MIN(ts) FROM wal WHERE source_id = ?1)), ?2)`, source, cutoff)
	return ev, err
}

// Checkpoint runs a PASSIVE checkpoint: it copies what it can of the
// sidecar into the file without waiting for readers.
func (h *WriteHandle) Checkpoint(ctx context.Context) error {
	_, err := h.conn.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)")
	return sqlErr("checkpoint", err)
}

// IncrementalVacuum returns up to pages free pages to the filesystem.
func (h *WriteHandle) IncrementalVacuum(ctx context.Context, pages int) error {
	return incrementalVacuum(ctx, h.conn, pages)
}

func incrementalVacuum(ctx context.Context, conn *sql.Conn, pages int) error {
	// The pragma frees one page per step; draining its rows runs it to the end.
	rows, err := conn.QueryContext(ctx, fmt.Sprintf("PRAGMA incremental_vacuum(%d)", pages))
	if err != nil {
		return sqlErr("incremental_vacuum", err)
	}
	for rows.Next() {
	}
	rows.Close()
	return sqlErr("incremental_vacuum", rows.Err())
}

// Compacted reports a compaction: segments before and after, and merges.
type Compacted struct {
	Before, After, Merges int
}

// compactStream merges runs of adjacent small segments of one stream, each
// merge in its own transaction (run by txn). The merged segment takes the
// run's first seq; later seqs of the run stay unused (gaps are normal). The
// watermark is unchanged because the merged last_ts is the run's last.
func compactStream(ctx context.Context, read func(func(*ReadTx) error) error, txn func(func(*WriteTx) error) error,
	source SourceID, stream string, targetRows int64, merger SegmentMerger) (Compacted, error) {
	var metas []StoredSegment
	if err := read(func(tx *ReadTx) error {
		var err error
		metas, err = tx.SegmentMetas(source, stream)
		return err
	}); err != nil {
		return Compacted{}, err
	}
	c := Compacted{Before: len(metas), After: len(metas)}
	target := max(targetRows, 1)
	var budget, span int64
	if b, ok := merger.(MergeBudget); ok {
		budget, span = b.MergeBudget()
	}
	for i := 0; i < len(metas); {
		j, rows, size := i, int64(0), int64(0)
		for j < len(metas) && (rows+metas[j].Rows <= target ||
			(size+metas[j].Size <= budget && spanWithin(metas[i].FirstTS, metas[j].LastTS, span))) {
			rows, size = rows+metas[j].Rows, size+metas[j].Size
			j++
		}
		// Past the target rows, a run whose first segment is larger than
		// the rest of it together does not start there: else a merged
		// segment would be rewritten whole to take in each new small one
		// (every pass, until the budget), where this way a segment is
		// rewritten each time the data it takes in at least doubles it.
		if j-i < 2 || (rows > target && 2*metas[i].Size > size) {
			i++
			continue
		}
		run := metas[i:j]
		consumed, err := mergeRun(ctx, read, txn, source, stream, run, merger)
		if err != nil {
			return c, err
		}
		if consumed < 2 {
			i++
			continue
		}
		c.Merges++
		c.After -= consumed - 1
		i += consumed
	}
	return c, nil
}

// spanWithin reports whether first <= last and last-first <= span, for
// any int64s (ts cover the whole signed range, where the difference of
// two overflows).
func spanWithin(first, last, span int64) bool {
	return last >= first && uint64(last)-uint64(first) <= uint64(max(span, 0))
}

func mergeRun(ctx context.Context, read func(func(*ReadTx) error) error, txn func(func(*WriteTx) error) error,
	source SourceID, stream string, run []StoredSegment, merger SegmentMerger) (int, error) {
	full := make([]StoredSegment, 0, len(run))
	if err := read(func(tx *ReadTx) error {
		for _, m := range run {
			b, ok, err := tx.SegmentBytes(source, stream, m.Seq)
			if err != nil {
				return err
			}
			if !ok {
				break // vanished: the run stops here
			}
			m.Bytes = b
			full = append(full, m)
		}
		return nil
	}); err != nil {
		return 0, err
	}
	if len(full) < 2 {
		return 0, nil
	}
	merged, consumed, err := merger.Merge(stream, full)
	if err != nil {
		return 0, &EncoderError{Stream: stream, Err: fmt.Errorf("merge: %w", err)}
	}
	if merged == nil || consumed < 2 {
		return 0, nil
	}
	if consumed > len(full) {
		return 0, &EncoderContractError{Stream: stream, Detail: fmt.Sprintf("the merger consumed %d of %d segments", consumed, len(full))}
	}
	var rows int64
	for _, s := range full[:consumed] {
		rows += s.Rows
	}
	first, last := full[0], full[consumed-1]
	if merged.Rows != rows || merged.FirstTS != first.FirstTS || merged.LastTS != last.LastTS {
		return 0, &EncoderContractError{Stream: stream, Detail: fmt.Sprintf(
			"a merge of %d segment(s) holding %d row(s) over [%d, %d] claims %d row(s) over [%d, %d]",
			consumed, rows, first.FirstTS, last.LastTS, merged.Rows, merged.FirstTS, merged.LastTS)}
	}
	err = txn(func(tx *WriteTx) error {
		// The run must still be as it was read: Writer.Compact merges
		// between its read and this commit, off the writer goroutine, and
		// meanwhile retention may have evicted part of the run (merged
		// back, it would come back to life) or another compaction merged
		// it. Then the run is left as it now is.
		now, err := tx.StreamSegmentMetas(source, stream)
		if err != nil {
			return err
		}
		held := make(map[int64]SegmentMeta, len(now))
		for _, m := range now {
			held[m.Seq] = m.SegmentMeta
		}
		for _, s := range full[:consumed] {
			if m, ok := held[s.Seq]; !ok || m != s.SegmentMeta {
				return errRunChanged
			}
		}
		for _, s := range full[:consumed] {
			if err := tx.DeleteSegment(source, stream, s.Seq); err != nil {
				return err
			}
		}
		return tx.InsertSegment(source, stream, first.Seq, merged)
	})
	if errors.Is(err, errRunChanged) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return consumed, nil
}

// errRunChanged: a compaction's run changed between its read and its
// commit; it is not merged.
var errRunChanged = errors.New("archive: the segments being merged changed")

// CompactStream compacts one stream on the write handle (see Compacted).
func (h *WriteHandle) CompactStream(ctx context.Context, source SourceID, stream string, targetRows int64, merger SegmentMerger) (Compacted, error) {
	return compactStream(ctx, func(f func(*ReadTx) error) error { return h.View(ctx, f) },
		func(f func(*WriteTx) error) error { return h.Update(ctx, f) }, source, stream, targetRows, merger)
}

// Compact compacts every stream of every source, then reclaims the pages
// the merges freed so the file shrinks.
func (h *WriteHandle) Compact(ctx context.Context, targetRows int64, merger SegmentMerger) (Compacted, error) {
	var total Compacted
	var keys []streamKey
	if err := h.View(ctx, func(tx *ReadTx) error {
		srcs, err := tx.Sources()
		if err != nil {
			return err
		}
		for _, s := range srcs {
			streams, err := tx.Streams(s.ID)
			if err != nil {
				return err
			}
			for _, st := range streams {
				keys = append(keys, streamKey{s.ID, st})
			}
		}
		return nil
	}); err != nil {
		return total, err
	}
	for _, k := range keys {
		c, err := h.CompactStream(ctx, k.source, k.stream, targetRows, merger)
		total.Before += c.Before
		total.After += c.After
		total.Merges += c.Merges
		if err != nil {
			return total, err
		}
	}
	if total.Merges > 0 {
		if err := h.IncrementalVacuum(ctx, math.MaxInt32); err != nil {
			return total, err
		}
	}
	return total, nil
}
