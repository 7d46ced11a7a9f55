package promread

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/membudget"
)

// TestAQuestionReservesWhatItHolds: a question's budget reserves from the
// process's memory budget as it takes samples, in steps; it is refused at
// once past its share (422), waits while others hold the memory and gets
// it when they release, or gives up with its context (503); release gives
// everything back.
func TestAQuestionReservesWhatItHolds(t *testing.T) {
	mem := membudget.New(8 << 20)
	s := &store{opts: Options{Memory: mem, MemoryPerQuery: 6 << 20}}
	ctx := context.Background()

	a := s.newBudget()
	if err := a.take(ctx, 1000, 0); err != nil {
		t.Fatal(err)
	}
	if got := mem.Stats().InUse; got != memoryStep {
		t.Fatalf("after 1000 floats %d bytes reserved, want one step (%d)", got, memoryStep)
	}
	// Past the share: refused, whatever is free.
	err := a.take(ctx, (6<<20)/floatBytes, 0)
	var ml *MemoryLimitError
	if !errors.As(err, &ml) || !errors.Is(err, ErrTooMuchMemory) {
		t.Fatalf("over the share: %v, want a MemoryLimitError", err)
	}
	if _, code := classify(err); code != http.StatusUnprocessableEntity {
		t.Fatalf("over the share is answered %d, want 422", code)
	}
	a.release()
	if got := mem.Stats().InUse; got != 0 {
		t.Fatalf("after release %d bytes reserved", got)
	}

	// Two questions of 5 MiB each: the second waits for the first.
	first, second := s.newBudget(), s.newBudget()
	if err := first.take(ctx, (5<<20)/floatBytes, 0); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err = second.take(short, (5<<20)/floatBytes, 0)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a wait that runs out: %v, want the context's deadline", err)
	}
	if _, code := classify(err); code != http.StatusServiceUnavailable {
		t.Fatalf("a wait that ran out is answered %d, want 503", code)
	}
	third := s.newBudget()
	done := make(chan error)
	go func() { done <- third.take(ctx, (5<<20)/floatBytes, 0) }()
	select {
	case err := <-done:
		t.Fatalf("the third question did not wait: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	first.release()
	if err := <-done; err != nil {
		t.Fatalf("after the first released: %v", err)
	}
	third.release()
	if got := mem.Stats().InUse; got != 0 {
		t.Fatalf("at the end %d bytes reserved", got)
	}
}
