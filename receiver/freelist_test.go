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

func TestBufStackReusesTheLatestAndBoundsWhatItKeeps(t *testing.T) {
	var s bufStack
	if b := s.get(); b != nil {
		t.Fatalf("empty stack gave %d bytes", cap(b))
	}
	a, b := make([]byte, 10, 100), make([]byte, 5, 200)
	s.put(a)
	s.put(b)
	s.put(make([]byte, 0, maxStackBuf+1)) // too large to keep
	s.put(nil)
	if got := s.get(); cap(got) != 200 || len(got) != 0 {
		t.Fatalf("got len %d cap %d, want the last one put, emptied (cap 200)", len(got), cap(got))
	}
	if got := s.get(); cap(got) != 100 {
		t.Fatalf("got cap %d, want 100", cap(got))
	}
	if got := s.get(); got != nil {
		t.Fatalf("kept a buffer it should not have (cap %d)", cap(got))
	}
	for range maxStackBufs + 10 {
		s.put(make([]byte, 1))
	}
	if len(s.bufs) != maxStackBufs {
		t.Fatalf("kept %d buffers, want at most %d", len(s.bufs), maxStackBufs)
	}
}
