package archive_test

import (
	"math"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

// The reads that walk a stream forward (read_after.go).

func TestWalkingAStreamForward(t *testing.T) {
	floor := &keepFloor{}
	floor.set("s", math.MinInt64)
	w, s := newSource(t, archive.WriterOptions{KeepWAL: floor.keep})
	appendWait(t, s, at.Rows("s", 10, 20, 30, 40, 50)...)
	sealWait(t, s, "s") // [10, 50]
	appendWait(t, s, at.Rows("s", 60, 70)...)
	sealWait(t, s, "s") // [60, 70]
	appendWait(t, s, at.Rows("s", 80)...)
	a := openRead(t, w.Path())
	view(t, a, func(tx *archive.ReadTx) error {
		segs, err := tx.StreamSegmentsAfter(s.ID(), "s", 30, 0)
		must(t, err)
		eq(t, "segments after 30", len(segs), 2)
		eq(t, "the first straddles", [2]int64{segs[0].FirstTS, segs[0].LastTS}, [2]int64{10, 50})
		segs, err = tx.StreamSegmentsAfter(s.ID(), "s", 50, 1)
		must(t, err)
		eq(t, "after 50, limit 1", [2]int64{segs[0].FirstTS, segs[0].LastTS}, [2]int64{60, 70})
		segs, err = tx.StreamSegmentsAfter(s.ID(), "s", 70, 0)
		must(t, err)
		eq(t, "after 70", len(segs), 0)

		rows, err := tx.WALFrom(s.ID(), "s", 30, 3, 0)
		must(t, err)
		eq(t, "raw rows from 30, shadowed included", tsOf(rows), []int64{30, 40, 50})
		rows, err = tx.WALFrom(s.ID(), "s", 0, 0, 1)
		must(t, err)
		eq(t, "a byte bound still returns one row", tsOf(rows), []int64{10})
		n, err := tx.WALCountBetween(s.ID(), "s", 20, 60)
		must(t, err)
		eq(t, "count", n, int64(5))
		wm, ok, err := tx.SealedWatermark(s.ID(), "s")
		must(t, err)
		eq(t, "watermark", [2]any{wm, ok}, [2]any{int64(70), true})
		_, ok, err = tx.SealedWatermark(s.ID(), "none")
		must(t, err)
		eq(t, "no watermark", ok, false)
		return nil
	})
}
