package archive_test

// Reference-notes §8.13: tests/retention.rs (caller-row floors are the
// lead's), plus eviction through the writer.

import (
	"math"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

func TestRefPerStreamEvictionCutsClockOffsetsAtTheOldestSurvivingRow(t *testing.T) {
	h, _ := newHandle(t)
	src := addSrc(t, h, nil)
	putSeg(t, h, src, "a", 0, 100)
	putSeg(t, h, src, "a", 1, 200)
	putSeg(t, h, src, "b", 0, 150)
	putWAL(t, h, src, "b", 250)
	update(t, h, func(tx *archive.WriteTx) error {
		for _, ts := range []int64{100, 150, 200, 250} {
			if err := tx.InsertClockOffset(src, ts, ts); err != nil {
				return err
			}
		}
		return nil
	})
	offsetTS := func() []int64 {
		out := []int64{}
		for _, o := range offsetsOf(t, h, src) {
			out = append(out, o.TS)
		}
		return out
	}
	var ev archive.Evicted
	update(t, h, func(tx *archive.WriteTx) error {
		var err error
		ev, err = tx.EvictStreamsBefore(src, 250, func(s string) bool { return s == "a" })
		return err
	})
	eq(t, "segments", ev.Segments, int64(2))
	eq(t, "offsets after a", offsetTS(), []int64{150, 200, 250})
	update(t, h, func(tx *archive.WriteTx) error {
		var err error
		ev, err = tx.EvictStreamsBefore(src, 300, func(s string) bool { return s == "b" })
		return err
	})
	eq(t, "streams", len(streamsOf(t, h, src)), 0)
	eq(t, "offsets after b", offsetTS(), []int64{})
}

func TestRefEvictionReportsTheUnsealedRowsItDeleted(t *testing.T) {
	fixture := func(t *testing.T) (*archive.WriteHandle, archive.SourceID) {
		h, _ := newHandle(t)
		src := addSrc(t, h, nil)
		update(t, h, func(tx *archive.WriteTx) error {
			return tx.InsertSegment(src, "a", 0, &archive.Segment{Bytes: []byte("x"), Rows: 2, FirstTS: 50, LastTS: 100})
		})
		putWAL(t, h, src, "a", 100, 150, 250)
		putWAL(t, h, src, "b", 10, 300)
		return h, src
	}
	cases := []struct {
		name   string
		evict  func(tx *archive.WriteTx, src archive.SourceID) (archive.Evicted, error)
		want   archive.Evicted
		wantA  []int64
		wantB  []int64
		segsOf []int64
	}{
		{"whole source", func(tx *archive.WriteTx, src archive.SourceID) (archive.Evicted, error) {
			return tx.EvictBefore(src, 200)
		}, archive.Evicted{Segments: 1, WALRows: 3, LiveRows: 2}, []int64{250}, []int64{300}, []int64{}},
		{"one stream", func(tx *archive.WriteTx, src archive.SourceID) (archive.Evicted, error) {
			return tx.EvictStreamsBefore(src, 200, func(s string) bool { return s == "b" })
		}, archive.Evicted{WALRows: 1, LiveRows: 1}, []int64{150, 250}, []int64{300}, []int64{0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, src := fixture(t)
			var ev archive.Evicted
			update(t, h, func(tx *archive.WriteTx) error {
				var err error
				ev, err = c.evict(tx, src)
				return err
			})
			eq(t, "evicted", ev, c.want)
			eq(t, "a live", liveTS(t, h, src, "a"), c.wantA)
			eq(t, "b live", liveTS(t, h, src, "b"), c.wantB)
			eq(t, "a segments", seqsOf(t, h, src, "a"), c.segsOf)
		})
	}
}

func TestRefASegmentStraddlingTheCutoffIsKeptWhole(t *testing.T) {
	h, _ := newHandle(t)
	src := addSrc(t, h, nil)
	putSeg(t, h, src, "s", 0, 10, 20)
	putSeg(t, h, src, "s", 1, 30, 40)
	update(t, h, func(tx *archive.WriteTx) error {
		ev, err := tx.EvictBefore(src, 35)
		eq(t, "evicted", ev.Segments, int64(1))
		return err
	})
	eq(t, "seqs", seqsOf(t, h, src, "s"), []int64{1})
}

func TestRefEvictionThroughTheWriterReclaimsAFragmentedFile(t *testing.T) {
	ctx := at.Ctx(t)
	big := at.EncoderFunc(func(stream string, rows []archive.Row) (*archive.Segment, error) {
		seg, err := at.Tags{}.Encode(stream, rows)
		if seg != nil {
			seg.Bytes = append(seg.Bytes, make([]byte, 64<<10)...)
		}
		return seg, err
	})
	w, s := newSource(t, archive.WriterOptions{Encoder: big})
	for ts := int64(1); ts <= 40; ts++ {
		must(t, s.Append(ctx, at.Rows("s", ts)...))
		must(t, s.Seal(ctx, "s"))
	}
	must(t, s.Sync(ctx))
	a := openRead(t, w.Path())
	pages := func() archive.PageStats {
		var ps archive.PageStats
		view(t, a, func(tx *archive.ReadTx) error {
			var err error
			ps, err = tx.PageStats()
			return err
		})
		return ps
	}
	before := pages()
	ev, err := w.EvictBefore(ctx, s.ID(), math.MaxInt64)
	must(t, err)
	eq(t, "segments evicted", ev.Segments, int64(40))
	after := pages()
	if after.Pages >= before.Pages {
		t.Errorf("eviction of most of the file reclaimed nothing: %d -> %d pages (free %d)", before.Pages, after.Pages, after.Free)
	}
	if w.Stats().Reclaims == 0 {
		t.Error("no reclaim pass recorded")
	}
}
