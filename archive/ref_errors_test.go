package archive_test

// Reference-notes §8.2: src/error.rs unit tests. Go classifies errors with
// archive.SQLiteCode / IsRetryable / IsConstraint and wraps with %w.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// fakeSQLiteError builds a *sqlite.Error carrying code (the driver has no
// exported constructor).
func fakeSQLiteError(code int) error {
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

func TestRefClassifiesSQLiteResultCodes(t *testing.T) {
	cases := []struct {
		name                  string
		err                   error
		retryable, constraint bool
	}{
		{"BUSY", fakeSQLiteError(sqlite3.SQLITE_BUSY), true, false},
		{"BUSY_SNAPSHOT", fakeSQLiteError(sqlite3.SQLITE_BUSY | 2<<8), true, false},
		{"LOCKED", fakeSQLiteError(sqlite3.SQLITE_LOCKED), true, false},
		{"FULL", fakeSQLiteError(sqlite3.SQLITE_FULL), true, false},
		{"IOERR", fakeSQLiteError(sqlite3.SQLITE_IOERR), true, false},
		{"IOERR_READ", fakeSQLiteError(sqlite3.SQLITE_IOERR | 1<<8), true, false},
		{"NOMEM", fakeSQLiteError(sqlite3.SQLITE_NOMEM), true, false},
		{"INTERRUPT", fakeSQLiteError(sqlite3.SQLITE_INTERRUPT), true, false},
		{"SCHEMA", fakeSQLiteError(sqlite3.SQLITE_SCHEMA), true, false},
		{"CONSTRAINT", fakeSQLiteError(sqlite3.SQLITE_CONSTRAINT), false, true},
		{"CONSTRAINT_PRIMARYKEY", fakeSQLiteError(sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY), false, true},
		{"CORRUPT", fakeSQLiteError(sqlite3.SQLITE_CORRUPT), false, false},
		{"READONLY", fakeSQLiteError(sqlite3.SQLITE_READONLY), false, false},
		{"MISUSE", fakeSQLiteError(sqlite3.SQLITE_MISUSE), false, false},
		{"NOTADB", fakeSQLiteError(sqlite3.SQLITE_NOTADB), false, false},
		{"not SQLite", errors.New("database is locked (SQLITE_BUSY) but only in text"), false, false},
		{"nil", nil, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eq(t, "IsRetryable", archive.IsRetryable(c.err), c.retryable)
			eq(t, "IsConstraint", archive.IsConstraint(c.err), c.constraint)
		})
	}
}

func TestRefRealSQLiteErrorsAreClassifiedByCode(t *testing.T) {
	h, _ := newHandle(t)
	src := addSrc(t, h, nil)
	// A real duplicate primary key.
	err := h.Update(context.Background(), func(tx *archive.WriteTx) error {
		return tx.InsertWALRows(src, append(at.Rows("s", 1), at.Rows("s", 1)...))
	})
	if !archive.IsConstraint(err) || archive.IsRetryable(err) {
		t.Errorf("duplicate key %v: constraint=%v retryable=%v", err, archive.IsConstraint(err), archive.IsRetryable(err))
	}
	eq(t, "code of a duplicate key", archive.SQLiteCode(err), sqlite3.SQLITE_CONSTRAINT)
	// A real NOTADB.
	path := at.Path(t)
	must(t, os.WriteFile(path, []byte(strings.Repeat("this is not a database\n", 100)), 0o644))
	db := rawDB(t, path)
	_, err = db.Exec("SELECT * FROM sqlite_master")
	eq(t, "code of a text file", archive.SQLiteCode(err), sqlite3.SQLITE_NOTADB)
	if archive.IsRetryable(err) || archive.IsConstraint(err) {
		t.Errorf("NOTADB %v classified as retryable or constraint", err)
	}
}

func TestRefContextAndWriterWrappingKeepTheCode(t *testing.T) {
	base := fakeSQLiteError(sqlite3.SQLITE_BUSY)
	ctxd := fmt.Errorf("ctx: %w", base)
	if !strings.HasPrefix(ctxd.Error(), "ctx: ") {
		t.Errorf("context prefix lost: %q", ctxd)
	}
	w := &archive.WriterError{Err: ctxd}
	eq(t, "code through context", archive.SQLiteCode(ctxd), sqlite3.SQLITE_BUSY)
	eq(t, "code through WriterError", archive.SQLiteCode(w), sqlite3.SQLITE_BUSY)
	eq(t, "retryable through WriterError", archive.IsRetryable(w), true)
	isErr(t, w, archive.ErrWriterStopped)
	nested := &archive.WriterError{Err: &archive.WriterError{Err: fakeSQLiteError(sqlite3.SQLITE_CONSTRAINT_UNIQUE)}}
	eq(t, "constraint through nested WriterError", archive.IsConstraint(nested), true)

	// Errors the archive itself returns never open with an empty context.
	h, _ := newHandle(t)
	src := addSrc(t, h, nil)
	err := h.Update(context.Background(), func(tx *archive.WriteTx) error {
		return tx.InsertWALRows(src, append(at.Rows("s", 1), at.Rows("s", 1)...))
	})
	if err == nil || strings.HasPrefix(err.Error(), ": ") || strings.HasPrefix(err.Error(), " ") {
		t.Errorf("archive error %q has an empty context", err)
	}
}

func TestRefTypedErrorsMatchTheirSentinels(t *testing.T) {
	cases := []struct {
		err      error
		sentinel error
	}{
		{&archive.NotAnArchiveError{What: "x", Reason: "y"}, archive.ErrNotAnArchive},
		{&archive.UnsupportedSchemaError{Found: 5, Writes: 4, Reads: 4}, archive.ErrUnsupportedSchema},
		{&archive.InUseError{What: "x"}, archive.ErrInUse},
		{&archive.TimelineBackwardsError{Source: 1, TS: 2, Floor: 3}, archive.ErrTimelineBackwards},
		{&archive.EncoderError{Stream: "s", Err: errors.New("e")}, archive.ErrEncoder},
		{&archive.EncoderContractError{Stream: "s", Detail: "d"}, archive.ErrEncoderContract},
		{&archive.EncoderMismatchError{Source: 1, Wrote: "a", Reading: "b"}, archive.ErrEncoderMismatch},
		{&archive.WriterError{Err: errors.New("e")}, archive.ErrWriterStopped},
	}
	for _, c := range cases {
		wrapped := fmt.Errorf("outer: %w", c.err)
		if !errors.Is(wrapped, c.sentinel) {
			t.Errorf("%T does not match %v", c.err, c.sentinel)
		}
	}
	// The texts carry the reference's substance.
	for _, c := range []struct {
		err  error
		want string
	}{
		{&archive.UnsupportedSchemaError{Found: 5, Writes: 4, Reads: 4}, "unsupported archive schema version 5: this build writes v4 and reads v4"},
		{&archive.NotAnArchiveError{What: "f", Reason: "r"}, "f: not a dendro archive: r"},
		{&archive.EncoderError{Stream: "s", Err: errors.New("e")}, "failed to encode a s segment: e"},
	} {
		eq(t, "text", c.err.Error(), c.want)
	}
}
