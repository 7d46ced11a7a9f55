package archive_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

// TestEachConnectionGetsItsPragmas checks the per-connection settings the
// format relies on (reference §3.4), read back from each kind of handle.
func TestEachConnectionGetsItsPragmas(t *testing.T) {
	path := at.Path(t)
	created, err := archive.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	want := func(h *archive.Archive, what string, pragmas map[string]string) {
		t.Helper()
		for name, v := range pragmas {
			got, err := archive.PragmaForTest(h, name)
			if err != nil || got != v {
				t.Errorf("%s: PRAGMA %s = %q (%v), want %q", what, name, got, err, v)
			}
		}
	}
	want(&created.Archive, "the creating connection", map[string]string{
		"page_size": "4096", "auto_vacuum": "2", "journal_mode": "wal", "synchronous": "2",
		"foreign_keys": "1", "wal_autocheckpoint": "1024", "cache_size": "-2048",
		"application_id": "1684368996", "user_version": "4",
	})
	created.Close()

	h, err := archive.OpenWrite(path)
	if err != nil {
		t.Fatal(err)
	}
	want(&h.Archive, "OpenWrite", map[string]string{
		"synchronous": "2", "foreign_keys": "1", "wal_autocheckpoint": "1024", "cache_size": "-262144",
		"locking_mode": "exclusive",
	})
	h.Close()

	r, err := archive.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	readHandle := map[string]string{"cache_size": "-7168", "query_only": "1"} // DefaultReadMemoryBytes / DefaultReadConns, less 2 MiB, halved
	want(r, "Open", readHandle)
	if err := r.VacuumInto(context.Background(), filepath.Join(t.TempDir(), "copy.dendro")); err != nil {
		t.Fatal(err)
	}
	want(r, "Open after VacuumInto", readHandle)
}

func TestCreateHonorsThePageSizeItIsGiven(t *testing.T) {
	path := at.Path(t)
	h, err := archive.CreateWithPageSizeForTest(path, 8192)
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	h, err = archive.OpenWrite(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for name, v := range map[string]string{"page_size": "8192", "wal_autocheckpoint": "512"} {
		if got, err := archive.PragmaForTest(&h.Archive, name); err != nil || got != v {
			t.Errorf("PRAGMA %s = %q (%v) after reopen, want %q", name, got, err, v)
		}
	}
}
