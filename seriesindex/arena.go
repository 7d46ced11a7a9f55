package seriesindex

import (
	"encoding/binary"
	"sync/atomic"
)

// arena holds every series' label pairs, encoded (appendLabels: a
// uvarint count of labels, then the pairs), in chunks of bytes that never
// move: a series' pairs are named by a 64-bit offset, chunk<<arenaBits |
// byte, so an entry holds no pointer and neither entries nor chunks are
// scanned by the garbage collector (a []uint32 per series cost its 48
// bytes, a heap object, and a pointer in the entry to scan).
//
// Readers take no lock: a series' bytes are written before its entry is
// published and do not change while it is live and for ReuseAfter after
// its removal (the space goes back only when its Ref is reused, see
// release). alloc and release run under Index.mu.
//
// Offsets are 64-bit because the end only grows: a removed series' space
// is reused only by a series of the same encoded length, so under churn
// of varied label sets the end moves on, and 32 bits (4 GiB) would wrap
// into live series' labels after long enough.
type arena struct {
	// chunks: the slice is replaced, never modified, when it grows; a
	// chunk is written only at offsets not yet handed out.
	chunks atomic.Pointer[[][]byte]
	end    uint64              // the next offset never handed out
	free   map[uint32][]uint64 // released space: length -> offsets
	// freeBytes is the space on free; lost the bytes skipped at the end
	// of a chunk that could not hold the next series' pairs.
	freeBytes, lost int64
}

const (
	arenaBits  = 16
	arenaChunk = 1 << arenaBits
	arenaMask  = arenaChunk - 1
)

func (a *arena) init() {
	a.chunks.Store(&[][]byte{})
	a.free = map[uint32][]uint64{}
}

// at returns the bytes from off to the end of its chunk (or of the
// allocation a large series spans).
func (a *arena) at(off uint64) []byte {
	return (*a.chunks.Load())[off>>arenaBits][off&arenaMask:]
}

// alloc returns n bytes of space, a released one of the same length if
// there is one: series of one shape encode to the same length, so what a
// removed series gave back a later one takes.
func (a *arena) alloc(n int) (uint64, []byte) {
	if n == 0 {
		return 0, nil
	}
	if offs := a.free[uint32(n)]; len(offs) > 0 {
		off := offs[len(offs)-1]
		if len(offs) == 1 {
			delete(a.free, uint32(n))
		} else {
			a.free[uint32(n)] = offs[:len(offs)-1]
		}
		a.freeBytes -= int64(n)
		return off, a.at(off)[:n:n]
	}
	cs := *a.chunks.Load()
	// inner is 0 exactly when the chunk at end is not allocated yet: end
	// reaches a chunk's start only by filling or skipping the one before.
	inner := int(a.end & arenaMask)
	if inner == 0 || inner+n > arenaChunk {
		// A series' pairs never straddle two allocations: skip the rest
		// of this chunk (lost) and start a new one, n bytes long at least.
		if inner != 0 {
			a.lost += int64(arenaChunk - inner)
			a.end += uint64(arenaChunk - inner)
		}
		size := max(arenaChunk, (n+arenaMask)&^arenaMask)
		buf := make([]byte, size)
		grown := make([][]byte, len(cs), len(cs)+size/arenaChunk)
		copy(grown, cs)
		// A large series spans several chunk numbers: each names the
		// rest of the allocation, so at(off) of the first covers it all.
		for i := 0; i < size; i += arenaChunk {
			grown = append(grown, buf[i:])
		}
		a.chunks.Store(&grown)
		cs = grown
	}
	off := a.end
	a.end += uint64(n)
	if n > arenaChunk {
		// The rest of a large series' allocation is its own.
		rest := (a.end+arenaMask)&^arenaMask - a.end
		a.lost += int64(rest)
		a.end += rest
	}
	return off, cs[off>>arenaBits][off&arenaMask:][:n:n]
}

// release gives back the n bytes at off. The caller guarantees nothing
// reads them any more: their series' Ref is being reused, so ReuseAfter
// has passed since its removal.
func (a *arena) release(off uint64, n int) {
	if n == 0 {
		return
	}
	a.free[uint32(n)] = append(a.free[uint32(n)], off)
	a.freeBytes += int64(n)
}

// bytes is the memory of the chunks.
func (a *arena) bytes() int64 {
	return int64(len(*a.chunks.Load())) * arenaChunk
}

// Label pairs are encoded as the uvarints of their symbol ids, name then
// value, in label order. Ids are dense and the most frequent strings are
// interned first, so label names and common values take a byte each:
// rwload's six labels take 13 bytes where uint32s took 48 (14 with the count).

// appendLabels appends a series' encoding: the uvarint count of its
// labels, then its pairs (name, value, name, ...).
func appendLabels(dst []byte, pairs []uint32) []byte {
	return appendPairs(binary.AppendUvarint(dst, uint64(len(pairs)/2)), pairs)
}

// labelsAt reads the count of labels that starts a series' encoding and
// returns the pairs after it.
func labelsAt(b []byte) ([]byte, int) {
	n, rest := uvarint(b)
	return rest, int(n)
}

// encodedLen is the length of the series' encoding b starts with.
func encodedLen(b []byte) int {
	rest, n := labelsAt(b)
	return len(b) - len(rest) + skipLen(rest, n)
}

// appendPairs appends the encoding of pairs (name, value, name, ...).
func appendPairs(dst []byte, pairs []uint32) []byte {
	for _, id := range pairs {
		for id >= 0x80 {
			dst = append(dst, byte(id)|0x80)
			id >>= 7
		}
		dst = append(dst, byte(id))
	}
	return dst
}

// Pairs reads one series' labels as (name, value) symbol ids, in label
// order, from the index's own encoding (Index.Pairs); Index.Symbol turns
// an id into its string. It lets a caller compare labels without building
// them.
type Pairs struct {
	b []byte
	n int // labels not read yet
}

// Len is the number of labels not read yet.
func (p *Pairs) Len() int { return p.n }

// Next returns the next label's symbol ids. It must be called only while
// Len is positive: past the end it returns (0, 0).
func (p *Pairs) Next() (name, value uint32) {
	if p.n <= 0 {
		return 0, 0
	}
	p.n--
	name, p.b = uvarint(p.b)
	value, p.b = uvarint(p.b)
	return name, value
}

// uvarint decodes one id from the start of b and returns the rest. The
// bytes were written by appendPairs for as many labels as are read, so a
// well-formed value ends before b does; a truncated one (impossible
// unless the arena is corrupt) reads as 0 rather than past b.
func uvarint(b []byte) (uint32, []byte) {
	// Inlined: ids under 128, as label names and the commonest values
	// are (they are interned first).
	if len(b) > 0 && b[0] < 0x80 {
		return uint32(b[0]), b[1:]
	}
	return uvarintSlow(b)
}

func uvarintSlow(b []byte) (uint32, []byte) {
	var v uint32
	for i, c := range b {
		if i == 5 {
			break
		}
		v |= uint32(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, b[i+1:]
		}
	}
	return 0, nil
}

// skipLen returns the length in bytes of n labels' encoding at the start
// of b.
func skipLen(b []byte, n int) int {
	k := 0
	for range 2 * n {
		for k < len(b) && b[k] >= 0x80 {
			k++
		}
		k++
	}
	return min(k, len(b))
}
