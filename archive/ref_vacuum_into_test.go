package archive_test

// Reference-notes §8.15 tests/vacuum_into.rs.

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

func TestRefVacuumIntoCopiesWhileTheWriterRuns(t *testing.T) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{})
	appendWait(t, s, at.Rows("s", 1000)...)
	appendWait(t, s, at.Rows("s", 2000)...)
	if _, err := os.Stat(w.Path() + "-wal"); err != nil {
		t.Fatalf("no sidecar while the writer runs: %v", err)
	}
	dest := filepath.Join(t.TempDir(), "copy.dendro")
	must(t, openRead(t, w.Path()).VacuumInto(context.Background(), dest))
	eq(t, "copy live rows", liveTS(t, openRead(t, dest), s.ID(), "s"), []int64{1000, 2000})
	appendWait(t, s, at.Rows("s", 3000)...)
	must(t, s.Sync(ctx))
	eq(t, "original", liveTS(t, openRead(t, w.Path()), s.ID(), "s"), []int64{1000, 2000, 3000})
	eq(t, "copy unchanged", liveTS(t, openRead(t, dest), s.ID(), "s"), []int64{1000, 2000})
}
