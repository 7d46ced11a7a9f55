package archive_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

// Readers see the file through a memory map (ReadOptions.MapBytes). The
// map must stay correct while the writer shrinks the file under it:
// eviction frees the oldest segments, reclaim passes move the last pages
// into the holes, checkpoints truncate the file. Readers that read every
// segment whole, over and over meanwhile, must always see the bytes that
// segment was written with.
func TestReadsThroughTheMapWhileTheFileShrinks(t *testing.T) {
	ctx := at.Ctx(t)
	// A segment is its rows' timestamps (Tags) and 512 KiB derived from its
	// first timestamp, so a reader can check any segment it finds.
	pad := func(first int64) []byte {
		p := make([]byte, 512<<10)
		r := rand.New(rand.NewPCG(uint64(first), 7))
		for i := range p {
			p[i] = byte(r.Uint32())
		}
		return p
	}
	enc := at.EncoderFunc(func(stream string, rows []archive.Row) (*archive.Segment, error) {
		seg, err := at.Tags{}.Encode(stream, rows)
		if seg != nil {
			seg.Bytes = append(seg.Bytes, pad(seg.FirstTS)...)
		}
		return seg, err
	})
	w, s := newSource(t, archive.WriterOptions{Encoder: enc, CheckpointInterval: 20 * time.Millisecond})
	const segs = 40
	for ts := int64(1); ts <= segs; ts++ {
		must(t, s.Append(ctx, at.Rows("s", ts)...))
		sealWait(t, s, "s")
	}
	must(t, s.Sync(ctx))
	st, err := os.Stat(w.Path())
	must(t, err)
	peak := st.Size()

	a, err := archive.OpenWithOptions(w.Path(), archive.ReadOptions{MaxConns: 4})
	must(t, err)
	defer a.Close()
	var stop atomic.Bool
	var reads atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				err := a.View(context.Background(), func(tx *archive.ReadTx) error {
					metas, err := tx.StreamSegmentMetas(s.ID(), "s")
					if err != nil {
						return err
					}
					for _, m := range metas {
						b, ok, err := tx.OpenSegment(s.ID(), "s", m.Seq)
						if err != nil || !ok {
							return fmt.Errorf("segment %d listed, open: %v %v", m.Seq, ok, err)
						}
						got := make([]byte, b.Size())
						if n, err := b.ReadAt(got, 0); n != len(got) || (err != nil && err != io.EOF) {
							return fmt.Errorf("segment %d: read %d of %d: %v", m.Seq, n, len(got), err)
						}
						want := append(fmt.Appendf(nil, "%d", m.FirstTS), pad(m.FirstTS)...)
						if string(got) != string(want) {
							return fmt.Errorf("segment %d (first ts %d) read back other bytes", m.Seq, m.FirstTS)
						}
						reads.Add(1)
					}
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
				// A gap between snapshots, or no checkpoint could ever
				// finish and truncate the file.
				time.Sleep(time.Millisecond)
			}
		}()
	}
	for cut := int64(2); cut <= segs-2; cut += 2 {
		_, err := w.EvictBefore(ctx, s.ID(), cut)
		must(t, err)
		time.Sleep(30 * time.Millisecond) // a checkpoint or two: the file shrinks
	}
	// The readers go on until a checkpoint has truncated the file (one
	// finishes once every reader is on the last commit; slower under -race).
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if st, err := os.Stat(w.Path()); err == nil && st.Size() <= peak*3/4 {
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st, err = os.Stat(w.Path())
	must(t, err)
	t.Logf("%d segment reads; file %d -> %d bytes; %d reclaim passes", reads.Load(), peak, st.Size(), w.Stats().Reclaims)
	if st.Size() > peak*3/4 || w.Stats().Reclaims == 0 {
		t.Fatalf("the file went %d -> %d bytes (%d reclaim passes): it did not shrink under the readers", peak, st.Size(), w.Stats().Reclaims)
	}
	if reads.Load() < segs {
		t.Fatalf("%d segment reads: the readers did not overlap the shrinking", reads.Load())
	}
}

// A connection maps the file while nobody commits and reads it through
// its page cache while the writer does: each snapshot that finds new
// commits turns its connection's map off for the next one, and each that
// finds none turns it back on (readmap.go). Reads give the same bytes
// either way.
func TestTheMapFollowsTheWriter(t *testing.T) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{})
	must(t, s.Append(ctx, at.Rows("s", 1)...))
	sealWait(t, s, "s")
	must(t, s.Sync(ctx))
	// One connection, so every snapshot below runs on it.
	a, err := archive.OpenWithOptions(w.Path(), archive.ReadOptions{MaxConns: 1})
	must(t, err)
	defer a.Close()
	ts := int64(1)
	for i, step := range []struct {
		commit bool // the writer commits before the snapshot
		mapped bool // the snapshot reads through the map
	}{
		{false, true}, // a new connection maps the file
		{true, true},  // this one found a commit: the next is unmapped
		{true, false},
		{false, false}, // quiet: the next maps again
		{false, true},
		{true, true},
		{false, false},
		{false, true},
	} {
		if step.commit {
			ts++
			must(t, s.Append(ctx, at.Rows("s", ts)...))
			must(t, s.Sync(ctx))
		}
		err := a.View(ctx, func(tx *archive.ReadTx) error {
			size, err := archive.MapSizeForTest(tx)
			if err != nil {
				return err
			}
			if got := size > 0; got != step.mapped {
				t.Errorf("snapshot %d (commit before it: %v): mmap_size %d, want mapped %v", i, step.commit, size, step.mapped)
			}
			seg, ok, err := tx.OpenSegment(s.ID(), "s", 0)
			if err != nil || !ok {
				return fmt.Errorf("segment 0: %v %v", ok, err)
			}
			got := make([]byte, seg.Size())
			if _, err := seg.ReadAt(got, 0); err != nil && err != io.EOF {
				return err
			}
			if string(got) != "1" {
				t.Errorf("snapshot %d: segment 0 reads %q, want %q", i, got, "1")
			}
			live, err := tx.LiveWAL(s.ID(), "s")
			if err != nil {
				return err
			}
			if int64(len(live)) != ts-1 {
				t.Errorf("snapshot %d: %d live rows, want %d", i, len(live), ts-1)
			}
			return nil
		})
		must(t, err)
	}
}
