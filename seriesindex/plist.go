package seriesindex

import (
	"math/bits"
	"slices"
)

// A posting list is the sorted Refs of the series that have one label
// value. A short one is a plain []Ref (4 bytes a series). One that grows
// long and dense becomes a bigList: its Refs grouped by their top 16 bits
// (a key), each group a container of the low 16 bits, an array of uint16
// while it holds up to arrayMax of them and a bitmap of 65,536 bits past
// that (the scheme of Roaring bitmaps). A label most series have (a job,
// a metric name) then costs a bit or two a series, a rarer one 2 bytes,
// and a list grows one container at a time: no append copies the whole
// list, which at a million series was 1.25x slack, garbage, and the page
// faults of fresh large allocations in the ingest path's CPU profile.
//
// Lists are read and written under postings.mu (readers under its read
// lock, and what they return is a copy), so a container changes in place.

const (
	// bigAt is the length at which a short list is considered for a
	// bigList, and again at every doubling; it becomes one if its Refs
	// fall in few enough keys (bigDensity a key at least), as containers
	// of a few Refs each would cost more than 4 bytes a Ref.
	bigAt      = 512
	bigDensity = 32
	// arrayMax is the most Refs an array container holds: 8 KiB, the
	// size of a bitmap. A bitmap that falls to arrayMax/2 becomes an
	// array again (half, so that a Ref removed and added back at the
	// boundary does not convert it each time).
	arrayMax = 4096
)

type container struct {
	key  uint32        // Ref >> 16
	n    uint32        // Refs held
	arr  []uint16      // the low bits, sorted; nil when bits holds them
	bits *[1024]uint64 // the low bits as a bitmap, from n > arrayMax down to arrayMax/2
}

type bigList struct {
	n    int
	ctrs []container // by key
}

// newBig returns the bigList of sorted refs.
func newBig(refs []Ref) *bigList {
	b := &bigList{}
	for _, r := range refs {
		b.add(r)
	}
	b.trimLast()
	return b
}

// add lists r; adding a listed Ref changes nothing.
func (b *bigList) add(r Ref) {
	key, low := uint32(r>>16), uint16(r)
	i := len(b.ctrs) - 1
	if i < 0 || b.ctrs[i].key < key {
		// The common case: a fresh Ref, the largest so far, in a new key.
		// The previous last container is complete: trim it to its size.
		b.trimLast()
		b.ctrs = append(b.ctrs, container{key: key})
		i++
	} else if b.ctrs[i].key > key {
		// A reused Ref: its container, or a new one in key order.
		var found bool
		i, found = slices.BinarySearchFunc(b.ctrs, key, func(c container, k uint32) int { return int(c.key) - int(k) })
		if !found {
			b.ctrs = slices.Insert(b.ctrs, i, container{key: key})
		}
	}
	if b.ctrs[i].add(low) {
		b.n++
	}
}

// trimLast gives the last container's array its exact size: a list's
// earlier containers are complete, only its last one grows.
func (b *bigList) trimLast() {
	if len(b.ctrs) == 0 {
		return
	}
	c := &b.ctrs[len(b.ctrs)-1]
	if c.arr != nil && cap(c.arr) > len(c.arr) {
		c.arr = slices.Clone(c.arr)
	}
}

// remove drops r; it reports whether r was listed.
func (b *bigList) remove(r Ref) bool {
	key := uint32(r >> 16)
	i, found := slices.BinarySearchFunc(b.ctrs, key, func(c container, k uint32) int { return int(c.key) - int(k) })
	if !found || !b.ctrs[i].remove(uint16(r)) {
		return false
	}
	b.n--
	if b.ctrs[i].n == 0 {
		b.ctrs = slices.Delete(b.ctrs, i, i+1)
	}
	return true
}

// add lists low; it reports whether it was new.
func (c *container) add(low uint16) bool {
	if c.bits != nil {
		w, bit := &c.bits[low/64], uint64(1)<<(low%64)
		if *w&bit != 0 {
			return false
		}
		*w |= bit
		c.n++
		return true
	}
	k := len(c.arr)
	if k == 0 || c.arr[k-1] < low {
		// appended: k stays the position
	} else {
		var found bool
		if k, found = slices.BinarySearch(c.arr, low); found {
			return false
		}
	}
	if len(c.arr) == arrayMax {
		c.bits = new([1024]uint64)
		for _, v := range c.arr {
			c.bits[v/64] |= 1 << (v % 64)
		}
		c.arr = nil
		c.bits[low/64] |= 1 << (low % 64)
		c.n++
		return true
	}
	if len(c.arr) == cap(c.arr) {
		// Grow by doubling up to arrayMax: a copy of at most 8 KiB.
		grown := make([]uint16, len(c.arr), min(max(8, 2*cap(c.arr)), arrayMax))
		copy(grown, c.arr)
		c.arr = grown
	}
	c.arr = slices.Insert(c.arr, k, low)
	c.n++
	return true
}

// remove drops low; it reports whether it was listed.
func (c *container) remove(low uint16) bool {
	if c.bits != nil {
		w, bit := &c.bits[low/64], uint64(1)<<(low%64)
		if *w&bit == 0 {
			return false
		}
		*w &^= bit
		c.n--
		if c.n <= arrayMax/2 {
			arr := make([]uint16, 0, c.n)
			c.arr = c.appendLows(arr)
			c.bits = nil
		}
		return true
	}
	k, found := slices.BinarySearch(c.arr, low)
	if !found {
		return false
	}
	c.arr = slices.Delete(c.arr, k, k+1)
	c.n--
	return true
}

// appendLows appends the container's low bits, in order.
func (c *container) appendLows(out []uint16) []uint16 {
	if c.bits == nil {
		return append(out, c.arr...)
	}
	for i, w := range c.bits {
		for w != 0 {
			out = append(out, uint16(i*64+bits.TrailingZeros64(w)))
			w &= w - 1
		}
	}
	return out
}

// appendTo appends the list's Refs, in order.
func (b *bigList) appendTo(out []Ref) []Ref {
	for i := range b.ctrs {
		c := &b.ctrs[i]
		base := Ref(c.key) << 16
		out = slices.Grow(out, int(c.n))
		if c.bits == nil {
			k := len(out)
			out = out[:k+len(c.arr)]
			for j, v := range c.arr {
				out[k+j] = base | Ref(v)
			}
			continue
		}
		for j, w := range c.bits {
			for w != 0 {
				out = append(out, base|Ref(j*64+bits.TrailingZeros64(w)))
				w &= w - 1
			}
		}
	}
	return out
}

// orInto sets the list's Refs in bm, which covers every Ref handed out.
func (b *bigList) orInto(bm bitmap) {
	for i := range b.ctrs {
		c := &b.ctrs[i]
		if c.bits == nil {
			base := Ref(c.key) << 16
			for _, v := range c.arr {
				bm.set(base | Ref(v))
			}
			continue
		}
		// A container's words are bm's words key*1024 on: 65,536 Refs
		// are 1,024 words. bm ends at the largest Ref handed out, which
		// may fall inside the container's range.
		words := bm[min(int(c.key)*1024, len(bm)):]
		for j, w := range c.bits[:min(1024, len(words))] {
			words[j] |= w
		}
	}
}

// any reports whether fn accepts one of the list's Refs, in order,
// stopping at the first.
func (b *bigList) any(fn func(Ref) bool) bool {
	for i := range b.ctrs {
		c := &b.ctrs[i]
		base := Ref(c.key) << 16
		if c.bits == nil {
			for _, v := range c.arr {
				if fn(base | Ref(v)) {
					return true
				}
			}
			continue
		}
		for j, w := range c.bits {
			for w != 0 {
				if fn(base | Ref(j*64+bits.TrailingZeros64(w))) {
					return true
				}
				w &= w - 1
			}
		}
	}
	return false
}

// filter appends to dst the sorted refs that the list holds; dst may be
// refs[:0] (it is written only behind where refs is read).
func (b *bigList) filter(dst, refs []Ref) []Ref {
	ci := 0
	for i := 0; i < len(refs); {
		key := uint32(refs[i] >> 16)
		for ci < len(b.ctrs) && b.ctrs[ci].key < key {
			ci++
		}
		if ci == len(b.ctrs) {
			break
		}
		c := &b.ctrs[ci]
		if c.key != key {
			// No container: skip the refs of this key.
			for i < len(refs) && uint32(refs[i]>>16) == key {
				i++
			}
			continue
		}
		if c.bits != nil {
			for ; i < len(refs) && uint32(refs[i]>>16) == key; i++ {
				if low := uint16(refs[i]); c.bits[low/64]&(1<<(low%64)) != 0 {
					dst = append(dst, refs[i])
				}
			}
			continue
		}
		arr := c.arr
		lo := 0 // every low of arr before lo is below the current ref's
		for ; i < len(refs) && uint32(refs[i]>>16) == key; i++ {
			low := uint16(refs[i])
			if lo < len(arr) && arr[lo] < low {
				// Gallop: the next low is after lo, often near it.
				k, step := lo, 1
				for k < len(arr) && arr[k] < low {
					lo = k + 1
					k += step
					step *= 2
				}
				lo += searchLow(arr[lo:min(k+1, len(arr))], low)
			}
			if lo == len(arr) {
				// The rest of this key's refs are past the container.
				for i < len(refs) && uint32(refs[i]>>16) == key {
					i++
				}
				break
			}
			if arr[lo] == low {
				dst = append(dst, refs[i])
				lo++
			}
		}
	}
	return dst
}

func searchLow(s []uint16, v uint16) int {
	lo, hi := 0, len(s)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s[m] < v {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// bytes is the list's memory.
func (b *bigList) bytes() int64 {
	n := int64(32 + cap(b.ctrs)*40)
	for i := range b.ctrs {
		if c := &b.ctrs[i]; c.bits != nil {
			n += 8192
		} else {
			n += int64(cap(c.arr)) * 2
		}
	}
	return n
}

// plist is a posting list as postings hands it out: the short form
// (refs) or the long (big), never both.
type plist struct {
	refs []Ref
	big  *bigList
}

func (l plist) len() int {
	if l.big != nil {
		return l.big.n
	}
	return len(l.refs)
}

func (l plist) any(fn func(Ref) bool) bool {
	if l.big != nil {
		return l.big.any(fn)
	}
	return slices.ContainsFunc(l.refs, fn)
}

func (l plist) appendTo(out []Ref) []Ref {
	if l.big != nil {
		return l.big.appendTo(out)
	}
	return append(out, l.refs...)
}

func (l plist) orInto(bm bitmap) {
	if l.big != nil {
		l.big.orInto(bm)
		return
	}
	for _, r := range l.refs {
		bm.set(r)
	}
}

// filter keeps of the sorted refs those in the list, in place.
func (l plist) filter(refs []Ref) []Ref {
	if l.big != nil {
		return l.big.filter(refs[:0], refs)
	}
	return intersect(refs[:0], refs, l.refs)
}

// dense reports whether sorted refs fall in few enough keys to be a
// bigList (bigDensity Refs a key or more).
func dense(refs []Ref) bool {
	keys := 0
	for i, r := range refs {
		if i == 0 || r>>16 != refs[i-1]>>16 {
			keys++
		}
	}
	return keys*bigDensity <= len(refs)
}
