package archive_test

// Reference-notes §8.1: src/archive.rs unit tests, against the low-level
// write handle (archive.Create) and the read handle (archive.Open).
//
// Not translatable from an external test package: the per-connection
// pragma checks (open_reapplies_the_per_connection_pragmas,
// a_writing_connection_does_not_get_the_reader_cache, the synchronous half
// of effective_config_matches_what_was_measured, and query_only around
// VacuumInto), because no exported API runs a PRAGMA on a handle's own
// connection; and create_honors_the_page_size_it_is_given (a test-only path
// the Go package does not export).

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

func TestRefVacuumIntoWorksOnTheReadHandle(t *testing.T) {
	h, path := newHandle(t)
	src := addSrc(t, h, map[string]string{"s": "1"})
	putWAL(t, h, src, "s", 1, 2)
	must(t, h.Close())

	a := openRead(t, path)
	dest := filepath.Join(t.TempDir(), "copy.dendro")
	if err := a.VacuumInto(context.Background(), dest); err != nil {
		t.Fatalf("VacuumInto: %v", err)
	}
	c := openRead(t, dest)
	eq(t, "copy live rows", liveTS(t, c, src, "s"), []int64{1, 2})
	before, _ := os.ReadFile(dest)
	if err := a.VacuumInto(context.Background(), dest); err == nil {
		t.Fatal("a second VacuumInto onto an existing file succeeded")
	}
	after, _ := os.ReadFile(dest)
	if string(before) != string(after) {
		t.Error("the failed VacuumInto changed the existing destination")
	}
	// The read handle is still usable after both dumps.
	eq(t, "original live rows", liveTS(t, a, src, "s"), []int64{1, 2})
}

func TestRefCreateAppliesTheOneWayPragmas(t *testing.T) {
	h, path := newHandle(t)
	var ps archive.PageStats
	view(t, h, func(tx *archive.ReadTx) error {
		var err error
		ps, err = tx.PageStats()
		return err
	})
	eq(t, "page_size on the creating connection", ps.PageSize, int64(4096))
	must(t, h.Close())
	for _, sidecar := range []string{"-wal", "-shm"} {
		if _, err := os.Stat(path + sidecar); err == nil {
			t.Errorf("a clean close left %s", sidecar)
		}
	}
	db := rawDB(t, path)
	for _, c := range []struct {
		pragma string
		want   any
	}{
		{"auto_vacuum", int64(2)},
		{"journal_mode", "wal"},
		{"page_size", int64(4096)},
		{"application_id", int64(archive.ApplicationID)},
		{"user_version", int64(4)},
	} {
		var got any
		if err := db.QueryRow("PRAGMA " + c.pragma).Scan(&got); err != nil {
			t.Fatalf("PRAGMA %s: %v", c.pragma, err)
		}
		if s, ok := got.(string); ok {
			got = strings.ToLower(s)
		}
		eq(t, c.pragma, got, c.want)
	}
	a := openRead(t, path)
	view(t, a, func(tx *archive.ReadTx) error {
		var err error
		ps, err = tx.PageStats()
		return err
	})
	eq(t, "page_size after reopen", ps.PageSize, int64(4096))
}

func TestRefSchemaRoundTripsASource(t *testing.T) {
	h, _ := newHandle(t)
	spec := archive.SourceSpec{
		Labels:            map[string]string{"host": "web-01", "source": "rezolus"},
		Metadata:          map[string]string{"producer_version": "1.2.3"},
		ClockAnchorWallNS: 1_700_000_000_000_000_000,
	}
	var id archive.SourceID
	var uuid string
	update(t, h, func(tx *archive.WriteTx) error {
		var err error
		id, uuid, err = tx.InsertSource(spec, "")
		return err
	})
	var got archive.SourceInfo
	view(t, h, func(tx *archive.ReadTx) error {
		var err error
		got, err = tx.Source(id)
		return err
	})
	eq(t, "labels", got.Labels, spec.Labels)
	eq(t, "metadata", got.Metadata, spec.Metadata)
	eq(t, "anchor", got.ClockAnchorWallNS, spec.ClockAnchorWallNS)
	eq(t, "complete", got.Complete, false)
	eq(t, "uuid", got.UUID, uuid)
}

func TestRefSegmentsReadBackInSeqOrderNotInsertionOrder(t *testing.T) {
	h, _ := newHandle(t)
	src := addSrc(t, h, nil)
	putSeg(t, h, src, "s", 1, 99)
	putSeg(t, h, src, "s", 0, 200)
	var seqs, lasts []int64
	view(t, h, func(tx *archive.ReadTx) error {
		segs, err := tx.Segments(src, "s")
		for _, s := range segs {
			seqs = append(seqs, s.Seq)
			lasts = append(lasts, s.LastTS)
		}
		return err
	})
	eq(t, "seqs", seqs, []int64{0, 1})
	eq(t, "last_ts", lasts, []int64{200, 99})
}

func TestRefTotalRowsSumsAcrossSegments(t *testing.T) {
	h, _ := newHandle(t)
	src := addSrc(t, h, nil)
	putSeg(t, h, src, "s", 0, 1, 2, 3)
	putSeg(t, h, src, "s", 1, 4, 5)
	view(t, h, func(tx *archive.ReadTx) error {
		n, err := tx.TotalRows(src, "s")
		eq(t, "total rows", n, int64(5))
		return err
	})
}

func TestRefStreamsListsEachStreamOnce(t *testing.T) {
	h, _ := newHandle(t)
	src := addSrc(t, h, nil)
	putSeg(t, h, src, "b", 0, 1)
	putSeg(t, h, src, "b", 1, 2)
	putSeg(t, h, src, "a", 0, 1)
	putWAL(t, h, src, "a", 5, 6)
	putWAL(t, h, src, "b", 7)
	eq(t, "streams", streamsOf(t, h, src), []string{"a", "b"})
}

func TestRefAllStreamsIncludesAStreamThatHasNeverSealed(t *testing.T) {
	h, _ := newHandle(t)
	src := addSrc(t, h, nil)
	putSeg(t, h, src, "sealed", 0, 1)
	putWAL(t, h, src, "unsealed", 1)
	eq(t, "streams", streamsOf(t, h, src), []string{"sealed", "unsealed"})
}

func TestRefAnUnboundedCutoffEvictsEverythingRatherThanNothing(t *testing.T) {
	h, _ := newHandle(t)
	src := addSrc(t, h, nil)
	update(t, h, func(tx *archive.WriteTx) error {
		return tx.InsertSegment(src, "s", 0, &archive.Segment{Bytes: []byte("x"), Rows: 2, FirstTS: 10, LastTS: 20})
	})
	putWAL(t, h, src, "s", 30)
	var ev archive.Evicted
	update(t, h, func(tx *archive.WriteTx) error {
		var err error
		ev, err = tx.EvictBefore(src, math.MaxInt64)
		return err
	})
	eq(t, "segments", ev.Segments, int64(1))
	eq(t, "wal rows", ev.WALRows, int64(1))
	eq(t, "streams left", len(streamsOf(t, h, src)), 0)
}

func TestRefTimestampsSpanTheWholeSignedRange(t *testing.T) {
	h, _ := newHandle(t)
	var src archive.SourceID
	update(t, h, func(tx *archive.WriteTx) error {
		var err error
		src, _, err = tx.InsertSource(archive.SourceSpec{ClockAnchorWallNS: math.MinInt64}, "")
		return err
	})
	all := []int64{math.MinInt64, -1_000_000_000, 0, 1, math.MaxInt64}
	putWAL(t, h, src, "s", all...)
	eq(t, "live before a seal", liveTS(t, h, src, "s"), all)
	eq(t, "raw wal", walTS(t, h, src, "s"), all)
	view(t, h, func(tx *archive.ReadTx) error {
		s, err := tx.Source(src)
		eq(t, "anchor", s.ClockAnchorWallNS, int64(math.MinInt64))
		return err
	})
	update(t, h, func(tx *archive.WriteTx) error {
		return tx.InsertSegment(src, "s", 0, &archive.Segment{Bytes: []byte("x"), Rows: 3, FirstTS: math.MinInt64, LastTS: 0})
	})
	eq(t, "live after a segment over [MIN, 0]", liveTS(t, h, src, "s"), []int64{1, math.MaxInt64})
}

func TestRefARowAtTimestampZeroIsLive(t *testing.T) {
	h, _ := newHandle(t)
	src := addSrc(t, h, nil)
	putWAL(t, h, src, "s", 0, 1, 2)
	eq(t, "live", liveTS(t, h, src, "s"), []int64{0, 1, 2})
	view(t, h, func(tx *archive.ReadTx) error {
		sp, err := tx.LiveSpan(src, "s")
		eq(t, "live span", sp, archive.Span{Rows: 3, FirstTS: 0, LastTS: 2})
		return err
	})
	putSeg(t, h, src, "s", 0, 0, 1)
	eq(t, "live after [0,1]", liveTS(t, h, src, "s"), []int64{2})
}

func TestRefPerStreamEvictionLeavesTheStreamsItWasNotGiven(t *testing.T) {
	h, _ := newHandle(t)
	src := addSrc(t, h, nil)
	for _, st := range []string{"debug/a", "debug/b", "metric/c"} {
		update(t, h, func(tx *archive.WriteTx) error {
			if err := tx.InsertSegment(src, st, 0, &archive.Segment{Bytes: []byte("x"), Rows: 10, FirstTS: 0, LastTS: 9}); err != nil {
				return err
			}
			return tx.InsertSegment(src, st, 1, &archive.Segment{Bytes: []byte("y"), Rows: 10, FirstTS: 100, LastTS: 109})
		})
	}
	var ev archive.Evicted
	update(t, h, func(tx *archive.WriteTx) error {
		var err error
		ev, err = tx.EvictStreamsBefore(src, 50, func(s string) bool { return strings.HasPrefix(s, "debug/") })
		return err
	})
	eq(t, "segments evicted", ev.Segments, int64(2))
	eq(t, "metric/c seqs", seqsOf(t, h, src, "metric/c"), []int64{0, 1})
	eq(t, "debug/a seqs", seqsOf(t, h, src, "debug/a"), []int64{1})
}

func TestRefPerStreamEvictionTakesTheWALRowsItsSegmentsShadowed(t *testing.T) {
	h, _ := newHandle(t)
	src := addSrc(t, h, nil)
	update(t, h, func(tx *archive.WriteTx) error {
		return tx.InsertSegment(src, "s", 0, &archive.Segment{Bytes: []byte("x"), Rows: 2, FirstTS: 0, LastTS: 20})
	})
	putWAL(t, h, src, "s", 10, 20, 30)
	eq(t, "live before", liveTS(t, h, src, "s"), []int64{30})
	update(t, h, func(tx *archive.WriteTx) error {
		_, err := tx.EvictStreamsBefore(src, 25, func(string) bool { return true })
		return err
	})
	eq(t, "segments left", seqsOf(t, h, src, "s"), []int64{})
	eq(t, "live after", liveTS(t, h, src, "s"), []int64{30})
	eq(t, "raw wal after", walTS(t, h, src, "s"), []int64{30})
}

func TestRefSegmentSizesAreOldestFirstAndMeasureThePayload(t *testing.T) {
	h, _ := newHandle(t)
	src := addSrc(t, h, nil)
	update(t, h, func(tx *archive.WriteTx) error {
		if err := tx.InsertSegment(src, "s", 0, &archive.Segment{Bytes: make([]byte, 300), Rows: 1, FirstTS: 99, LastTS: 99}); err != nil {
			return err
		}
		return tx.InsertSegment(src, "t", 0, &archive.Segment{Bytes: make([]byte, 100), Rows: 1, FirstTS: 9, LastTS: 9})
	})
	view(t, h, func(tx *archive.ReadTx) error {
		got, err := tx.SegmentSizes(src)
		eq(t, "sizes", got, []archive.SizeAt{{LastTS: 9, Bytes: 100}, {LastTS: 99, Bytes: 300}})
		return err
	})
}

func TestRefArchiveBytesCountsTheFileIncludingPagesNotYetReclaimed(t *testing.T) {
	h, _ := newHandle(t)
	src := addSrc(t, h, nil)
	stats := func() archive.PageStats {
		var ps archive.PageStats
		view(t, h, func(tx *archive.ReadTx) error {
			var err error
			ps, err = tx.PageStats()
			return err
		})
		return ps
	}
	empty := stats()
	update(t, h, func(tx *archive.WriteTx) error {
		for i := int64(0); i < 40; i++ {
			if err := tx.InsertSegment(src, "s", i, &archive.Segment{Bytes: make([]byte, 4096), Rows: 1, FirstTS: i, LastTS: i}); err != nil {
				return err
			}
		}
		return nil
	})
	full := stats()
	if full.Bytes() <= empty.Bytes() {
		t.Fatalf("40 segments of 4096 bytes did not grow the file: %d -> %d", empty.Bytes(), full.Bytes())
	}
	update(t, h, func(tx *archive.WriteTx) error {
		_, err := tx.EvictBefore(src, math.MaxInt64)
		return err
	})
	evicted := stats()
	eq(t, "bytes after eviction", evicted.Bytes(), full.Bytes())
	if evicted.Free == 0 {
		t.Error("eviction left no free pages")
	}
}

func TestRefSegmentsAndWALRowsAreScopedPerSource(t *testing.T) {
	h, _ := newHandle(t)
	r1 := addSrc(t, h, map[string]string{"host": "r1"})
	r2 := addSrc(t, h, map[string]string{"host": "r2"})
	putSeg(t, h, r1, "s", 0, 1, 2)
	putWAL(t, h, r1, "s", 3)
	putWAL(t, h, r2, "s", 7)
	eq(t, "r1 seqs", seqsOf(t, h, r1, "s"), []int64{0})
	eq(t, "r2 seqs", seqsOf(t, h, r2, "s"), []int64{})
	eq(t, "r1 wal", walTS(t, h, r1, "s"), []int64{3})
	eq(t, "r2 wal", walTS(t, h, r2, "s"), []int64{7})
}

func TestRefCreateRefusesAnExistingFile(t *testing.T) {
	path := at.Path(t)
	must(t, os.WriteFile(path, []byte("precious"), 0o644))
	_, err := archive.Create(path)
	if err == nil {
		t.Fatal("Create over an existing file succeeded")
	}
	isErr(t, err, archive.ErrExists)
	isErr(t, err, os.ErrExist)
	if !strings.Contains(err.Error(), "exists") {
		t.Errorf("error %q does not carry the OS already-exists error", err)
	}
	b, _ := os.ReadFile(path)
	eq(t, "file content", string(b), "precious")
	// Also refused through the writer.
	_, err = archive.CreateWriter(path, archive.WriterOptions{Encoder: at.Tags{}})
	isErr(t, err, archive.ErrExists)
	b, _ = os.ReadFile(path)
	eq(t, "file content after CreateWriter", string(b), "precious")
}

func TestRefLiveWAL(t *testing.T) {
	cases := []struct {
		name     string
		segment  []int64 // Tags segment; nil: none
		wal      []int64
		wantLive []int64
	}{
		{"excludes rows already covered by a sealed segment", []int64{10, 20, 30}, []int64{10, 20, 30, 40}, []int64{40}},
		{"returns everything when nothing has sealed", nil, []int64{10, 20, 30, 40}, []int64{10, 20, 30, 40}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, _ := newHandle(t)
			src := addSrc(t, h, nil)
			if c.segment != nil {
				putSeg(t, h, src, "s", 0, c.segment...)
			}
			putWAL(t, h, src, "s", c.wal...)
			eq(t, "live", liveTS(t, h, src, "s"), c.wantLive)
			eq(t, "raw wal", walTS(t, h, src, "s"), c.wal)
		})
	}
}

func TestRefLiveWALWatermarkIsScopedToItsOwnStreamAndSource(t *testing.T) {
	h, _ := newHandle(t)
	r1 := addSrc(t, h, map[string]string{"host": "r1"})
	r2 := addSrc(t, h, map[string]string{"host": "r2"})
	putSeg(t, h, r1, "cpu_usage", 0, 10, 30)
	putWAL(t, h, r1, "cpu_usage", 40)
	putWAL(t, h, r1, "blockio", 5)
	putWAL(t, h, r2, "cpu_usage", 5)
	eq(t, "r1 blockio", liveTS(t, h, r1, "blockio"), []int64{5})
	eq(t, "r2 cpu_usage", liveTS(t, h, r2, "cpu_usage"), []int64{5})
	eq(t, "r1 cpu_usage", liveTS(t, h, r1, "cpu_usage"), []int64{40})
}

func TestRefSegmentSpanSummarizesTheCatalogWithoutReadingABlob(t *testing.T) {
	h, _ := newHandle(t)
	src := addSrc(t, h, nil)
	update(t, h, func(tx *archive.WriteTx) error {
		if err := tx.InsertSegment(src, "s", 0, &archive.Segment{Bytes: []byte("x"), Rows: 3, FirstTS: 10, LastTS: 29}); err != nil {
			return err
		}
		return tx.InsertSegment(src, "s", 1, &archive.Segment{Bytes: []byte("y"), Rows: 2, FirstTS: 30, LastTS: 49})
	})
	view(t, h, func(tx *archive.ReadTx) error {
		n, sp, err := tx.SegmentSpan(src, "s")
		if err != nil {
			return err
		}
		eq(t, "count", n, int64(2))
		eq(t, "span", sp, archive.Span{Rows: 5, FirstTS: 10, LastTS: 49})
		n, sp, err = tx.SegmentSpan(src, "none")
		eq(t, "empty count", n, int64(0))
		eq(t, "empty span rows", sp.Rows, int64(0))
		return err
	})
}

func TestRefLiveWALSpanCountsTheSameRowsLiveWALReturns(t *testing.T) {
	h, _ := newHandle(t)
	src := addSrc(t, h, nil)
	putSeg(t, h, src, "s", 0, 10, 20, 30)
	putWAL(t, h, src, "s", 10, 20, 30, 40, 50)
	view(t, h, func(tx *archive.ReadTx) error {
		sp, err := tx.LiveSpan(src, "s")
		eq(t, "live span", sp, archive.Span{Rows: 2, FirstTS: 40, LastTS: 50})
		return err
	})
	eq(t, "live", liveTS(t, h, src, "s"), []int64{40, 50})
}

func TestRefPruneIsIdempotentAndBoundedToOneStream(t *testing.T) {
	h, _ := newHandle(t)
	src := addSrc(t, h, nil)
	putWAL(t, h, src, "a", 1, 2)
	putWAL(t, h, src, "b", 1)
	for i, want := range []int64{1, 0} {
		update(t, h, func(tx *archive.WriteTx) error {
			n, err := tx.PruneWAL(src, "a", 1)
			if n != want {
				t.Errorf("prune %d deleted %d, want %d", i, n, want)
			}
			return err
		})
	}
	eq(t, "a", walTS(t, h, src, "a"), []int64{2})
	eq(t, "b untouched", walTS(t, h, src, "b"), []int64{1})
}

func TestRefInsertWALRowsInsertsEveryRowInTheBatch(t *testing.T) {
	h, _ := newHandle(t)
	src := addSrc(t, h, nil)
	var rows []archive.Row
	var names []string
	for i := 0; i < 26; i++ {
		name := "stream-" + string(rune('a'+i))
		names = append(names, name)
		rows = append(rows, at.Rows(name, 1000)...)
	}
	update(t, h, func(tx *archive.WriteTx) error { return tx.InsertWALRows(src, rows) })
	eq(t, "streams", streamsOf(t, h, src), names)
	view(t, h, func(tx *archive.ReadTx) error {
		n, err := tx.WALRowCount(src)
		eq(t, "rows", n, int64(26))
		return err
	})
}

func TestRefInsertWALRowsIsOneTransactionForTheWholeTick(t *testing.T) {
	h, _ := newHandle(t)
	src := addSrc(t, h, nil)
	rows := append(at.Rows("a", 1, 2), at.Rows("b", 1)...)
	rows = append(rows, at.Rows("a", 2)...) // duplicate primary key
	err := h.Update(context.Background(), func(tx *archive.WriteTx) error { return tx.InsertWALRows(src, rows) })
	if err == nil {
		t.Fatal("a batch with a duplicate (stream, ts) was committed")
	}
	if !archive.IsConstraint(err) {
		t.Errorf("error %v is not classified as a constraint failure", err)
	}
	if msg := strings.ToLower(err.Error()); !strings.Contains(msg, "unique") && !strings.Contains(msg, "constraint") {
		t.Errorf("error %q mentions neither unique nor constraint", err)
	}
	view(t, h, func(tx *archive.ReadTx) error {
		n, err := tx.WALRowCount(src)
		eq(t, "rows left from the batch", n, int64(0))
		return err
	})
}

func TestRefATransactionCommitsTheWholeBatchOrNoneOfIt(t *testing.T) {
	h, _ := newHandle(t)
	boom := errors.New("boom")
	var src archive.SourceID
	err := h.Update(context.Background(), func(tx *archive.WriteTx) error {
		var err error
		if src, _, err = tx.InsertSource(archive.SourceSpec{}, ""); err != nil {
			return err
		}
		if err := tx.InsertSegment(src, "s", 0, tagSeg(1, 2)); err != nil {
			return err
		}
		if err := tx.InsertWALRows(src, at.Rows("s", 3)); err != nil {
			return err
		}
		return boom
	})
	isErr(t, err, boom)
	eq(t, "sources", len(sourcesOf(t, h)), 0)
	view(t, h, func(tx *archive.ReadTx) error {
		n, err := tx.WALRowCount(0)
		eq(t, "wal rows", n, int64(0))
		return err
	})
	// A failing statement (not the caller's error) rolls back too.
	id := addSrc(t, h, nil)
	err = h.Update(context.Background(), func(tx *archive.WriteTx) error {
		if err := tx.InsertSegment(id, "s", 0, tagSeg(1)); err != nil {
			return err
		}
		return tx.InsertSegment(id, "s", 0, tagSeg(2)) // same seq: primary key
	})
	if !archive.IsConstraint(err) {
		t.Errorf("duplicate seq: %v, want a constraint error", err)
	}
	eq(t, "segments after the failed batch", seqsOf(t, h, id, "s"), []int64{})
}
