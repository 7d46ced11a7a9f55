package archivecmd

import (
	"bytes"
	"context"
	"fmt"
	"math"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// VerifyOptions configures Verify.
type VerifyOptions struct {
	// Full runs SQLite's integrity_check instead of its quick_check, and
	// reads every segment a second time through the query path's reader
	// (promsample.SegmentReader, page by page against the index's page
	// checksums), comparing it with the whole-segment decode.
	Full bool
	// Progress, when set, is called with bytes decoded of the total bytes
	// of segments and live rows.
	Progress func(done, total int64)
}

// ProblemKind classifies a Problem.
type ProblemKind int

const (
	// ProblemArchive is one of the archive's own findings (archive.Verify:
	// SQLite's check, foreign keys, the catalog walk).
	ProblemArchive ProblemKind = iota + 1
	// ProblemSegment is a segment that does not decode, or whose contents
	// disagree with its catalog entry or index.
	ProblemSegment
	// ProblemTail is a live tail row that does not decode, or samples in
	// the tail no reader can attribute to a series (their anchoring row is
	// gone).
	ProblemTail
)

// Problem is one thing Verify found wrong.
type Problem struct {
	Kind   ProblemKind
	Source archive.SourceID
	Stream string
	Seq    int64 // ProblemSegment
	TS     int64 // ProblemTail: the row's ts (0: the tail as a whole)
	Detail string
}

func (p Problem) String() string {
	switch p.Kind {
	case ProblemSegment:
		return fmt.Sprintf("source %d, stream %s, segment %d: %s", p.Source, p.Stream, p.Seq, p.Detail)
	case ProblemTail:
		if p.TS != 0 {
			return fmt.Sprintf("source %d, stream %s, live row ts %d: %s", p.Source, p.Stream, p.TS, p.Detail)
		}
		return fmt.Sprintf("source %d, stream %s, live tail: %s", p.Source, p.Stream, p.Detail)
	}
	return p.Detail
}

// VerifyReport is what Verify checked and found.
type VerifyReport struct {
	Sources, Streams, Segments, LiveRows int64
	Samples                              int64 // decoded: float and histogram samples, sealed and live
	Bytes                                int64 // segment and live row bytes decoded
	// Shadowed counts wal rows at or below their stream's sealed
	// watermark that the prune has not removed yet: harmless (no read
	// sees them), and not a problem.
	Shadowed int64
	Problems []Problem
}

// Sound reports whether no problem was found.
func (r *VerifyReport) Sound() bool { return len(r.Problems) == 0 }

// Verify checks the archive a reads: the archive's own checks, then every
// segment decoded whole by promsample (its data checksum, every page of
// every column) and compared with its catalog entry and index, then every
// stream's live tail decoded row by row with each sample's series
// resolved. Problems are returned as data; an error means the check could
// not run. Segments are read one snapshot at a time per stream, so a
// verify of a live archive never pins the sidecar for long.
func Verify(ctx context.Context, a *archive.Archive, opts VerifyOptions) (*VerifyReport, error) {
	depth := archive.Quick
	if opts.Full {
		depth = archive.Full
	}
	ar, err := a.Verify(ctx, depth)
	if err != nil {
		return nil, err
	}
	rep := &VerifyReport{Sources: ar.Sources, Streams: ar.Streams}
	for _, p := range ar.Problems {
		if p.Kind == archive.ProblemUnreadableWAL {
			// Rows a segment already holds, not yet pruned: the seal's
			// prune runs after it, outside its transaction, and the
			// receiver defers it, so a live or crashed archive routinely
			// has them. The watermark hides them from every read.
			rep.Shadowed += p.Rows
			continue
		}
		rep.Problems = append(rep.Problems, Problem{Kind: ProblemArchive, Source: p.Source, Stream: p.Stream, Seq: p.Seq, Detail: p.String()})
	}
	for _, p := range ar.Problems {
		if p.Kind == archive.ProblemCorrupt {
			// The catalog cannot be trusted to walk: SQLite's finding is the answer.
			return rep, nil
		}
	}
	type streamRef struct {
		src    archive.SourceID
		stream string
	}
	var todo []streamRef
	var total int64
	err = a.View(ctx, func(tx *archive.ReadTx) error {
		srcs, err := tx.Sources()
		if err != nil {
			return err
		}
		for _, s := range srcs {
			names, err := tx.Streams(s.ID)
			if err != nil {
				return err
			}
			for _, n := range names {
				todo = append(todo, streamRef{s.ID, n})
				b, err := tx.StreamBytes(s.ID, n)
				if err != nil {
					return err
				}
				total += b
				live, err := tx.LiveWAL(s.ID, n)
				if err != nil {
					return err
				}
				for _, r := range live {
					total += int64(len(r.Data))
				}
			}
		}
		return nil
	})
	if err != nil {
		return rep, err
	}
	progress := func() {
		if opts.Progress != nil {
			opts.Progress(rep.Bytes, max(total, rep.Bytes))
		}
	}
	progress()
	for _, s := range todo {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		if err := verifyStream(ctx, a, s.src, s.stream, opts, rep, progress); err != nil {
			return rep, fmt.Errorf("source %d stream %s: %w", s.src, s.stream, err)
		}
	}
	return rep, nil
}

func verifyStream(ctx context.Context, a *archive.Archive, src archive.SourceID, stream string, opts VerifyOptions,
	rep *VerifyReport, progress func()) error {
	var metas []archive.StoredSegment
	if err := a.View(ctx, func(tx *archive.ReadTx) error {
		var err error
		metas, err = tx.SegmentMetas(src, stream)
		return err
	}); err != nil {
		return err
	}
	problem := func(seq int64, format string, args ...any) {
		rep.Problems = append(rep.Problems, Problem{Kind: ProblemSegment, Source: src, Stream: stream, Seq: seq, Detail: fmt.Sprintf(format, args...)})
	}
	// One snapshot per segment: a segment is immutable under its seq (a
	// compaction reuses a seq only with a new catalog entry, checked here).
	for _, m := range metas {
		if err := ctx.Err(); err != nil {
			return err
		}
		var b []byte
		var ok bool
		if err := a.View(ctx, func(tx *archive.ReadTx) error {
			var err error
			b, ok, err = tx.SegmentBytes(src, stream, m.Seq)
			return err
		}); err != nil {
			return err
		}
		if !ok {
			continue // gone since the listing: a compaction or eviction on a live archive
		}
		rep.Segments++
		rep.Bytes += int64(len(b))
		verifySegment(m, b, opts.Full, rep, func(format string, args ...any) { problem(m.Seq, format, args...) })
		progress()
	}
	return a.View(ctx, func(tx *archive.ReadTx) error {
		live, err := tx.LiveWAL(src, stream)
		if err != nil {
			return err
		}
		verifyTail(src, stream, live, rep)
		progress()
		return nil
	})
}

// verifySegment decodes one segment and checks it against its catalog
// entry m.
func verifySegment(m archive.StoredSegment, b []byte, full bool, rep *VerifyReport, problem func(string, ...any)) {
	if int64(len(b)) != m.Size {
		problem("the catalog says %d bytes, the BLOB has %d", m.Size, len(b))
	}
	x, err := promsample.ParseIndex(m.Index)
	if err != nil {
		problem("catalog index: %v", err)
		return
	}
	series, err := promsample.ReadSegment(b, promsample.AllTime())
	if err != nil {
		problem("%v", err)
		return
	}
	footer, err := promsample.ReadSegmentIndex(b)
	if err != nil {
		problem("footer index: %v", err)
		return
	}
	if footer.MinT != x.MinT || footer.MaxT != x.MaxT || footer.Samples != x.Samples || footer.Histograms != x.Histograms ||
		footer.Series != x.Series || len(footer.RowGroups) != len(x.RowGroups) {
		problem("the footer's index and the catalog's disagree")
	}
	var floats, hists int64
	minT, maxT := int64(math.MaxInt64), int64(math.MinInt64)
	for _, s := range series {
		floats += int64(len(s.Samples))
		hists += int64(len(s.Histograms))
		for _, smp := range s.Samples {
			minT, maxT = min(minT, smp.T), max(maxT, smp.T)
		}
		for _, h := range s.Histograms {
			minT, maxT = min(minT, h.T), max(maxT, h.T)
		}
	}
	rep.Samples += floats + hists
	if floats != x.Samples || hists != x.Histograms {
		problem("decoded %d samples and %d histograms; the index says %d and %d", floats, hists, x.Samples, x.Histograms)
	}
	if floats+hists > 0 && (minT < x.MinT || maxT > x.MaxT) {
		problem("samples span [%d, %d] ms, outside the index's [%d, %d]", minT, maxT, x.MinT, x.MaxT)
	}
	if !full || x.Table == nil {
		return
	}
	// The query path's reader, page by page, must agree with the whole decode.
	sr, err := promsample.NewSegmentReader(bytes.NewReader(b), int64(len(b)), &x)
	if err != nil {
		problem("segment reader: %v", err)
		return
	}
	var got int64
	ords := make([]int, x.Table.Len())
	for i := range ords {
		ords[i] = i
	}
	// One pass over every series, as a whole-metric read makes.
	if err := sr.ReadRun(ords, math.MinInt64, math.MaxInt64, func(_ int, s *promsample.Series) error {
		got += int64(len(s.Samples) + len(s.Histograms))
		return nil
	}); err != nil {
		problem("segment reader: %v", err)
		return
	}
	if got != floats+hists {
		problem("the segment reader reads %d samples, the whole decode %d", got, floats+hists)
	}
}

// verifyTail decodes a stream's live rows as a reader in another process
// does, with nothing but the rows: every row must decode, and every
// sample of a format-2 row must name a series that a row of its epoch
// still in the tail anchored (as promsample's tail reader resolves them:
// a table per epoch, filled by each row's anchors at their local ids).
func verifyTail(src archive.SourceID, stream string, live []archive.Row, rep *VerifyReport) {
	problem := func(ts int64, format string, args ...any) {
		rep.Problems = append(rep.Problems, Problem{Kind: ProblemTail, Source: src, Stream: stream, TS: ts, Detail: fmt.Sprintf(format, args...)})
	}
	var d promsample.RowDecoder
	var row promsample.DecodedRow
	anchored := map[uint64][]bool{} // epoch -> local id -> anchored
	var unresolved, unresolvedRows, firstUnresolved int64
	for _, r := range live {
		rep.LiveRows++
		rep.Bytes += int64(len(r.Data))
		if err := d.Decode(r.Data, &row); err != nil {
			problem(r.TS, "%v", err)
			continue
		}
		h := row.Header
		if h.Format == 1 || h.Close {
			for _, s := range row.Series {
				rep.Samples += int64(len(s.Samples) + len(s.Histograms))
			}
			continue
		}
		table := anchored[h.Epoch]
		if end := int(h.FirstLocal) + len(row.Anchors); end > len(table) {
			table = append(table, make([]bool, end-len(table))...)
		}
		for i := range row.Anchors {
			table[int(h.FirstLocal)+i] = true
		}
		anchored[h.Epoch] = table
		var bad int64
		for _, s := range row.Series {
			n := int64(len(s.Samples) + len(s.Histograms))
			if int(s.Local) >= len(table) || !table[s.Local] {
				bad += n
				continue
			}
			rep.Samples += n
		}
		if bad > 0 {
			if unresolvedRows == 0 {
				firstUnresolved = r.TS
			}
			unresolved += bad
			unresolvedRows++
		}
	}
	if unresolved > 0 {
		problem(0, "%d sample(s) in %d row(s) from ts %d name series whose anchoring row is gone "+
			"(did retention remove the start of an unsealed epoch?): no reader can attribute them",
			unresolved, unresolvedRows, firstUnresolved)
	}
}
