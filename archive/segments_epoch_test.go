package archive_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

// epochOf returns the segments epoch of a new snapshot of r.
func epochOf(t *testing.T, r *archive.Archive) (uint64, bool) {
	t.Helper()
	var e uint64
	var ok bool
	if err := r.View(at.Ctx(t), func(tx *archive.ReadTx) error {
		e, ok = tx.SegmentsEpoch()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return e, ok
}

// A read handle that follows the writer claims an epoch in every
// snapshot: the same one across commits of wal rows only, a greater one
// after each commit that inserts or deletes segments (seal, compaction,
// eviction). A handle that follows no writer claims none.
func TestSegmentsEpochMovesWithTheSegmentsOnly(t *testing.T) {
	ctx := at.Ctx(t)
	w, src := newSource(t, archive.WriterOptions{})
	r, err := archive.OpenWithOptions(w.Path(), archive.ReadOptions{Writer: w})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	plain, err := archive.Open(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()

	append := func(stream string, ts int64) {
		t.Helper()
		if _, err := w.AppendWait(ctx, []archive.SourceRows{{Source: src.ID(), Rows: at.Rows(stream, ts)}}, false); err != nil {
			t.Fatal(err)
		}
	}
	prev, ok := epochOf(t, r)
	if !ok {
		t.Fatal("a quiet archive's snapshot claims no epoch")
	}
	steps := []struct {
		name    string
		do      func()
		changes bool
	}{
		{"wal rows", func() { append("a", 1); append("b", 1) }, false},
		{"seal", func() { append("a", 2); sealWait(t, src, "a") }, true},
		{"wal rows after a seal", func() { append("a", 3) }, false},
		{"a second seal", func() { sealWait(t, src, "a") }, true},
		{"compaction", func() {
			if _, err := w.Compact(ctx, src.ID(), "a", 100, mergerFunc(at.Tags{}.Merge)); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"a prune", func() { must(t, w.Prune(ctx)) }, false},
		{"eviction", func() {
			if _, err := w.EvictBefore(ctx, src.ID(), math.MaxInt64); err != nil {
				t.Fatal(err)
			}
		}, true},
	}
	for _, s := range steps {
		s.do()
		e, ok := epochOf(t, r)
		if !ok {
			t.Fatalf("after %s: no epoch claimed on a quiet archive", s.name)
		}
		if s.changes && e <= prev || !s.changes && e != prev {
			t.Fatalf("after %s: epoch %d, was %d (changes segments: %v)", s.name, e, prev, s.changes)
		}
		prev = e
		if _, ok := epochOf(t, plain); ok {
			t.Fatalf("after %s: a handle that follows no writer claimed an epoch", s.name)
		}
	}
}

// A handle refuses to follow the writer of another file.
func TestSegmentsEpochOfAnotherArchiveIsRefused(t *testing.T) {
	w := at.NewWriter(t, archive.WriterOptions{})
	ow := at.NewWriter(t, archive.WriterOptions{})
	if filepath.Clean(w.Path()) == filepath.Clean(ow.Path()) {
		t.Fatal("the two writers write one file")
	}
	if r, err := archive.OpenWithOptions(w.Path(), archive.ReadOptions{Writer: ow}); err == nil {
		r.Close()
		t.Fatal("a handle followed the writer of another archive")
	}
}

// Under a writer that seals, compacts and appends without pause, every
// snapshot that claims an epoch holds exactly the segments the first
// snapshot of that epoch listed: the list a reader keeps for an epoch is
// never stale. Run with -race.
func TestSegmentsEpochListsAreNeverStale(t *testing.T) {
	ctx := at.Ctx(t)
	w, src := newSource(t, archive.WriterOptions{})
	r, err := archive.OpenWithOptions(w.Path(), archive.ReadOptions{Writer: w, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	stop := make(chan struct{})
	var writes sync.WaitGroup
	writes.Add(1)
	var werr error
	go func() {
		defer writes.Done()
		for i := int64(1); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			stream := fmt.Sprintf("s%d", i%3)
			if _, err := w.AppendWait(ctx, []archive.SourceRows{{Source: src.ID(), Rows: at.Rows(stream, i)}}, false); err != nil {
				werr = err
				return
			}
			switch {
			case i%7 == 0:
				_, err = w.Compact(ctx, src.ID(), stream, 1000, mergerFunc(at.Tags{}.Merge))
			case i%2 == 0:
				_, err = w.SealWait(ctx, src.ID(), []string{stream})
			case i%11 == 0:
				_, err = w.EvictBefore(ctx, src.ID(), i-20)
			}
			if err != nil {
				werr = err
				return
			}
		}
	}()

	type listed struct {
		epoch uint64
		all   []archive.StreamSegment
	}
	var (
		mu      sync.Mutex
		byEpoch = map[uint64][]archive.StreamSegment{}
		claimed atomic.Int64
		checked atomic.Int64
	)
	deadline := time.Now().Add(2 * time.Second)
	var reads sync.WaitGroup
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		reads.Add(1)
		go func() {
			defer reads.Done()
			for time.Now().Before(deadline) {
				var l listed
				ok := false
				err := r.View(ctx, func(tx *archive.ReadTx) error {
					l.epoch, ok = tx.SegmentsEpoch()
					var err error
					l.all, err = tx.SourceSegmentMetas(src.ID())
					return err
				})
				if err != nil {
					errs <- err
					return
				}
				if !ok {
					continue
				}
				claimed.Add(1)
				mu.Lock()
				first, seen := byEpoch[l.epoch]
				if !seen {
					byEpoch[l.epoch] = l.all
				}
				mu.Unlock()
				if seen {
					checked.Add(1)
					if !slices.Equal(first, l.all) {
						errs <- fmt.Errorf("epoch %d: a snapshot listed %v, an earlier one %v", l.epoch, l.all, first)
						return
					}
				}
			}
		}()
	}
	reads.Wait()
	close(stop)
	writes.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if werr != nil && !errors.Is(werr, context.Canceled) {
		t.Fatal(werr)
	}
	if len(byEpoch) < 5 || checked.Load() < 20 {
		t.Fatalf("the test checked too little: %d epochs, %d snapshots claimed one, %d compared", len(byEpoch), claimed.Load(), checked.Load())
	}
	t.Logf("%d epochs, %d snapshots claimed one, %d compared with the epoch's first", len(byEpoch), claimed.Load(), checked.Load())
}
