package main

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	pq "github.com/parquet-go/parquet-go"
)

// TestOpsRefuseBadInputInOneLine: every command refuses a missing file, a
// file that is not an archive, an archive of another schema version and
// bad flags with a one-line error (exit status 2), and prints its help
// with an example.
func TestOpsRefuseBadInputInOneLine(t *testing.T) {
	dir := t.TempDir()
	notArchive := filepath.Join(dir, "notes.txt")
	os.WriteFile(notArchive, []byte("not a database\n"), 0o644)
	path, _ := closedArchive(t, 12)
	otherSchema := filepath.Join(dir, "v3.db")
	copyFile(t, path, otherSchema)
	b, _ := os.ReadFile(otherSchema)
	binary.BigEndian.PutUint32(b[60:64], 3) // user_version: the schema stamp
	os.WriteFile(otherSchema, b, 0o644)
	missing := filepath.Join(dir, "nope.db")
	commands := [][]string{{"inspect"}, {"verify"}, {"backup", filepath.Join(dir, "copy.db")}, {"compact"},
		{"evict", "--before=now"}, {"query", "up"}, {"export", filepath.Join(dir, "out")}}
	for _, c := range commands {
		for _, bad := range []struct{ path, want string }{
			{missing, "no such file"}, {notArchive, "not a dendro archive"}, {otherSchema, "schema version 3"},
		} {
			_, err := op(t, append(c, "--archive.path="+bad.path)...)
			var u *usageError
			if !errors.As(err, &u) || !strings.Contains(err.Error(), bad.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%v on %s: %v; want a one-line usage error with %q", c, filepath.Base(bad.path), err, bad.want)
			}
		}
		out := mustOp(t, c[0], "--help")
		ex := strings.Index(out, "Example:")
		if ex < 0 || !strings.HasPrefix(strings.TrimSpace(out[ex+len("Example:"):]), "dendro-receiver "+c[0]) || !strings.Contains(out, "--archive.path") {
			t.Errorf("%s --help:\n%s", c[0], out)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"query", "sum(", "--archive.path=" + path}, "query"},
		{[]string{"query", "up", "--time=now", "--start=now-1h", "--archive.path=" + path}, "instant"},
		{[]string{"query", "up", "--time=yesterday", "--archive.path=" + path}, "not a time"},
		{[]string{"evict", "--archive.path=" + path}, "--before"},
		{[]string{"evict", "--before=now", "--older-than=1h", "--archive.path=" + path}, "not both"},
		{[]string{"evict", "--before=now", "--match={", "--archive.path=" + path}, "--match"},
		{[]string{"export", dir, "--match=}", "--archive.path=" + path}, "--match"},
		{[]string{"export", dir, "--start=2024-01-02", "--end=2024-01-01", "--archive.path=" + path}, "after --start"},
		{[]string{"backup", "--archive.path=" + path}, "DEST"},
		{[]string{"inspect", "--format=xml", "--archive.path=" + path}, "format"},
		{[]string{"backup", path, "--archive.path=" + path}, "exists"},
	} {
		_, err := op(t, c.args...)
		var u *usageError
		if !errors.As(err, &u) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v; want a one-line usage error with %q", c.args, err, c.want)
		}
	}
	if out := mustOp(t, "help"); !strings.Contains(out, "export") {
		t.Errorf("help: %s", out)
	}
}

// TestExportCommandOnALiveArchive: export from an archive a server is
// writing holds every acknowledged sample (sealed and live) in the
// metric/day layout, and a rerun names every file it skips.
func TestExportCommandOnALiveArchive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.db")
	base := time.Now().Add(-2 * time.Hour).UnixMilli()
	srv := serve(t, path, "--seal.max-rows=5")
	const n = 20
	sendN(t, srv.addr, "ops", 0, n-3, base)
	waitSealed(t, path)
	sendN(t, srv.addr, "ops", n-3, n, base)
	dir := filepath.Join(t.TempDir(), "dataset")
	out := mustOp(t, "export", "--archive.path="+path, dir)
	if !strings.HasPrefix(out, "exported ") {
		t.Errorf("export said %q", out)
	}
	var files []string
	var rows int64
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
			f, _ := os.Open(p)
			st, _ := f.Stat()
			pf, err := pq.OpenFile(f, st.Size())
			if err != nil {
				t.Errorf("%s: %v", p, err)
			} else {
				rows += pf.NumRows()
			}
			f.Close()
		}
		return err
	})
	if rows != n*opsMetrics*opsSeries {
		t.Errorf("the dataset holds %d rows, want %d", rows, n*opsMetrics*opsSeries)
	}
	for _, f := range files {
		rel, _ := filepath.Rel(dir, f)
		if !strings.HasPrefix(rel, "__name__=ops_") || !strings.Contains(rel, "/date=") {
			t.Errorf("not the layout: %s", rel)
		}
	}
	out = mustOp(t, "export", "--archive.path="+path, dir)
	if strings.Count(out, "skipped (exists): ") != len(files) {
		t.Errorf("a rerun over %d files said:\n%s", len(files), out)
	}
	srv.stop(t, syscall.SIGTERM)
}

// TestProgressLine: done of total, the rate and what is left.
func TestProgressLine(t *testing.T) {
	p := &progress{what: "verify", unit: "bytes"}
	if got := p.line(512<<20, 2<<30, 4*time.Second); got != "verify: 512.0 MiB of 2.0 GiB (25%), 128.0 MiB/s, ETA 12s" {
		t.Errorf("%q", got)
	}
	p = &progress{what: "export", unit: "partitions"}
	if got := p.line(10, 10, 5*time.Second); got != "export: 10 of 10 partitions (100%), 2.0 partitions/s" {
		t.Errorf("%q", got)
	}
	if newProgress(&strings.Builder{}, "x", "bytes") != nil {
		t.Error("progress on a writer that is not a terminal")
	}
	var nilP *progress
	nilP.update(1, 2) // a nil progress does nothing
	nilP.clear()
}
