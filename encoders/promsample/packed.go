package promsample

import (
	"encoding/binary"
	"errors"
	"math"
	"math/bits"
)

// Packed samples: how the encoder holds a segment's float samples while it
// builds the segment. Encode and Merge hold every sample of the segment at
// once (900 rows of a busy stream are ~10^6 samples), and as a []Sample
// that is 16 bytes each, plus the slack of growing slices: the seal's share
// of the receiver's peak heap. Packed, a sample costs ~3-5 bytes:
//
//	byte     h      0: the value's bits equal the previous ones; else
//	                1 + 8*lead + trail, lead and trail being the zero bytes
//	                at the top and bottom of bits XOR previous bits
//	varint   dod    delta of the timestamp delta (0 for a steady scrape)
//	8-lead-trail bytes of (bits XOR previous) >> (8*trail), little-endian
//
// The first sample's dod is its T minus the arena's base (the first T it
// was given), and the delta after it is 0: the first two timestamps of a
// series take a few bytes each, not 6 (T) and 6 (the next delta minus T).
// The previous bits start at 0. Arithmetic wraps, so every int64
// timestamp round-trips. Packed bytes never leave the process
// (they are not a storage format) and are only read by unpack, which
// trusts them.
//
// A series' bytes are a list of chunks cut from its collector's packArena,
// of 32 bytes, then doubling up to 1 KiB; each starts with the 4-byte address
// of the next (filled when there is one), and a sample never straddles
// two: one that does not fit in what is left of a chunk goes to the next,
// and a packEnd byte (never a sample's first: h is at most 64) ends the
// first one's samples. A series of a few samples (a seal at high
// cardinality holds one to a few of each: 4 of BenchmarkSealMemory's pack
// into 13-28 bytes) takes one chunk, and its seriesData two 4-byte
// addresses instead of two slices.
// Grown by append, the buffers were a fifth of the bytes the server
// allocated (each growth a copy, half of the last one slack).
type packedSamples struct {
	lastT    int64
	lastDT   int64
	lastBits uint64
	first    uint32 // address of the first chunk (when n > 0)
	cur      uint32 // address of the chunk being written
	n        int32  // samples in the chunks
	curLen   uint16 // bytes of cur in use, its link included
	level    uint8  // cur's size is packChunkSize(level)
	// ordered: every sample's T is above the one before, so the packed
	// order is already canonical (sorted, no duplicates possible), and
	// the first and last samples' T are the least and the greatest.
	ordered bool
}

// packArena cuts chunks for packed samples from 64 KiB slabs. A chunk's
// address is its offset in the arena in units of packAlign bytes: every
// chunk size is a multiple of it, so a uint32 reaches 64 GiB of chunks.
type packArena struct {
	slabs [][]byte
	used  int   // bytes of the last slab handed out
	base  int64 // the first T added (set with the first slab)
	// err is set when the arena has no address left for a chunk: the
	// sample is dropped and the encode fails with err (see collector.err).
	err error
}

const (
	packSlab      = 64 << 10
	packAlign     = 16
	slabUnits     = packSlab / packAlign
	maxPackSlabs  = 1 << 32 / slabUnits // addresses are uint32
	minPackChunk  = 32
	maxPackLevel  = 5 // 32 << 5 = 1 KiB
	packLinkBytes = 4
	packEnd       = 0xff
	// maxPackedSample is the most bytes one sample packs to: a header
	// byte, a varint and 8 value bytes. A new chunk always takes one
	// (minPackChunk - packLinkBytes is more).
	maxPackedSample = 1 + binary.MaxVarintLen64 + 8
)

// packChunkSize is the size of a chunk of level l: every size is a
// multiple of packAlign and divides into packSlab's slack at most once.
func packChunkSize(l uint8) int { return minPackChunk << min(l, maxPackLevel) }

// chunk returns the address of a new chunk of size bytes, all zero; ok is
// false when the arena cannot address another.
func (a *packArena) chunk(size int) (addr uint32, ok bool) {
	if len(a.slabs) == 0 || packSlab-a.used < size {
		if len(a.slabs) >= maxPackSlabs {
			a.err = errors.New("promsample: a segment's packed samples exceed 64 GiB")
			return 0, false
		}
		a.slabs = append(a.slabs, make([]byte, packSlab))
		a.used = 0
	}
	addr = uint32(len(a.slabs)-1)*slabUnits + uint32(a.used/packAlign)
	a.used += size
	return addr, true
}

// bytes returns the chunk at addr of size bytes.
func (a *packArena) bytes(addr uint32, size int) []byte {
	off := int(addr%slabUnits) * packAlign
	return a.slabs[addr/slabUnits][off : off+size : off+size]
}

func (p *packedSamples) add(a *packArena, t int64, v float64) {
	if len(a.slabs) == 0 {
		a.base = t // before any sample is packed against it
	}
	dt := t - p.lastT
	dod := dt - p.lastDT
	if p.n == 0 {
		dt, dod = 0, t-a.base
	}
	b := math.Float64bits(v)
	size := packChunkSize(p.level)
	if p.n > 0 && size-int(p.curLen) >= packRoom {
		// The common case: packed in place, room to spare.
		c := a.bytes(p.cur, size)
		p.curLen += uint16(packSample(c[p.curLen:], dod, b^p.lastBits)) // a chunk is at most 1 KiB
	} else {
		// Near a chunk's end, or no chunk yet: packed aside, then copied
		// to what is left of the chunk if it fits, else to a new one.
		var buf [packRoom]byte
		n := packSample(buf[:], dod, b^p.lastBits)
		switch {
		case p.n == 0:
			addr, ok := a.chunk(minPackChunk)
			if !ok {
				return
			}
			p.first, p.cur, p.curLen, p.level = addr, addr, packLinkBytes, 0
		case size-int(p.curLen) < n:
			next, ok := a.chunk(packChunkSize(p.level + 1))
			if !ok {
				return
			}
			c := a.bytes(p.cur, size)
			if int(p.curLen) < size {
				c[p.curLen] = packEnd
			}
			binary.LittleEndian.PutUint32(c, next)
			p.cur, p.curLen = next, packLinkBytes
			if p.level < maxPackLevel {
				p.level++
			}
		}
		c := a.bytes(p.cur, packChunkSize(p.level))
		copy(c[p.curLen:], buf[:n])
		p.curLen += uint16(n)
	}
	if p.n == 0 {
		p.ordered = true
	} else if t <= p.lastT {
		p.ordered = false
	}
	p.lastT, p.lastDT, p.lastBits = t, dt, b
	p.n++
}

// packRoom is the room packSample needs: a sample's most bytes and the
// rest of its 8-byte store.
const packRoom = maxPackedSample + 8

// packSample packs one sample, dod and x (its bits XOR the previous ones),
// into dst (at least packRoom bytes) and returns the bytes it takes.
func packSample(dst []byte, dod int64, x uint64) int {
	_ = dst[packRoom-1]
	if x == 0 {
		dst[0] = 0
		return 1 + binary.PutVarint(dst[1:], dod)
	}
	lead, trail := bits.LeadingZeros64(x)/8, bits.TrailingZeros64(x)/8
	dst[0] = byte(1 + lead*8 + trail)
	n := 1 + binary.PutVarint(dst[1:], dod)
	// One 8-byte store, of which the 8-lead-trail low bytes count.
	binary.LittleEndian.PutUint64(dst[n:], x>>(8*trail))
	return n + 8 - lead - trail
}

// span returns the least and greatest T (p.n > 0). Without ordered
// samples it decodes them all: the collector unpacks those in finish, so
// that is only a caller's before finish.
func (p *packedSamples) span(a *packArena) (minT, maxT int64) {
	if !p.ordered {
		minT, maxT = math.MaxInt64, math.MinInt64
		for _, s := range p.unpack(a, nil) {
			minT, maxT = min(minT, s.T), max(maxT, s.T)
		}
		return minT, maxT
	}
	// The first sample's dod is its T minus the base. It follows the first
	// chunk's link and its header byte.
	dod, _ := binary.Varint(a.bytes(p.first, minPackChunk)[packLinkBytes+1:])
	return a.base + dod, p.lastT
}

// unpack appends the samples in the order they were added.
func (p *packedSamples) unpack(a *packArena, dst []Sample) []Sample {
	dst = growSamples(dst, int(p.n))
	var t, dt int64
	var vb uint64
	addr, level, left := p.first, uint8(0), p.n
	for left > 0 {
		c := a.bytes(addr, packChunkSize(level))
		next := binary.LittleEndian.Uint32(c)
		b := c[packLinkBytes:]
		for ; left > 0 && len(b) > 0 && b[0] != packEnd; left-- {
			h := b[0]
			dod, k := binary.Varint(b[1:])
			b = b[1+k:]
			if left == p.n {
				t = a.base + dod // the first sample
			} else {
				dt += dod
				t += dt
			}
			if h != 0 {
				lead, trail := int(h-1)/8, int(h-1)%8
				n := 8 - lead - trail // 1..8: x was not 0
				var x uint64
				if len(b) >= 8 {
					// One load; the bytes past n belong to the next sample.
					x = binary.LittleEndian.Uint64(b) & (^uint64(0) >> (64 - 8*n))
				} else {
					for i := range n {
						x |= uint64(b[i]) << (8 * i)
					}
				}
				b = b[n:]
				vb ^= x << (8 * trail)
			}
			dst = append(dst, Sample{T: t, V: math.Float64frombits(vb)})
		}
		addr, level = next, min(level+1, maxPackLevel)
	}
	return dst
}

// growSamples makes room for n more samples without the slack of doubling
// when dst has none.
func growSamples(dst []Sample, n int) []Sample {
	if cap(dst)-len(dst) >= n {
		return dst
	}
	if len(dst) == 0 {
		return make([]Sample, 0, n)
	}
	out := make([]Sample, len(dst), len(dst)+n)
	copy(out, dst)
	return out
}
