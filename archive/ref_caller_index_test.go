package archive_test

// Reference-notes §8.15 tests/caller_index.rs: the caller's opaque
// per-segment index, and projection (CopySpec.Project) dropping it.

import (
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

// indexing is Tags whose index is the rows' timestamps as bytes.
var indexing = at.EncoderFunc(func(stream string, rows []archive.Row) (*archive.Segment, error) {
	seg, err := at.Tags{}.Encode(stream, rows)
	if seg != nil {
		for _, r := range rows {
			seg.Index = append(seg.Index, byte(r.TS))
		}
	}
	return seg, err
})

// indexFixture: segments with indexes [10, 11] and [12], a tail [99].
func indexFixture(t *testing.T) (string, archive.SourceID) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{Encoder: indexing})
	must(t, s.Append(ctx, at.Rows("s", 10, 11)...))
	sealWait(t, s, "s")
	must(t, s.Append(ctx, at.Rows("s", 12)...))
	sealWait(t, s, "s")
	must(t, s.Append(ctx, at.Rows("s", 99)...))
	must(t, s.Sync(ctx))
	return w.Path(), s.ID()
}

func TestRefSegmentIndexesOmitTheTailAndStreamIndexesIncludeIt(t *testing.T) {
	path, src := indexFixture(t)
	a := openRead(t, path)
	view(t, a, func(tx *archive.ReadTx) error {
		metas, err := tx.SegmentMetas(src, "s")
		if err != nil {
			return err
		}
		var idx [][]byte
		for _, m := range metas {
			idx = append(idx, m.Index)
		}
		eq(t, "segment indexes", idx, [][]byte{{10, 11}, {12}})
		all, err := tx.StreamIndexes(src, "s", indexing)
		eq(t, "stream indexes", all, [][]byte{{10, 11}, {12}, {99}})
		return err
	})
}

func TestRefACopyTurnsTheTailIntoASegmentThatKeepsItsIndex(t *testing.T) {
	path, src := indexFixture(t)
	dest := copyInto(t, path, archive.Everything(), indexing)
	c := openRead(t, dest)
	cs := sourcesOf(t, c)
	view(t, c, func(tx *archive.ReadTx) error {
		metas, err := tx.SegmentMetas(cs[0].ID, "s")
		var idx [][]byte
		var seqs []int64
		for _, m := range metas {
			idx = append(idx, m.Index)
			seqs = append(seqs, m.Seq)
		}
		eq(t, "copied indexes", idx, [][]byte{{10, 11}, {12}, {99}})
		eq(t, "copied seqs", seqs, []int64{0, 1, 2})
		return err
	})
	_ = src
}

func TestRefNoIndexReadsAsNil(t *testing.T) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{})
	must(t, s.Append(ctx, at.Rows("s", 1)...))
	sealWait(t, s, "s")
	view(t, openRead(t, w.Path()), func(tx *archive.ReadTx) error {
		metas, err := tx.SegmentMetas(s.ID(), "s")
		if len(metas) != 1 || metas[0].Index != nil {
			t.Errorf("metas %+v, want one segment with a nil index", metas)
		}
		return err
	})
}

func TestRefProjectionRewritesSegmentsAndDropsTheIndex(t *testing.T) {
	path, _ := indexFixture(t)
	spec := archive.Everything()
	// A Tags-style projection: keep only the first timestamp of a segment;
	// a segment starting at 12 has no "data" left and is dropped.
	spec.Project = func(stream string, b []byte) ([]byte, bool, error) {
		if string(b) == "12" {
			return nil, false, nil
		}
		return []byte("p:" + string(b)), true, nil
	}
	dest := copyInto(t, path, spec, indexing)
	c := openRead(t, dest)
	cs := sourcesOf(t, c)
	view(t, c, func(tx *archive.ReadTx) error {
		segs, err := tx.Segments(cs[0].ID, "s")
		type got struct {
			Bytes             string
			Rows, First, Last int64
			Index             []byte
		}
		var out []got
		for _, s := range segs {
			out = append(out, got{string(s.Bytes), s.Rows, s.FirstTS, s.LastTS, s.Index})
		}
		eq(t, "projected", out, []got{{"p:10,11", 2, 10, 11, nil}, {"p:99", 1, 99, 99, nil}})
		return err
	})
}

func TestRefCopyKeepStreamsAndRange(t *testing.T) {
	h, path := newHandle(t)
	src := addSrc(t, h, map[string]string{"h": "1"})
	putSeg(t, h, src, "weather/temp", 0, 1, 2)
	putSeg(t, h, src, "weather/temp", 1, 3, 4)
	putWAL(t, h, src, "weather/temp", 5, 6)
	putSeg(t, h, src, "other", 0, 1, 2)
	update(t, h, func(tx *archive.WriteTx) error { return tx.MarkComplete(src) })
	must(t, h.Close())
	spec := archive.CopySpec{Start: 3, End: 5, KeepStream: func(s string) bool { return len(s) > 8 && s[:8] == "weather/" },
		MetadataExtra: map[string]string{"copied": "yes"}}
	dest := copyInto(t, path, spec, at.Tags{})
	eq(t, "copy", at.ReadStrings(t, dest, at.Tags{}), [][]string{{"3,4", "5,6"}})
	cs := sourcesOf(t, openRead(t, dest))
	eq(t, "complete carried", cs[0].Complete, true)
	eq(t, "metadata extra", cs[0].Metadata["copied"], "yes")
}
