package archive_test

import (
	"context"
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

// Metadata staged onto the writer's next commit (writer_staged.go).

func TestStagedMetadataRidesOnTheNextCommit(t *testing.T) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{})
	a := openRead(t, w.Path())
	meta := func() map[string]string {
		var m map[string]string
		view(t, a, func(tx *archive.ReadTx) error {
			src, err := tx.Source(s.ID())
			m = src.Metadata
			return err
		})
		return m
	}
	commits := w.Stats().Commits
	gen := w.StageMetadata(s.ID(), map[string]string{"k": "1"})
	w.StageMetadata(s.ID(), map[string]string{"k": "2", "j": "x"})
	gen2 := w.StageMetadata(s.ID(), map[string]string{"j": "y"})
	if w.StagedCommitted() >= gen {
		t.Fatalf("committed %d before any commit (stage %d)", w.StagedCommitted(), gen)
	}
	eq(t, "nothing written yet", meta()["k"], "")

	appendWait(t, s, at.Rows("s", 1)...)
	eq(t, "the append's commit took the stage", w.StagedCommitted() >= gen2, true)
	eq(t, "one commit, no extra", w.Stats().Commits-commits, int64(1))
	m := meta()
	eq(t, "latest value per key", [2]string{m["k"], m["j"]}, [2]string{"2", "y"})

	// With nothing else committing, FlushStaged commits on its own.
	gen3 := w.StageMetadata(s.ID(), map[string]string{"k": "3"})
	must(t, w.FlushStaged(ctx))
	must(t, w.Sync(ctx))
	eq(t, "flushed", w.StagedCommitted() >= gen3, true)
	eq(t, "flushed value", meta()["k"], "3")
}

func TestAStagedPatchForAMissingSourceNeverFailsTheAppendItRidesWith(t *testing.T) {
	_, s := newSource(t, archive.WriterOptions{})
	w := s.Writer()
	gen := w.StageMetadata(archive.SourceID(9999), map[string]string{"k": "v"})
	res := appendWait(t, s, at.Rows("s", 1, 2)...)
	eq(t, "rows committed", res.Dropped(), 0)
	eq(t, "the stage counts as done", w.StagedCommitted() >= gen, true)
}

func TestStagedMetadataSurvivesAFailedTransaction(t *testing.T) {
	// A transaction that fails (a duplicate wal key rolls the tick back)
	// puts what it carried back on the stage.
	w, s := newSource(t, archive.WriterOptions{})
	appendWait(t, s, at.Rows("s", 1)...)
	gen := w.StageMetadata(s.ID(), map[string]string{"k": "v"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// ts 1 again, unstamped: the wal primary key refuses it.
	res, err := w.AppendWait(ctx, []archive.SourceRows{{Source: s.ID(), Rows: at.Rows("s", 1)}}, false)
	must(t, err)
	if res.Dropped() == 0 {
		t.Skip("the duplicate row was not refused; nothing failed to carry the stage")
	}
	appendWait(t, s, at.Rows("s", 2)...)
	eq(t, "committed by a later transaction", w.StagedCommitted() >= gen, true)
	a := openRead(t, w.Path())
	view(t, a, func(tx *archive.ReadTx) error {
		src, err := tx.Source(s.ID())
		eq(t, "value", src.Metadata["k"], "v")
		return err
	})
}
