package archive_test

import (
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// TestSourceSegmentMetasAndSegmentIndex: the catalog of every stream of a
// source in one query agrees with SegmentMetas per stream (without the
// index), and SegmentIndex returns the index SegmentMetas carries.
func TestSourceSegmentMetasAndSegmentIndex(t *testing.T) {
	h, path := newHandle(t)
	src := addSrc(t, h, nil)
	other := addSrc(t, h, nil)
	update(t, h, func(tx *archive.WriteTx) error {
		for _, q := range []struct {
			src    archive.SourceID
			stream string
			seq    int64
			index  []byte
		}{{src, "b", 0, []byte("ib0")}, {src, "a", 1, []byte("ia1")}, {src, "a", 0, nil}, {other, "a", 0, []byte("other")}} {
			// A BLOB over many pages, so the index sits past an overflow chain.
			seg := &archive.Segment{Bytes: make([]byte, 20000+int(q.seq)), Rows: q.seq + 1, FirstTS: q.seq * 10, LastTS: q.seq*10 + 5, Index: q.index}
			if err := tx.InsertSegment(q.src, q.stream, q.seq, seg); err != nil {
				return err
			}
		}
		return nil
	})
	must(t, h.Close())
	a := openRead(t, path)
	view(t, a, func(tx *archive.ReadTx) error {
		got, err := tx.SourceSegmentMetas(src)
		must(t, err)
		var want []archive.StreamSegment
		for _, st := range []string{"a", "b"} {
			metas, err := tx.SegmentMetas(src, st)
			must(t, err)
			for _, m := range metas {
				want = append(want, archive.StreamSegment{Stream: st, Seq: m.Seq, SegmentMeta: m.SegmentMeta})
				idx, ok, err := tx.SegmentIndex(src, st, m.Seq)
				must(t, err)
				eq(t, "index found", ok, true)
				eq(t, "index of "+st, string(idx), string(m.Index))
			}
		}
		eq(t, "metas", got, want)
		eq(t, "count", len(got), 3)
		eq(t, "size", got[1].Size, int64(20001))
		_, ok, err := tx.SegmentIndex(src, "a", 7)
		must(t, err)
		eq(t, "absent index", ok, false)
		return nil
	})
}
