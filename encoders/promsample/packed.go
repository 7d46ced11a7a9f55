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
type packedSamples struct {
	buf      []byte
	n        int // samples in buf
	lastT    int64
	lastDT   int64
	lastBits uint64
	minT     int64
	maxT     int64
	// ordered: every sample's T is above the one before, so the packed
	// order is already canonical (sorted, no duplicates possible).
	ordered bool
}

func (p *packedSamples) add(t int64, v float64) {
	if p.n == 0 {
		p.minT, p.maxT, p.ordered = t, t, true
	} else {
		if t <= p.lastT {
			p.ordered = false
		}
		p.minT, p.maxT = min(p.minT, t), max(p.maxT, t)
	}
	dt := t - p.lastT
	p.buf = binary.AppendVarint(p.buf, dt-p.lastDT)
	p.lastT, p.lastDT = t, dt
	b := math.Float64bits(v)
	x := b ^ p.lastBits
	p.lastBits = b
	p.n++
	if x == 0 {
		p.buf = append(p.buf, 0)
		return
	}
	lead, trail := bits.LeadingZeros64(x)/8, bits.TrailingZeros64(x)/8
	p.buf = append(p.buf, byte(1+lead*8+trail))
	x >>= 8 * trail
	for range 8 - lead - trail {
		p.buf = append(p.buf, byte(x))
		x >>= 8
	}
}

// unpack appends the samples in the order they were added.
func (p *packedSamples) unpack(dst []Sample) []Sample {
	dst = growSamples(dst, p.n)
	b := p.buf
	var t, dt int64
	var vb uint64
	for range p.n {
		dod, k := binary.Varint(b)
		b = b[k:]
		dt += dod
		t += dt
		h := b[0]
		b = b[1:]
		if h != 0 {
			lead, trail := int(h-1)/8, int(h-1)%8
			var x uint64
			n := 8 - lead - trail
			for i := range n {
				x |= uint64(b[i]) << (8 * i)
			}
			b = b[n:]
			vb ^= x << (8 * trail)
		}
		dst = append(dst, Sample{T: t, V: math.Float64frombits(vb)})
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
