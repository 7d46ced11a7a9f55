package archive

import (
	"fmt"
	"runtime/debug"
)

// SourceID is a row id of the sources table.
type SourceID int64

// Row is one row of the wal table: an opaque payload keyed by
// (source, Stream, TS). TS is an int64 in the caller's unit and clock
// (dendro-receiver uses receipt time in Unix nanoseconds); TS+WallOffset is
// wall-clock time in that unit. The archive never interprets Data.
type Row struct {
	Stream     string
	TS         int64
	WallOffset int64
	Data       []byte
}

// Segment is what a SegmentEncoder makes of a run of a stream's rows. Every
// field describes the encoded bytes, not the input: an encoder may drop a
// leading or a trailing run of rows (never a middle one), and the catalog
// records the span the segment actually holds.
type Segment struct {
	Bytes   []byte
	Rows    int64 // input rows the segment holds; > 0
	FirstTS int64 // ts of the first row it holds
	LastTS  int64 // ts of the last row it holds
	// Index is the caller's opaque per-segment index (the catalog's
	// caller_index). The archive stores and returns it and never reads it.
	Index []byte
}

// SegmentEncoder turns a stream's rows into one immutable segment. The
// writer calls it at seal, and any reader in any process calls it to
// materialize a live tail, so its contract is strict:
//
//  1. It works from the rows alone: the writer and a reader in another
//     process, given the same rows, produce equivalent segments.
//  2. An empty input returns (nil, nil).
//  3. It may drop a leading or a trailing run of rows, never a middle run.
//     (nil, nil) means "no segment"; the rows stay live.
//  4. It must not retain rows[i].Data after it returns.
//
// Materialize checks 3 by counting, and turns a panic into an *EncoderError.
type SegmentEncoder interface {
	Encode(stream string, rows []Row) (*Segment, error)
	// Version identifies the encoding. It is recorded in a source's metadata
	// under "encoder" and compared for equality on read; "" is unversioned
	// and never checked.
	Version() string
}

// A ConsumingEncoder is a SegmentEncoder that can also release its input as
// it reads it. The writer's seal owns the rows it reads and needs only their
// TS afterwards, so it calls EncodeConsuming when the encoder offers it: a
// seal's rows are its largest allocation, and released one by one as they
// are decoded they no longer sit in memory beside the segment being built.
type ConsumingEncoder interface {
	SegmentEncoder
	// EncodeConsuming is Encode, except that it may set rows[i].Data to
	// nil once it has read it. It leaves every other field alone.
	EncodeConsuming(stream string, rows []Row) (*Segment, error)
}

// MetadataKeyEncoder is the sources.metadata key holding the encoder version
// a source was written with.
const MetadataKeyEncoder = "encoder"

// Materialize runs enc over rows (sorted by TS) and checks the result
// against the encoder contract. It is the single validation point for the
// writer's seal, for copies and for every read of a live tail.
func Materialize(enc SegmentEncoder, stream string, rows []Row) (seg *Segment, err error) {
	return materialize(enc, stream, rows, false)
}

// materialize is Materialize; with consume, and an enc that is a
// ConsumingEncoder, the rows' Data may be gone when it returns (their TS,
// all the contract check reads, stays).
func materialize(enc SegmentEncoder, stream string, rows []Row, consume bool) (seg *Segment, err error) {
	if len(rows) == 0 {
		return nil, nil
	}
	defer func() {
		if p := recover(); p != nil {
			seg = nil
			err = &EncoderError{Stream: stream, Err: fmt.Errorf("the encoder panicked: %v\n%s", p, debug.Stack())}
		}
	}()
	if ce, ok := enc.(ConsumingEncoder); ok && consume {
		seg, err = ce.EncodeConsuming(stream, rows)
	} else {
		seg, err = enc.Encode(stream, rows)
	}
	if err != nil {
		return nil, &EncoderError{Stream: stream, Err: err}
	}
	if seg == nil {
		return nil, nil
	}
	if err := checkContract(stream, seg, rows); err != nil {
		return nil, err
	}
	return seg, nil
}

// checkContract verifies that seg claims exactly the input rows inside its
// own [FirstTS, LastTS] span, so a dropped middle run or an invented span is
// refused rather than recorded in the catalog.
func checkContract(stream string, seg *Segment, rows []Row) error {
	inFirst, inLast := rows[0].TS, rows[len(rows)-1].TS
	var inSpan int64
	for i := range rows {
		if rows[i].TS >= seg.FirstTS && rows[i].TS <= seg.LastTS {
			inSpan++
		}
	}
	if seg.Rows <= 0 || seg.FirstTS > seg.LastTS || seg.FirstTS < inFirst || seg.LastTS > inLast || seg.Rows != inSpan {
		return &EncoderContractError{Stream: stream, Detail: fmt.Sprintf(
			"it claims %d row(s) over [%d, %d]; that span holds %d of the %d row(s) it was given over [%d, %d]",
			seg.Rows, seg.FirstTS, seg.LastTS, inSpan, len(rows), inFirst, inLast)}
	}
	return nil
}

// CheckEncoder refuses to read a source written by another encoder version.
// Nothing is checked when either side is unversioned.
func CheckEncoder(source SourceID, metadata map[string]string, enc SegmentEncoder) error {
	wrote := metadata[MetadataKeyEncoder]
	reading := enc.Version()
	if wrote != "" && reading != "" && wrote != reading {
		return &EncoderMismatchError{Source: source, Wrote: wrote, Reading: reading}
	}
	return nil
}

// SegmentMerger concatenates adjacent segments of one stream for Compact.
// Merge is given segments in seq order and returns the merged segment and how
// many of the leading segments it consumed (at least 2 for a merge to happen;
// fewer means "stop this run here"). The merged segment must hold every row
// of the consumed segments: Rows equal to their sum, FirstTS of the first and
// LastTS of the last. Its Index is stored as the merged segment's index.
// Writer.Compact calls Merge on its caller's goroutine, while the writer's
// encoder goroutine may be encoding a seal: a merger that is also the
// writer's SegmentEncoder must be safe for concurrent use.
type SegmentMerger interface {
	Merge(stream string, segments []StoredSegment) (merged *Segment, consumed int, err error)
}

// MergeBudget is implemented by a SegmentMerger whose memory does not grow
// with the rows of what it merges (one that streams its inputs): Compact
// then also offers it runs of segments whose rows pass the target, up to
// bytes of segments in all and spanning at most span of ts (from the
// first segment's FirstTS to the last's LastTS, in the caller's unit). The
// span keeps a merged segment, which retention removes whole once its
// newest row has expired, from holding a long stretch of a quiet stream.
type MergeBudget interface {
	MergeBudget() (bytes, span int64)
}

// StoredSegment is one row of the segments table.
type StoredSegment struct {
	Seq int64
	SegmentMeta
	Bytes []byte
	Index []byte
}

// SegmentMeta is a segment's catalog entry, read without its bytes.
type SegmentMeta struct {
	Rows    int64
	FirstTS int64
	LastTS  int64
	Size    int64 // length of the BLOB in bytes
}
