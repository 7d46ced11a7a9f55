package archive

import (
	"context"
	"fmt"

	sqlite3 "modernc.org/sqlite/lib"
)

// Depth selects SQLite's quick_check or its full integrity_check.
type Depth int

const (
	Quick Depth = iota
	Full
)

// Problem is one thing Verify found wrong.
type Problem struct {
	Kind   ProblemKind
	Source SourceID // for segment and wal problems
	Stream string
	Seq    int64 // for segment problems
	Rows   int64 // for unreadable wal rows
	Detail string
}

// ProblemKind classifies a Problem.
type ProblemKind int

const (
	// ProblemCorrupt is a line of SQLite's own check, or SQLITE_CORRUPT met
	// while checking.
	ProblemCorrupt ProblemKind = iota + 1
	// ProblemForeignKey is a dangling reference.
	ProblemForeignKey
	// ProblemSegment is a segment whose catalog entry cannot be true.
	ProblemSegment
	// ProblemUnreadableWAL is wal rows at or below the sealed watermark
	// that no read path can reach (shadowed, not yet pruned).
	ProblemUnreadableWAL
)

func (p Problem) String() string {
	switch p.Kind {
	case ProblemCorrupt:
		return "corrupt: " + p.Detail
	case ProblemForeignKey:
		return "dangling reference: " + p.Detail
	case ProblemSegment:
		return fmt.Sprintf("source %d, stream %s, segment %d: %s", p.Source, p.Stream, p.Seq, p.Detail)
	case ProblemUnreadableWAL:
		return fmt.Sprintf("source %d, stream %s: %d WAL row(s) at or below the sealed watermark, which no read path can reach",
			p.Source, p.Stream, p.Rows)
	}
	return p.Detail
}

// Report is what Verify found.
type Report struct {
	Sources, Streams, Segments, WALRows int64
	Problems                            []Problem
}

// Sound reports whether no problem was found.
func (r Report) Sound() bool { return len(r.Problems) == 0 }

// Verify checks the archive and reports problems as data: SQLite's own
// check, foreign keys, and a catalog walk (segments that run backwards or
// claim no rows, shadowed wal rows). It fails only when the check cannot
// run. It never opens a segment.
func (a *Archive) Verify(ctx context.Context, depth Depth) (Report, error) {
	var rep Report
	conn, release, err := a.acquire(ctx)
	if err != nil {
		return rep, err
	}
	defer release()
	check := "PRAGMA quick_check"
	if depth == Full {
		check = "PRAGMA integrity_check"
	}
	corrupt := func(err error) bool {
		if SQLiteCode(err) == sqlite3.SQLITE_CORRUPT || SQLiteCode(err) == sqlite3.SQLITE_NOTADB {
			rep.Problems = append(rep.Problems, Problem{Kind: ProblemCorrupt, Detail: err.Error()})
			return true
		}
		return false
	}
	lines, err := queryStrings(ctx, conn, check)
	if err != nil {
		if !corrupt(err) {
			return rep, sqlErr("verify", err)
		}
	}
	for _, l := range lines {
		if l != "ok" {
			rep.Problems = append(rep.Problems, Problem{Kind: ProblemCorrupt, Detail: l})
		}
	}
	fk, err := conn.QueryContext(ctx, "PRAGMA foreign_key_check")
	if err == nil {
		for fk.Next() {
			var table, parent string
			var rowid, fkid any
			if err := fk.Scan(&table, &rowid, &parent, &fkid); err != nil {
				break
			}
			rep.Problems = append(rep.Problems, Problem{Kind: ProblemForeignKey, Detail: fmt.Sprintf("%s row %v -> %s", table, rowid, parent)})
		}
		err = fk.Err()
		fk.Close()
	}
	if err != nil && !corrupt(err) {
		return rep, sqlErr("verify: foreign keys", err)
	}
	walkErr := a.View(ctx, func(tx *ReadTx) error {
		srcs, err := tx.Sources()
		if err != nil {
			return err
		}
		rep.Sources = int64(len(srcs))
		for _, s := range srcs {
			names, err := tx.Streams(s.ID)
			if err != nil {
				return err
			}
			for _, name := range names {
				rep.Streams++
				metas, err := tx.SegmentMetas(s.ID, name)
				if err != nil {
					return err
				}
				for _, m := range metas {
					rep.Segments++
					switch {
					case m.FirstTS > m.LastTS:
						rep.Problems = append(rep.Problems, Problem{Kind: ProblemSegment, Source: s.ID, Stream: name, Seq: m.Seq,
							Detail: fmt.Sprintf("spans [%d, %d], which runs backwards", m.FirstTS, m.LastTS)})
					case m.Rows <= 0:
						rep.Problems = append(rep.Problems, Problem{Kind: ProblemSegment, Source: s.ID, Stream: name, Seq: m.Seq,
							Detail: "claims no rows; such a segment should not exist"})
					}
				}
				var total int64
				if err := tx.q.QueryRowContext(tx.ctx, `SELECT COUNT(*) FROM wal WHERE source_id = ?1 AND stream = ?2`, s.ID, name).Scan(&total); err != nil {
					return sqlErr("verify", err)
				}
				live, err := tx.LiveSpan(s.ID, name)
				if err != nil {
					return err
				}
				rep.WALRows += total
				if total > live.Rows {
					rep.Problems = append(rep.Problems, Problem{Kind: ProblemUnreadableWAL, Source: s.ID, Stream: name, Rows: total - live.Rows})
				}
			}
		}
		return nil
	})
	if walkErr != nil {
		if !corrupt(walkErr) {
			return rep, walkErr
		}
		rep.Sources, rep.Streams, rep.Segments, rep.WALRows = 0, 0, 0, 0
	}
	return rep, nil
}

func queryStrings(ctx context.Context, q queryer, query string) ([]string, error) {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return out, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
