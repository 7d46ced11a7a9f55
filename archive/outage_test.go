package archive_test

// The failure policy (writer_failure.go): transient failures are an outage
// the writer rides out on a backoff, never a stop; corruption stops it.
// Faults come through the writer's one seam (archive.SetFaultForTest), and
// the backoff's clock is synctest's, so no test waits for it.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
	sqlite3 "modernc.org/sqlite/lib"
)

// switchFault is a fault seam a test turns on and off: while code is not 0
// every write transaction fails with that SQLite code, and calls counts the
// transactions it failed.
type switchFault struct {
	code  atomic.Int64
	calls atomic.Int64
}

func (f *switchFault) fault(*archive.WriteTx) error {
	if c := f.code.Load(); c != 0 {
		f.calls.Add(1)
		return fakeSQLiteError(int(c))
	}
	return nil
}

func faultyWriter(t *testing.T, f *switchFault, opts archive.WriterOptions) (*archive.Writer, *archive.Source) {
	t.Helper()
	archive.SetFaultForTest(&opts, f.fault)
	return newSource(t, opts)
}

// appendOne appends one row at ts and reports whether it was committed.
func appendOne(t *testing.T, w *archive.Writer, s *archive.Source, ts int64) (bool, error) {
	t.Helper()
	r, err := w.AppendWait(context.Background(), []archive.SourceRows{{Source: s.ID(), Rows: at.Rows("s", ts)}}, false)
	must(t, err)
	return r.Dropped() == 0, r.Err()
}

// waitHealthy lets synctest's clock run until the writer's backoff has
// passed and its idle probe has found it can commit again.
func waitHealthy(t *testing.T, w *archive.Writer) {
	t.Helper()
	for i := 0; w.Health() != nil; i++ {
		if i > 100 {
			t.Fatalf("still not healthy after 100 backoff steps: %v", w.Health())
		}
		time.Sleep(time.Second) // synctest's clock: the writer's timer fires, nothing waits
		synctest.Wait()
	}
}

func TestAFullDiskIsAnOutageTheWriterRidesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &switchFault{}
		w, s := faultyWriter(t, f, archive.WriterOptions{})
		acked := []int64{}
		ts := int64(0)
		appendNext := func() (bool, error) {
			ts++
			ok, err := appendOne(t, w, s, ts)
			if ok {
				acked = append(acked, ts)
			}
			return ok, err
		}
		for range 5 {
			if ok, err := appendNext(); !ok {
				t.Fatalf("healthy append refused: %v", err)
			}
		}
		must(t, w.Health())

		f.code.Store(sqlite3.SQLITE_FULL)
		// Far more failures than the old 30-dropped-ticks rule allowed.
		for i := range 100 {
			ok, err := appendNext()
			if ok {
				t.Fatalf("append %d committed on a full disk", i)
			}
			if !archive.IsDiskFull(err) {
				t.Fatalf("append %d refused with %v, want a disk-full error", i, err)
			}
			if i > 0 && !errors.Is(err, archive.ErrCannotCommit) {
				t.Fatalf("append %d in the outage refused with %v, want ErrCannotCommit", i, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		h := w.Health()
		var cc *archive.CannotCommitError
		if !errors.As(h, &cc) || !archive.IsDiskFull(h) {
			t.Fatalf("Health in the outage = %v, want a CannotCommitError over a full disk", h)
		}
		must(t, w.Err()) // not stopped
		// The backoff: 100 appends over 5 s of the outage met at most one
		// attempt per step (100 ms doubling to 5 s), plus the first failure
		// and its in-place retries.
		if n := f.calls.Load(); n > 12 {
			t.Errorf("%d commit attempts in 5 s of outage: the backoff does not hold", n)
		}
		st := w.Stats()
		eq(t, "outages", st.Outages, int64(1))

		// Space returns. Without any append, the idle probe notices.
		f.code.Store(0)
		waitHealthy(t, w)
		for range 5 {
			if ok, err := appendNext(); !ok {
				t.Fatalf("append after the outage refused: %v", err)
			}
		}
		if w.Stats().Probes == 0 {
			t.Error("the writer became healthy without probing")
		}
		eq(t, "live rows", liveTS(t, openRead(t, w.Path()), s.ID(), "s"), acked)
	})
}

func TestAnEIOOnCommitIsRetriedAndTheSealAfterwardKeepsItsSeq(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &switchFault{}
		w, s := faultyWriter(t, f, archive.WriterOptions{})
		for ts := int64(1); ts <= 3; ts++ {
			if ok, err := appendOne(t, w, s, ts); !ok {
				t.Fatal(err)
			}
		}
		// A seal whose commit meets EIO on fsync is deferred; its rows stay
		// live, and nothing the writer caches moves.
		f.code.Store(sqlite3.SQLITE_IOERR_FSYNC)
		_, err := w.SealWait(context.Background(), s.ID(), []string{"s"})
		if archive.SQLiteCode(err) != sqlite3.SQLITE_IOERR {
			t.Fatalf("seal on EIO: %v, want the IOERR", err)
		}
		// In the outage a seal is deferred without being read or encoded.
		_, err = w.SealWait(context.Background(), s.ID(), []string{"s"})
		isErr(t, err, archive.ErrCannotCommit)
		f.code.Store(0)
		waitHealthy(t, w)
		sealed := sealWait(t, s, "s")
		if len(sealed) != 1 || sealed[0].Seq != 0 || sealed[0].Rows != 3 {
			t.Fatalf("seal after the outage: %+v, want seq 0 with 3 rows", sealed)
		}
		if ok, err := appendOne(t, w, s, 4); !ok {
			t.Fatal(err)
		}
		a := openRead(t, w.Path())
		eq(t, "seqs", seqsOf(t, a, s.ID(), "s"), []int64{0})
		eq(t, "live", liveTS(t, a, s.ID(), "s"), []int64{4})
		eq(t, "read", at.ReadStrings(t, w.Path(), at.Tags{}), [][]string{{"1,2,3", "4"}})
		verifySound(t, a)
	})
}

func TestCorruptionStopsTheWriterAndSaysSo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &switchFault{}
		w, s := faultyWriter(t, f, archive.WriterOptions{})
		f.code.Store(sqlite3.SQLITE_CORRUPT_INDEX)
		r, err := w.AppendWait(context.Background(), []archive.SourceRows{{Source: s.ID(), Rows: at.Rows("s", 1)}}, false)
		if err == nil {
			err = r.Err()
		}
		if !archive.IsCorrupt(err) {
			t.Fatalf("append on a corrupt archive: %v", err)
		}
		f.code.Store(0)
		synctest.Wait() // the loop exits
		isErr(t, w.Err(), archive.ErrWriterStopped)
		if !archive.IsCorrupt(w.Health()) || !errors.Is(w.Health(), archive.ErrWriterStopped) {
			t.Fatalf("Health = %v, want the stored corruption", w.Health())
		}
		_, err = w.AppendWait(context.Background(), []archive.SourceRows{{Source: s.ID(), Rows: at.Rows("s", 2)}}, false)
		if !archive.IsCorrupt(err) {
			t.Errorf("an append after the stop: %v, want the stored corruption", err)
		}
	})
}

func appendWaitRows(t *testing.T, w *archive.Writer, s *archive.Source, rows ...archive.Row) archive.AppendResult {
	t.Helper()
	r, err := w.AppendWait(context.Background(), []archive.SourceRows{{Source: s.ID(), Rows: rows}}, false)
	must(t, err)
	return r
}

// verifySound runs the archive's full verify (integrity_check included).
func verifySound(t *testing.T, a *archive.Archive) {
	t.Helper()
	rep, err := a.Verify(context.Background(), archive.Full)
	must(t, err)
	if !rep.Sound() {
		t.Fatalf("verify: %v", rep.Problems)
	}
}

// TestWhichSQLiteCodesAreAnOutageAndWhichAStop: the policy's one table. An
// outage is every code about the machine; a stop, every code about the
// archive (and every error that is not SQLite's).
func TestWhichSQLiteCodesAreAnOutageAndWhichAStop(t *testing.T) {
	cases := []struct {
		name               string
		code               int
		transient, corrupt bool
	}{
		{"FULL", sqlite3.SQLITE_FULL, true, false},
		{"IOERR_WRITE (EIO, EFBIG)", sqlite3.SQLITE_IOERR_WRITE, true, false},
		{"IOERR_FSYNC", sqlite3.SQLITE_IOERR_FSYNC, true, false},
		{"IOERR_SHORT_READ", sqlite3.SQLITE_IOERR_SHORT_READ, true, false},
		{"BUSY", sqlite3.SQLITE_BUSY, true, false},
		{"LOCKED", sqlite3.SQLITE_LOCKED, true, false},
		{"NOMEM", sqlite3.SQLITE_NOMEM, true, false},
		{"CANTOPEN (a sidecar, say EMFILE)", sqlite3.SQLITE_CANTOPEN, true, false},
		{"PROTOCOL", sqlite3.SQLITE_PROTOCOL, true, false},
		{"IOERR_CORRUPTFS", sqlite3.SQLITE_IOERR_CORRUPTFS, false, true},
		{"CORRUPT", sqlite3.SQLITE_CORRUPT, false, true},
		{"CORRUPT_INDEX", sqlite3.SQLITE_CORRUPT_INDEX, false, true},
		{"NOTADB", sqlite3.SQLITE_NOTADB, false, true},
		{"READONLY_DBMOVED", sqlite3.SQLITE_READONLY_DBMOVED, false, false},
		{"MISUSE", sqlite3.SQLITE_MISUSE, false, false},
		{"CONSTRAINT", sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := fmt.Errorf("commit: %w", fakeSQLiteError(c.code))
			eq(t, "IsRetryable", archive.IsRetryable(err), c.transient)
			eq(t, "IsCorrupt", archive.IsCorrupt(err), c.corrupt)
			cc := &archive.CannotCommitError{Err: err}
			eq(t, "IsRetryable through CannotCommitError", archive.IsRetryable(cc), c.transient)
			isErr(t, cc, archive.ErrCannotCommit)
		})
	}
	if archive.IsRetryable(errors.New("disk I/O error (SQLITE_IOERR)")) || archive.IsCorrupt(errors.New("database disk image is malformed")) {
		t.Error("an error that only says so in its text was classified")
	}
}
