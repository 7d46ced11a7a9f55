package archive_test

// Go-API contracts of the writer that the reference suite implies but
// spells differently (stamped appends, Close, a stopped writer).

import (
	"os"
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

// AppendWait's doc: a stamped row's ts is "one above the newest ts the
// stream holds", so a stamped append never collides with, or falls below,
// a row appended unstamped earlier.
func TestRefStampedAppendsStayAboveEveryRowTheStreamHolds(t *testing.T) {
	ctx := at.Ctx(t)
	now := time.Unix(0, 1000)
	w, s := newSource(t, archive.WriterOptions{Now: func() time.Time { return now }})
	stamped := func() archive.AppendResult {
		r, err := w.AppendWait(ctx, []archive.SourceRows{{Source: s.ID(), Rows: at.Rows("s", 0)}}, true)
		must(t, err)
		return r
	}
	eq(t, "first stamped", stamped().Streams, []archive.StreamResult{{Source: s.ID(), Stream: "s", Committed: 1}})
	// An unstamped row far ahead of the clock.
	appendWait(t, s, at.Rows("s", 5000)...)
	r := stamped()
	eq(t, "stamped after an unstamped row ahead of the clock", r.Streams, []archive.StreamResult{{Source: s.ID(), Stream: "s", Committed: 1}})
	live := liveTS(t, openRead(t, w.Path()), s.ID(), "s")
	if len(live) != 3 || live[2] <= 5000 {
		t.Errorf("live %v: the last stamped row is not above 5000", live)
	}
	must(t, w.Err())
}

// The same, when the unstamped row was sealed: a stamped row below the
// watermark would be dropped as out of order.
func TestRefStampedAppendsStayAboveAWatermarkSetByUnstampedRows(t *testing.T) {
	ctx := at.Ctx(t)
	now := time.Unix(0, 1000)
	w, s := newSource(t, archive.WriterOptions{Now: func() time.Time { return now }})
	stamped := func() archive.AppendResult {
		r, err := w.AppendWait(ctx, []archive.SourceRows{{Source: s.ID(), Rows: at.Rows("s", 0)}}, true)
		must(t, err)
		return r
	}
	stamped()
	appendWait(t, s, at.Rows("s", 5000)...)
	sealWait(t, s, "s")
	eq(t, "stamped after the seal", stamped().Streams, []archive.StreamResult{{Source: s.ID(), Stream: "s", Committed: 1}})
	eq(t, "dropped out of order", s.DroppedOutOfOrder(), int64(0))
}

func TestRefStampedAppendsStayAboveTheWatermark(t *testing.T) {
	ctx := at.Ctx(t)
	now := time.Unix(0, 10)
	w, s := newSource(t, archive.WriterOptions{Now: func() time.Time { return now }})
	appendWait(t, s, at.Rows("s", 100)...)
	sealWait(t, s, "s")
	r, err := w.AppendWait(ctx, []archive.SourceRows{{Source: s.ID(), Rows: at.Rows("s", 0, 0)}}, true)
	must(t, err)
	eq(t, "result", r.Streams, []archive.StreamResult{{Source: s.ID(), Stream: "s", Committed: 2}})
	eq(t, "live", liveTS(t, openRead(t, w.Path()), s.ID(), "s"), []int64{101, 102})
}

func TestRefACleanCloseLeavesOneFile(t *testing.T) {
	ctx := at.Ctx(t)
	path := at.Path(t)
	w, err := archive.CreateWriter(path, archive.WriterOptions{Encoder: at.Tags{}})
	must(t, err)
	s, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"h": "1"}}, "")
	must(t, err)
	must(t, s.Append(ctx, at.Rows("s", 1, 2)...))
	must(t, s.Seal(ctx, "s"))
	must(t, s.Finalize(ctx, 2, 0))
	must(t, w.Close())
	for _, sidecar := range []string{"-wal", "-shm"} {
		if _, err := os.Stat(path + sidecar); err == nil {
			t.Errorf("a clean close left %s", sidecar)
		}
	}
	eq(t, "read", at.ReadStrings(t, path, at.Tags{}), [][]string{{"1,2"}})
	// Every call after Close reports ErrClosed.
	isErr(t, s.Append(ctx, at.Rows("s", 3)...), archive.ErrClosed)
	isErr(t, w.Sync(ctx), archive.ErrClosed)
	_, err = w.AddSource(ctx, archive.SourceSpec{}, "")
	isErr(t, err, archive.ErrClosed)
	must(t, w.Close()) // idempotent
}

func TestRefASecondWriterIsRefused(t *testing.T) {
	w := at.NewWriter(t, archive.WriterOptions{})
	_, err := archive.OpenWriter(w.Path(), archive.WriterOptions{Encoder: at.Tags{}, CheckpointInterval: -1})
	isErr(t, err, archive.ErrInUse)
}

func TestRefACopyCarriesEveryClockOffset(t *testing.T) {
	h, path := newHandle(t)
	src := addSrc(t, h, nil)
	putSeg(t, h, src, "s", 0, 10)
	update(t, h, func(tx *archive.WriteTx) error {
		for _, ts := range []int64{-5, 10, 1000} {
			if err := tx.InsertClockOffset(src, ts, ts+1); err != nil {
				return err
			}
		}
		return nil
	})
	must(t, h.Close())
	spec := archive.CopySpec{Start: 5, End: 15}
	dest := copyInto(t, path, spec, at.Tags{})
	c := openRead(t, dest)
	eq(t, "offsets", offsetsOf(t, c, sourcesOf(t, c)[0].ID), []archive.ClockOffset{{-5, -4}, {10, 11}, {1000, 1001}})
}
