package archive_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

// blockingMerger merges as Tags does, but its first Merge waits for
// release after closing entered.
func blockingMerger(t *testing.T) (m mergerFunc, entered chan struct{}, release func()) {
	entered = make(chan struct{})
	gate := make(chan struct{})
	var once, enterOnce sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release) // a failing test must not leave the merge waiting
	m = func(stream string, segs []archive.StoredSegment) (*archive.Segment, int, error) {
		enterOnce.Do(func() { close(entered); <-gate })
		return at.Tags{}.Merge(stream, segs)
	}
	return m, entered, release
}

// sealedSegments appends each ts to stream and seals it: one segment each.
func sealedSegments(t *testing.T, w *archive.Writer, src archive.SourceID, stream string, ts ...int64) {
	t.Helper()
	ctx := at.Ctx(t)
	for _, v := range ts {
		if _, err := w.AppendWait(ctx, []archive.SourceRows{{Source: src, Rows: at.Rows(stream, v)}}, false); err != nil {
			t.Fatal(err)
		}
		if _, err := w.SealWait(ctx, src, []string{stream}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCompactionMergesOffTheWriterGoroutine: while a merge runs (at a
// million series it takes a second or more), appends and seals of other
// streams commit; the merge commits after.
func TestCompactionMergesOffTheWriterGoroutine(t *testing.T) {
	ctx := at.Ctx(t)
	w, src := newSource(t, archive.WriterOptions{})
	sealedSegments(t, w, src.ID(), "block", 1, 2)
	merger, entered, release := blockingMerger(t)
	type outcome struct {
		c   archive.Compacted
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		c, err := w.Compact(ctx, src.ID(), "block", 10, merger)
		done <- outcome{c, err}
	}()
	<-entered // the merge runs from here until release

	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for i := range 3 {
		r, err := w.AppendWait(wait, []archive.SourceRows{{Source: src.ID(), Rows: at.Rows("other", int64(10+i))}}, false)
		if err != nil {
			t.Fatalf("append %d while a merge ran: %v", i, err)
		}
		if r.Dropped() != 0 {
			t.Fatalf("append %d while a merge ran: %+v", i, r.Streams)
		}
	}
	if sealed, err := w.SealWait(wait, src.ID(), []string{"other"}); err != nil || len(sealed) != 1 {
		t.Fatalf("seal while a merge ran: %+v, %v", sealed, err)
	}
	select {
	case o := <-done:
		t.Fatalf("Compact returned before its merge did: %+v", o)
	default:
	}
	release()
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.c != (archive.Compacted{Before: 2, After: 1, Merges: 1}) {
		t.Fatalf("compacted %+v", o.c)
	}
	if st := w.Stats(); st.Compactions != 1 {
		t.Errorf("stats count %d compactions, want 1", st.Compactions)
	}
	got := fmt.Sprint(at.ReadStrings(t, w.Path(), at.Tags{}))
	if want := "[[1,2] [10,11,12]]"; got != want {
		t.Errorf("archive %s, want %s", got, want)
	}
}

// TestCompactionLeavesARunChangedMeanwhile: retention evicts part of a run
// while it is merged; that merge is not committed, so nothing evicted comes
// back, and the compaction goes on with what is left of the stream.
func TestCompactionLeavesARunChangedMeanwhile(t *testing.T) {
	ctx := at.Ctx(t)
	w, src := newSource(t, archive.WriterOptions{})
	sealedSegments(t, w, src.ID(), "s", 1, 2, 3)
	merger, entered, release := blockingMerger(t)
	type outcome struct {
		c   archive.Compacted
		err error
	}
	done := make(chan outcome, 1)
	var runs [][]int64 // the seqs of each run the merger was given
	var mu sync.Mutex
	logged := mergerFunc(func(stream string, segs []archive.StoredSegment) (*archive.Segment, int, error) {
		var seqs []int64
		for _, s := range segs {
			seqs = append(seqs, s.Seq)
		}
		mu.Lock()
		runs = append(runs, seqs)
		mu.Unlock()
		return merger(stream, segs)
	})
	go func() {
		c, err := w.Compact(ctx, src.ID(), "s", 10, logged)
		done <- outcome{c, err}
	}()
	<-entered // merging seqs 0, 1 and 2
	// Evict seq 0, the segment holding 1.
	ev, err := w.EvictBefore(ctx, src.ID(), 2)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Segments != 1 {
		t.Fatalf("evicted %+v, want one segment", ev)
	}
	release()
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	// The first run (0, 1, 2) is dropped at its commit; the next (1, 2)
	// still stands and is merged.
	if got := fmt.Sprint(runs); got != "[[0 1 2] [1 2]]" {
		t.Errorf("runs merged %s, want [[0 1 2] [1 2]]", got)
	}
	if o.c.Merges != 1 {
		t.Errorf("compacted %+v, want the one merge of what was left", o.c)
	}
	if got := fmt.Sprint(at.ReadStrings(t, w.Path(), at.Tags{})); got != "[[2,3]]" {
		t.Errorf("archive %s, want [[2,3]]: the evicted 1 must stay gone", got)
	}
}
