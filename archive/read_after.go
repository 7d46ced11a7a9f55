package archive

import (
	"database/sql"
)

// Reads for a caller that walks a stream forward from a position, a unit
// at a time (the forwarder): the segments after a receipt ts, and the raw
// wal rows after one, shadowed rows included.

// StreamSegmentsAfter returns, by seq and catalog only, at most limit (<= 0:
// every) of a stream's segments whose newest row is after ts (last_ts > ts).
// A stream's segments cover disjoint receipt-time ranges in seq order, so
// these are the segments a reader that has read everything up to ts has
// yet to read, the first of them possibly straddling ts.
func (tx *ReadTx) StreamSegmentsAfter(source SourceID, stream string, ts int64, limit int) ([]StreamSegment, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	return tx.streamSegments(`WHERE source_id = ?1 AND stream = ?2 AND last_ts > ?3 ORDER BY seq LIMIT ?4`,
		source, stream, ts, limit)
}

// WALFrom returns, by ts, at most limit (<= 0: every) of a stream's raw wal
// rows with ts >= from, and at most maxBytes (<= 0: no bound) of their
// data, but at least one row. Unlike LiveWAL it does not apply the sealed
// watermark: shadowed rows (a segment holds them; the prune has not yet
// deleted them, or WriterOptions.KeepWAL keeps them) are returned too. A
// caller that reads rows below the watermark must know which of them it
// wants; see SealedWatermark.
func (tx *ReadTx) WALFrom(source SourceID, stream string, from int64, limit int, maxBytes int64) ([]Row, error) {
	if limit <= 0 {
		limit = -1
	}
	rs, err := tx.q.QueryContext(tx.ctx, `SELECT stream, ts, wall_offset, row FROM wal WHERE source_id = ?1 AND stream = ?2 AND ts >= ?3
		ORDER BY ts LIMIT ?4`, source, stream, from, limit)
	if err != nil {
		return nil, sqlErr("read wal", err)
	}
	defer rs.Close()
	var out []Row
	var bytes int64
	for rs.Next() {
		var r Row
		if err := rs.Scan(&r.Stream, &r.TS, &r.WallOffset, (*driverBytes)(&r.Data)); err != nil {
			return nil, sqlErr("read wal", err)
		}
		out = append(out, r)
		if bytes += int64(len(r.Data)); maxBytes > 0 && bytes >= maxBytes {
			break
		}
	}
	return out, sqlErr("read wal", rs.Err())
}

// WALCountBetween counts a stream's raw wal rows with from <= ts <= to,
// shadowed rows included.
func (tx *ReadTx) WALCountBetween(source SourceID, stream string, from, to int64) (n int64, err error) {
	err = tx.q.QueryRowContext(tx.ctx, `SELECT COUNT(*) FROM wal WHERE source_id = ?1 AND stream = ?2 AND ts >= ?3 AND ts <= ?4`,
		source, stream, from, to).Scan(&n)
	return n, sqlErr("count wal", err)
}

// SealedWatermark returns a stream's sealed watermark, the newest last_ts
// of its segments; ok is false when it has none (every wal row is live).
func (tx *ReadTx) SealedWatermark(source SourceID, stream string) (ts int64, ok bool, err error) {
	var v sql.NullInt64
	err = tx.q.QueryRowContext(tx.ctx, `SELECT MAX(last_ts) FROM segments WHERE source_id = ?1 AND stream = ?2`,
		source, stream).Scan(&v)
	return v.Int64, v.Valid, sqlErr("sealed watermark", err)
}
