package archive_test

// Reference-notes §8.15 tests/compaction.rs (§6.5), with a SegmentMerger in
// place of the parquet concatenation (the schema-union cases are the
// merger's business and do not apply).

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

// segsOf2 writes n segments of 2 rows (ts 1..2n) to stream, seq 0..n-1.
func segsOf2(t *testing.T, h *archive.WriteHandle, src archive.SourceID, stream string, n int) {
	for i := 0; i < n; i++ {
		putSeg(t, h, src, stream, int64(i), int64(2*i+1), int64(2*i+2))
	}
}

type metaRow struct{ Seq, Rows, First, Last int64 }

func metasOf(t *testing.T, v viewer, src archive.SourceID, stream string) []metaRow {
	t.Helper()
	var out []metaRow
	view(t, v, func(tx *archive.ReadTx) error {
		metas, err := tx.SegmentMetas(src, stream)
		for _, m := range metas {
			out = append(out, metaRow{m.Seq, m.Rows, m.FirstTS, m.LastTS})
		}
		return err
	})
	return out
}

func joinTS(from, to int64) string {
	var p []string
	for i := from; i <= to; i++ {
		p = append(p, strconv.FormatInt(i, 10))
	}
	return strings.Join(p, ",")
}

func TestRefCompactionMergesRunsUpToTheTargetRowCount(t *testing.T) {
	ctx := context.Background()
	h, path := newHandle(t)
	src := addSrc(t, h, nil)
	segsOf2(t, h, src, "s", 10)
	putWAL(t, h, src, "s", 19, 20, 21, 22) // 19 and 20 shadowed, 21 and 22 live
	c, err := h.CompactStream(ctx, src, "s", 8, at.Tags{})
	must(t, err)
	eq(t, "compacted", c, archive.Compacted{Before: 10, After: 3, Merges: 3})
	eq(t, "metas", metasOf(t, h, src, "s"), []metaRow{{0, 8, 1, 8}, {4, 8, 9, 16}, {8, 4, 17, 20}})
	view(t, h, func(tx *archive.ReadTx) error {
		wm, err := tx.SealedWatermarks()
		eq(t, "watermark", wm[src]["s"], int64(20))
		return err
	})
	eq(t, "live tail", liveTS(t, h, src, "s"), []int64{21, 22})
	must(t, h.Close())
	eq(t, "read", at.ReadStrings(t, path, at.Tags{}), [][]string{{joinTS(1, 8), joinTS(9, 16), joinTS(17, 20), "21,22"}})
	if rep := verify(t, path, archive.Full); !rep.Sound() {
		// The shadowed rows 19 and 20 are the only expected finding.
		if len(rep.Problems) != 1 || rep.Problems[0].Kind != archive.ProblemUnreadableWAL {
			t.Errorf("verify after compaction: %v", rep.Problems)
		}
	}
}

func TestRefCompactionRunsUntilNothingIsLeftToMerge(t *testing.T) {
	ctx := context.Background()
	h, _ := newHandle(t)
	src := addSrc(t, h, nil)
	putSeg(t, h, src, "s", 0, 1, 2, 3, 4, 5, 6, 7, 8)
	putSeg(t, h, src, "s", 1, 9, 10, 11, 12, 13, 14, 15, 16)
	for _, step := range []struct {
		target int64
		want   archive.Compacted
	}{
		{10, archive.Compacted{Before: 2, After: 2, Merges: 0}},
		{100, archive.Compacted{Before: 2, After: 1, Merges: 1}},
		{100, archive.Compacted{Before: 1, After: 1, Merges: 0}},
	} {
		c, err := h.CompactStream(ctx, src, "s", step.target, at.Tags{})
		must(t, err)
		eq(t, "target "+strconv.FormatInt(step.target, 10), c, step.want)
	}
	eq(t, "metas", metasOf(t, h, src, "s"), []metaRow{{0, 16, 1, 16}})
}

// indexingMerger is Tags.Merge that also sets an index.
type indexingMerger struct{}

func (indexingMerger) Merge(stream string, segs []archive.StoredSegment) (*archive.Segment, int, error) {
	m, n, err := at.Tags{}.Merge(stream, segs)
	if m != nil {
		m.Index = []byte("merged")
	}
	return m, n, err
}

func TestRefTheMergedSegmentsIndexIsTheMergers(t *testing.T) {
	for _, c := range []struct {
		name   string
		merger archive.SegmentMerger
		want   []byte
	}{{"a merger without an index drops it", at.Tags{}, nil}, {"a merger's index is stored", indexingMerger{}, []byte("merged")}} {
		t.Run(c.name, func(t *testing.T) {
			h, _ := newHandle(t)
			src := addSrc(t, h, nil)
			for i := int64(0); i < 2; i++ {
				update(t, h, func(tx *archive.WriteTx) error {
					seg := tagSeg(i + 1)
					seg.Index = []byte{3}
					return tx.InsertSegment(src, "s", i, seg)
				})
			}
			_, err := h.CompactStream(context.Background(), src, "s", 10, c.merger)
			must(t, err)
			view(t, h, func(tx *archive.ReadTx) error {
				metas, err := tx.SegmentMetas(src, "s")
				if len(metas) != 1 {
					t.Fatalf("metas %+v", metas)
				}
				eq(t, "seq", metas[0].Seq, int64(0))
				eq(t, "index", metas[0].Index, c.want)
				return err
			})
		})
	}
}

// padded segments carry 4 KiB of padding the merger drops, so a merge frees
// pages.
type stripMerger struct{}

func (stripMerger) Merge(stream string, segs []archive.StoredSegment) (*archive.Segment, int, error) {
	stripped := make([]archive.StoredSegment, len(segs))
	for i, s := range segs {
		s.Bytes = []byte(strings.TrimRight(string(s.Bytes), "\x00"))
		stripped[i] = s
	}
	return at.Tags{}.Merge(stream, stripped)
}

func paddedArchive(t *testing.T) (*archive.WriteHandle, archive.SourceID) {
	h, _ := newHandle(t)
	src := addSrc(t, h, nil)
	update(t, h, func(tx *archive.WriteTx) error {
		for i := int64(0); i < 100; i++ {
			seg := tagSeg(4*i+1, 4*i+2, 4*i+3, 4*i+4)
			seg.Bytes = append(seg.Bytes, make([]byte, 4096)...)
			if err := tx.InsertSegment(src, "s", i, seg); err != nil {
				return err
			}
			if i < 4 {
				if err := tx.InsertSegment(src, "sibling", i, tagSeg(4*i+1, 4*i+2, 4*i+3, 4*i+4)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return h, src
}

func pageStats(t *testing.T, v viewer) archive.PageStats {
	var ps archive.PageStats
	view(t, v, func(tx *archive.ReadTx) error {
		var err error
		ps, err = tx.PageStats()
		return err
	})
	return ps
}

func TestRefCompactStreamDoesNotReclaimButCompactDoes(t *testing.T) {
	ctx := context.Background()
	t.Run("CompactStream", func(t *testing.T) {
		h, src := paddedArchive(t)
		before := pageStats(t, h)
		c, err := h.CompactStream(ctx, src, "s", 40, stripMerger{})
		must(t, err)
		eq(t, "compacted", c, archive.Compacted{Before: 100, After: 10, Merges: 10})
		after := pageStats(t, h)
		eq(t, "pages", after.Pages, before.Pages)
		if after.Free == 0 {
			t.Error("the merges freed no pages")
		}
		eq(t, "sibling seqs", seqsOf(t, h, src, "sibling"), []int64{0, 1, 2, 3})
	})
	t.Run("Compact", func(t *testing.T) {
		h, src := paddedArchive(t)
		before := pageStats(t, h)
		c, err := h.Compact(ctx, 40, stripMerger{})
		must(t, err)
		eq(t, "compacted", c, archive.Compacted{Before: 104, After: 11, Merges: 11})
		after := pageStats(t, h)
		if after.Pages >= before.Pages {
			t.Errorf("Compact did not shrink the file: %d -> %d pages", before.Pages, after.Pages)
		}
		eq(t, "free after Compact", after.Free, int64(0))
		view(t, h, func(tx *archive.ReadTx) error {
			n, err := tx.TotalRows(src, "s")
			eq(t, "rows kept", n, int64(400))
			return err
		})
	})
}

func TestRefCompactingOneStreamLeavesItsSiblingAlone(t *testing.T) {
	h, _ := newHandle(t)
	src := addSrc(t, h, nil)
	segsOf2(t, h, src, "a", 4)
	segsOf2(t, h, src, "b", 4)
	_, err := h.CompactStream(context.Background(), src, "a", 100, at.Tags{})
	must(t, err)
	eq(t, "a", len(seqsOf(t, h, src, "a")), 1)
	eq(t, "b", seqsOf(t, h, src, "b"), []int64{0, 1, 2, 3})
}

func TestRefAMergerThatLosesRowsIsRefused(t *testing.T) {
	h, _ := newHandle(t)
	src := addSrc(t, h, nil)
	segsOf2(t, h, src, "s", 3)
	lossy := mergerFunc(func(stream string, segs []archive.StoredSegment) (*archive.Segment, int, error) {
		m, n, err := at.Tags{}.Merge(stream, segs)
		m.Rows--
		return m, n, err
	})
	_, err := h.CompactStream(context.Background(), src, "s", 100, lossy)
	isErr(t, err, archive.ErrEncoderContract)
	eq(t, "seqs untouched", seqsOf(t, h, src, "s"), []int64{0, 1, 2})
}

func TestRefAMergerConsumingFewerThanTwoMovesOnByOne(t *testing.T) {
	h, _ := newHandle(t)
	src := addSrc(t, h, nil)
	segsOf2(t, h, src, "s", 4)
	// Refuses to merge a run starting at seq 0, merges any other.
	picky := mergerFunc(func(stream string, segs []archive.StoredSegment) (*archive.Segment, int, error) {
		if segs[0].Seq == 0 {
			return nil, 0, nil
		}
		return at.Tags{}.Merge(stream, segs)
	})
	c, err := h.CompactStream(context.Background(), src, "s", 100, picky)
	must(t, err)
	eq(t, "compacted", c, archive.Compacted{Before: 4, After: 2, Merges: 1})
	eq(t, "metas", metasOf(t, h, src, "s"), []metaRow{{0, 2, 1, 2}, {1, 6, 3, 8}})
}

type mergerFunc func(string, []archive.StoredSegment) (*archive.Segment, int, error)

func (f mergerFunc) Merge(s string, segs []archive.StoredSegment) (*archive.Segment, int, error) {
	return f(s, segs)
}

func TestRefCompactionThroughTheWriterKeepsTheWatermark(t *testing.T) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{})
	for i := int64(1); i <= 4; i++ {
		must(t, s.Append(ctx, at.Rows("s", 2*i-1, 2*i)...))
		sealWait(t, s, "s")
	}
	c, err := w.Compact(ctx, s.ID(), "s", 100, at.Tags{})
	must(t, err)
	eq(t, "compacted", c, archive.Compacted{Before: 4, After: 1, Merges: 1})
	r := appendWait(t, s, at.Rows("s", 8, 9)...)
	eq(t, "at the watermark: dropped", r.Dropped(), 1)
	sealed := sealWait(t, s, "s")
	if len(sealed) != 1 || sealed[0].Seq != 4 {
		t.Errorf("seal after compaction: %+v, want seq 4", sealed)
	}
	eq(t, "read", at.ReadStrings(t, w.Path(), at.Tags{}), [][]string{{joinTS(1, 8), "9"}})
}
