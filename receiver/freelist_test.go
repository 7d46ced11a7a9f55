package receiver

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestFreeListLendsTheWarmestFirstAndAtMostMax(t *testing.T) {
	made := 0
	f := newFreeList(2, func() *int { made++; n := made; return &n })
	a, b := f.get(), f.get()
	if *a != 1 || *b != 2 {
		t.Fatalf("got %d, %d; want new objects 1, 2", *a, *b)
	}
	// A third caller waits until one comes back.
	var third atomic.Pointer[int]
	done := make(chan struct{})
	go func() { third.Store(f.get()); close(done) }()
	select {
	case <-done:
		t.Fatal("a third object was lent while two were out")
	case <-time.After(50 * time.Millisecond):
	}
	f.put(a)
	<-done
	if third.Load() != a {
		t.Fatalf("the waiting caller got %d, want the returned 1", *third.Load())
	}
	f.put(b)
	f.put(third.Load())
	// Last in, first out: the most recently returned is lent first.
	if got := f.get(); got != a {
		t.Fatalf("got %d, want 1 (returned last)", *got)
	}
	if got := f.get(); got != b {
		t.Fatalf("got %d, want 2", *got)
	}
	if made != 2 {
		t.Fatalf("made %d objects, want 2", made)
	}
}
