package archive_test

// Reference-notes §8.8: tests/identity.rs (adapted to the current gate:
// application id 0 is refused; there is no open_bytes/serialize in Go).

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

func TestRefCreateStampsTheHeaderAndACopyCarriesIt(t *testing.T) {
	h, path := newHandle(t)
	got, err := archive.Sniff(path)
	must(t, err)
	eq(t, "sniff while the creating handle is open", got, archive.SniffResult{Stamped: true, Version: 4})
	dest := filepath.Join(t.TempDir(), "copy.dendro")
	must(t, h.VacuumInto(context.Background(), dest))
	got, err = archive.Sniff(dest)
	must(t, err)
	eq(t, "sniff of the copy", got, archive.SniffResult{Stamped: true, Version: 4})
	openRead(t, dest)
	// The file alone (before any checkpoint of later commits) carries it too.
	raw, err := os.ReadFile(path)
	must(t, err)
	eq(t, "SniffBytes", archive.SniffBytes(raw), archive.SniffResult{Stamped: true, Version: 4})
	eq(t, "SniffBytes of 99 bytes", archive.SniffBytes(raw[:99]), archive.SniffResult{})
}

// opens tries every way of opening path and returns each one's error.
func opens(t *testing.T, path string) map[string]error {
	t.Helper()
	out := map[string]error{}
	if a, err := archive.Open(path); err == nil {
		a.Close()
		out["Open"] = nil
	} else {
		out["Open"] = err
	}
	if h, err := archive.OpenWrite(path); err == nil {
		h.Close()
		out["OpenWrite"] = nil
	} else {
		out["OpenWrite"] = err
	}
	if w, err := archive.OpenWriter(path, archive.WriterOptions{Encoder: at.Tags{}, CheckpointInterval: -1}); err == nil {
		w.Close()
		out["OpenWriter"] = nil
	} else {
		out["OpenWriter"] = err
	}
	return out
}

func TestRefANewerSchemaIsRefusedByNameOnEveryOpen(t *testing.T) {
	h, path := newHandle(t)
	must(t, h.Close())
	db := rawDB(t, path)
	mustExec(t, db, "PRAGMA user_version=5")
	must(t, db.Close())
	got, err := archive.Sniff(path)
	must(t, err)
	eq(t, "sniff", got, archive.SniffResult{Stamped: true, Version: 5})
	for name, err := range opens(t, path) {
		var us *archive.UnsupportedSchemaError
		if !errors.As(err, &us) {
			t.Errorf("%s: %v, want UnsupportedSchema", name, err)
			continue
		}
		eq(t, name+" error", *us, archive.UnsupportedSchemaError{Found: 5, Writes: 4, Reads: 4})
		isErr(t, err, archive.ErrUnsupportedSchema)
	}
}

func TestRefForeignFilesAreRefusedAndLeftUntouched(t *testing.T) {
	sqliteFile := func(appID int, version int) func(t *testing.T, path string) {
		return func(t *testing.T, path string) {
			db := rawDB(t, path)
			mustExec(t, db, "CREATE TABLE t (x)")
			mustExec(t, db, "INSERT INTO t VALUES (1)")
			if appID != 0 {
				mustExec(t, db, "PRAGMA application_id="+itoa(appID))
			}
			mustExec(t, db, "PRAGMA user_version="+itoa(version))
			must(t, db.Close())
		}
	}
	cases := []struct {
		name   string
		make   func(t *testing.T, path string)
		reason string // substring of the NotAnArchive reason
	}{
		{"another application", sqliteFile(0x41424344, 7), "another application"},
		{"unstamped SQLite", sqliteFile(0, 0), "without dendro's header stamp"},
		{"text file", func(t *testing.T, path string) {
			must(t, os.WriteFile(path, []byte(strings.Repeat("just some text, not a database\n", 200)), 0o644))
		}, "not a SQLite database"},
		{"5-byte file", func(t *testing.T, path string) {
			must(t, os.WriteFile(path, []byte("hello"), 0o644))
		}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "foreign.db")
			c.make(t, path)
			before, err := os.ReadFile(path)
			must(t, err)
			got, err := archive.Sniff(path)
			if err != nil {
				t.Fatalf("Sniff: %v (a short or foreign file is an answer, not an error)", err)
			}
			eq(t, "sniff", got, archive.SniffResult{})
			for name, err := range opens(t, path) {
				var na *archive.NotAnArchiveError
				if !errors.As(err, &na) {
					t.Errorf("%s: %v, want NotAnArchive", name, err)
					continue
				}
				isErr(t, err, archive.ErrNotAnArchive)
				if !strings.Contains(na.Reason, c.reason) {
					t.Errorf("%s: reason %q does not contain %q", name, na.Reason, c.reason)
				}
			}
			after, err := os.ReadFile(path)
			must(t, err)
			if !bytes.Equal(before, after) {
				t.Errorf("the refused file's bytes changed (%d -> %d bytes)", len(before), len(after))
			}
			for _, sidecar := range []string{"-wal", "-shm", "-journal"} {
				if _, err := os.Stat(path + sidecar); err == nil {
					t.Errorf("the refused file gained a %s", sidecar)
				}
			}
			if strings.Contains(c.name, "SQLite") || strings.Contains(c.name, "application") {
				db := rawDB(t, path)
				var mode string
				must(t, db.QueryRow("PRAGMA journal_mode").Scan(&mode))
				eq(t, "journal_mode", mode, "delete")
			}
		})
	}
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// copyInto copies every source of src into a new archive and returns its path.
func copyInto(t *testing.T, src string, spec archive.CopySpec, enc archive.SegmentEncoder) string {
	t.Helper()
	a := openRead(t, src)
	dest := filepath.Join(t.TempDir(), "copy.dendro")
	h, err := archive.Create(dest)
	must(t, err)
	update(t, h, func(tx *archive.WriteTx) error {
		_, err := a.CopySourcesInto(context.Background(), tx, spec, enc)
		return err
	})
	must(t, h.Close())
	return dest
}

func TestRefASourceIsMintedAV4UUIDAndACopyKeepsIt(t *testing.T) {
	ctx := at.Ctx(t)
	w := at.NewWriter(t, archive.WriterOptions{})
	var uuids []string
	for _, host := range []string{"a", "b"} {
		s, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"host": host}}, "")
		must(t, err)
		if len(s.UUID()) != 36 || s.UUID()[14] != '4' || !strings.ContainsRune("89ab", rune(s.UUID()[19])) || !uuidV4.MatchString(s.UUID()) {
			t.Errorf("uuid %q is not a lowercase v4 uuid", s.UUID())
		}
		must(t, s.Append(ctx, at.Rows("s", 1)...))
		uuids = append(uuids, s.UUID())
	}
	if uuids[0] == uuids[1] {
		t.Fatal("two sources were minted the same uuid")
	}
	must(t, w.Sync(ctx))
	dest := copyInto(t, w.Path(), archive.Everything(), at.Tags{})
	var copied []string
	for _, s := range sourcesOf(t, openRead(t, dest)) {
		copied = append(copied, s.UUID)
	}
	eq(t, "copied uuids", copied, uuids)
	shared, err := archive.SharedSources(ctx, openRead(t, w.Path()), openRead(t, dest))
	must(t, err)
	eq(t, "shared", shared, uuids)

	// An unrelated archive with the same labels shares none.
	other := at.NewWriter(t, archive.WriterOptions{})
	for _, host := range []string{"a", "b"} {
		_, err := other.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"host": host}}, "")
		must(t, err)
	}
	must(t, other.Sync(ctx))
	shared, err = archive.SharedSources(ctx, openRead(t, w.Path()), openRead(t, other.Path()))
	must(t, err)
	eq(t, "shared with an unrelated archive", len(shared), 0)
}

func TestRefAnArchiveWithoutTheUUIDColumnReadsUnknownIdentity(t *testing.T) {
	h, path := newHandle(t)
	src := addSrc(t, h, map[string]string{"host": "a"})
	putWAL(t, h, src, "s", 1)
	must(t, h.Close())
	db := rawDB(t, path)
	mustExec(t, db, "ALTER TABLE sources DROP COLUMN uuid")
	must(t, db.Close())
	a := openRead(t, path)
	srcs := sourcesOf(t, a)
	if len(srcs) != 1 || srcs[0].UUID != "" {
		t.Fatalf("sources = %+v, want one with an unknown uuid", srcs)
	}
	dest := copyInto(t, path, archive.Everything(), at.Tags{})
	c := openRead(t, dest)
	cs := sourcesOf(t, c)
	if len(cs) != 1 || !uuidV4.MatchString(cs[0].UUID) {
		t.Errorf("copy's sources = %+v, want one with a freshly minted uuid", cs)
	}
	shared, err := archive.SharedSources(context.Background(), a, c)
	must(t, err)
	eq(t, "shared", len(shared), 0)
}

func itoa(n int) string { return fmtInt(n) }
