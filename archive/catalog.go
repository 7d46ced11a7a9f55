package archive

import (
	"context"
	"database/sql/driver"
	"fmt"
	"os"
)

// StreamCatalog describes one stream from the catalog alone.
type StreamCatalog struct {
	Name     string
	Segments int64
	Sealed   Span  // rows the segments hold
	Live     Span  // live wal rows
	Bytes    int64 // segment bytes
}

// SourceCatalog describes one source and its streams.
type SourceCatalog struct {
	SourceInfo
	Streams []StreamCatalog
}

// Catalog describes every source and stream in one snapshot without reading
// a segment's bytes.
func (a *Archive) Catalog(ctx context.Context) ([]SourceCatalog, error) {
	var out []SourceCatalog
	err := a.View(ctx, func(tx *ReadTx) error {
		var err error
		out, err = tx.Catalog()
		return err
	})
	return out, err
}

// Catalog is Archive.Catalog inside an existing snapshot.
func (tx *ReadTx) Catalog() ([]SourceCatalog, error) {
	srcs, err := tx.Sources()
	if err != nil {
		return nil, err
	}
	out := make([]SourceCatalog, 0, len(srcs))
	for _, s := range srcs {
		names, err := tx.Streams(s.ID)
		if err != nil {
			return nil, err
		}
		sc := SourceCatalog{SourceInfo: s}
		for _, name := range names {
			st := StreamCatalog{Name: name}
			if st.Segments, st.Sealed, err = tx.SegmentSpan(s.ID, name); err != nil {
				return nil, err
			}
			if st.Live, err = tx.LiveSpan(s.ID, name); err != nil {
				return nil, err
			}
			if st.Bytes, err = tx.StreamBytes(s.ID, name); err != nil {
				return nil, err
			}
			sc.Streams = append(sc.Streams, st)
		}
		out = append(out, sc)
	}
	return out, nil
}

// SourceSegments is one source's whole answer: each stream's sealed
// segments in seq order, then its materialized live tail.
type SourceSegments struct {
	SourceInfo
	Streams []StreamSegments
}

// StreamSegments is one stream's segment bytes in read order.
type StreamSegments struct {
	Name     string
	Segments [][]byte
}

// ReadArchive reads every source and stream in one snapshot, checking each
// source's encoder version against enc. A stream with nothing to return is
// skipped.
func (a *Archive) ReadArchive(ctx context.Context, enc SegmentEncoder) ([]SourceSegments, error) {
	var out []SourceSegments
	err := a.View(ctx, func(tx *ReadTx) error {
		srcs, err := tx.Sources()
		if err != nil {
			return err
		}
		for _, s := range srcs {
			if err := CheckEncoder(s.ID, s.Metadata, enc); err != nil {
				return err
			}
			names, err := tx.Streams(s.ID)
			if err != nil {
				return err
			}
			ss := SourceSegments{SourceInfo: s}
			for _, name := range names {
				segs, err := tx.StreamSegments(s.ID, name, enc)
				if err != nil {
					return err
				}
				if len(segs) > 0 {
					ss.Streams = append(ss.Streams, StreamSegments{Name: name, Segments: segs})
				}
			}
			out = append(out, ss)
		}
		return nil
	})
	return out, err
}

// SegmentBytesAt fetches one segment from the archive at path, opening it
// afresh for this one fetch, so no snapshot outlives the question and
// checkpoints are never held back by a long-lived reader.
func SegmentBytesAt(ctx context.Context, path string, source SourceID, stream string, seq int64) ([]byte, bool, error) {
	a, err := Open(path)
	if err != nil {
		return nil, false, err
	}
	defer a.Close()
	var b []byte
	var ok bool
	err = a.View(ctx, func(tx *ReadTx) error {
		b, ok, err = tx.SegmentBytes(source, stream, seq)
		return err
	})
	return b, ok, err
}

// VacuumInto writes an exact, compact copy of the archive to dest (which
// must not exist) while the writer keeps running: it reads through the
// sidecar, so the copy holds every commit up to its snapshot. On a read
// handle query_only is lifted for this one statement and restored on every
// path.
func (a *Archive) VacuumInto(ctx context.Context, dest string) (err error) {
	if _, err := os.Lstat(dest); err == nil {
		return fmt.Errorf("archive: vacuum into %s: %w", dest, os.ErrExist)
	}
	conn, release, err := a.acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	if a.pinned == nil {
		if _, err := conn.ExecContext(ctx, "PRAGMA query_only=0"); err != nil {
			return sqlErr("vacuum into", err)
		}
		defer func() {
			if _, rerr := conn.ExecContext(context.Background(), "PRAGMA query_only=1"); rerr != nil {
				// A connection we cannot make read-only again is not returned
				// to the pool.
				conn.Raw(func(any) error { return driver.ErrBadConn })
				if err == nil {
					err = sqlErr("vacuum into: restore query_only", rerr)
				}
			}
		}()
	}
	if _, err := conn.ExecContext(ctx, "VACUUM INTO ?1", dest); err != nil {
		return sqlErr("vacuum into "+dest, err)
	}
	return nil
}

// Stats describes the archive file for operators (see cmd's metrics).
type Stats struct {
	PageStats
	WALRows  int64 // rows in the wal table, shadowed included
	Sources  int64
	Segments int64
	// SidecarBytes is the size of the -wal file (0 when absent).
	SidecarBytes int64
}

// Stats reads the archive's sizes and counts in one snapshot.
func (a *Archive) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	err := a.View(ctx, func(tx *ReadTx) error {
		var err error
		if s.PageStats, err = tx.PageStats(); err != nil {
			return err
		}
		if s.WALRows, err = tx.WALRowCount(0); err != nil {
			return err
		}
		if err := tx.q.QueryRowContext(tx.ctx, `SELECT COUNT(*) FROM sources`).Scan(&s.Sources); err != nil {
			return sqlErr("stats", err)
		}
		return sqlErr("stats", tx.q.QueryRowContext(tx.ctx, `SELECT COUNT(*) FROM segments`).Scan(&s.Segments))
	})
	if fi, statErr := os.Stat(a.path + "-wal"); statErr == nil {
		s.SidecarBytes = fi.Size()
	}
	return s, err
}
