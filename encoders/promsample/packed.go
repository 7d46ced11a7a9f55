package promsample

import (
	"encoding/binary"
	"math"
	"math/bits"
)

// Packed samples: how the encoder holds a segment's float samples while it
// builds the segment. Encode and Merge hold every sample of the segment at
// once (900 rows of a busy stream are ~10^6 samples), and as a []Sample
// that is 16 bytes each, plus the slack of growing slices: the seal's share
// of the receiver's peak heap. Packed, a sample costs ~3-5 bytes:
//
//	varint   dod    delta of the timestamp delta (0 for a steady scrape)
//	byte     h      0: the value's bits equal the previous ones; else
//	                1 + 8*lead + trail, lead and trail being the zero bytes
//	                at the top and bottom of bits XOR previous bits
//	8-lead-trail bytes of (bits XOR previous) >> (8*trail), little-endian
//
// The previous timestamp, delta and bits start at 0. Arithmetic wraps, so
// every int64 timestamp round-trips. Packed bytes never leave the process
// (they are not a storage format) and are only read by unpack, which
// trusts them.
//
// A series' bytes are a list of chunks cut from its collector's packArena:
// two of minPackChunk bytes, then doubling up to maxPackChunk bytes; a
// sample never straddles two chunks. Grown by append, the buffers were a fifth of the bytes the
// server allocated (each growth a copy, half of the last one slack).
type packedSamples struct {
	chunks [][]byte // full chunks, in order
	cur    []byte   // the chunk being written (cap is its size)
	n      int32    // samples in chunks and cur
	// ordered: every sample's T is above the one before, so the packed
	// order is already canonical (sorted, no duplicates possible), and
	// the first and last samples' T are the least and the greatest.
	ordered  bool
	lastT    int64
	lastDT   int64
	lastBits uint64
}

// packArena cuts chunks for packed samples from shared slabs.
type packArena struct{ slab []byte }

const (
	packSlab     = 64 << 10
	minPackChunk = 64
	maxPackChunk = 1 << 10
	// maxPackedSample is the most bytes one sample packs to: a varint and
	// a header byte and 8 value bytes.
	maxPackedSample = binary.MaxVarintLen64 + 1 + 8
)

func (a *packArena) chunk(size int) []byte {
	if len(a.slab) < size {
		a.slab = make([]byte, packSlab)
	}
	c := a.slab[:0:size]
	a.slab = a.slab[size:]
	return c
}

func (p *packedSamples) add(a *packArena, t int64, v float64) {
	if cap(p.cur)-len(p.cur) < maxPackedSample {
		size := minPackChunk
		if p.cur != nil {
			p.chunks = append(p.chunks, p.cur)
			// The second chunk is as small as the first: a seal's
			// series mostly hold a dozen or two samples, which two
			// small chunks take with less slack than 64+128 bytes.
			if len(p.chunks) > 1 {
				size = min(2*cap(p.cur), maxPackChunk)
			}
		}
		p.cur = a.chunk(size)
	}
	if p.n == 0 {
		p.ordered = true
	} else if t <= p.lastT {
		p.ordered = false
	}
	// Every append below stays within cur's capacity (checked above), so
	// it writes into the arena's slab and never moves cur: the appends go
	// to a local and only the length is stored back, which, unlike
	// assigning the slice, writes no pointer into the heap (no write
	// barrier while the collector marks).
	cur := p.cur
	dt := t - p.lastT
	cur = binary.AppendVarint(cur, dt-p.lastDT)
	p.lastT, p.lastDT = t, dt
	b := math.Float64bits(v)
	x := b ^ p.lastBits
	p.lastBits = b
	p.n++
	if x == 0 {
		cur = append(cur, 0)
	} else {
		lead, trail := bits.LeadingZeros64(x)/8, bits.TrailingZeros64(x)/8
		cur = append(cur, byte(1+lead*8+trail))
		// One 8-byte store, of which the 8-lead-trail low bytes count: the
		// capacity check above leaves room for all eight.
		end := len(cur) + 8 - lead - trail
		binary.LittleEndian.PutUint64(cur[len(cur):len(cur)+8], x>>(8*trail))
		cur = cur[:end]
	}
	p.cur = p.cur[:len(cur)]
}

// span returns the least and greatest T (p.n > 0). Without ordered
// samples it decodes them all: the collector unpacks those in finish, so
// that is only a caller's before finish.
func (p *packedSamples) span() (minT, maxT int64) {
	if !p.ordered {
		minT, maxT = math.MaxInt64, math.MinInt64
		for _, s := range p.unpack(nil) {
			minT, maxT = min(minT, s.T), max(maxT, s.T)
		}
		return minT, maxT
	}
	first := p.cur
	if len(p.chunks) > 0 {
		first = p.chunks[0]
	}
	// The first sample's dod is its T: the previous T and delta start at 0.
	minT, _ = binary.Varint(first)
	return minT, p.lastT
}

// unpack appends the samples in the order they were added.
func (p *packedSamples) unpack(dst []Sample) []Sample {
	dst = growSamples(dst, int(p.n))
	var t, dt int64
	var vb uint64
	decode := func(b []byte) {
		for len(b) > 0 {
			dod, k := binary.Varint(b)
			b = b[k:]
			dt += dod
			t += dt
			h := b[0]
			b = b[1:]
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
	}
	for _, c := range p.chunks {
		decode(c)
	}
	decode(p.cur)
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
