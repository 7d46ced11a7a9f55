package archive_test

import (
	"fmt"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

// The prune that follows a seal deletes rows the watermark already hides
// (design, "The seal seam"). With DeferPrunes it waits for Prune, Sync, an
// eviction or Close; reads must not see the difference meanwhile.

func TestDeferredPrunesWaitForPruneAndReadsDoNotSeeThem(t *testing.T) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{DeferPrunes: true})
	appendWait(t, s, append(at.Rows("s", 1, 2, 3), at.Rows("t", 1, 2)...)...)
	sealWait(t, s, "s")
	sealWait(t, s, "t")
	appendWait(t, s, at.Rows("s", 4)...)
	a := openRead(t, w.Path())
	eq(t, "raw wal s before the prune", walTS(t, a, s.ID(), "s"), []int64{1, 2, 3, 4})
	eq(t, "raw wal t before the prune", walTS(t, a, s.ID(), "t"), []int64{1, 2})
	eq(t, "pruned rows before the prune", w.Stats().PrunedRows, int64(0))
	eq(t, "live s", liveTS(t, a, s.ID(), "s"), []int64{4})
	eq(t, "live t", liveTS(t, a, s.ID(), "t"), []int64{})
	eq(t, "read", at.ReadStrings(t, w.Path(), at.Tags{}), [][]string{{"1,2,3", "4"}, {"1,2"}})

	must(t, w.Prune(ctx))
	must(t, w.Sync(ctx))
	eq(t, "raw wal s", walTS(t, a, s.ID(), "s"), []int64{4})
	eq(t, "raw wal t", walTS(t, a, s.ID(), "t"), []int64{})
	eq(t, "pruned rows", w.Stats().PrunedRows, int64(5))
	eq(t, "read after", at.ReadStrings(t, w.Path(), at.Tags{}), [][]string{{"1,2,3", "4"}, {"1,2"}})
}

// Sync answers "everything sent before me is applied", prunes included,
// and Close leaves no sealed row behind.
func TestSyncAndCloseRunDeferredPrunes(t *testing.T) {
	for _, how := range []string{"sync", "close"} {
		t.Run(how, func(t *testing.T) {
			ctx := at.Ctx(t)
			w, s := newSource(t, archive.WriterOptions{DeferPrunes: true})
			appendWait(t, s, at.Rows("s", 1, 2, 3)...)
			sealWait(t, s, "s")
			if how == "sync" {
				must(t, w.Sync(ctx))
			} else {
				must(t, w.Close())
			}
			eq(t, "raw wal", walTS(t, openRead(t, w.Path()), s.ID(), "s"), []int64{})
		})
	}
}

// An eviction runs the queued prunes first, so Evicted.WALRows counts the
// rows it took, not sealed rows a prune would have taken anyway.
func TestAnEvictionRunsDeferredPrunesFirst(t *testing.T) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{DeferPrunes: true})
	appendWait(t, s, append(at.Rows("s", 10, 20, 30), at.Rows("t", 10, 20, 30)...)...)
	sealWait(t, s, "s")
	ev, err := w.EvictBefore(ctx, s.ID(), 25)
	must(t, err)
	eq(t, "evicted", ev, archive.Evicted{Segments: 0, WALRows: 2, LiveRows: 2})
	eq(t, "raw wal s", walTS(t, openRead(t, w.Path()), s.ID(), "s"), []int64{})
}

// A process stopped between a seal's commit and its prune leaves sealed
// rows in wal; the next writer deletes them as it starts.
func TestAWriterPrunesWhatAnEarlierProcessSealedButDidNotPrune(t *testing.T) {
	h, path := newHandle(t)
	src := addSrc(t, h, nil)
	putSeg(t, h, src, "s", 0, 1, 2)
	putWAL(t, h, src, "s", 1, 2, 9)
	putWAL(t, h, src, "u", 5) // never sealed: all live
	must(t, h.Close())
	w, err := archive.OpenWriter(path, archive.WriterOptions{Encoder: at.Tags{}, CheckpointInterval: -1})
	must(t, err)
	t.Cleanup(func() { w.Close() })
	// A call that waits, and does not prune by itself as Sync would.
	must(t, w.Checkpoint(at.Ctx(t)))
	a := openRead(t, path)
	eq(t, "raw wal s", walTS(t, a, src, "s"), []int64{9})
	eq(t, "raw wal u", walTS(t, a, src, "u"), []int64{5})
	eq(t, "pruned rows", w.Stats().PrunedRows, int64(2))
	must(t, w.Close())
	if rep := verify(t, path, archive.Quick); !rep.Sound() {
		t.Errorf("verify: %v", rep.Problems)
	}
}

// One Prune of more streams than one statement names (pruneStreams works
// in chunks) deletes exactly each stream's sealed rows, whatever its
// watermark, and none of the rows above it.
func TestOnePruneOfManyStreamsDeletesExactlyTheSealedRows(t *testing.T) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{DeferPrunes: true})
	const streams = 230 // 77 sealed at 6, 77 at 3, 76 never
	name := func(i int) string { return fmt.Sprintf("s%03d", i) }
	appendAll := func(ts ...int64) {
		var rows []archive.Row
		for _, v := range ts {
			for i := range streams {
				rows = append(rows, at.Rows(name(i), v)...)
			}
		}
		appendWait(t, s, rows...)
	}
	sealEvery := func(rem int) {
		for i := range streams {
			if i%3 == rem {
				sealWait(t, s, name(i))
			}
		}
	}
	appendAll(1, 2, 3)
	sealEvery(1)
	appendAll(4, 5, 6)
	sealEvery(0)
	appendAll(7)
	must(t, w.Prune(ctx))
	must(t, w.Sync(ctx))
	a := openRead(t, w.Path())
	for i := range streams {
		want := map[int][]int64{0: {7}, 1: {4, 5, 6, 7}, 2: {1, 2, 3, 4, 5, 6, 7}}[i%3]
		eq(t, "raw wal "+name(i), walTS(t, a, s.ID(), name(i)), want)
	}
	eq(t, "pruned rows", w.Stats().PrunedRows, int64(77*6+77*3))
}
