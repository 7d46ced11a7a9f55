package promsample

import (
	"errors"
	"fmt"
)

// Sentinel errors. Each is returned wrapped (test with errors.Is).
var (
	// ErrCorruptRow is returned by DecodeBatch (and everything that decodes
	// rows: Encoder.Encode, ReadRows, ReadRowsMetadata) when a row's bytes
	// are not a batch this package wrote. *CorruptError matches it.
	ErrCorruptRow = errors.New("promsample: corrupt row")

	// ErrCorruptSegment is returned by ReadSegment, ReadSegmentMetadata,
	// Encoder.Merge and ParseIndex when segment or index bytes are not a
	// segment this package wrote (including a Parquet library panic on
	// malformed input, which is recovered). *CorruptError matches it.
	ErrCorruptSegment = errors.New("promsample: corrupt segment")

	// ErrUnsupportedVersion is returned when a row, segment or index carries
	// a format version this build does not read.
	ErrUnsupportedVersion = errors.New("promsample: unsupported format version")

	// ErrTooLarge is returned by DecodeBatch when a row claims to decompress
	// to more than MaxBatchBytes, and by EncodeBatch for such a batch.
	ErrTooLarge = errors.New("promsample: batch too large")

	// ErrInvalidBatch is returned by EncodeBatch for data it cannot store
	// (a histogram sample with both or neither of H and FH set).
	ErrInvalidBatch = errors.New("promsample: invalid batch")
)

// CorruptError says what was being decoded and where it went wrong. It
// matches ErrCorruptRow or ErrCorruptSegment (its Kind).
type CorruptError struct {
	Kind   error  // ErrCorruptRow or ErrCorruptSegment
	Detail string // what was being read
	Err    error  // underlying cause, may be nil
}

func (e *CorruptError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%v: %s: %v", e.Kind, e.Detail, e.Err)
	}
	return fmt.Sprintf("%v: %s", e.Kind, e.Detail)
}

func (e *CorruptError) Is(target error) bool { return target == e.Kind }
func (e *CorruptError) Unwrap() error        { return e.Err }

func corruptRow(detail string, err error) error {
	return &CorruptError{Kind: ErrCorruptRow, Detail: detail, Err: err}
}

func corruptSegment(detail string, err error) error {
	return &CorruptError{Kind: ErrCorruptSegment, Detail: detail, Err: err}
}
