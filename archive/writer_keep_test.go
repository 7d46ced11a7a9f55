package archive_test

import (
	"math"
	"sync"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

// WriterOptions.KeepWAL: the prune keeps the rows a reader still reads as rows.

// keepFloor is a KeepWAL whose floor a test moves.
type keepFloor struct {
	mu    sync.Mutex
	from  map[string]int64
	asked int
}

func (k *keepFloor) set(stream string, from int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.from == nil {
		k.from = map[string]int64{}
	}
	k.from[stream] = from
}

func (k *keepFloor) keep(_ archive.SourceID, stream string) (int64, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.asked++
	f, ok := k.from[stream]
	return f, ok
}

func TestThePruneKeepsRowsAtOrAboveTheFloorAndPrunesThemOnceItMoves(t *testing.T) {
	ctx := at.Ctx(t)
	floor := &keepFloor{}
	floor.set("s", 3)
	floor.set("u", math.MinInt64)
	w, s := newSource(t, archive.WriterOptions{DeferPrunes: true, KeepWAL: floor.keep})
	appendWait(t, s, append(at.Rows("s", 1, 2, 3, 4), append(at.Rows("t", 1, 2), at.Rows("u", 1, 2)...)...)...)
	sealWait(t, s, "s")
	sealWait(t, s, "t")
	sealWait(t, s, "u")
	must(t, w.Prune(ctx))
	must(t, w.Sync(ctx))
	a := openRead(t, w.Path())
	eq(t, "s keeps the rows at and above its floor", walTS(t, a, s.ID(), "s"), []int64{3, 4})
	eq(t, "t has no floor", walTS(t, a, s.ID(), "t"), []int64{})
	eq(t, "u keeps everything", walTS(t, a, s.ID(), "u"), []int64{1, 2})
	eq(t, "reads do not see the held rows", at.ReadStrings(t, w.Path(), at.Tags{}),
		[][]string{{"1,2,3,4"}, {"1,2"}, {"1,2"}})

	// The floor moves: the next prune takes what it held.
	floor.set("s", 5)
	floor.set("u", 2)
	must(t, w.Prune(ctx))
	must(t, w.Sync(ctx))
	eq(t, "s after its floor moved", walTS(t, a, s.ID(), "s"), []int64{})
	eq(t, "u after its floor moved", walTS(t, a, s.ID(), "u"), []int64{2})
}
