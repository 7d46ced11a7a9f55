package receiver

import "sync"

// freeList hands out reusable objects that carry caches (label caches, row
// encoders), at most max at a time: a caller beyond that waits for one to
// come back. The work done with them (decoding, encoding) is pure CPU, so
// more objects than GOMAXPROCS would only time-slice while each grew its
// own cache of every series: the cap is memory saved at no throughput.
//
// Last in, first out on purpose: the object handed out is the one used
// most recently, whose cache is warm in the CPU's, and the others are only
// reached when requests really overlap. A FIFO (a buffered channel)
// rotated every request through every object, so each lookup missed the
// CPU cache. Not a sync.Pool: the caches must survive garbage collections.
type freeList[T any] struct {
	slots chan struct{} // one token per object out
	newT  func() T

	mu    sync.Mutex
	items []T // idle objects, most recently returned last
}

func newFreeList[T any](max int, newT func() T) *freeList[T] {
	return &freeList[T]{slots: make(chan struct{}, max), newT: newT, items: make([]T, 0, max)}
}

// get returns the most recently put object, or a new one, waiting while
// max are out. Every get must be followed by exactly one put.
func (f *freeList[T]) get() T {
	f.slots <- struct{}{}
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := len(f.items); n > 0 {
		t := f.items[n-1]
		var zero T
		f.items[n-1] = zero // the list must not keep it reachable twice
		f.items = f.items[:n-1]
		return t
	}
	return f.newT()
}

// put returns t for reuse.
func (f *freeList[T]) put(t T) {
	f.mu.Lock()
	f.items = append(f.items, t)
	f.mu.Unlock()
	<-f.slots
}
