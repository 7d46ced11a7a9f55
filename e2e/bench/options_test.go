package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParseScales(t *testing.T) {
	got, err := parseScales("10000x720/10s/3, 1000000x12/15s/1")
	if err != nil {
		t.Fatal(err)
	}
	want := []Scale{{10000, 720, 10 * time.Second, 3}, {1000000, 12, 15 * time.Second, 1}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{"10000", "10000x/1s/1", "10x10/1s", "10x10/soon/1", "10x10/1s/x"} {
		if _, err := parseScales(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestFlags(t *testing.T) {
	o, err := parseFlags([]string{"--quick", "--servers", "dendro,prometheus", "--per-series", "4"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o = o.withDefaults()
	if !o.Quick || len(o.Scales) != len(quickScales()) || o.Scales[1].Series != 100_000 || len(o.PerSeries) != 1 || o.PerSeries[0] != 4 || len(o.Servers) != 2 {
		t.Fatalf("options %+v", o)
	}
	for _, bad := range [][]string{
		{"--servers", "vm,dendro"},    // dendro must be first: ratios are to it
		{"--servers", "dendro,mimir"}, // unknown
		{"--servers", "dendro,vm,vm"}, // repeated
		{"--per-series", "0"},         // no such shape
		{"--scales", "10x10/1s/0"},    // no rounds
		{"surplus"},                   // arguments
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		} else if _, ok := err.(usageError); !ok {
			t.Errorf("%q: %v is not a usage error", bad, err)
		}
	}
}

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and a parenthesis, as a process may
	// name itself.
	stat := []byte("4242 (a b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 1000 2000000 500 18446744073709551615")
	got, err := parseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if got != 3 { // (250 + 50) / 100
		t.Fatalf("cpu %v s, want 3", got)
	}
	if _, err := parseStatCPU([]byte("4242 (x) S 1 2")); err == nil {
		t.Fatal("a short stat parsed")
	}
	if v, ok := field([]byte("Name:\tx\nVmHWM:\t  1234 kB\n"), "VmHWM:"); !ok || v != 1234 {
		t.Fatalf("VmHWM %d %v", v, ok)
	}
}

func TestTreeBytesSkips(t *testing.T) {
	dir := t.TempDir()
	write := func(rel string, n int) {
		t.Helper()
		p := dir + "/" + rel
		if err := mkdirFile(p, n); err != nil {
			t.Fatal(err)
		}
	}
	write("data/a", 100)
	write("data/sub/b", 20)
	write("cache/c", 1000)
	write("log", 7)
	got, err := treeBytes(dir, "cache", "log")
	if err != nil {
		t.Fatal(err)
	}
	if got != 120 {
		t.Fatalf("%d bytes, want 120", got)
	}
	if n, err := treeBytes(dir + "/missing"); err != nil || n != 0 {
		t.Fatalf("missing dir: %d, %v", n, err)
	}
}

func mkdirFile(path string, n int) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, make([]byte, n), 0o644)
}
