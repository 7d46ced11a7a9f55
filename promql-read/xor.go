package promread

import (
	"encoding/binary"
	"errors"
	"math"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// decodeXOR appends to dst the samples in [mint, maxt] of one Gorilla XOR
// chunk as Prometheus's chunkenc.XORChunk writes it (the packed cache's
// format, see packer.add). It reads the same bits as chunkenc's xorIterator
// (TestDecodeXORMatchesChunkenc holds it to that) in one loop with the bit
// buffer in local variables: no interface call and no iterator state in
// memory per sample, which makes it about twice as fast; a whole-metric
// read spends most of its time here.
//
// The format: a big-endian uint16 sample count; the first sample as a
// varint timestamp and 64 raw value bits; the second as a uvarint
// timestamp delta and an XOR value; then per sample a delta-of-delta in
// one of five buckets ('0', '10'+14 bits, '110'+17, '1110'+20,
// '1111'+64) and an XOR value ('0': same; '10': the previous
// leading/trailing-zero window; '11', 5 bits of leading zeros, 6 bits of
// significant bits (0 meaning 64), the bits).
//
// whole says every sample is inside [mint, maxt] (the chunk's span is), so
// no sample is compared.
func decodeXOR(b []byte, mint, maxt int64, whole bool, dst []promsample.Sample) ([]promsample.Sample, error) {
	if len(b) < 2 {
		return dst, errBadChunk
	}
	n := int(binary.BigEndian.Uint16(b))
	if n == 0 {
		return dst, nil
	}
	data := b[2:]
	// The first sample and the second's delta are byte-aligned varints.
	t, k := binary.Varint(data)
	if k <= 0 || len(data) < k+8 {
		return dst, errBadChunk
	}
	data = data[k:]
	v := binary.BigEndian.Uint64(data)
	data = data[8:]
	if whole || (t >= mint && t <= maxt) {
		dst = append(dst, promsample.Sample{T: t, V: math.Float64frombits(v)})
	}
	if n == 1 {
		return dst, nil
	}
	d, k := binary.Uvarint(data)
	if k <= 0 {
		return dst, errBadChunk
	}
	data = data[k:]
	delta := int64(d)

	// The bit reader: pos is the next bit of data; w holds the bits from
	// pos on at its top, the first avail of them valid. peek loads 57 or
	// more (zeros past the end of data, so a corrupt chunk reads zeros,
	// never out of bounds; the check after each sample turns that into an
	// error). A read takes bits off the top of w and reloads only when w
	// runs short: a regular series' sample (a 1-bit delta of delta and a
	// short value) costs one load every few samples.
	pos := uint(0)
	end := uint(len(data)) * 8
	w, avail := peek(data, 0), uint(57)
	var leading, trailing uint
	for i := 1; i < n; i++ {
		if i > 1 {
			// The delta of delta: at most 4 + 20 bits but for '1111'.
			if avail < 24 {
				w, avail = peek(data, pos), 57
			}
			var dod int64
			var used uint
			switch {
			case w>>63 == 0:
				used = 1
			case w>>62 == 0b10:
				dod, used = signed(w<<2>>(64-14), 14), 2+14
			case w>>61 == 0b110:
				dod, used = signed(w<<3>>(64-17), 17), 3+17
			case w>>60 == 0b1110:
				dod, used = signed(w<<4>>(64-20), 20), 4+20
			default:
				// '1111' and 64 bits.
				dod = int64(peek64(data, pos+4))
				pos += 4 + 64
				w, avail = peek(data, pos), 57
			}
			if used > 0 {
				w <<= used
				avail -= used
				pos += used
			}
			delta += dod
		}
		t += delta

		// The value: a control of at most 2 + 5 + 6 bits, then 1 to 64.
		if avail < 13 {
			w, avail = peek(data, pos), 57
		}
		if w>>63 == 0 {
			w <<= 1
			avail--
			pos++
		} else {
			used := uint(2)
			if w>>62 == 0b11 {
				leading = uint(w << 2 >> (64 - 5))
				sig := uint(w << 7 >> (64 - 6))
				if sig == 0 {
					sig = 64
				}
				if leading+sig > 64 {
					return dst, errBadChunk
				}
				trailing = 64 - leading - sig
				used = 2 + 5 + 6
			}
			w <<= used
			avail -= used
			pos += used
			// sig >= 1: a new window has 1 to 64 significant bits, and
			// the initial one (leading = trailing = 0) has 64.
			sig := 64 - leading - trailing
			var bits uint64
			switch {
			case sig <= avail:
				bits = w >> (64 - sig)
				w <<= sig
				avail -= sig
				pos += sig
			case sig <= 57:
				w = peek(data, pos)
				bits = w >> (64 - sig)
				w <<= sig
				avail = 57 - sig
				pos += sig
			default:
				bits = peek64(data, pos) >> (64 - sig)
				pos += sig
				w, avail = peek(data, pos), 57
			}
			v ^= bits << trailing
		}
		if pos > end {
			return dst, errBadChunk
		}
		if whole {
			dst = append(dst, promsample.Sample{T: t, V: math.Float64frombits(v)})
			continue
		}
		if t > maxt {
			break
		}
		if t >= mint {
			dst = append(dst, promsample.Sample{T: t, V: math.Float64frombits(v)})
		}
	}
	return dst, nil
}

// peek returns at least the 57 bits of b from bit pos on, at the top of
// a word, most significant first; zeros past the end of b.
func peek(b []byte, pos uint) uint64 {
	i := pos >> 3
	if i+8 <= uint(len(b)) {
		return binary.BigEndian.Uint64(b[i:]) << (pos & 7)
	}
	return peekTail(b, i) << (pos & 7)
}

// peek64 returns the 64 bits of b from bit pos on.
func peek64(b []byte, pos uint) uint64 {
	return peek(b, pos)&^0xff | peek(b, pos+56)>>56
}

// peekTail loads the bytes from i on into the top of a word, zeros after.
func peekTail(b []byte, i uint) uint64 {
	var w uint64
	for k := uint(0); k < 8; k++ {
		w <<= 8
		if i+k < uint(len(b)) {
			w |= uint64(b[i+k])
		}
	}
	return w
}

// signed reads the low n bits of x as Prometheus's bstream writes a
// delta of delta: two's complement, except that the most negative value
// (-2^(n-1)) is written as +2^(n-1) and is read back as positive (see
// chunkenc's xorIterator: bits > 1<<(n-1) are negative).
func signed(x uint64, n uint) int64 {
	if x > 1<<(n-1) {
		return int64(x) - 1<<n
	}
	return int64(x)
}

var errBadChunk = errors.New("corrupt XOR chunk")
