package archive_test

// Reference-notes §8.6: tests/out_of_order.rs, through the Writer.

import (
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

func TestRefAnAppendBelowTheSealedWatermarkIsDroppedAndCounted(t *testing.T) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{})
	must(t, s.Append(ctx, at.Rows("s", 100)...))
	must(t, s.Seal(ctx, "s"))
	must(t, s.Sync(ctx))
	eq(t, "dropped after seal", s.DroppedOutOfOrder(), int64(0))
	must(t, s.Append(ctx, at.Rows("s", 100, 50)...))
	must(t, s.Sync(ctx))
	eq(t, "dropped after 100, 50", s.DroppedOutOfOrder(), int64(2))
	must(t, s.Append(ctx, at.Rows("s", 150)...))
	must(t, s.Sync(ctx))
	eq(t, "dropped after 150", s.DroppedOutOfOrder(), int64(2))
	a := openRead(t, w.Path())
	eq(t, "raw wal", walTS(t, a, s.ID(), "s"), []int64{150})
	must(t, s.Finalize(ctx, 150, 0))
	eq(t, "read", at.ReadStrings(t, w.Path(), at.Tags{}), [][]string{{"100", "150"}})
}

func TestRefAppendWaitReportsDroppedRowsPerStream(t *testing.T) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{})
	appendWait(t, s, at.Rows("s", 100)...)
	sealWait(t, s, "s")
	r, err := w.AppendWait(ctx, []archive.SourceRows{{Source: s.ID(), Rows: append(at.Rows("s", 50, 200), at.Rows("t", 1)...)}}, false)
	must(t, err)
	eq(t, "results", r.Streams, []archive.StreamResult{
		{Source: s.ID(), Stream: "s", Committed: 1, Dropped: 1},
		{Source: s.ID(), Stream: "t", Committed: 1},
	})
	eq(t, "Dropped()", r.Dropped(), 1)
	if r.Err() != nil {
		t.Errorf("an out-of-order drop carries an error: %v", r.Err())
	}
}

func TestRefALateRowDoesNotTakeItsTickWithIt(t *testing.T) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{})
	must(t, s.Append(ctx, at.Rows("s", 100)...))
	must(t, s.Seal(ctx, "s"))
	must(t, s.Append(ctx, at.Rows("s", 50, 200, 300)...))
	must(t, s.Sync(ctx))
	eq(t, "dropped", s.DroppedOutOfOrder(), int64(1))
	eq(t, "read", at.ReadStrings(t, w.Path(), at.Tags{}), [][]string{{"100", "200,300"}})
}

func TestRefASiblingStreamAndAnotherSourceAreUnaffected(t *testing.T) {
	ctx := at.Ctx(t)
	w := at.NewWriter(t, archive.WriterOptions{})
	a, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"source": "a"}}, "")
	must(t, err)
	b, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"source": "b"}}, "")
	must(t, err)
	must(t, a.Append(ctx, at.Rows("ahead", 1000)...))
	must(t, a.Seal(ctx, "ahead"))
	must(t, a.Append(ctx, append(at.Rows("ahead", 10), at.Rows("behind", 10)...)...))
	must(t, b.Append(ctx, at.Rows("ahead", 10)...))
	must(t, w.Sync(ctx))
	eq(t, "a dropped", a.DroppedOutOfOrder(), int64(1))
	eq(t, "b dropped", b.DroppedOutOfOrder(), int64(0))
	r := openRead(t, w.Path())
	eq(t, "a/behind", liveTS(t, r, a.ID(), "behind"), []int64{10})
	eq(t, "b/ahead", liveTS(t, r, b.ID(), "ahead"), []int64{10})
	eq(t, "a/ahead wal", walTS(t, r, a.ID(), "ahead"), []int64{})
}

func TestRefAResumedSourceIsRefusedAtTheHandle(t *testing.T) {
	ctx := at.Ctx(t)
	path := at.Path(t)
	w, err := archive.CreateWriter(path, archive.WriterOptions{Encoder: at.Tags{}, CheckpointInterval: -1})
	must(t, err)
	s, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"source": "r"}}, "")
	must(t, err)
	must(t, s.Append(ctx, at.Rows("s", 100)...))
	must(t, s.Seal(ctx, "s"))
	must(t, s.Finalize(ctx, 100, 0))
	must(t, w.Close())

	w2, err := archive.OpenWriter(path, archive.WriterOptions{Encoder: at.Tags{}, CheckpointInterval: -1})
	must(t, err)
	defer w2.Close()
	r, err := w2.ResumeSource(ctx, s.ID(), 101)
	must(t, err)
	floor, ok := r.Floor()
	eq(t, "floor", []any{floor, ok}, []any{int64(100), true})
	err = r.Append(ctx, at.Rows("s", 60)...)
	var tb *archive.TimelineBackwardsError
	if !asErr(err, &tb) {
		t.Fatalf("Append(60) = %v, want TimelineBackwards", err)
	}
	eq(t, "ts/floor", []int64{tb.TS, tb.Floor}, []int64{60, 100})
	must(t, r.Sync(ctx))
	eq(t, "dropped", r.DroppedOutOfOrder(), int64(0))
	must(t, w2.Close())
	eq(t, "read", at.ReadStrings(t, path, at.Tags{}), [][]string{{"100"}})
}

func TestRefSealedWatermarksArePerSourceAndPerStream(t *testing.T) {
	ctx := at.Ctx(t)
	w := at.NewWriter(t, archive.WriterOptions{})
	a, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"source": "a"}}, "")
	must(t, err)
	b, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"source": "b"}}, "")
	must(t, err)
	must(t, a.Append(ctx, append(at.Rows("fast", 50, 100), at.Rows("slow", 5)...)...))
	must(t, a.Append(ctx, at.Rows("unsealed", 1)...))
	must(t, b.Append(ctx, at.Rows("fast", 7)...))
	must(t, a.Seal(ctx, "fast", "slow"))
	must(t, b.Seal(ctx, "fast"))
	must(t, w.Sync(ctx))
	view(t, openRead(t, w.Path()), func(tx *archive.ReadTx) error {
		wm, err := tx.SealedWatermarks()
		eq(t, "watermarks", wm, map[archive.SourceID]map[string]int64{
			a.ID(): {"fast": 100, "slow": 5},
			b.ID(): {"fast": 7},
		})
		return err
	})
}

func TestRefTheWatermarkMovesWithTheCommitNotTheRequest(t *testing.T) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{})
	must(t, s.Append(ctx, at.Rows("s", 300)...))
	must(t, s.Append(ctx, at.Rows("s", 100)...))
	must(t, s.Sync(ctx))
	eq(t, "dropped", s.DroppedOutOfOrder(), int64(0))
	eq(t, "live", liveTS(t, openRead(t, w.Path()), s.ID(), "s"), []int64{100, 300})
}
