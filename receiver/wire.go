package receiver

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"
)

// Minimal protobuf wire-format reading for the remote-write 1.0 hot path
// (labels and samples). It follows the gogo-generated decoders that the
// Prometheus packages use (prompb), so the same bytes are accepted: varints
// of at most 64 bits, lengths within the buffer, field number 0 and stray
// end-group markers refused, unknown fields (groups included) skipped. The
// fuzz target FuzzDecodeV1 checks the two agree.

const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireStart   = 3
	wireEnd     = 4
	wireFixed32 = 5
)

var (
	errVarintOverflow = errors.New("varint overflows 64 bits")
	errTruncated      = errors.New("unexpected end of message")
	errBadLength      = errors.New("length out of range")
)

// varint reads a base-128 varint from b, returning it and the bytes used.
func varint(b []byte) (uint64, int, error) {
	var x uint64
	for i, shift := 0, uint(0); ; shift += 7 {
		if shift >= 64 {
			return 0, 0, errVarintOverflow
		}
		if i >= len(b) {
			return 0, 0, errTruncated
		}
		c := b[i]
		i++
		x |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return x, i, nil
		}
	}
}

// field reads one field key; it returns the field number, wire type and
// the rest of b after the key.
func field(b []byte) (num int32, typ int, rest []byte, err error) {
	var k uint64
	n := 1
	if len(b) > 0 && b[0] < 0x80 { // every key of fields 1-15: one byte
		k = uint64(b[0])
	} else if k, n, err = varint(b); err != nil {
		return 0, 0, nil, err
	}
	num, typ = int32(k>>3), int(k&7)
	// int32 truncation as in the gogo decoders, so both read the same field.
	if num <= 0 {
		return 0, 0, nil, fmt.Errorf("illegal field number %d", k>>3)
	}
	if typ == wireEnd {
		return 0, 0, nil, errors.New("end group without start")
	}
	return num, typ, b[n:], nil
}

// bytesField reads a length-delimited payload from b (after its key).
func bytesField(b []byte) (payload, rest []byte, err error) {
	var l uint64
	n := 1
	if len(b) > 0 && b[0] < 0x80 { // labels, samples: under 128 bytes
		l = uint64(b[0])
	} else if l, n, err = varint(b); err != nil {
		return nil, nil, err
	}
	b = b[n:]
	if l > uint64(len(b)) {
		return nil, nil, errBadLength
	}
	return b[:l], b[l:], nil
}

func fixed64(b []byte) (uint64, []byte, error) {
	if len(b) < 8 {
		return 0, nil, errTruncated
	}
	return binary.LittleEndian.Uint64(b), b[8:], nil
}

// skip skips the value of a field of wire type typ (after its key).
func skip(typ int, b []byte) ([]byte, error) {
	switch typ {
	case wireVarint:
		_, n, err := varint(b)
		if err != nil {
			return nil, err
		}
		return b[n:], nil
	case wireFixed64:
		if len(b) < 8 {
			return nil, errTruncated
		}
		return b[8:], nil
	case wireBytes:
		_, rest, err := bytesField(b)
		return rest, err
	case wireFixed32:
		if len(b) < 4 {
			return nil, errTruncated
		}
		return b[4:], nil
	case wireStart:
		// Skip to the matching end group; nested groups counted.
		for depth := 1; ; {
			k, n, err := varint(b)
			if err != nil {
				return nil, err
			}
			b = b[n:]
			switch t := int(k & 7); t {
			case wireStart:
				depth++
			case wireEnd:
				if depth--; depth == 0 {
					return b, nil
				}
			default:
				if b, err = skip(t, b); err != nil {
					return nil, err
				}
			}
		}
	default:
		return nil, fmt.Errorf("illegal wire type %d", typ)
	}
}

// wrongType is the error for a known field with an unexpected wire type.
func wrongType(msg string, num int32, typ int) error {
	return fmt.Errorf("%s: field %d has wire type %d", msg, num, typ)
}

// yolo returns a string sharing b's memory. Only for strings that do not
// outlive b: label strings handed to a ScratchBuilder in unsafe-add mode
// (which copies them), comparisons, and fmt (which copies).
func yolo(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
