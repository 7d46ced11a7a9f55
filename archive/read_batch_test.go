package archive_test

import (
	"slices"
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
		// Every listed segment names its own row; the rest is the
		// catalog's.
		rowless := func(ms []archive.StreamSegment) []archive.StreamSegment {
			seen := map[int64]bool{}
			out := slices.Clone(ms)
			for i := range out {
				if out[i].RowID <= 0 || seen[out[i].RowID] {
					t.Fatalf("segment %s/%d listed with row %d", out[i].Stream, out[i].Seq, out[i].RowID)
				}
				seen[out[i].RowID] = true
				out[i].RowID = 0
			}
			return out
		}
		eq(t, "metas", rowless(got), want)
		one, err := tx.StreamSegmentMetas(src, "a")
		must(t, err)
		eq(t, "metas of a", rowless(one), want[:2])
		eq(t, "rows of a", one[1].RowID, got[1].RowID)
		eq(t, "count", len(got), 3)
		eq(t, "size", got[1].Size, int64(20001))
		_, ok, err := tx.SegmentIndex(src, "a", 7)
		must(t, err)
		eq(t, "absent index", ok, false)
		return nil
	})
}

// TestLiveSpanAboveAgreesWithLiveSpan: given the watermark read from the
// segments, LiveSpanAbove counts what LiveSpan counts, before any seal
// (negative and zero ts included), after one, and with shadowed rows not
// yet pruned.
func TestLiveSpanAboveAgreesWithLiveSpan(t *testing.T) {
	h, path := newHandle(t)
	src := addSrc(t, h, nil)
	putWAL(t, h, src, "s", -5, 0, 3, 7, 9)
	putWAL(t, h, src, "t", 1)
	a := openRead(t, path)
	check := func(step string, wantRows int64) {
		t.Helper()
		view(t, a, func(tx *archive.ReadTx) error {
			for _, st := range []string{"s", "t", "none"} {
				metas, err := tx.StreamSegmentMetas(src, st)
				must(t, err)
				var w int64
				for _, m := range metas {
					w = max(w, m.LastTS)
				}
				got, err := tx.LiveSpanAbove(src, st, w, len(metas) > 0)
				must(t, err)
				want, err := tx.LiveSpan(src, st)
				must(t, err)
				eq(t, step+" span of "+st, got, want)
				if st == "s" {
					eq(t, step+" live rows of s", got.Rows, wantRows)
				}
			}
			return nil
		})
	}
	check("unsealed", 5)
	update(t, h, func(tx *archive.WriteTx) error {
		// sealed through ts 3; rows -5..3 stay behind, shadowed
		return tx.InsertSegment(src, "s", 0, &archive.Segment{Bytes: []byte{1}, Rows: 3, FirstTS: -5, LastTS: 3})
	})
	check("sealed", 2)
}

// TestVersionChangesWithEveryVisibleCommit: a read handle's snapshot
// version stays equal while nothing is committed and differs once another
// connection commits; a write handle's own snapshots give no version.
func TestVersionChangesWithEveryVisibleCommit(t *testing.T) {
	h, path := newHandle(t)
	src := addSrc(t, h, nil)
	putWAL(t, h, src, "s", 1)
	a := openRead(t, path)
	version := func() archive.SnapshotVersion {
		t.Helper()
		var v archive.SnapshotVersion
		view(t, a, func(tx *archive.ReadTx) error {
			var ok bool
			var err error
			v, ok, err = tx.Version()
			must(t, err)
			eq(t, "version known", ok, true)
			return nil
		})
		return v
	}
	v1 := version()
	eq(t, "unchanged", version(), v1)
	putWAL(t, h, src, "s", 2)
	v2 := version()
	if v2 == v1 {
		t.Fatalf("version %v did not change after a commit", v2)
	}
	eq(t, "unchanged again", version(), v2)
	view(t, &h.Archive, func(tx *archive.ReadTx) error {
		_, ok, err := tx.Version()
		must(t, err)
		eq(t, "version on the writer's connection", ok, false)
		return nil
	})
}
