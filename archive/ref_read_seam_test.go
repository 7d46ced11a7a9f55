package archive_test

// Reference-notes §8.10: tests/read_seam.rs — the seal seam, snapshots, the
// encoder contract at seal, retention and clock offsets through the writer.

import (
	"math"
	"strings"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

// seamFixture is an archive with three unsealed rows of stream s, a read
// handle on it, and a second (raw) connection that can seal behind it.
func seamFixture(t *testing.T) (path string, src archive.SourceID, a *archive.Archive, sealBehind func()) {
	h, path := newHandle(t)
	src = addSrc(t, h, nil)
	putWAL(t, h, src, "s", 1, 2, 3)
	must(t, h.Close())
	a = openRead(t, path)
	db := rawDB(t, path)
	sealBehind = func() {
		tx, err := db.Begin()
		must(t, err)
		mustExec(t, tx, `INSERT INTO segments (source_id, stream, seq, rows, first_ts, last_ts, bytes) VALUES (?1, 's', 0, 3, 1, 3, '1,2,3')`, src)
		must(t, tx.Commit())
		mustExec(t, db, `DELETE FROM wal WHERE source_id = ?1 AND stream = 's' AND ts <= 3`, src)
	}
	return path, src, a, sealBehind
}

func TestRefTwoReadsWithoutASnapshotLoseTheRowsEntirely(t *testing.T) {
	_, src, a, sealBehind := seamFixture(t)
	var segs []archive.StoredSegment
	view(t, a, func(tx *archive.ReadTx) error {
		var err error
		segs, err = tx.Segments(src, "s")
		return err
	})
	sealBehind()
	live := liveTS(t, a, src, "s")
	// The hazard: neither read saw the rows.
	eq(t, "segments seen", len(segs), 0)
	eq(t, "live rows seen", live, []int64{})
}

func TestRefOneSnapshotSurvivesASealLandingMidRead(t *testing.T) {
	_, src, a, sealBehind := seamFixture(t)
	var segs []archive.StoredSegment
	var live []archive.Row
	view(t, a, func(tx *archive.ReadTx) error {
		var err error
		if segs, err = tx.Segments(src, "s"); err != nil {
			return err
		}
		sealBehind()
		live, err = tx.LiveWAL(src, "s")
		return err
	})
	eq(t, "segments seen", len(segs), 0)
	eq(t, "live rows seen", tsOf(live), []int64{1, 2, 3})
	// And afterwards the segment alone answers.
	eq(t, "read after the seal", at.ReadStrings(t, a.Path(), at.Tags{}), [][]string{{"1,2,3"}})
}

func TestRefReadArchiveHoldsOneSnapshotAcrossStreams(t *testing.T) {
	h, path := newHandle(t)
	src := addSrc(t, h, nil)
	putWAL(t, h, src, "a", 1)
	putWAL(t, h, src, "s", 1, 2, 3)
	must(t, h.Close())
	db := rawDB(t, path)
	committed := false
	enc := at.EncoderFunc(func(stream string, rows []archive.Row) (*archive.Segment, error) {
		if stream == "a" && !committed {
			committed = true
			mustExec(t, db, `INSERT INTO wal (source_id, stream, ts, wall_offset, row) VALUES (?1, 's', 4, 0, x'00')`, src)
		}
		return at.Tags{}.Encode(stream, rows)
	})
	got := at.ReadStrings(t, path, enc)
	if !committed {
		t.Fatal("the encoder never ran for stream a")
	}
	eq(t, "read", got, [][]string{{"1"}, {"1,2,3"}})
	eq(t, "a later read", at.ReadStrings(t, path, at.Tags{}), [][]string{{"1"}, {"1,2,3,4"}})
}

// dropLast drops the last row, and makes no segment of fewer than 2 rows.
var dropLast = at.EncoderFunc(func(stream string, rows []archive.Row) (*archive.Segment, error) {
	if len(rows) < 2 {
		return nil, nil
	}
	return at.Tags{}.Encode(stream, rows[:len(rows)-1])
})

func TestRefADroppedTrailingRowStaysLiveInsteadOfBeingPruned(t *testing.T) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{Encoder: dropLast})
	must(t, s.Append(ctx, at.Rows("s", 1, 2, 3)...))
	sealed := sealWait(t, s, "s")
	if len(sealed) != 1 {
		t.Fatalf("sealed %v", sealed)
	}
	eq(t, "segment span", []int64{sealed[0].Rows, sealed[0].FirstTS, sealed[0].LastTS}, []int64{2, 1, 2})
	a := openRead(t, w.Path())
	eq(t, "live", liveTS(t, a, s.ID(), "s"), []int64{3})
	eq(t, "raw wal", walTS(t, a, s.ID(), "s"), []int64{3})
	eq(t, "read", at.ReadStrings(t, w.Path(), at.Tags{}), [][]string{{"1,2", "3"}})
}

func TestRefEncoderContractViolationsStopTheWriterAndKeepTheRows(t *testing.T) {
	cases := []struct {
		name string
		rows []int64
		enc  at.EncoderFunc
	}{
		{"an encoder cannot invent coverage", []int64{1, 2, 3}, func(string, []archive.Row) (*archive.Segment, error) {
			return &archive.Segment{Bytes: []byte("x"), Rows: 9999, FirstTS: 0, LastTS: math.MaxInt64}, nil
		}},
		{"an encoder that drops a middle run does not lose the rows", []int64{1, 2, 3, 4}, func(s string, rows []archive.Row) (*archive.Segment, error) {
			return &archive.Segment{Bytes: []byte("1,4"), Rows: 2, FirstTS: rows[0].TS, LastTS: rows[len(rows)-1].TS}, nil
		}},
		{"an encoder claiming more rows than its span holds is refused", []int64{1, 2, 3}, func(s string, rows []archive.Row) (*archive.Segment, error) {
			return &archive.Segment{Bytes: []byte("1,2,3"), Rows: 3, FirstTS: 1, LastTS: 2}, nil
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := at.Ctx(t)
			w, s := newSource(t, archive.WriterOptions{Encoder: c.enc})
			must(t, s.Append(ctx, at.Rows("s", c.rows...)...))
			must(t, s.Seal(ctx, "s"))
			err := s.Sync(ctx)
			if !asErr(err, new(*archive.EncoderContractError)) {
				t.Fatalf("Sync = %v, want a stopped writer whose root is EncoderContract", err)
			}
			isErr(t, err, archive.ErrWriterStopped)
			isErr(t, w.Err(), archive.ErrEncoderContract)
			isErr(t, w.Close(), archive.ErrEncoderContract)
			a := openRead(t, w.Path())
			eq(t, "rows still live", liveTS(t, a, s.ID(), "s"), c.rows)
			eq(t, "segments", seqsOf(t, a, s.ID(), "s"), []int64{})
		})
	}
}

func TestRefRetentionRunsThroughTheWriterAndReportsWhatItRemoved(t *testing.T) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{})
	must(t, s.Append(ctx, append(at.Rows("debug/a", 10, 20), at.Rows("metric/b", 10, 20)...)...))
	sealWait(t, s, "debug/a", "metric/b")
	ev, err := w.EvictStreamsBefore(ctx, s.ID(), 100, func(st string) bool { return strings.HasPrefix(st, "debug/") })
	must(t, err)
	eq(t, "evicted segments", ev.Segments, int64(1))
	eq(t, "evicted live rows", ev.LiveRows, int64(0))
	eq(t, "streams", streamsOf(t, openRead(t, w.Path()), s.ID()), []string{"metric/b"})
}

func TestRefTwoSealsAtOneTimestampLeaveOneClockObservation(t *testing.T) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{})
	must(t, s.Append(ctx, archive.Row{Stream: "a", TS: 100, WallOffset: 11, Data: []byte("a")}))
	must(t, s.Append(ctx, archive.Row{Stream: "b", TS: 100, WallOffset: 22, Data: []byte("b")}))
	sealWait(t, s, "a")
	sealWait(t, s, "b")
	eq(t, "offsets", offsetsOf(t, openRead(t, w.Path()), s.ID()), []archive.ClockOffset{{TS: 100, OffsetNS: 11}})
}

func TestRefOneSealBatchRecordsTheNewestObservation(t *testing.T) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{})
	must(t, s.Append(ctx,
		archive.Row{Stream: "a", TS: 100, WallOffset: 1, Data: []byte("a")},
		archive.Row{Stream: "b", TS: 200, WallOffset: 2, Data: []byte("b")},
		archive.Row{Stream: "c", TS: 200, WallOffset: 3, Data: []byte("c")}))
	sealWait(t, s, "a", "b", "c")
	// One observation per batch: the newest; on a tie the later stream wins.
	eq(t, "offsets", offsetsOf(t, openRead(t, w.Path()), s.ID()), []archive.ClockOffset{{TS: 200, OffsetNS: 3}})
}

func TestRefRetentionBoundsTheClockOffsetSeries(t *testing.T) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{})
	for _, ts := range []int64{10, 20, 30} {
		must(t, s.Append(ctx, archive.Row{Stream: "s", TS: ts, WallOffset: ts, Data: []byte("x")}))
		sealWait(t, s, "s")
	}
	a := openRead(t, w.Path())
	eq(t, "offsets", len(offsetsOf(t, a, s.ID())), 3)
	_, err := w.EvictBefore(ctx, s.ID(), 25)
	must(t, err)
	eq(t, "offsets after evict", offsetsOf(t, a, s.ID()), []archive.ClockOffset{{TS: 30, OffsetNS: 30}})
}

func TestRefEverythingCopiesRowsFromBeforeTheEpoch(t *testing.T) {
	h, path := newHandle(t)
	src := addSrc(t, h, nil)
	putSeg(t, h, src, "old", 0, -200, -100)
	putWAL(t, h, src, "tail", -50)
	must(t, h.Close())
	dest := copyInto(t, path, archive.Everything(), at.Tags{})
	eq(t, "copy", at.ReadStrings(t, dest, at.Tags{}), [][]string{{"-200,-100"}, {"-50"}})
	c := openRead(t, dest)
	view(t, c, func(tx *archive.ReadTx) error {
		n, err := tx.WALRowCount(0)
		eq(t, "copy wal rows", n, int64(0))
		return err
	})
}
