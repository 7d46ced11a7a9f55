// Package archivetest holds fixtures for tests of the archive and its
// callers: encoders whose segments are readable text, and helpers that open
// archives under t.TempDir and check invariants at cleanup.
package archivetest

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// Tags is an encoder whose segment bytes are the rows' timestamps joined by
// commas ("1,2,3"), claiming exactly its input. An empty input is no segment.
type Tags struct{ Ver string }

func (Tags) Encode(_ string, rows []archive.Row) (*archive.Segment, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	parts := make([]string, len(rows))
	for i, r := range rows {
		parts[i] = strconv.FormatInt(r.TS, 10)
	}
	return &archive.Segment{Bytes: []byte(strings.Join(parts, ",")), Rows: int64(len(rows)),
		FirstTS: rows[0].TS, LastTS: rows[len(rows)-1].TS}, nil
}
func (t Tags) Version() string { return t.Ver }

// Merge concatenates Tags segments (a SegmentMerger for compaction tests).
func (Tags) Merge(_ string, segs []archive.StoredSegment) (*archive.Segment, int, error) {
	var parts []string
	var rows int64
	for _, s := range segs {
		parts = append(parts, string(s.Bytes))
		rows += s.Rows
	}
	return &archive.Segment{Bytes: []byte(strings.Join(parts, ",")), Rows: rows,
		FirstTS: segs[0].FirstTS, LastTS: segs[len(segs)-1].LastTS}, len(segs), nil
}

// Never is an encoder that never makes a segment.
type Never struct{}

func (Never) Encode(string, []archive.Row) (*archive.Segment, error) { return nil, nil }
func (Never) Version() string                                        { return "" }

// EncoderFunc adapts a function to archive.SegmentEncoder.
type EncoderFunc func(stream string, rows []archive.Row) (*archive.Segment, error)

func (f EncoderFunc) Encode(stream string, rows []archive.Row) (*archive.Segment, error) {
	return f(stream, rows)
}
func (EncoderFunc) Version() string { return "" }

// Rows builds rows of one stream at the given timestamps (payload: the ts).
func Rows(stream string, ts ...int64) []archive.Row {
	out := make([]archive.Row, len(ts))
	for i, t := range ts {
		out[i] = archive.Row{Stream: stream, TS: t, Data: []byte(strconv.FormatInt(t, 10))}
	}
	return out
}

// Path returns a fresh archive path under t.TempDir.
func Path(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "test.dendro")
}

// NewWriter creates an archive with a Tags encoder (checkpoint timer off
// unless opts says otherwise) and closes it at cleanup, failing the test if
// the writer stopped on an error.
func NewWriter(t testing.TB, opts archive.WriterOptions) *archive.Writer {
	t.Helper()
	if opts.Encoder == nil {
		opts.Encoder = Tags{}
	}
	if opts.CheckpointInterval == 0 {
		opts.CheckpointInterval = -1
	}
	w, err := archive.CreateWriter(Path(t), opts)
	if err != nil {
		t.Fatalf("CreateWriter: %v", err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil && !errors.Is(err, archive.ErrWriterStopped) {
			t.Errorf("writer close: %v", err)
		}
	})
	return w
}

// Ctx is a test context with a generous deadline.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// ReadStrings opens path read-only and returns every stream's segments as
// strings (Tags segments read as their timestamps), source by source,
// stream by stream.
func ReadStrings(t testing.TB, path string, enc archive.SegmentEncoder) [][]string {
	t.Helper()
	a, err := archive.Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer a.Close()
	srcs, err := a.ReadArchive(context.Background(), enc)
	if err != nil {
		t.Fatalf("ReadArchive: %v", err)
	}
	var out [][]string
	for _, s := range srcs {
		for _, st := range s.Streams {
			var segs []string
			for _, b := range st.Segments {
				segs = append(segs, string(b))
			}
			out = append(out, segs)
		}
	}
	return out
}
