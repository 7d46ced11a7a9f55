package promsample

import (
	"math/bits"
	"sync"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// writeAllocator is the arrow-go allocator of one segment write. arrow-go
// allocates a column writer's buffers (dictionary indices, levels, page
// buffers) for every column of every row group and frees them when the
// column is closed; with Go's allocator each was fresh zeroed memory for
// the GC to collect, a third of all bytes the server allocated under load.
// Here a freed buffer goes on a free list by size class and the next
// column of the same write takes it.
//
// Safety rests on three rules:
//   - Only a buffer arrow-go has freed is handed out again, and a buffer is
//     freed at most once (a second Free of it is ignored).
//   - Nothing outlives the write: the allocator is dropped when the segment
//     has been written, with any buffer never freed left to the GC.
//   - A buffer reads as Go's allocator would give it: zeroed when
//     allocated, zero-extended when grown.
//
// Tests write the same segments with this allocator and with Go's and
// compare them byte for byte.
type writeAllocator struct {
	mu sync.Mutex // arrow-go's writer calls from one goroutine; cheap insurance
	// live maps the first byte of each pooled-class buffer handed out to
	// the whole buffer; free holds freed buffers by class (log2 of size).
	live map[*byte][]byte
	free [64][][]byte
}

var _ memory.Allocator = (*writeAllocator)(nil)

// Buffers below minPooled bytes come from Go's allocator and are not
// tracked: the bookkeeping would cost more than they do.
const (
	minPooledShift = 12
	minPooled      = 1 << minPooledShift
	allocAlign     = 64 // arrow-go's buffers are 64-byte aligned
)

func newWriteAllocator() *writeAllocator {
	return &writeAllocator{live: map[*byte][]byte{}}
}

// alignedBytes returns n zeroed bytes starting on a 64-byte boundary.
func alignedBytes(n int) []byte {
	b := make([]byte, n+allocAlign)
	shift := int(-uintptr(unsafe.Pointer(unsafe.SliceData(b)))) & (allocAlign - 1)
	return b[shift : shift+n : shift+n]
}

func sizeClass(n int) int { return bits.Len(uint(n - 1)) }

func (a *writeAllocator) Allocate(size int) []byte {
	if size < minPooled {
		return alignedBytes(size)
	}
	class := sizeClass(size)
	a.mu.Lock()
	defer a.mu.Unlock()
	var b []byte
	if fl := a.free[class]; len(fl) > 0 {
		b = fl[len(fl)-1]
		fl[len(fl)-1] = nil
		a.free[class] = fl[:len(fl)-1]
		clear(b[:size])
	} else {
		b = alignedBytes(1 << class)
	}
	a.live[unsafe.SliceData(b)] = b
	return b[:size:size]
}

func (a *writeAllocator) Reallocate(size int, b []byte) []byte {
	if len(b) == 0 {
		return a.Allocate(size)
	}
	if size <= len(b) {
		return b[:size:size]
	}
	a.mu.Lock()
	whole, ok := a.live[unsafe.SliceData(b)]
	a.mu.Unlock()
	if ok && size <= len(whole) {
		// Grown in place, zero-extended as a fresh buffer would be.
		clear(whole[len(b):size])
		return whole[:size:size]
	}
	nb := a.Allocate(size)
	copy(nb, b)
	a.Free(b)
	return nb
}

func (a *writeAllocator) Free(b []byte) {
	if cap(b) == 0 {
		return
	}
	p := unsafe.SliceData(b)
	a.mu.Lock()
	defer a.mu.Unlock()
	whole, ok := a.live[p]
	if !ok {
		return // small, not ours, or freed already
	}
	delete(a.live, p)
	class := sizeClass(len(whole))
	a.free[class] = append(a.free[class], whole)
}
