package membudget_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/membudget"
)

func TestReservationsCountAgainstTheLimit(t *testing.T) {
	b := membudget.New(100)
	ctx := context.Background()
	r1, err := b.Reserve(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.TryReserve(41); ok {
		t.Fatal("41 more bytes fitted in 40")
	}
	r2, ok := b.TryReserve(40)
	if !ok {
		t.Fatal("40 bytes did not fit in 40")
	}
	if r1.TryGrow(1) {
		t.Fatal("grew past the limit")
	}
	r2.Shrink(15)
	if !r1.TryGrow(15) || r1.Bytes() != 75 || r2.Bytes() != 25 {
		t.Fatalf("after a shrink and a grow: %d and %d, want 75 and 25", r1.Bytes(), r2.Bytes())
	}
	r1.Release()
	r1.Release() // idempotent
	r2.Release()
	var none *membudget.Reservation
	none.Release()
	if s := b.Stats(); s.InUse != 0 || s.Limit != 100 {
		t.Fatalf("stats after releasing everything: %+v", s)
	}
}

func TestWhatCouldNeverFitIsRefusedAtOnce(t *testing.T) {
	b := membudget.New(100)
	ctx := context.Background()
	_, err := b.Reserve(ctx, 101)
	var ee *membudget.ExceedsError
	if !errors.As(err, &ee) || !errors.Is(err, membudget.ErrExceedsBudget) || ee.Want != 101 || ee.Limit != 100 {
		t.Fatalf("Reserve(101) of 100: %v", err)
	}
	r, _ := b.Reserve(ctx, 60)
	err = r.Grow(ctx, 41) // the holder's total, 101, could never fit
	if !errors.As(err, &ee) || ee.Want != 101 {
		t.Fatalf("Grow to 101 of 100: %v", err)
	}
	if r.Bytes() != 60 {
		t.Fatalf("a refused Grow changed the reservation to %d", r.Bytes())
	}
}

func TestAReservationWaitsForRoomInTurn(t *testing.T) {
	b := membudget.New(100)
	ctx := context.Background()
	hog, _ := b.Reserve(ctx, 90)
	reserve := func(n int64) chan *membudget.Reservation {
		got := make(chan *membudget.Reservation, 1)
		go func() {
			r, err := b.Reserve(ctx, n)
			if err != nil {
				t.Error(err)
			}
			got <- r
		}()
		return got
	}
	first := reserve(50)
	waitFor(t, b, 1)
	second := reserve(5) // would fit now, but waits behind the first: first come, first served
	waitFor(t, b, 2)
	hog.Shrink(40) // 50 held: room for the first (50) and not then for the second
	r1 := <-first
	if s := b.Stats(); s.Waiting != 1 || s.InUse != 100 {
		t.Fatalf("after room for the first: %+v", s)
	}
	r1.Release()
	r2 := <-second
	r2.Release()
	hog.Release()
	if s := b.Stats(); s.Waited != 2 || s.InUse != 0 || s.Waiting != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestAWaitThatEndsGivesUpItsPlace(t *testing.T) {
	b := membudget.New(100)
	hog, _ := b.Reserve(context.Background(), 90)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := b.Reserve(ctx, 50)
		done <- err
	}()
	waitFor(t, b, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a canceled wait: %v", err)
	}
	if s := b.Stats(); s.Waiting != 0 || s.InUse != 90 || s.Refused != 1 {
		t.Fatalf("stats after the canceled wait: %+v", s)
	}
	// The place is gone: a smaller reservation fits at once.
	if _, ok := b.TryReserve(10); !ok {
		t.Fatal("the canceled waiter still blocks the queue")
	}
	hog.Release()
}

// TestNeverOverTheLimit: many holders reserving, growing and releasing at
// once never hold more than the limit together.
func TestNeverOverTheLimit(t *testing.T) {
	const limit = 1000
	b := membudget.New(limit)
	var mu sync.Mutex
	var held int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for i := range 200 {
				n := int64(1 + (g*31+i*17)%300)
				r, err := b.Reserve(ctx, n)
				if err != nil {
					t.Error(err)
					return
				}
				extra := int64(0)
				if r.TryGrow(n / 2) {
					extra = n / 2
				}
				mu.Lock()
				held += n + extra
				if held > limit {
					t.Errorf("%d bytes held against a limit of %d", held, limit)
				}
				mu.Unlock()
				mu.Lock()
				held -= n + extra
				mu.Unlock()
				r.Release()
			}
		}()
	}
	wg.Wait()
	if s := b.Stats(); s.InUse != 0 || s.Waiting != 0 {
		t.Fatalf("stats at the end: %+v", s)
	}
}

// waitFor returns once n reservations wait on b. Waiting is only visible
// through Stats, so it polls; each step yields to the waiting goroutines.
func waitFor(t *testing.T, b *membudget.Budget, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); b.Stats().Waiting < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiting, want %d", b.Stats().Waiting, n)
		}
	}
}
