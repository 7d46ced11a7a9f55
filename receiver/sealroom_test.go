package receiver

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// A disk without room to seal the live rows (a reserve beyond what the
// filesystem has) makes seals urgent, holds writes (507, before they reach
// the writer) and seals every stream with live rows though none is due;
// with room again, writes resume and seals wait for idle CPU again.
func TestWritesAreHeldForSealsWhenTheDiskHasNoRoom(t *testing.T) {
	ctx := context.Background()
	urgency := &SealUrgency{}
	// A policy no stream reaches in this test: only the hold seals.
	policy := archive.SealPolicy{MaxRows: 1 << 20, MaxBytes: 1 << 30, MaxAge: time.Hour}
	s := openStackIngest(t, filepath.Join(t.TempDir(), "a.dendro"), archive.WriterOptions{DeferPrunes: true},
		IngestOptions{Seal: policy, RetentionBytes: 1 << 40, Urgency: urgency})
	n := 0
	write := func() error {
		var series []promsample.Series
		for i := range 50 {
			series = append(series, promsample.Series{
				Labels:  labels.FromStrings("__name__", fmt.Sprint("m", i%7), "i", fmt.Sprint(i)),
				Samples: []promsample.Sample{{T: int64(1000 * (n + 1)), V: float64(n)}},
			})
		}
		n++
		_, err := s.ing.Write(ctx, DefaultSource, unlabelled(s.ing.Series(), series), nil)
		return err
	}
	// live and sealed count the source's live rows and segments.
	state := func() (live, segs int64) {
		t.Helper()
		err := s.reader.View(ctx, func(tx *archive.ReadTx) error {
			id := s.ing.sourceIDs()[0]
			spans, err := tx.LiveSpans(id)
			for _, sp := range spans {
				live += sp.Rows
			}
			if err != nil {
				return err
			}
			sizes, err := tx.SegmentSizes(id)
			segs = int64(len(sizes))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return live, segs
	}
	b := newBallast(s.path, 0)
	for range 3 {
		if err := write(); err != nil {
			t.Fatal(err)
		}
	}
	s.ing.SealDue(ctx)
	if live, segs := state(); live == 0 || segs != 0 {
		t.Fatalf("before the hold: %d live rows, %d segments; want rows and no segment", live, segs)
	}
	if err := s.ing.keepRoom(ctx, b); err != nil {
		t.Fatal(err)
	}
	if urgency.Urgent() || s.ing.held.Load() {
		t.Fatalf("with room: urgent %v, held %v", urgency.Urgent(), s.ing.held.Load())
	}

	s.ing.opts.DiskReserve = 1 << 60 // more than any disk has
	if err := s.ing.keepRoom(ctx, b); err != nil {
		t.Fatal(err)
	}
	if !urgency.Urgent() || !s.ing.held.Load() {
		t.Fatalf("without room: urgent %v, held %v; want both", urgency.Urgent(), s.ing.held.Load())
	}
	if err := s.ing.Health(); !errors.Is(err, ErrWritesHeld) || !s.ing.Stats().Held {
		t.Fatalf("while held: Health %v, Stats().Held %v; want ErrWritesHeld, true", err, s.ing.Stats().Held)
	}
	_, before := state()
	err := write()
	if !errors.Is(err, ErrDiskFull) {
		t.Fatalf("a write while held: %v, want ErrDiskFull", err)
	}
	if c := classify(err); c.code != 507 || !c.retryable {
		t.Fatalf("a write while held is answered %d (retryable %v), want 507, retried", c.code, c.retryable)
	}
	if live, _ := state(); live == 0 {
		t.Fatal("the live rows went without a seal")
	}
	s.ing.SealDue(ctx)
	live, segs := state()
	if live != 0 || segs <= before {
		t.Fatalf("after a seal round while held: %d live rows, %d segments; want none live", live, segs)
	}
	if st := s.ing.Stats(); st.Holds != 1 || st.HeldWrites != 1 {
		t.Fatalf("stats: %d holds, %d held writes; want 1, 1", st.Holds, st.HeldWrites)
	}

	s.ing.opts.DiskReserve = 1
	if err := s.ing.keepRoom(ctx, b); err != nil {
		t.Fatal(err)
	}
	if urgency.Urgent() || s.ing.held.Load() || s.ing.Health() != nil || s.ing.Stats().Held {
		t.Fatalf("with room again: urgent %v, held %v, Health %v", urgency.Urgent(), s.ing.held.Load(), s.ing.Health())
	}
	if err := write(); err != nil {
		t.Fatalf("a write once the room is back: %v", err)
	}
}
