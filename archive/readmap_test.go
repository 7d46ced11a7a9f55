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
