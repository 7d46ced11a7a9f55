package archive_test

// Reference-notes §8.15 tests/metadata_patch.rs.

import (
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

func TestRefAPatchIsVisibleAfterSyncAndPatchesMerge(t *testing.T) {
	ctx := at.Ctx(t)
	w := at.NewWriter(t, archive.WriterOptions{})
	s, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"h": "1"}, Metadata: map[string]string{"seed": "s", "keep": "k"}}, "")
	must(t, err)
	must(t, w.PatchMetadata(ctx, s.ID(), map[string]string{"a": "1"}))
	must(t, w.Sync(ctx))
	// Another connection sees it before finalize.
	m := sourceInfo(t, w.Path(), s.ID()).Metadata
	eq(t, "a", m["a"], "1")
	eq(t, "seed", m["seed"], "s")
	must(t, w.PatchMetadata(ctx, s.ID(), map[string]string{"seed": "s2"}))
	must(t, s.Finalize(ctx, 1, 0))
	m = sourceInfo(t, w.Path(), s.ID()).Metadata
	eq(t, "seed replaced", m["seed"], "s2")
	eq(t, "keep kept", m["keep"], "k")
	eq(t, "a kept", m["a"], "1")
	eq(t, "keys", len(m), 4+0) // seed, keep, a, writer_sessions
	if _, ok := m[archive.MetadataKeyWriterSessions]; !ok {
		t.Error("writer_sessions missing")
	}
}

func TestRefAPatchToASourceDeletedFromOutsideDoesNotStopTheWriter(t *testing.T) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{})
	db := rawDB(t, w.Path())
	mustExec(t, db, "DELETE FROM sources WHERE id = ?1", s.ID())
	must(t, db.Close())
	must(t, w.PatchMetadata(ctx, s.ID(), map[string]string{"a": "1"}))
	must(t, w.Sync(ctx))
	must(t, w.Err())
	_, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"h": "2"}}, "")
	must(t, err)
}
