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

// The C buffers segment reads go through outlive the question that used
// them (one per segment open at once, up to a bound), and the handle's
// Close frees them; a read after the pool closed still works and frees
// its own.
func TestSegmentBlobBuffersAreKeptAndFreed(t *testing.T) {
	h, path := newHandle(t)
	src := addSrc(t, h, map[string]string{"name": "a"})
	payload := bytes.Repeat([]byte("dendro"), 100<<10)
	update(t, h, func(tx *archive.WriteTx) error {
		for seq := range int64(3) {
			if err := tx.InsertSegment(src, "s", seq, &archive.Segment{Bytes: payload, Rows: 1, FirstTS: 1 + seq, LastTS: 1 + seq}); err != nil {
				return err
			}
		}
		return nil
	})
	a, err := archive.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	read := func(segs ...int64) {
		t.Helper()
		view(t, a, func(tx *archive.ReadTx) error {
			for _, seq := range segs {
				b, ok, err := tx.OpenSegment(src, "s", seq)
				if err != nil || !ok {
					t.Fatalf("OpenSegment(%d): %v %v", seq, ok, err)
				}
				p := make([]byte, 6)
				if _, err := b.ReadAt(p, int64(len(payload)-6)); err != nil || string(p) != "dendro" {
					t.Fatalf("ReadAt: %q %v", p, err)
				}
			}
			return nil
		})
	}
	for _, c := range []struct {
		segs []int64
		idle int
	}{
		{[]int64{0}, 1},
		{[]int64{1}, 1}, // the same buffer again
		{[]int64{0, 1, 2}, 3},
		{[]int64{2}, 3},
	} {
		read(c.segs...)
		if idle, closed := archive.IdleBlobBufsForTest(a); idle != c.idle || closed {
			t.Fatalf("after reading %v: %d idle (closed %v), want %d", c.segs, idle, closed, c.idle)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if idle, closed := archive.IdleBlobBufsForTest(a); idle != 0 || !closed {
		t.Fatalf("after Close: %d idle (closed %v)", idle, closed)
	}
}

// SegmentIndexHead hands back the head of a segment's caller index, in
// place, equal to SegmentIndex's first bytes; all of a shorter index; nil
// for a segment without one; ok false for an absent segment; and refuses
// a head longer than it reads in one piece.
func TestSegmentIndexHead(t *testing.T) {
	h, path := newHandle(t)
	src := addSrc(t, h, map[string]string{"name": "a"})
	index := make([]byte, 300<<10) // overflow pages, as at a million series
	r := rand.New(rand.NewPCG(3, 4))
	for i := range index {
		index[i] = byte(r.Uint32())
	}
	update(t, h, func(tx *archive.WriteTx) error {
		if err := tx.InsertSegment(src, "s", 0, &archive.Segment{Bytes: []byte("data"), Index: index, Rows: 1, FirstTS: 1, LastTS: 1}); err != nil {
			return err
		}
		if err := tx.InsertSegment(src, "s", 1, &archive.Segment{Bytes: []byte("data"), Index: index[:5], Rows: 1, FirstTS: 2, LastTS: 2}); err != nil {
			return err
		}
		return tx.InsertSegment(src, "s", 2, &archive.Segment{Bytes: []byte("data"), Rows: 1, FirstTS: 3, LastTS: 3})
	})
	a := openRead(t, path)
	for _, v := range []viewer{a, h} {
		view(t, v, func(tx *archive.ReadTx) error {
			cases := []struct {
				seq    int64
				n      int
				want   []byte
				wantOK bool
			}{
				{0, 32, index[:32], true},
				{0, 64 << 10, index[:64<<10], true},
				{0, 0, []byte{}, true},
				{1, 32, index[:5], true},
				{2, 32, nil, true},
				{3, 32, nil, false},
			}
			for _, c := range cases {
				got, ok, err := tx.SegmentIndexHead(src, "s", c.seq, c.n)
				if err != nil || ok != c.wantOK || !bytes.Equal(got, c.want) || (c.want == nil) != (got == nil) {
					t.Fatalf("seq %d, %d bytes: %d bytes, %v, %v; want %d bytes, %v", c.seq, c.n, len(got), ok, err, len(c.want), c.wantOK)
				}
			}
			if _, _, err := tx.SegmentIndexHead(src, "s", 0, 64<<10+1); err == nil {
				t.Fatal("a head past 64 KiB was read")
			}
			return nil
		})
	}
}

// OpenListedSegment opens a listed segment by its row: the same bytes as
// OpenSegment; a listing whose row is gone or holds other bytes (here, an
// entry whose RowID names another segment, or none) is looked up by key.
func TestOpenListedSegment(t *testing.T) {
	h, path := newHandle(t)
	src := addSrc(t, h, map[string]string{"name": "a"})
	payloads := [][]byte{bytes.Repeat([]byte("a"), 100<<10), bytes.Repeat([]byte("bc"), 70<<10), []byte("short")}
	update(t, h, func(tx *archive.WriteTx) error {
		for i, p := range payloads {
			if err := tx.InsertSegment(src, "s", int64(i), &archive.Segment{Bytes: p, Rows: 1, FirstTS: int64(i + 1), LastTS: int64(i + 1)}); err != nil {
				return err
			}
		}
		return nil
	})
	a := openRead(t, path)
	view(t, a, func(tx *archive.ReadTx) error {
		listed, err := tx.StreamSegmentMetas(src, "s")
		if err != nil || len(listed) != len(payloads) {
			t.Fatalf("listed %d segments: %v", len(listed), err)
		}
		read := func(m archive.StreamSegment) []byte {
			b, ok, err := tx.OpenListedSegment(src, m)
			if err != nil || !ok {
				t.Fatalf("OpenListedSegment(seq %d, row %d): %v %v", m.Seq, m.RowID, ok, err)
			}
			p := make([]byte, b.Size())
			if _, err := b.ReadAt(p, 0); err != nil && err != io.EOF {
				t.Fatal(err)
			}
			return p
		}
		for i, m := range listed {
			if m.RowID == 0 {
				t.Fatalf("segment %d listed without its row", m.Seq)
			}
			if got := read(m); !bytes.Equal(got, payloads[i]) {
				t.Fatalf("seq %d by its row: other bytes", m.Seq)
			}
			// Another segment's row, or none: found by its key.
			for _, row := range []int64{listed[(i+1)%len(listed)].RowID, 0, 1 << 40} {
				wrong := m
				wrong.RowID = row
				if got := read(wrong); !bytes.Equal(got, payloads[i]) {
					t.Fatalf("seq %d listed with row %d: other bytes", m.Seq, row)
				}
			}
		}
		if _, ok, err := tx.OpenListedSegment(src, archive.StreamSegment{Stream: "s", Seq: 9, RowID: listed[0].RowID,
			SegmentMeta: archive.SegmentMeta{Size: 1}}); ok || err != nil {
			t.Fatalf("an absent segment: %v %v", ok, err)
		}
		// The row is what is opened, not the key (which is not looked up
		// at all): listed with a seq that no segment has, it still reads.
		byRow := listed[0]
		byRow.Seq = 9
		if got := read(byRow); !bytes.Equal(got, payloads[0]) {
			t.Fatal("the row was not opened by its id")
		}
		return nil
	})
}
