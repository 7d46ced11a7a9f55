package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestStartupRefusals: every bad flag or unusable archive path is refused
// with a usage error (exit status 2) and leaves nothing behind.
func TestStartupRefusals(t *testing.T) {
	dir := t.TempDir()
	notArchive := filepath.Join(dir, "notes.db")
	if err := os.WriteFile(notArchive, []byte("not a database, and it must stay that way\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	aDir := filepath.Join(dir, "adir")
	os.Mkdir(aDir, 0o755)
	fileAsDir := filepath.Join(dir, "file")
	os.WriteFile(fileAsDir, nil, 0o644)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"--bogus"}, "unknown long flag"},
		{"bad duration", []string{"--retention.time=soon"}, "retention.time"},
		{"bad size", []string{"--web.max-request-bytes=lots"}, "max-request-bytes"},
		{"zero buckets", []string{"--source.stream-buckets=0"}, "stream-buckets"},
		{"not an archive", []string{"--archive.path=" + notArchive}, "not a dendro archive"},
		{"a directory", []string{"--archive.path=" + aDir}, "is a directory"},
		{"under a file", []string{"--archive.path=" + filepath.Join(fileAsDir, "x.db")}, "not a directory"},
		{"missing web config", []string{"--web.config.file=" + filepath.Join(dir, "nope.yml")}, "web.config.file"},
		{"bad listen address", []string{"--archive.path=" + filepath.Join(dir, "new", "a.db"), "--web.listen-address=256.0.0.1:http"}, "listen-address"},
	}
	before, _ := os.ReadFile(notArchive)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(context.Background(), c.args, &out, &errOut, runtime.GOMAXPROCS(0))
			var u *usageError
			if !errors.As(err, &u) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("run(%q) = %v; want a usage error mentioning %q", c.args, err, c.want)
			}
		})
	}
	after, _ := os.ReadFile(notArchive)
	if !bytes.Equal(before, after) {
		t.Errorf("the file that is not an archive was changed")
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "adir,file,notes.db" {
		t.Errorf("refused starts left files behind: %v", names)
	}
}

func TestVersionAndHelp(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"--help"}} {
		var out bytes.Buffer
		if err := run(context.Background(), args, &out, &out, runtime.GOMAXPROCS(0)); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if out.Len() == 0 {
			t.Errorf("%v printed nothing", args)
		}
	}
}
