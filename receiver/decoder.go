package receiver

import (
	"errors"
	"fmt"
	"sync"

	"github.com/golang/snappy"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

// Protocol is the remote-write message a body holds, negotiated by the
// proto= parameter of Content-Type.
type Protocol uint8

const (
	// ProtocolV1 is Remote-Write 1.0, prometheus.WriteRequest.
	ProtocolV1 Protocol = 1
	// ProtocolV2 is Remote-Write 2.0, io.prometheus.write.v2.Request.
	ProtocolV2 Protocol = 2
)

// String returns the protobuf message name.
func (p Protocol) String() string {
	switch p {
	case ProtocolV1:
		return "prometheus.WriteRequest"
	case ProtocolV2:
		return "io.prometheus.write.v2.Request"
	default:
		return fmt.Sprintf("Protocol(%d)", uint8(p))
	}
}

// Counts counts the elements of a request, or those a Sink wrote.
type Counts struct {
	Samples    int // float samples
	Histograms int // native histogram samples
	Exemplars  int
}

// Request is a decoded, validated, normalized remote-write request.
//
// Series are in wire order and may repeat a series (senders split a
// series' exemplars, metadata or start timestamps over several entries);
// each names, in the Decoder's series index, sorted, valid labels with a
// __name__, and has at least one sample, histogram or exemplar. Float
// values keep their exact bits. Nothing in a Request aliases the body. Its
// Series and their Samples may be handed back to the Decoder with Recycle
// once nothing uses them.
type Request struct {
	Protocol Protocol
	Series   []Series
	// Metadata: 1.0 WriteRequest.metadata entries, and 2.0 per-series
	// metadata deduplicated by metric name (first entry wins).
	Metadata []promsample.Metadata
	Counts   Counts

	slab *requestSlab // the memory Decoder.Recycle takes back; nil if none
}

// Decoder turns remote-write bodies into Requests. It is safe for
// concurrent use; it pools its decode buffers and scratch state.
type Decoder struct {
	opts Options
	x    *seriesindex.Index // Options.Series, or the Decoder's own

	// bufs holds *[]byte snappy output buffers. A buffer is only borrowed
	// for the duration of one Decode: everything kept from it is copied
	// (labels by the ScratchBuilder, strings by the gogo decoders).
	bufs sync.Pool
	// v1 lends v1Decoders, with their scratch state, at most
	// Options.Parallelism at a time.
	v1    *freeList[*v1Decoder]
	v2    sync.Pool // *v2Decoder
	slabs *slabPool // Request memory, back from Recycle
}

// maxPooledBuf bounds the buffers kept for reuse, so that one huge request
// does not pin its buffer in the pool (RSS).
const maxPooledBuf = 8 << 20

// snappyMaxRatio bounds how much a snappy block can expand: the densest
// element is a 3-byte copy of 64 bytes (21.3x). A block declaring more than
// this for its size is corrupt, and is refused before allocating.
const snappyMaxRatio = 22

// NewDecoder returns a Decoder for the limits and name rules of o.
func NewDecoder(o Options) (*Decoder, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	return newDecoder(o), nil
}

func newDecoder(o Options) *Decoder {
	slabs := &slabPool{}
	x := o.Series
	if x == nil {
		x = seriesindex.New()
	}
	return &Decoder{opts: o, slabs: slabs, x: x,
		v1: newFreeList(o.Parallelism, func() *v1Decoder { return newV1Decoder(slabs, x) })}
}

// Series returns the series index the Decoder resolves labels with.
func (d *Decoder) Series() *seriesindex.Index { return d.x }

// Decode decodes and validates a snappy-block-compressed body holding a
// message of protocol p. The declared decoded length is checked against the
// limits before any allocation: a small body claiming a huge length costs
// nothing.
func (d *Decoder) Decode(p Protocol, body []byte) (*Request, error) {
	if len(body) == 0 {
		return nil, ErrEmptyBody
	}
	if int64(len(body)) > d.opts.MaxCompressedBytes {
		return nil, fmt.Errorf("%w: body of %d bytes exceeds %d", ErrTooLarge, len(body), d.opts.MaxCompressedBytes)
	}
	n, err := snappy.DecodedLen(body)
	switch {
	case errors.Is(err, snappy.ErrTooLarge):
		return nil, fmt.Errorf("%w: snappy block declares more than 4 GiB", ErrTooLarge)
	case err != nil:
		return nil, fmt.Errorf("%w: snappy: %v", ErrMalformed, err)
	case int64(n) > d.opts.MaxDecodedBytes:
		return nil, fmt.Errorf("%w: snappy block declares %d decoded bytes, limit %d", ErrTooLarge, n, d.opts.MaxDecodedBytes)
	case uint64(n) > snappyMaxRatio*uint64(len(body))+16:
		return nil, fmt.Errorf("%w: snappy block of %d bytes cannot decode to the %d it declares", ErrMalformed, len(body), n)
	}
	if p == ProtocolV1 {
		// The v1Decoder lent for the message also lends its snappy
		// buffer: a pooled one was lost at every other GC.
		v := d.v1.get()
		defer d.v1.put(v)
		msg, err := snappy.Decode(v.msgBuf(n), body)
		if err != nil {
			return nil, fmt.Errorf("%w: snappy: %v", ErrMalformed, err)
		}
		return v.decode(msg, d.opts.AllowUTF8NamesV1)
	}
	bp := d.buf(n)
	defer d.putBuf(bp)
	msg, err := snappy.Decode((*bp)[:cap(*bp)], body)
	if err != nil {
		return nil, fmt.Errorf("%w: snappy: %v", ErrMalformed, err)
	}
	return d.DecodeMessage(p, msg)
}

// DecodeMessage decodes and validates an uncompressed protobuf message of
// protocol p. Nothing in the result aliases msg.
func (d *Decoder) DecodeMessage(p Protocol, msg []byte) (*Request, error) {
	if int64(len(msg)) > d.opts.MaxDecodedBytes {
		return nil, fmt.Errorf("%w: message of %d bytes exceeds %d", ErrTooLarge, len(msg), d.opts.MaxDecodedBytes)
	}
	switch p {
	case ProtocolV1:
		v := d.v1.get()
		defer d.v1.put(v)
		return v.decode(msg, d.opts.AllowUTF8NamesV1)
	case ProtocolV2:
		v, _ := d.v2.Get().(*v2Decoder)
		if v == nil {
			v = newV2Decoder(d.x)
		}
		defer d.v2.Put(v)
		return v.decode(msg)
	default:
		return nil, fmt.Errorf("%w: %v", ErrUnsupportedMediaType, p)
	}
}

// buf returns a pooled buffer of capacity at least n.
func (d *Decoder) buf(n int) *[]byte {
	if bp, _ := d.bufs.Get().(*[]byte); bp != nil {
		if cap(*bp) >= n {
			return bp
		}
		d.putBuf(bp) // too small for this one; keep it for the next
	}
	b := make([]byte, n)
	return &b
}

func (d *Decoder) putBuf(bp *[]byte) {
	if cap(*bp) <= maxPooledBuf {
		d.bufs.Put(bp)
	}
}
