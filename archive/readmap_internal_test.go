package archive

import (
	"context"
	"path/filepath"
	"testing"
)

// A read handle's connections map the file unless told not to.
func TestReadHandleMapsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.dendro")
	h, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts    ReadOptions
		atLeast int64
		atMost  int64
	}{
		{ReadOptions{}, 1 << 30, DefaultReadMapBytes},
		{ReadOptions{MapBytes: 1 << 20}, 1 << 20, 1 << 20},
		{ReadOptions{MapBytes: -1}, 0, 0},
	} {
		a, err := OpenWithOptions(path, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := a.db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got, err := pragmaInt(context.Background(), conn, "mmap_size")
		conn.Close()
		a.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got < tc.atLeast || got > tc.atMost {
			t.Errorf("MapBytes %d: mmap_size = %d, want [%d, %d]", tc.opts.MapBytes, got, tc.atLeast, tc.atMost)
		}
	}
}
