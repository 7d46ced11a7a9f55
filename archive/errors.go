package archive

import (
	"errors"
	"fmt"
	"time"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Sentinel errors. Each is returned wrapped (test with errors.Is); the typed
// errors below carry data and also match the sentinel they refine.
var (
	// ErrNotAnArchive is matched by every *NotAnArchiveError: the file is not
	// SQLite, or is SQLite without dendro's header stamp. Returned by every open
	// and by Sniff's callers; the file is left exactly as it was.
	ErrNotAnArchive = errors.New("archive: not a dendro archive")

	// ErrInUse is returned by OpenWrite while anything else holds the file,
	// and by any open while an OpenWrite handle holds it.
	ErrInUse = errors.New("archive: in use")

	// ErrReadOnlyMedia is returned by OpenWrite and OpenWriter when the file
	// or its directory cannot be written: a write handle that cannot write is
	// not handed out. Read such an archive with Open.
	ErrReadOnlyMedia = errors.New("archive: on read-only media; open it with archive.Open to read it")

	// ErrUnsupportedSchema is matched by every *UnsupportedSchemaError.
	ErrUnsupportedSchema = errors.New("archive: unsupported schema version")

	// ErrTimelineBackwards is matched by every *TimelineBackwardsError.
	ErrTimelineBackwards = errors.New("archive: timeline runs backwards")

	// ErrEncoder is matched by every *EncoderError: the caller's encoder
	// failed or panicked.
	ErrEncoder = errors.New("archive: encoder failed")

	// ErrEncoderContract is matched by every *EncoderContractError: the
	// encoder returned a segment that does not describe its input rows.
	ErrEncoderContract = errors.New("archive: encoder broke its contract")

	// ErrEncoderMismatch is matched by every *EncoderMismatchError.
	ErrEncoderMismatch = errors.New("archive: encoder version mismatch")

	// ErrWriterStopped is matched by every *WriterError: the writer goroutine
	// stopped on a failure, and every handle reports that failure.
	ErrWriterStopped = errors.New("archive: the writer stopped")

	// ErrCannotCommit is matched by every *CannotCommitError: the writer is
	// running, but its writes fail with a transient error (a full disk, an
	// I/O error, a lock held elsewhere). It keeps trying on a backoff, and
	// calls that would write fail fast with this error until one succeeds.
	// Returned by Writer.Health and in the results of appends and seals.
	ErrCannotCommit = errors.New("archive: the writer cannot commit")

	// ErrClosed is returned by a Writer or handle used after Close.
	ErrClosed = errors.New("archive: closed")

	// ErrNoSource is returned when a source id names no row of sources.
	ErrNoSource = errors.New("archive: no such source")

	// ErrExists is returned by Create when the path already exists.
	ErrExists = errors.New("archive: already exists")
)

// NotAnArchiveError says which file was refused and why.
type NotAnArchiveError struct {
	What   string // the path, or "<bytes>"
	Reason string
}

func (e *NotAnArchiveError) Error() string {
	return fmt.Sprintf("%s: not a dendro archive: %s", e.What, e.Reason)
}
func (e *NotAnArchiveError) Is(target error) bool { return target == ErrNotAnArchive }

// UnsupportedSchemaError names the version found and the one this build
// writes and reads.
type UnsupportedSchemaError struct {
	Found, Writes, Reads int64
}

func (e *UnsupportedSchemaError) Error() string {
	return fmt.Sprintf("unsupported archive schema version %d: this build writes v%d and reads v%d",
		e.Found, e.Writes, e.Reads)
}
func (e *UnsupportedSchemaError) Is(target error) bool { return target == ErrUnsupportedSchema }

// InUseError names the file another connection holds, and why that
// refuses this open when the reason is more specific than the lock.
type InUseError struct {
	What   string
	Reason string // "" for the exclusive-lock case
}

func (e *InUseError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("%s is in use: %s", e.What, e.Reason)
	}
	return fmt.Sprintf("%s is held by another connection: an exclusive open needs the file to itself, "+
		"and nothing can open a file an exclusive handle holds", e.What)
}
func (e *InUseError) Is(target error) bool { return target == ErrInUse }

// TimelineBackwardsError is a row or resume anchor at or below a resumed
// source's floor (its newest row from an earlier session).
type TimelineBackwardsError struct {
	Source SourceID
	TS     int64
	Floor  int64
}

func (e *TimelineBackwardsError) Error() string {
	return fmt.Sprintf("source %d: timestamp %d is at or below the source's newest row %d", e.Source, e.TS, e.Floor)
}
func (e *TimelineBackwardsError) Is(target error) bool { return target == ErrTimelineBackwards }

// EncoderError is the caller's encoder failing (or panicking) on a stream.
type EncoderError struct {
	Stream string
	Err    error
}

func (e *EncoderError) Error() string {
	return fmt.Sprintf("failed to encode a %s segment: %v", e.Stream, e.Err)
}
func (e *EncoderError) Unwrap() error        { return e.Err }
func (e *EncoderError) Is(target error) bool { return target == ErrEncoder }

// EncoderContractError is a segment that does not describe the rows the
// encoder was given.
type EncoderContractError struct {
	Stream string
	Detail string
}

func (e *EncoderContractError) Error() string {
	return fmt.Sprintf("the encoder returned a segment for %s that does not describe the rows it was given: %s",
		e.Stream, e.Detail)
}
func (e *EncoderContractError) Is(target error) bool { return target == ErrEncoderContract }

// EncoderMismatchError: the source was written by another encoder version.
type EncoderMismatchError struct {
	Source         SourceID
	Wrote, Reading string
}

func (e *EncoderMismatchError) Error() string {
	return fmt.Sprintf("source %d was written by encoder %q; this reader's encoder is %q", e.Source, e.Wrote, e.Reading)
}
func (e *EncoderMismatchError) Is(target error) bool { return target == ErrEncoderMismatch }

// WriterError is the writer goroutine's stored failure, shared by every
// handle once the writer has stopped.
type WriterError struct{ Err error }

func (e *WriterError) Error() string        { return "the archive writer stopped: " + e.Err.Error() }
func (e *WriterError) Unwrap() error        { return e.Err }
func (e *WriterError) Is(target error) bool { return target == ErrWriterStopped }

// CannotCommitError is the writer's condition while its writes fail with a
// transient error: since when, the latest failure, and when it tries again.
// It wraps the failure, so IsDiskFull and SQLiteCode see through it.
type CannotCommitError struct {
	Since time.Time // the first failure of this outage
	Next  time.Time // when the writer next tries to commit
	Err   error     // the latest failure
}

func (e *CannotCommitError) Error() string {
	return fmt.Sprintf("the archive writer cannot commit since %s (retrying): %v",
		e.Since.UTC().Format(time.RFC3339), e.Err)
}
func (e *CannotCommitError) Unwrap() error        { return e.Err }
func (e *CannotCommitError) Is(target error) bool { return target == ErrCannotCommit }

// SQLiteCode returns the primary SQLite result code found in err's chain
// (for example sqlite3.SQLITE_BUSY), or 0 when there is none. Classification
// is by code, never by message text.
func SQLiteCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() & 0xff
	}
	return 0
}

// sqliteExtendedCode is SQLiteCode with the extended bits kept (the driver
// turns extended result codes on), or 0 when err holds no SQLite error.
func sqliteExtendedCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code()
	}
	return 0
}

// IsRetryable reports whether err is a transient SQLite condition: one that
// a later attempt at the same transaction may not meet, because it is about
// the machine and not about the archive. They are BUSY and LOCKED (another
// connection holds a lock), FULL (the disk or a quota is full), IOERR (the
// operating system failed a read, write or sync: EIO, EFBIG, ENOSPC on a
// sync), NOMEM, INTERRUPT, SCHEMA, CANTOPEN (a sidecar could not be opened,
// say for want of descriptors) and PROTOCOL (a WAL lock race). Each leaves
// nothing behind: SQLite rolls the failed transaction back, and a commit
// whose sync failed was never made visible (its frames lie past the WAL
// index, and the next commit overwrites them).
//
// Not retryable, whatever else the code says: IOERR_CORRUPTFS (the
// filesystem reports corruption), and everything IsCorrupt matches.
func IsRetryable(err error) bool {
	code := sqliteExtendedCode(err)
	if code == sqlite3.SQLITE_IOERR_CORRUPTFS {
		return false
	}
	switch code & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR,
		sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_INTERRUPT, sqlite3.SQLITE_SCHEMA, sqlite3.SQLITE_CANTOPEN,
		sqlite3.SQLITE_PROTOCOL:
		return true
	}
	return false
}

// IsCorrupt reports whether err says the archive itself is damaged:
// SQLITE_CORRUPT (any extended code), NOTADB, or IOERR_CORRUPTFS. The
// writer stops on it and says so; retrying cannot help, and writing on
// could spread the damage.
func IsCorrupt(err error) bool {
	code := sqliteExtendedCode(err)
	return code == sqlite3.SQLITE_IOERR_CORRUPTFS || code&0xff == sqlite3.SQLITE_CORRUPT || code&0xff == sqlite3.SQLITE_NOTADB
}

// IsConstraint reports whether err is a SQLite constraint violation,
// extended codes included.
func IsConstraint(err error) bool { return SQLiteCode(err) == sqlite3.SQLITE_CONSTRAINT }

// IsDiskFull reports whether err is SQLITE_FULL: the disk (or a quota) is full.
func IsDiskFull(err error) bool { return SQLiteCode(err) == sqlite3.SQLITE_FULL }

// sqlErr attaches context to a SQLite error, keeping it matchable.
func sqlErr(context string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", context, err)
}
