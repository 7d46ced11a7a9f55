package receiver

import (
	"os"
	"path/filepath"
	"testing"
)

func TestBallastFillsReleasesAndIsFoundAgain(t *testing.T) {
	archive := filepath.Join(t.TempDir(), "a.db")
	const size = 3<<20 + 5 // not a whole number of write chunks
	b := newBallast(archive, size)
	if b.present || b.room() != 0 {
		t.Fatalf("a new ballast is present before it was filled: %+v", b)
	}
	if err := b.fill(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(archive + ballastSuffix)
	if err != nil || fi.Size() != size || b.room() != size {
		t.Fatalf("filled: %v, %v bytes, room %d; want %d", err, fi.Size(), b.room(), size)
	}
	if _, err := os.Stat(archive + ballastSuffix + ".tmp"); err == nil {
		t.Error("the temporary file outlived the fill")
	}
	// A restart after a kill -9 finds it whole, and a different size
	// (the reserve changed) as missing.
	if again := newBallast(archive, size); !again.present {
		t.Error("a whole ballast left by an earlier run is not found")
	}
	if other := newBallast(archive, size+1); other.present {
		t.Error("a ballast of another size is taken as whole")
	}
	if err := b.release(); err != nil || b.present || b.room() != 0 {
		t.Fatalf("release: %v, %+v", err, b)
	}
	if _, err := os.Stat(archive + ballastSuffix); !os.IsNotExist(err) {
		t.Errorf("released, the file is still there: %v", err)
	}
	if err := b.release(); err != nil {
		t.Errorf("releasing twice: %v", err)
	}
}
