package archive_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
	sqlite3 "modernc.org/sqlite/lib"
)

// readOnlyChild runs one read-only-media case as an unprivileged process
// and reports failures through its exit status.
func readOnlyChild(kind, path string) error {
	switch kind {
	case "clean", "crashed":
		a, err := archive.Open(path)
		if err != nil {
			return fmt.Errorf("open: %w", err)
		}
		srcs, err := a.ReadArchive(context.Background(), at.Tags{})
		a.Close()
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		var got []string
		for _, s := range srcs {
			for _, st := range s.Streams {
				for _, b := range st.Segments {
					got = append(got, string(b))
				}
			}
		}
		if want := []string{"1,2,3", "4,5"}; !reflect.DeepEqual(got, want) {
			return fmt.Errorf("read %q, want %q", got, want)
		}
		if _, err := archive.OpenWrite(path); !errors.Is(err, archive.ErrReadOnlyMedia) {
			return fmt.Errorf("OpenWrite on read-only media: %v, want ErrReadOnlyMedia", err)
		}
		if _, err := archive.OpenWriter(path, archive.WriterOptions{Encoder: at.Tags{}}); !errors.Is(err, archive.ErrReadOnlyMedia) {
			return fmt.Errorf("OpenWriter on read-only media: %v, want ErrReadOnlyMedia", err)
		}
	case "wal-without-shm":
		_, err := archive.Open(path)
		if err == nil {
			return errors.New("a -wal without -shm on read-only media was opened; it must be refused rather than read short")
		}
		if archive.SQLiteCode(err) != sqlite3.SQLITE_CANTOPEN {
			return fmt.Errorf("refused with %v, want SQLITE_CANTOPEN", err)
		}
	default:
		return fmt.Errorf("unknown read-only case %q", kind)
	}
	return nil
}

// unprivileged returns credentials to drop to, or nil when this process
// is not root (it is then unprivileged itself).
func unprivileged(t *testing.T) *syscall.Credential {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("running as root and there is no user nobody to drop to: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
}

// worldRunnableCopy copies the test binary where an unprivileged user can
// run it.
func worldRunnableCopy(t *testing.T, bin string) string {
	t.Helper()
	dir := worldDir(t)
	dst := filepath.Join(dir, filepath.Base(bin))
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// worldDir is a t.TempDir that every user can enter.
func worldDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// makeReadOnly sets the files to 0444 and the directory to 0555, and
// restores write permission at cleanup so t.TempDir can be removed.
func makeReadOnly(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		os.Chmod(filepath.Join(dir, e.Name()), 0o444)
	}
	os.Chmod(dir, 0o555)
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
}

func runReadOnlyCase(t *testing.T, kind, path string) {
	t.Helper()
	cred := unprivileged(t)
	if cred == nil {
		if err := readOnlyChild(kind, path); err != nil {
			t.Fatal(err)
		}
		return
	}
	cmd, _ := startChild(t, "read-only|"+kind+"|"+path, cred)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("read-only case %s as an unprivileged process: %v", kind, err)
	}
}

// cleanFiveRowArchive writes ts 1..5, sealed after 3, and closes cleanly.
func cleanFiveRowArchive(t *testing.T, path string) {
	t.Helper()
	ctx := at.Ctx(t)
	w, err := archive.CreateWriter(path, archive.WriterOptions{Encoder: at.Tags{}, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	src, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"source": "ro"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	src.Append(ctx, at.Rows("s", 1, 2, 3)...)
	src.Seal(ctx, "s")
	src.Append(ctx, at.Rows("s", 4, 5)...)
	if err := src.Finalize(ctx, 5, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestReadOnlyMedia(t *testing.T) {
	t.Run("a clean archive opens and reads", func(t *testing.T) {
		dir := worldDir(t)
		path := filepath.Join(dir, "clean.dendro")
		cleanFiveRowArchive(t, path)
		makeReadOnly(t, dir)
		runReadOnlyCase(t, "clean", path)
		for _, side := range []string{"-wal", "-shm"} {
			if _, err := os.Stat(path + side); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("reading on read-only media left %s (%v)", side, err)
			}
		}
	})
	t.Run("a crashed archive with its sidecars opens and reads", func(t *testing.T) {
		dir := worldDir(t)
		path := filepath.Join(dir, "crashed.dendro")
		killedArchive(t, path, 5, 3, 0, 0)
		makeReadOnly(t, dir)
		runReadOnlyCase(t, "crashed", path)
		if _, err := os.Stat(path + "-wal"); err != nil {
			t.Errorf("the -wal must remain: %v", err)
		}
	})
	t.Run("a -wal without -shm is refused rather than read short", func(t *testing.T) {
		dir := worldDir(t)
		path := filepath.Join(dir, "noshm.dendro")
		killedArchive(t, path, 5, 3, 0, 0)
		if err := os.Remove(path + "-shm"); err != nil {
			t.Fatal(err)
		}
		makeReadOnly(t, dir)
		runReadOnlyCase(t, "wal-without-shm", path)
	})
}

func TestWriteHandlesAreRefusedWhileTheFileIsHeld(t *testing.T) {
	ctx := at.Ctx(t)
	w := at.NewWriter(t, archive.WriterOptions{})
	path := w.Path()
	if _, err := w.AddSource(ctx, archive.SourceSpec{}, ""); err != nil {
		t.Fatal(err)
	}
	t.Run("a write handle while a writer runs", func(t *testing.T) {
		if h, err := archive.OpenWrite(path); !errors.Is(err, archive.ErrInUse) {
			if h != nil {
				h.Close()
			}
			t.Fatalf("OpenWrite while a Writer runs: %v, want ErrInUse", err)
		}
	})
	t.Run("a second writer while a writer runs", func(t *testing.T) {
		begin := time.Now()
		if w2, err := archive.OpenWriter(path, archive.WriterOptions{Encoder: at.Tags{}}); !errors.Is(err, archive.ErrInUse) {
			if w2 != nil {
				w2.Close()
			}
			t.Fatalf("OpenWriter while a Writer runs: %v, want ErrInUse", err)
		}
		if d := time.Since(begin); d > time.Second {
			t.Errorf("a second writer took %v to be refused; the advisory lock should refuse it at once", d)
		}
	})
	// The writer is still healthy afterwards.
	if err := w.Sync(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestAnExclusiveHandleKeepsEveryoneElseOut(t *testing.T) {
	path := at.Path(t)
	cleanFiveRowArchive(t, path)
	h, err := archive.OpenWrite(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h2, err := archive.OpenWrite(path); !errors.Is(err, archive.ErrInUse) {
		if h2 != nil {
			h2.Close()
		}
		t.Fatalf("a second OpenWrite: %v, want ErrInUse", err)
	}
	if w, err := archive.OpenWriter(path, archive.WriterOptions{Encoder: at.Tags{}, BusyTimeout: 200 * time.Millisecond}); !errors.Is(err, archive.ErrInUse) {
		if w != nil {
			w.Close()
		}
		t.Fatalf("OpenWriter while OpenWrite holds the file: %v, want ErrInUse", err)
	}
}

// TestForeignFilesAreRefusedAndLeftAlone: every open refuses what is not a
// v4 dendro archive with the right error and leaves its bytes (journal
// mode included) exactly as they were.
func TestForeignFilesAreRefusedAndLeftAlone(t *testing.T) {
	dir := t.TempDir()
	foreign := filepath.Join(dir, "foreign.db")
	execSQL(t, foreign, "PRAGMA application_id=1094861636", "PRAGMA user_version=7", "CREATE TABLE t(x)", "INSERT INTO t VALUES (1)")
	unstamped := filepath.Join(dir, "unstamped.db")
	execSQL(t, unstamped, "CREATE TABLE t(x)")
	text := filepath.Join(dir, "notes.txt")
	os.WriteFile(text, []byte(strings.Repeat("not a database\n", 20)), 0o644)
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("12345"), 0o644)
	newer := filepath.Join(dir, "v5.dendro")
	cleanFiveRowArchive(t, newer)
	execSQL(t, newer, "PRAGMA user_version=5")

	opens := map[string]func(string) error{
		"Open":      func(p string) error { a, err := archive.Open(p); closeIf(a, err); return err },
		"OpenWrite": func(p string) error { h, err := archive.OpenWrite(p); closeIf(h, err); return err },
		"OpenWriter": func(p string) error {
			w, err := archive.OpenWriter(p, archive.WriterOptions{Encoder: at.Tags{}})
			closeIf(w, err)
			return err
		},
		"CreateWriter": func(p string) error {
			w, err := archive.CreateWriter(p, archive.WriterOptions{Encoder: at.Tags{}})
			closeIf(w, err)
			if errors.Is(err, archive.ErrExists) {
				return nil // refused as it should be: the path exists
			}
			return fmt.Errorf("CreateWriter over an existing file: %v, want ErrExists", err)
		},
	}
	cases := []struct {
		path   string
		want   error
		reason string
	}{
		{foreign, archive.ErrNotAnArchive, "another application"},
		{unstamped, archive.ErrNotAnArchive, "header stamp"},
		{text, archive.ErrNotAnArchive, "not a SQLite database"},
		{short, archive.ErrNotAnArchive, "not a SQLite database"},
		{newer, archive.ErrUnsupportedSchema, "version 5"},
	}
	for _, c := range cases {
		sniff, err := archive.Sniff(c.path)
		if err != nil {
			t.Fatalf("Sniff(%s): %v", c.path, err)
		}
		if wantStamped := c.path == newer; sniff.Stamped != wantStamped || (wantStamped && sniff.Version != 5) {
			t.Errorf("Sniff(%s) = %+v", filepath.Base(c.path), sniff)
		}
		for name, open := range opens {
			before, _ := os.ReadFile(c.path)
			err := open(c.path)
			if name == "CreateWriter" {
				if err != nil {
					t.Errorf("%s(%s): %v", name, filepath.Base(c.path), err)
				}
			} else if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.reason) {
				t.Errorf("%s(%s) = %v; want %v mentioning %q", name, filepath.Base(c.path), err, c.want, c.reason)
			}
			after, _ := os.ReadFile(c.path)
			if string(before) != string(after) {
				t.Errorf("%s changed the bytes of %s", name, filepath.Base(c.path))
			}
			for _, side := range []string{"-wal", "-shm", "-journal"} {
				os.Remove(c.path + side) // a refused open of a SQLite file may leave an empty sidecar; its bytes are checked above
			}
		}
	}
	var sErr *archive.UnsupportedSchemaError
	_, err := archive.Open(newer)
	if !errors.As(err, &sErr) || sErr.Found != 5 || sErr.Reads != 4 || sErr.Writes != 4 {
		t.Fatalf("Open(v5) = %v; want UnsupportedSchemaError{Found 5, Writes 4, Reads 4}", err)
	}
}

func closeIf[T interface{ Close() error }](h T, err error) {
	if err == nil {
		h.Close()
	}
}
