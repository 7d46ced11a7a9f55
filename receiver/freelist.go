package receiver

import "sync"

// freeList is a bounded LIFO of reusable objects that carry caches (label
// caches, row encoders). Last in, first out on purpose: the object handed
// out is the one used most recently, whose cache is warm in the CPU's, and
// the others are only reached when requests really overlap. A FIFO (a
// buffered channel) rotated every request through every object, so each
// cache ended up holding every series and each lookup missed the CPU
// cache. Not a sync.Pool: the caches must survive garbage collections.
type freeList[T any] struct {
	mu    sync.Mutex
	items []T
	max   int
}

func newFreeList[T any](max int) *freeList[T] {
	return &freeList[T]{items: make([]T, 0, max), max: max}
}

// get returns the most recently put object, or ok false when there is none.
func (f *freeList[T]) get() (t T, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := len(f.items); n > 0 {
		t, f.items = f.items[n-1], f.items[:n-1]
		var zero T
		f.items[:n][n-1] = zero // the list must not keep it reachable twice
		return t, true
	}
	return t, false
}

// put keeps t for reuse, or drops it (cache and all) when the list is full.
func (f *freeList[T]) put(t T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.items) < f.max {
		f.items = append(f.items, t)
	}
}
