package archive

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sync"
)

// SourceSpec is what a caller gives to start a source: its name (labels),
// free-form metadata, and the wall-clock anchor of its timeline in Unix
// nanoseconds.
type SourceSpec struct {
	Labels            map[string]string
	Metadata          map[string]string
	ClockAnchorWallNS int64
}

// SourceInfo is one row of sources, as read back.
type SourceInfo struct {
	ID SourceID
	SourceSpec
	// UUID is the source's identity, carried verbatim by every copy. ""
	// means unknown (an archive from before the column): never "the same".
	UUID     string
	Complete bool
}

// Span summarizes rows: their count and, when Rows > 0, the first and last
// ts (inclusive). With Rows == 0 the bounds are zero and meaningless.
type Span struct {
	Rows    int64
	FirstTS int64
	LastTS  int64
}

// PageStats describes the file's pages.
type PageStats struct {
	Pages    int64
	Free     int64
	PageSize int64
}

// Bytes is the file size the pages occupy (the -wal sidecar not counted).
func (p PageStats) Bytes() int64 { return p.Pages * p.PageSize }

// ClockOffset is one clock observation of a source: at ts, wall time was
// ts+OffsetNS.
type ClockOffset struct {
	TS       int64
	OffsetNS int64
}

// ReadTx is one read snapshot. It is valid only inside the function given
// to View and must not be used from other goroutines.
type ReadTx struct {
	ctx context.Context
	q   queryer
	// hasUUID, when set, remembers per handle whether sources has the
	// optional uuid column (older v4 files lack it). A handle's schema does
	// not change under it: nothing in dendro adds or drops the column.
	hasUUID *columnCache
	// pinned: the questions run on a connection that also writes (a write
	// handle's), whose own commits do not change its data_version.
	pinned bool
	// blobs are the segment BLOB handles opened in the snapshot, closed
	// before it ends (see blob.go).
	blobs []*SegmentBlob
	// bufs is the handle's pool of their C buffers; nil (a transaction of
	// the writer's) allocates one per segment opened.
	bufs *blobBufs
	// jumps, when set, are the handle's scattered chain links, and the
	// blobs read their pages in place through pages (blobpages.go);
	// pagesFailed says the snapshot cannot.
	jumps       *pageJumps
	place       *segmentsPlace
	pages       *pageReader
	pagesFailed bool
	// version is the snapshot's data_version once asked (dataVersion).
	version struct {
		v     int64
		known bool
	}
	// segs is the snapshot's segments epoch, when it has one (View,
	// segments_epoch.go).
	segs struct {
		epoch uint64
		ok    bool
	}
	// moves is the count of the writer's reclaims the snapshot sees, when
	// it knows it, and chains the handle's kept page chains
	// (blobchains.go); nil when it follows no writer.
	moves struct {
		count uint64
		ok    bool
	}
	chains *chainCache
}

// columnCache remembers the answer to one "does this column exist"
// question once it has been answered (a failed check is asked again).
type columnCache struct {
	mu    sync.Mutex
	known bool
	found bool
}

func (c *columnCache) get(check func() (bool, error)) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.known {
		return c.found, nil
	}
	found, err := check()
	if err == nil {
		c.known, c.found = true, found
	}
	return found, err
}

// View runs fn inside one read snapshot (BEGIN DEFERRED ... ROLLBACK): every
// question fn asks sees the same committed state, so a seal landing midway
// can neither hide rows (its segment unseen, its watermark applied) nor show
// them twice. A snapshot pins the sidecar frames it can see, so checkpoints
// cannot move them while fn runs: hold it for one answer, not for the life
// of a reader.
func (a *Archive) View(ctx context.Context, fn func(tx *ReadTx) error) (err error) {
	conn, release, err := a.acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	st, err := a.maps.before(ctx, conn) // nil: the map never switches
	if err != nil {
		return err
	}
	// The writer's segments epoch, loaded before the snapshot starts and
	// again after (segments_epoch.go). BEGIN DEFERRED starts nothing.
	var before, movesBefore uint64
	follow := a.segs != nil && a.pinned == nil
	if follow {
		before, movesBefore = a.segs.n.Load(), a.moves.n.Load()
	}
	if _, err := conn.ExecContext(ctx, "BEGIN DEFERRED"); err != nil {
		return sqlErr("archive: begin snapshot", err)
	}
	tx := &ReadTx{ctx: ctx, q: conn, hasUUID: &a.uuidColumn, pinned: a.pinned != nil, bufs: &a.blobBufs, jumps: a.jumps, place: a.place}
	defer func() {
		// Always end the snapshot, even when fn panics; use a fresh context
		// so a canceled request still releases its snapshot. BLOB handles
		// first: they belong to the transaction.
		tx.closeBlobs()
		if _, rerr := conn.ExecContext(context.Background(), "ROLLBACK"); rerr != nil && err == nil {
			err = sqlErr("archive: end snapshot", rerr)
		}
	}()
	if st != nil {
		// The snapshot begins here (the first statement after BEGIN
		// DEFERRED), and what it finds decides the connection's next map.
		v, err := tx.dataVersion()
		if err != nil {
			return err
		}
		st.saw(v)
	}
	if follow {
		// dataVersion's pragma starts the snapshot (if the map's switch
		// above has not), and a question asks it anyway (Version).
		if _, err := tx.dataVersion(); err != nil {
			return err
		}
		after, movesAfter := a.segs.n.Load(), a.moves.n.Load()
		tx.segs.epoch, tx.segs.ok = after, after == before && after%2 == 0
		// The reclaims are counted as the segments changes are, and known
		// by the same argument (blobchains.go).
		tx.moves.count, tx.moves.ok = movesAfter, movesAfter == movesBefore && movesAfter%2 == 0
		tx.chains = a.chains
	}
	return fn(tx)
}

// acquire returns the connection a question runs on and how to give it back.
func (a *Archive) acquire(ctx context.Context) (*sql.Conn, func(), error) {
	if a.pinned != nil {
		return a.pinned, func() {}, nil
	}
	conn, err := a.db.Conn(ctx)
	if err != nil {
		return nil, nil, classifyOpenError(a.path, err)
	}
	return conn, func() { conn.Close() }, nil
}

func (tx *ReadTx) hasColumn(table, column string) (bool, error) {
	rows, err := tx.q.QueryContext(tx.ctx, "SELECT name FROM pragma_table_info(?1)", table)
	if err != nil {
		return false, sqlErr("table_info", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return false, err
		}
		if name == column {
			return true, nil
		}
	}
	return false, rows.Err()
}

// Sources returns every source, by id. A missing uuid column (an older v4
// file) reads as unknown identity.
func (tx *ReadTx) Sources() ([]SourceInfo, error) {
	return tx.sources("")
}

// Source returns one source, or an error wrapping ErrNoSource.
func (tx *ReadTx) Source(id SourceID) (SourceInfo, error) {
	s, err := tx.sources(fmt.Sprintf(" WHERE id = %d", int64(id)))
	if err != nil {
		return SourceInfo{}, err
	}
	if len(s) == 0 {
		return SourceInfo{}, fmt.Errorf("no source with id %d: %w", id, ErrNoSource)
	}
	return s[0], nil
}

func (tx *ReadTx) sources(where string) ([]SourceInfo, error) {
	uuidCol := "NULL"
	check := func() (bool, error) { return tx.hasColumn("sources", "uuid") }
	var ok bool
	var err error
	if tx.hasUUID != nil {
		ok, err = tx.hasUUID.get(check)
	} else {
		ok, err = check()
	}
	if err != nil {
		return nil, err
	}
	if ok {
		uuidCol = "uuid"
	}
	rows, err := tx.q.QueryContext(tx.ctx, "SELECT id, labels, metadata, complete, clock_anchor_wall_ns, "+uuidCol+
		" FROM sources"+where+" ORDER BY id")
	if err != nil {
		return nil, sqlErr("read sources", err)
	}
	defer rows.Close()
	var out []SourceInfo
	for rows.Next() {
		var s SourceInfo
		var labels, meta string
		var uuid sql.NullString
		if err := rows.Scan(&s.ID, &labels, &meta, &s.Complete, &s.ClockAnchorWallNS, &uuid); err != nil {
			return nil, sqlErr("read sources", err)
		}
		if err := json.Unmarshal([]byte(labels), &s.Labels); err != nil {
			return nil, fmt.Errorf("archive: source %d: labels are not a JSON object: %w", s.ID, err)
		}
		if err := json.Unmarshal([]byte(meta), &s.Metadata); err != nil {
			return nil, fmt.Errorf("archive: source %d: metadata is not a JSON object: %w", s.ID, err)
		}
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		if s.Metadata == nil {
			s.Metadata = map[string]string{}
		}
		s.UUID = uuid.String
		out = append(out, s)
	}
	return out, rows.Err()
}

// Streams is the union of stream names in segments and wal for a source,
// sorted. This set is the stream list: there is no streams table.
//
// It seeks from each name to the next (streamsSQL) instead of reading every
// row's name: a reader asks for it at every snapshot that finds new commits,
// and the wal table of a million series holds ~10,000 rows of a handful of
// streams, whose index entries a plain UNION read on every question.
func (tx *ReadTx) Streams(source SourceID) ([]string, error) {
	return tx.strings(streamsSQL, source)
}

// streamsSQL lists a source's distinct stream names by a seek per name:
// min(stream) above the last one found, on the wal table's primary key and
// on segments_by_time, both of which lead with (source_id, stream). A
// scalar min over no rows is NULL, which ends each walk.
const streamsSQL = `WITH RECURSIVE
	w(name) AS (
		SELECT (SELECT min(stream) FROM wal WHERE source_id = ?1)
		UNION ALL
		SELECT (SELECT min(stream) FROM wal WHERE source_id = ?1 AND stream > w.name) FROM w WHERE w.name IS NOT NULL),
	g(name) AS (
		SELECT (SELECT min(stream) FROM segments WHERE source_id = ?1)
		UNION ALL
		SELECT (SELECT min(stream) FROM segments WHERE source_id = ?1 AND stream > g.name) FROM g WHERE g.name IS NOT NULL)
	SELECT name FROM w WHERE name IS NOT NULL
	UNION SELECT name FROM g WHERE name IS NOT NULL
	ORDER BY 1`

func (tx *ReadTx) strings(query string, args ...any) ([]string, error) {
	rows, err := tx.q.QueryContext(tx.ctx, query, args...)
	if err != nil {
		return nil, sqlErr("archive: query", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// SegmentMetas returns a stream's segments in seq order without their bytes
// (the index is included). Readers must order by seq, never by time.
func (tx *ReadTx) SegmentMetas(source SourceID, stream string) ([]StoredSegment, error) {
	return tx.segments(`SELECT seq, rows, first_ts, last_ts, length(bytes), caller_index, NULL FROM segments
		WHERE source_id = ?1 AND stream = ?2 ORDER BY seq`, source, stream)
}

// StreamSegment is one segment's catalog entry with its stream's name.
type StreamSegment struct {
	Stream string
	Seq    int64
	// RowID is the segment's row in the snapshot that listed it (0: not
	// known). Rows keep their ids while they exist, but a deleted row's
	// id can be given to a new one, so it locates the segment only in a
	// snapshot of the same committed state (OpenListedSegment).
	RowID int64
	SegmentMeta
}

// SourceSegmentMetas returns every segment of a source, by stream then seq,
// from the catalog alone: neither the bytes nor the caller index is read.
// (The index sits after the BLOB in the row, so reading it walks the
// BLOB's overflow-page chain; a reader that has the parsed index cached
// asks for the catalog only, and for SegmentIndex on a miss.)
func (tx *ReadTx) SourceSegmentMetas(source SourceID) ([]StreamSegment, error) {
	return tx.streamSegments(`WHERE source_id = ?1 ORDER BY stream, seq`, source)
}

// StreamSegmentMetas is SourceSegmentMetas for one stream: its segments
// by seq, catalog only.
func (tx *ReadTx) StreamSegmentMetas(source SourceID, stream string) ([]StreamSegment, error) {
	return tx.streamSegments(`WHERE source_id = ?1 AND stream = ?2 ORDER BY seq`, source, stream)
}

// streamSegments reads catalog rows (never the bytes or the caller index)
// selected and ordered by where.
func (tx *ReadTx) streamSegments(where string, args ...any) ([]StreamSegment, error) {
	rows, err := tx.q.QueryContext(tx.ctx, `SELECT stream, seq, rowid, rows, first_ts, last_ts, length(bytes) FROM segments `+where, args...)
	if err != nil {
		return nil, sqlErr("read segment metas", err)
	}
	defer rows.Close()
	var out []StreamSegment
	for rows.Next() {
		var s StreamSegment
		if err := rows.Scan(&s.Stream, &s.Seq, &s.RowID, &s.Rows, &s.FirstTS, &s.LastTS, &s.Size); err != nil {
			return nil, sqlErr("read segment metas", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// LiveSpanAbove is LiveSpan for a caller that has already read the
// stream's segments in this snapshot: watermark is their greatest LastTS
// and sealed says there is at least one (the stream's sealed watermark;
// with sealed false every row is live). Given those, it counts exactly the
// rows LiveSpan counts, with a plain index range instead of the live
// predicate's subqueries.
func (tx *ReadTx) LiveSpanAbove(source SourceID, stream string, watermark int64, sealed bool) (Span, error) {
	if !sealed {
		return tx.span(`SELECT COUNT(*), COALESCE(MIN(ts), 0), COALESCE(MAX(ts), 0) FROM wal WHERE source_id = ?1 AND stream = ?2`,
			source, stream)
	}
	return tx.span(`SELECT COUNT(*), COALESCE(MIN(ts), 0), COALESCE(MAX(ts), 0) FROM wal WHERE source_id = ?1 AND stream = ?2 AND ts > ?3`,
		source, stream, watermark)
}

// SegmentIndex returns one segment's caller index (nil when it has none);
// ok is false when the segment is absent.
func (tx *ReadTx) SegmentIndex(source SourceID, stream string, seq int64) (index []byte, ok bool, err error) {
	err = tx.q.QueryRowContext(tx.ctx, `SELECT caller_index FROM segments WHERE source_id = ?1 AND stream = ?2 AND seq = ?3`,
		source, stream, seq).Scan((*driverBytes)(&index))
	if err == sql.ErrNoRows {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, sqlErr("read segment index", err)
	}
	return index, true, nil
}

// SnapshotVersion names the committed state a snapshot reads, for a caller
// that memoizes answers about the catalog: two snapshots with equal
// versions read the same committed state. Reader identifies the SQLite
// connection (versions of different connections are unrelated) and
// DataVersion is its PRAGMA data_version, which SQLite changes whenever
// another connection's commit becomes visible to it.
type SnapshotVersion struct {
	Reader      any
	DataVersion int64
}

// Version returns the snapshot's version. ok is false when equal versions
// would not promise equal states: the questions run on a connection that
// also writes (its own commits leave data_version alone), or the
// connection cannot be identified.
func (tx *ReadTx) Version() (v SnapshotVersion, ok bool, err error) {
	if tx.pinned {
		return v, false, nil
	}
	raw, isConn := tx.q.(interface {
		Raw(func(driverConn any) error) error
	})
	if !isConn {
		return v, false, nil
	}
	if v.DataVersion, err = tx.dataVersion(); err != nil {
		return v, false, err
	}
	if err := raw.Raw(func(dc any) error { v.Reader = dc; return nil }); err != nil {
		return v, false, sqlErr("data_version", err)
	}
	return v, v.Reader != nil, nil
}

// dataVersion is the snapshot's PRAGMA data_version, asked once. The
// pragma runs inside the snapshot (BEGIN DEFERRED): it starts the read
// transaction if nothing has yet, so the value is this snapshot's.
func (tx *ReadTx) dataVersion() (int64, error) {
	if tx.version.known {
		return tx.version.v, nil
	}
	var v int64
	if err := tx.q.QueryRowContext(tx.ctx, "PRAGMA data_version").Scan(&v); err != nil {
		return 0, sqlErr("data_version", err)
	}
	tx.version.v, tx.version.known = v, true
	return v, nil
}

// Segments returns a stream's segments with their bytes, in seq order. The
// ORDER BY is load-bearing: without it the planner may walk
// segments_by_time, which is ordered by last_ts.
func (tx *ReadTx) Segments(source SourceID, stream string) ([]StoredSegment, error) {
	return tx.segments(`SELECT seq, rows, first_ts, last_ts, length(bytes), caller_index, bytes FROM segments
		WHERE source_id = ?1 AND stream = ?2 ORDER BY seq`, source, stream)
}

// SegmentsOverlapping returns, in seq order and whole, the segments whose
// [first_ts, last_ts] meets [start, end] (inclusive), with their bytes.
func (tx *ReadTx) SegmentsOverlapping(source SourceID, stream string, start, end int64) ([]StoredSegment, error) {
	return tx.segments(`SELECT seq, rows, first_ts, last_ts, length(bytes), caller_index, bytes FROM segments
		WHERE source_id = ?1 AND stream = ?2 AND last_ts >= ?3 AND first_ts <= ?4 ORDER BY seq`,
		source, stream, start, end)
}

// SegmentBytes returns one segment's bytes; ok is false when it is absent.
func (tx *ReadTx) SegmentBytes(source SourceID, stream string, seq int64) (b []byte, ok bool, err error) {
	err = tx.q.QueryRowContext(tx.ctx, `SELECT bytes FROM segments WHERE source_id = ?1 AND stream = ?2 AND seq = ?3`,
		source, stream, seq).Scan((*driverBytes)(&b))
	if err == sql.ErrNoRows {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, sqlErr("read segment", err)
	}
	return b, true, nil
}

func (tx *ReadTx) segments(query string, args ...any) ([]StoredSegment, error) {
	rows, err := tx.q.QueryContext(tx.ctx, query, args...)
	if err != nil {
		return nil, sqlErr("read segments", err)
	}
	defer rows.Close()
	var out []StoredSegment
	for rows.Next() {
		var s StoredSegment
		if err := rows.Scan(&s.Seq, &s.Rows, &s.FirstTS, &s.LastTS, &s.Size, (*driverBytes)(&s.Index), (*driverBytes)(&s.Bytes)); err != nil {
			return nil, sqlErr("read segments", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// WAL returns a stream's raw wal rows by ts, shadowed rows included (rows
// at or below the sealed watermark that the prune has not yet removed).
func (tx *ReadTx) WAL(source SourceID, stream string) ([]Row, error) {
	return tx.rows(`SELECT stream, ts, wall_offset, row FROM wal WHERE source_id = ?1 AND stream = ?2 ORDER BY ts`,
		source, stream)
}

// LiveWAL returns a stream's live rows by ts: those above its own sealed
// watermark, or all of them when it has never sealed.
func (tx *ReadTx) LiveWAL(source SourceID, stream string) ([]Row, error) {
	return tx.rows(`SELECT stream, ts, wall_offset, row FROM wal WHERE `+liveStream+` ORDER BY ts`, source, stream)
}

// liveWALPrefix is LiveWAL cut to its oldest rows: at most maxRows rows and
// maxBytes bytes of row data, but at least one row (a bound <= 0 is no
// bound). The rows past the cut are not read; more reports whether at
// least behind of them remain (never, when behind <= 0). The count stops
// at behind, so it costs at most that many index entries.
func (tx *ReadTx) liveWALPrefix(source SourceID, stream string, maxRows int, maxBytes int64, behind int) (rows []Row, more bool, err error) {
	if maxRows <= 0 && maxBytes <= 0 {
		rows, err = tx.LiveWAL(source, stream)
		return rows, false, err
	}
	limit := int64(maxRows)
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	rs, err := tx.q.QueryContext(tx.ctx, `SELECT stream, ts, wall_offset, row FROM wal WHERE `+liveStream+` ORDER BY ts LIMIT ?3`,
		source, stream, limit)
	if err != nil {
		return nil, false, sqlErr("read wal", err)
	}
	var bytes int64
	for rs.Next() {
		var r Row
		if err := rs.Scan(&r.Stream, &r.TS, &r.WallOffset, (*driverBytes)(&r.Data)); err != nil {
			rs.Close()
			return nil, false, sqlErr("read wal", err)
		}
		if bytes += int64(len(r.Data)); maxBytes > 0 && bytes > maxBytes && len(rows) > 0 {
			break // r is the first row of the next seal
		}
		rows = append(rows, r)
	}
	if err := cmp.Or(rs.Err(), rs.Close()); err != nil {
		return nil, false, sqlErr("read wal", err)
	}
	if len(rows) == 0 || behind <= 0 {
		return rows, false, nil
	}
	// Rows above the last one read are live too: the live predicate is a
	// watermark, and every row here is above it.
	var n int
	err = tx.q.QueryRowContext(tx.ctx, `SELECT COUNT(*) FROM (SELECT 1 FROM wal WHERE source_id = ?1 AND stream = ?2 AND ts > ?3 LIMIT ?4)`,
		source, stream, rows[len(rows)-1].TS, behind).Scan(&n)
	if err != nil {
		return nil, false, sqlErr("count live wal", err)
	}
	return rows, n >= behind, nil
}

// LiveWALRange is LiveWAL restricted to start <= ts <= end.
func (tx *ReadTx) LiveWALRange(source SourceID, stream string, start, end int64) ([]Row, error) {
	return tx.rows(`SELECT stream, ts, wall_offset, row FROM wal WHERE `+liveStream+` AND ts >= ?3 AND ts <= ?4 ORDER BY ts`,
		source, stream, start, end)
}

func (tx *ReadTx) rows(query string, args ...any) ([]Row, error) {
	rs, err := tx.q.QueryContext(tx.ctx, query, args...)
	if err != nil {
		return nil, sqlErr("read wal", err)
	}
	defer rs.Close()
	var out []Row
	for rs.Next() {
		var r Row
		if err := rs.Scan(&r.Stream, &r.TS, &r.WallOffset, (*driverBytes)(&r.Data)); err != nil {
			return nil, sqlErr("read wal", err)
		}
		out = append(out, r)
	}
	return out, rs.Err()
}

// LiveSpan counts a stream's live rows and their ts bounds, under the same
// predicate LiveWAL uses.
func (tx *ReadTx) LiveSpan(source SourceID, stream string) (Span, error) {
	return tx.span(`SELECT COUNT(*), COALESCE(MIN(ts), 0), COALESCE(MAX(ts), 0) FROM wal WHERE `+liveStream, source, stream)
}

// SegmentSpan returns how many segments a stream has and the span of rows
// they hold, from the catalog alone (no BLOB is read).
func (tx *ReadTx) SegmentSpan(source SourceID, stream string) (count int64, span Span, err error) {
	err = tx.q.QueryRowContext(tx.ctx, `SELECT COUNT(*), COALESCE(SUM(rows), 0), COALESCE(MIN(first_ts), 0), COALESCE(MAX(last_ts), 0)
		FROM segments WHERE source_id = ?1 AND stream = ?2`, source, stream).Scan(&count, &span.Rows, &span.FirstTS, &span.LastTS)
	return count, span, sqlErr("segment span", err)
}

func (tx *ReadTx) span(query string, args ...any) (s Span, err error) {
	err = tx.q.QueryRowContext(tx.ctx, query, args...).Scan(&s.Rows, &s.FirstTS, &s.LastTS)
	return s, sqlErr("span", err)
}

// StreamBytes is the total size of a stream's segment BLOBs.
func (tx *ReadTx) StreamBytes(source SourceID, stream string) (n int64, err error) {
	err = tx.q.QueryRowContext(tx.ctx, `SELECT COALESCE(SUM(length(bytes)), 0) FROM segments WHERE source_id = ?1 AND stream = ?2`,
		source, stream).Scan(&n)
	return n, sqlErr("stream bytes", err)
}

// SizeAt is one segment's newest ts and size: what a size cap walks.
type SizeAt struct {
	LastTS int64
	Bytes  int64
}

// SegmentSizes lists a source's segments oldest (by last_ts) first.
func (tx *ReadTx) SegmentSizes(source SourceID) ([]SizeAt, error) {
	rows, err := tx.q.QueryContext(tx.ctx, `SELECT last_ts, length(bytes) FROM segments WHERE source_id = ?1 ORDER BY last_ts`, source)
	if err != nil {
		return nil, sqlErr("segment sizes", err)
	}
	defer rows.Close()
	var out []SizeAt
	for rows.Next() {
		var s SizeAt
		if err := rows.Scan(&s.LastTS, &s.Bytes); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// TotalRows sums rows over a stream's segments (wal rows not included).
func (tx *ReadTx) TotalRows(source SourceID, stream string) (n int64, err error) {
	err = tx.q.QueryRowContext(tx.ctx, `SELECT COALESCE(SUM(rows), 0) FROM segments WHERE source_id = ?1 AND stream = ?2`,
		source, stream).Scan(&n)
	return n, sqlErr("total rows", err)
}

// SealedWatermarks returns source -> stream -> newest sealed last_ts. A
// stream that has never sealed has no entry.
func (tx *ReadTx) SealedWatermarks() (map[SourceID]map[string]int64, error) {
	rows, err := tx.q.QueryContext(tx.ctx, `SELECT source_id, stream, MAX(last_ts) FROM segments GROUP BY source_id, stream`)
	if err != nil {
		return nil, sqlErr("sealed watermarks", err)
	}
	defer rows.Close()
	out := map[SourceID]map[string]int64{}
	for rows.Next() {
		var src SourceID
		var stream string
		var w int64
		if err := rows.Scan(&src, &stream, &w); err != nil {
			return nil, err
		}
		if out[src] == nil {
			out[src] = map[string]int64{}
		}
		out[src][stream] = w
	}
	return out, rows.Err()
}

type streamKey struct {
	source SourceID
	stream string
}

// nextSeqs returns MAX(seq)+1 per (source, stream).
func (tx *ReadTx) nextSeqs() (map[streamKey]int64, error) {
	rows, err := tx.q.QueryContext(tx.ctx, `SELECT source_id, stream, MAX(seq) + 1 FROM segments GROUP BY source_id, stream`)
	if err != nil {
		return nil, sqlErr("next seqs", err)
	}
	defer rows.Close()
	out := map[streamKey]int64{}
	for rows.Next() {
		var k streamKey
		var n int64
		if err := rows.Scan(&k.source, &k.stream, &n); err != nil {
			return nil, err
		}
		out[k] = n
	}
	return out, rows.Err()
}

// newestTS returns the newest ts a stream holds (segments or wal, shadowed
// rows included); ok is false when it holds nothing.
func (tx *ReadTx) newestTS(source SourceID, stream string) (ts int64, ok bool, err error) {
	var v sql.NullInt64
	err = tx.q.QueryRowContext(tx.ctx, `SELECT MAX(m) FROM (
		SELECT MAX(last_ts) AS m FROM segments WHERE source_id = ?1 AND stream = ?2
		UNION ALL SELECT MAX(ts) FROM wal WHERE source_id = ?1 AND stream = ?2)`, source, stream).Scan(&v)
	return v.Int64, v.Valid, sqlErr("newest ts", err)
}

// SourceLastTS returns the newest row a source holds across its segments and
// its live wal rows; ok is false when it holds none.
//
// It asks for the newest wal row of each stream, live or not, which is the
// same answer: a row that is not live is at or below its stream's newest
// segment, so below the segments' MAX(last_ts). That is one index probe per
// stream (walStreams), where filtering by the live predicate evaluated it
// for every wal row of the source: the cost of a restart grew with the
// live tail (0.08 s per source at 85,000 live rows).
func (tx *ReadTx) SourceLastTS(source SourceID) (ts int64, ok bool, err error) {
	var v sql.NullInt64
	err = tx.q.QueryRowContext(tx.ctx, walStreams+` SELECT MAX(m) FROM (
		SELECT MAX(last_ts) AS m FROM segments WHERE source_id = ?1
		UNION ALL SELECT (SELECT MAX(ts) FROM wal WHERE source_id = ?1 AND stream = s.stream) FROM s WHERE s.stream IS NOT NULL)`,
		source).Scan(&v)
	return v.Int64, v.Valid, sqlErr("source last ts", err)
}

// walStreams is a common table s(stream) of the distinct streams source ?1
// has wal rows in, found by one seek per stream on the wal's primary key
// (SQLite has no skip scan without ANALYZE; a DISTINCT or GROUP BY would
// read every wal row's index entry). Its last row is NULL.
const walStreams = `WITH RECURSIVE s(stream) AS (
		SELECT MIN(stream) FROM wal WHERE source_id = ?1
		UNION ALL SELECT (SELECT MIN(stream) FROM wal WHERE source_id = ?1 AND stream > s.stream) FROM s WHERE s.stream IS NOT NULL)`

// StreamSpan is one stream's Span.
type StreamSpan struct {
	Stream string
	Span
}

// LiveSpans returns the span of every stream of source that has live wal
// rows, by stream name, from the wal's primary key alone: no row is read.
// A restart uses it to account for the live tail it inherits.
func (tx *ReadTx) LiveSpans(source SourceID) ([]StreamSpan, error) {
	streams, err := tx.strings(walStreams+` SELECT stream FROM s WHERE stream IS NOT NULL ORDER BY stream`, source)
	if err != nil {
		return nil, err
	}
	var out []StreamSpan
	for _, st := range streams {
		sp, err := tx.LiveSpan(source, st)
		if err != nil {
			return nil, err
		}
		if sp.Rows > 0 {
			out = append(out, StreamSpan{Stream: st, Span: sp})
		}
	}
	return out, nil
}

// LiveRowsBefore counts the live wal rows of a stream received before
// cutoff.
func (tx *ReadTx) LiveRowsBefore(source SourceID, stream string, cutoff int64) (int64, error) {
	var n int64
	err := tx.q.QueryRowContext(tx.ctx, `SELECT COUNT(*) FROM wal WHERE `+liveStream+` AND ts < ?3`, source, stream, cutoff).Scan(&n)
	return n, sqlErr("live rows before", err)
}

// ClockOffsets returns a source's clock observations by ts.
func (tx *ReadTx) ClockOffsets(source SourceID) ([]ClockOffset, error) {
	rows, err := tx.q.QueryContext(tx.ctx, `SELECT ts, offset_ns FROM clock_offsets WHERE source_id = ?1 ORDER BY ts`, source)
	if err != nil {
		return nil, sqlErr("clock offsets", err)
	}
	defer rows.Close()
	var out []ClockOffset
	for rows.Next() {
		var c ClockOffset
		if err := rows.Scan(&c.TS, &c.OffsetNS); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// PageStats reads page_count, freelist_count and page_size.
func (tx *ReadTx) PageStats() (PageStats, error) {
	var p PageStats
	var err error
	if p.Pages, err = pragmaInt(tx.ctx, tx.q, "page_count"); err != nil {
		return p, err
	}
	if p.Free, err = pragmaInt(tx.ctx, tx.q, "freelist_count"); err != nil {
		return p, err
	}
	p.PageSize, err = pragmaInt(tx.ctx, tx.q, "page_size")
	return p, err
}

// WALRowCount counts every wal row (shadowed included) of a source, or of
// the whole archive when source is 0.
func (tx *ReadTx) WALRowCount(source SourceID) (n int64, err error) {
	q := `SELECT COUNT(*) FROM wal`
	var args []any
	if source != 0 {
		q += ` WHERE source_id = ?1`
		args = append(args, source)
	}
	err = tx.q.QueryRowContext(tx.ctx, q, args...).Scan(&n)
	return n, sqlErr("wal rows", err)
}

// StreamSegments is a stream's whole answer in seq order: its sealed
// segments' bytes, then its live tail materialized through enc (when it has
// one). Nothing de-duplicates the seam: the live predicate already excludes
// every row a segment holds.
func (tx *ReadTx) StreamSegments(source SourceID, stream string, enc SegmentEncoder) ([][]byte, error) {
	if err := tx.checkEncoder(source, enc); err != nil {
		return nil, err
	}
	segs, err := tx.Segments(source, stream)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, 0, len(segs)+1)
	for _, s := range segs {
		out = append(out, s.Bytes)
	}
	live, err := tx.LiveWAL(source, stream)
	if err != nil {
		return nil, err
	}
	tail, err := Materialize(enc, stream, live)
	if err != nil {
		return nil, err
	}
	if tail != nil {
		out = append(out, tail.Bytes)
	}
	return out, nil
}

// StreamRange returns the segments overlapping [start, end] whole, then the
// live tail trimmed to [start, end] and materialized.
func (tx *ReadTx) StreamRange(source SourceID, stream string, start, end int64, enc SegmentEncoder) ([][]byte, error) {
	if err := tx.checkEncoder(source, enc); err != nil {
		return nil, err
	}
	segs, err := tx.SegmentsOverlapping(source, stream, start, end)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, s := range segs {
		out = append(out, s.Bytes)
	}
	live, err := tx.LiveWALRange(source, stream, start, end)
	if err != nil {
		return nil, err
	}
	tail, err := Materialize(enc, stream, live)
	if err != nil {
		return nil, err
	}
	if tail != nil {
		out = append(out, tail.Bytes)
	}
	return out, nil
}

// StreamIndexes returns the sealed segments' indexes in seq order, then the
// live tail's when it materializes.
func (tx *ReadTx) StreamIndexes(source SourceID, stream string, enc SegmentEncoder) ([][]byte, error) {
	if err := tx.checkEncoder(source, enc); err != nil {
		return nil, err
	}
	metas, err := tx.SegmentMetas(source, stream)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, m := range metas {
		out = append(out, m.Index)
	}
	live, err := tx.LiveWAL(source, stream)
	if err != nil {
		return nil, err
	}
	tail, err := Materialize(enc, stream, live)
	if err != nil {
		return nil, err
	}
	if tail != nil {
		out = append(out, tail.Index)
	}
	return out, nil
}

// Probe returns the stream's first sealed segment (lowest seq), or else its
// materialized live tail; nil when the stream holds no rows.
func (tx *ReadTx) Probe(source SourceID, stream string, enc SegmentEncoder) ([]byte, error) {
	if err := tx.checkEncoder(source, enc); err != nil {
		return nil, err
	}
	var seq int64
	err := tx.q.QueryRowContext(tx.ctx, `SELECT MIN(seq) FROM segments WHERE source_id = ?1 AND stream = ?2 HAVING COUNT(*) > 0`,
		source, stream).Scan(&seq)
	if err == nil {
		b, _, err := tx.SegmentBytes(source, stream, seq)
		return b, err
	}
	if err != sql.ErrNoRows {
		return nil, sqlErr("probe", err)
	}
	live, err := tx.LiveWAL(source, stream)
	if err != nil {
		return nil, err
	}
	tail, err := Materialize(enc, stream, live)
	if err != nil || tail == nil {
		return nil, err
	}
	return tail.Bytes, nil
}

// checkEncoder refuses a versioned encoder that is not the one the source
// was written with (an unversioned encoder is never checked here).
func (tx *ReadTx) checkEncoder(source SourceID, enc SegmentEncoder) error {
	if enc.Version() == "" {
		return nil
	}
	s, err := tx.Source(source)
	if err != nil {
		return err
	}
	return CheckEncoder(source, s.Metadata, enc)
}

// driverBytes scans a BLOB column without database/sql's copy of it.
// Scanning into a *[]byte clones the driver's value, and modernc's driver
// has already copied the BLOB out of SQLite into a slice it allocated for
// that one value and never reuses (conn.columnBlob): a seal's rows, and
// every segment a read fetched, were copied twice (~100 MB per rwload run
// on the seal's side alone). database/sql hands a Scanner the driver's own
// value, which this keeps. That the driver never reuses it is what keeping
// it relies on; TestDriverBlobsAreOwnedByTheCaller checks it against the
// driver this module builds with.
type driverBytes []byte

func (b *driverBytes) Scan(src any) error {
	switch v := src.(type) {
	case []byte:
		*b = v
	case string: // a BLOB column holding TEXT, written by another program
		*b = []byte(v)
	case nil:
		*b = nil
	default:
		return fmt.Errorf("archive: expected a BLOB, got %T", src)
	}
	return nil
}
