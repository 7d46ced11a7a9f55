package receiver

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"unsafe"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// sqliteError builds a *sqlite.Error carrying code (the driver has no
// exported constructor), as the archive's own tests do.
func sqliteError(code int) error {
	e := &sqlite.Error{}
	v := reflect.ValueOf(e).Elem()
	set := func(name string, val any) {
		f := v.FieldByName(name)
		reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Set(reflect.ValueOf(val))
	}
	set("code", code)
	set("msg", fmt.Sprintf("sqlite error %d", code))
	return e
}

// TestArchiveFailuresFollowTheRetryContract: what the archive's writer
// reports becomes, through writeError and classify, the status a sender
// retries on (5xx with Retry-After) or drops (4xx).
func TestArchiveFailuresFollowTheRetryContract(t *testing.T) {
	full := fmt.Errorf("commit: %w", sqliteError(sqlite3.SQLITE_FULL))
	eio := fmt.Errorf("commit: %w", sqliteError(sqlite3.SQLITE_IOERR_FSYNC))
	corrupt := fmt.Errorf("commit: %w", sqliteError(sqlite3.SQLITE_CORRUPT))
	in := &Ingester{}
	for _, c := range []struct {
		name      string
		err       error
		code      int
		retryable bool
	}{
		{"a full disk", full, 507, true},
		{"a full disk, in the outage", &archive.CannotCommitError{Err: full}, 507, true},
		{"a dropped row on a full disk", fmt.Errorf("%w: %w", ErrIncompleteWrite, in.writeError(&archive.CannotCommitError{Err: full})), 507, true},
		{"EIO on a commit", eio, 503, true},
		{"EIO, in the outage", &archive.CannotCommitError{Err: eio}, 503, true},
		{"the writer stopped on corruption", &archive.WriterError{Err: corrupt}, 503, true},
		{"the writer closed", archive.ErrClosed, 503, true},
		{"the writer busy past the write timeout", context.DeadlineExceeded, 503, true},
		{"a timeline running backwards", &archive.TimelineBackwardsError{Source: 1, TS: 1, Floor: 2}, 500, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, retry := Status(in.writeError(c.err))
			if code != c.code || retry != c.retryable {
				t.Errorf("%v: %d (Retry-After %v), want %d (%v)", c.err, code, retry, c.code, c.retryable)
			}
		})
	}
}
