package archive_test

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// OpenSegment reads a segment in place: every range equals the same range
// of SegmentBytes, reads past the end stop at it, and the handle is dead
// once its snapshot ended. If this fails on a modernc.org/sqlite upgrade,
// the driver's connection fields changed (see blob.go).
func TestSegmentBlobIsIncremental(t *testing.T) {
	h, path := newHandle(t)
	src := addSrc(t, h, map[string]string{"name": "a"})
	payload := make([]byte, 3<<20+123)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range payload {
		payload[i] = byte(r.Uint32())
	}
	update(t, h, func(tx *archive.WriteTx) error {
		return tx.InsertSegment(src, "s", 0, &archive.Segment{Bytes: payload, Rows: 1, FirstTS: 1, LastTS: 1})
	})
	a := openRead(t, path)
	var kept *archive.SegmentBlob
	for _, v := range []viewer{a, h} {
		view(t, v, func(tx *archive.ReadTx) error {
			b, ok, err := tx.OpenSegment(src, "s", 0)
			if err != nil || !ok {
				t.Fatalf("OpenSegment: %v %v", ok, err)
			}
			if !b.Incremental() {
				t.Fatal("the segment is read whole: the driver's connection is not what blob.go expects")
			}
			if b.Size() != int64(len(payload)) {
				t.Fatalf("Size = %d, want %d", b.Size(), len(payload))
			}
			for range 50 {
				off := r.Int64N(int64(len(payload)))
				n := 1 + r.IntN(200<<10)
				p := make([]byte, n)
				got, err := b.ReadAt(p, off)
				want := min(n, len(payload)-int(off))
				if got != want || (got < n && err != io.EOF) || (got == n && err != nil) {
					t.Fatalf("ReadAt(%d, %d) = %d, %v; want %d", n, off, got, err, want)
				}
				if !bytes.Equal(p[:got], payload[off:int(off)+got]) {
					t.Fatalf("ReadAt(%d, %d) returned other bytes", n, off)
				}
			}
			if _, ok, err := tx.OpenSegment(src, "s", 1); ok || err != nil {
				t.Fatalf("absent segment: %v %v", ok, err)
			}
			kept = b
			return nil
		})
		if _, err := kept.ReadAt(make([]byte, 10), 0); err == nil {
			t.Fatal("a handle read after its snapshot ended")
		}
	}
}
