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

// bufStack keeps byte slices for reuse, the most recently returned first,
// up to maxStackBufs of them and none larger than maxStackBuf.
type bufStack struct {
	mu   sync.Mutex
	bufs [][]byte
}

const (
	maxStackBufs = 64
	maxStackBuf  = 1 << 20
)

// get returns an empty slice, with the capacity of a returned one if any.
func (s *bufStack) get() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.bufs); n > 0 {
		b := s.bufs[n-1]
		s.bufs[n-1] = nil
		s.bufs = s.bufs[:n-1]
		return b[:0]
	}
	return nil
}

// put hands back b, which its caller no longer uses.
func (s *bufStack) put(b []byte) {
	if cap(b) == 0 || cap(b) > maxStackBuf {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.bufs) < maxStackBufs {
		s.bufs = append(s.bufs, b)
	}
}
