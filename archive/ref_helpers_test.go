package archive_test

// Helpers shared by the ref_*_test.go files: the translation of the
// reference implementation's acceptance suite (reference-notes §8).

import (
	"context"
	"database/sql"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
	sqlite "modernc.org/sqlite"
)

// newHandle creates an archive through the low-level write handle and closes
// it at cleanup.
func newHandle(t *testing.T) (*archive.WriteHandle, string) {
	t.Helper()
	path := at.Path(t)
	h, err := archive.Create(path)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { h.Close() })
	return h, path
}

// update runs fn in one transaction and fails the test on error.
func update(t *testing.T, h *archive.WriteHandle, fn func(tx *archive.WriteTx) error) {
	t.Helper()
	if err := h.Update(context.Background(), fn); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

// viewer is anything with View (a read handle or a write handle).
type viewer interface {
	View(ctx context.Context, fn func(tx *archive.ReadTx) error) error
}

func view(t *testing.T, v viewer, fn func(tx *archive.ReadTx) error) {
	t.Helper()
	if err := v.View(context.Background(), fn); err != nil {
		t.Fatalf("View: %v", err)
	}
}

// addSrc inserts a source with the given labels and returns its id.
func addSrc(t *testing.T, h *archive.WriteHandle, labels map[string]string) archive.SourceID {
	t.Helper()
	var id archive.SourceID
	update(t, h, func(tx *archive.WriteTx) error {
		var err error
		id, _, err = tx.InsertSource(archive.SourceSpec{Labels: labels, Metadata: map[string]string{}}, "")
		return err
	})
	return id
}

// tagSeg is a Tags-style segment over the given timestamps.
func tagSeg(ts ...int64) *archive.Segment {
	parts := make([]string, len(ts))
	for i, v := range ts {
		parts[i] = strconv.FormatInt(v, 10)
	}
	return &archive.Segment{Bytes: []byte(strings.Join(parts, ",")), Rows: int64(len(ts)), FirstTS: ts[0], LastTS: ts[len(ts)-1]}
}

// putSeg inserts a Tags-style segment.
func putSeg(t *testing.T, h *archive.WriteHandle, src archive.SourceID, stream string, seq int64, ts ...int64) {
	t.Helper()
	update(t, h, func(tx *archive.WriteTx) error { return tx.InsertSegment(src, stream, seq, tagSeg(ts...)) })
}

// putWAL inserts wal rows of one stream.
func putWAL(t *testing.T, h *archive.WriteHandle, src archive.SourceID, stream string, ts ...int64) {
	t.Helper()
	update(t, h, func(tx *archive.WriteTx) error { return tx.InsertWALRows(src, at.Rows(stream, ts...)) })
}

func tsOf(rows []archive.Row) []int64 {
	out := []int64{}
	for _, r := range rows {
		out = append(out, r.TS)
	}
	return out
}

func liveTS(t *testing.T, v viewer, src archive.SourceID, stream string) []int64 {
	t.Helper()
	var out []int64
	view(t, v, func(tx *archive.ReadTx) error {
		rows, err := tx.LiveWAL(src, stream)
		out = tsOf(rows)
		return err
	})
	return out
}

func walTS(t *testing.T, v viewer, src archive.SourceID, stream string) []int64 {
	t.Helper()
	var out []int64
	view(t, v, func(tx *archive.ReadTx) error {
		rows, err := tx.WAL(src, stream)
		out = tsOf(rows)
		return err
	})
	return out
}

func streamsOf(t *testing.T, v viewer, src archive.SourceID) []string {
	t.Helper()
	var out []string
	view(t, v, func(tx *archive.ReadTx) error {
		var err error
		out, err = tx.Streams(src)
		return err
	})
	return out
}

func seqsOf(t *testing.T, v viewer, src archive.SourceID, stream string) []int64 {
	t.Helper()
	return segmentsField(t, v, src, stream, func(m archive.StoredSegment) int64 { return m.Seq })
}

// segmentsField returns f of each catalog entry of a stream's segments,
// in seq order.
func segmentsField[T any](t *testing.T, v viewer, src archive.SourceID, stream string, f func(archive.StoredSegment) T) []T {
	t.Helper()
	out := []T{}
	view(t, v, func(tx *archive.ReadTx) error {
		metas, err := tx.SegmentMetas(src, stream)
		for _, m := range metas {
			out = append(out, f(m))
		}
		return err
	})
	return out
}

func offsetsOf(t *testing.T, v viewer, src archive.SourceID) []archive.ClockOffset {
	t.Helper()
	var out []archive.ClockOffset
	view(t, v, func(tx *archive.ReadTx) error {
		var err error
		out, err = tx.ClockOffsets(src)
		return err
	})
	return out
}

func sourcesOf(t *testing.T, v viewer) []archive.SourceInfo {
	t.Helper()
	var out []archive.SourceInfo
	view(t, v, func(tx *archive.ReadTx) error {
		var err error
		out, err = tx.Sources()
		return err
	})
	return out
}

// openRead opens a read handle and closes it at cleanup.
func openRead(t *testing.T, path string) *archive.Archive {
	t.Helper()
	a, err := archive.Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// rawDB opens a plain SQLite connection pool to path, bypassing the archive
// (to restamp, drop columns, hold locks or write behind its back).
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	c, err := sqlite.NewConnector("file:" + path)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func mustExec(t *testing.T, db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, q string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func eq(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// newSource starts a writer (Tags encoder unless opts says otherwise) with
// one source.
func newSource(t *testing.T, opts archive.WriterOptions) (*archive.Writer, *archive.Source) {
	t.Helper()
	w := at.NewWriter(t, opts)
	s, err := w.AddSource(at.Ctx(t), archive.SourceSpec{Labels: map[string]string{"source": t.Name()}, Metadata: map[string]string{}}, "")
	if err != nil {
		t.Fatalf("AddSource: %v", err)
	}
	return w, s
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// sealWait seals streams of s and waits for the result.
func sealWait(t *testing.T, s *archive.Source, streams ...string) []archive.Sealed {
	t.Helper()
	out, err := s.Writer().SealWait(at.Ctx(t), s.ID(), streams)
	if err != nil {
		t.Fatalf("SealWait(%v): %v", streams, err)
	}
	return out
}

// appendWait appends rows of one source and waits.
func appendWait(t *testing.T, s *archive.Source, rows ...archive.Row) archive.AppendResult {
	t.Helper()
	r, err := s.Writer().AppendWait(at.Ctx(t), []archive.SourceRows{{Source: s.ID(), Rows: rows}}, false)
	if err != nil {
		t.Fatalf("AppendWait: %v", err)
	}
	return r
}

func isErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("error %v does not match %v", err, target)
	}
}

// asErr is errors.As.
func asErr[T error](err error, target *T) bool { return errors.As(err, target) }

func fmtInt(n int) string { return strconv.Itoa(n) }
