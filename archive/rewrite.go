package archive

import (
	"context"
	"math"
)

// CopySpec selects what CopySourcesInto copies. The zero value copies
// nothing in time; use Everything() for a whole copy.
type CopySpec struct {
	// Start and End bound the copy (inclusive): whole segments overlapping
	// the range are copied. Start must be math.MinInt64 to keep rows from
	// before the epoch.
	Start, End int64
	// KeepStream selects the streams kept; nil keeps all.
	KeepStream func(stream string) bool
	// MetadataExtra is merged into each copied source's metadata.
	MetadataExtra map[string]string
	// Project, when set, rewrites each segment's bytes (dropping columns,
	// for instance: ProjectSegmentColumns is the caller's, because the
	// archive does not know the segment format). keep=false drops the
	// segment. A projected segment keeps its catalog meta and loses its
	// index.
	Project func(stream string, segment []byte) (out []byte, keep bool, err error)
}

// Everything is the CopySpec of a whole copy: [MinInt64, MaxInt64], every
// stream, no projection.
func Everything() CopySpec { return CopySpec{Start: math.MinInt64, End: math.MaxInt64} }

// CopySourcesInto copies every source of a into the destination
// transaction (so a combine of several archives is atomic), reading a in one
// snapshot. Segments are copied verbatim (seq renumbered densely from 0);
// the live tail is materialized through enc into one more sealed segment, so
// the copy holds no wal rows. uuids are carried (a missing one is minted).
// It returns how many sources were copied.
func (a *Archive) CopySourcesInto(ctx context.Context, dst *WriteTx, spec CopySpec, enc SegmentEncoder) (int, error) {
	n := 0
	err := a.View(ctx, func(tx *ReadTx) error {
		srcs, err := tx.Sources()
		if err != nil {
			return err
		}
		for _, s := range srcs {
			if err := CheckEncoder(s.ID, s.Metadata, enc); err != nil {
				return err
			}
			meta := map[string]string{}
			for k, v := range s.Metadata {
				meta[k] = v
			}
			for k, v := range spec.MetadataExtra {
				meta[k] = v
			}
			id, _, err := dst.InsertSource(SourceSpec{Labels: s.Labels, Metadata: meta, ClockAnchorWallNS: s.ClockAnchorWallNS}, s.UUID)
			if err != nil {
				return err
			}
			if s.Complete {
				if err := dst.MarkComplete(id); err != nil {
					return err
				}
			}
			names, err := tx.Streams(s.ID)
			if err != nil {
				return err
			}
			for _, name := range names {
				if spec.KeepStream != nil && !spec.KeepStream(name) {
					continue
				}
				if err := copyStream(tx, dst, s.ID, id, name, spec, enc); err != nil {
					return err
				}
			}
			offsets, err := tx.ClockOffsets(s.ID)
			if err != nil {
				return err
			}
			for _, o := range offsets {
				if err := dst.InsertClockOffset(id, o.TS, o.OffsetNS); err != nil {
					return err
				}
			}
			if err := copyCallerRows(tx, dst, s.ID, id, spec); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

func copyStream(tx *ReadTx, dst *WriteTx, from, to SourceID, name string, spec CopySpec, enc SegmentEncoder) error {
	segs, err := tx.SegmentsOverlapping(from, name, spec.Start, spec.End)
	if err != nil {
		return err
	}
	var seq int64
	put := func(seg *Segment) error {
		if spec.Project != nil {
			out, keep, err := spec.Project(name, seg.Bytes)
			if err != nil {
				return &EncoderError{Stream: name, Err: err}
			}
			if !keep {
				return nil
			}
			seg = &Segment{Bytes: out, Rows: seg.Rows, FirstTS: seg.FirstTS, LastTS: seg.LastTS}
		}
		if err := dst.InsertSegment(to, name, seq, seg); err != nil {
			return err
		}
		seq++
		return nil
	}
	for _, s := range segs {
		if err := put(&Segment{Bytes: s.Bytes, Rows: s.Rows, FirstTS: s.FirstTS, LastTS: s.LastTS, Index: s.Index}); err != nil {
			return err
		}
	}
	live, err := tx.LiveWAL(from, name)
	if err != nil || len(live) == 0 {
		return err
	}
	if live[len(live)-1].TS < spec.Start || live[0].TS > spec.End {
		return nil
	}
	tail, err := Materialize(enc, name, live)
	if err != nil || tail == nil {
		return err
	}
	return put(tail)
}

func copyCallerRows(tx *ReadTx, dst *WriteTx, from, to SourceID, spec CopySpec) error {
	rows, err := tx.q.QueryContext(tx.ctx, `SELECT stream, ts, blob FROM caller_rows WHERE source_id = ?1 AND ts >= ?2 AND ts <= ?3
		ORDER BY ts, rowid`, from, spec.Start, spec.End)
	if err != nil {
		return sqlErr("copy caller rows", err)
	}
	type callerRow struct {
		stream string
		ts     int64
		blob   []byte
	}
	var all []callerRow
	for rows.Next() {
		var r callerRow
		if err := rows.Scan(&r.stream, &r.ts, &r.blob); err != nil {
			rows.Close()
			return err
		}
		if spec.KeepStream == nil || spec.KeepStream(r.stream) {
			all = append(all, r)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, r := range all {
		if _, err := dst.exec("copy caller rows", `INSERT INTO caller_rows (source_id, stream, ts, blob) VALUES (?1, ?2, ?3, ?4)`,
			to, r.stream, r.ts, nonNilBytes(r.blob)); err != nil {
			return err
		}
	}
	return nil
}

// SharedSources returns the uuids of sources in b that also appear in a:
// "the same source again" as opposed to "another source with the same
// labels". Sources of unknown identity (no uuid) never match.
func SharedSources(ctx context.Context, a, b *Archive) ([]string, error) {
	have := map[string]bool{}
	if err := a.View(ctx, func(tx *ReadTx) error {
		srcs, err := tx.Sources()
		for _, s := range srcs {
			if s.UUID != "" {
				have[s.UUID] = true
			}
		}
		return err
	}); err != nil {
		return nil, err
	}
	var out []string
	err := b.View(ctx, func(tx *ReadTx) error {
		srcs, err := tx.Sources()
		for _, s := range srcs {
			if s.UUID != "" && have[s.UUID] {
				out = append(out, s.UUID)
			}
		}
		return err
	})
	return out, err
}
