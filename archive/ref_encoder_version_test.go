package archive_test

// Reference-notes §8.15 tests/encoder_version.rs.

import (
	"context"
	"errors"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

func versionedArchive(t *testing.T, ver string) (string, archive.SourceID) {
	ctx := at.Ctx(t)
	path := at.Path(t)
	w, err := archive.CreateWriter(path, archive.WriterOptions{Encoder: at.Tags{Ver: ver}, CheckpointInterval: -1})
	must(t, err)
	s, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"h": "1"}}, "")
	must(t, err)
	must(t, s.Append(ctx, at.Rows("s", 1, 2)...))
	sealWait(t, s, "s")
	must(t, s.Append(ctx, at.Rows("s", 3)...))
	must(t, s.Finalize(ctx, 3, 0))
	must(t, w.Close())
	return path, s.ID()
}

func TestRefTheEncoderVersionIsRecorded(t *testing.T) {
	path, src := versionedArchive(t, "v1")
	eq(t, "encoder key", sourceInfo(t, path, src).Metadata[archive.MetadataKeyEncoder], "v1")
	path, src = versionedArchive(t, "")
	if v, ok := sourceInfo(t, path, src).Metadata[archive.MetadataKeyEncoder]; ok {
		t.Errorf("an unversioned encoder recorded %q", v)
	}
}

// readPaths are every way of reading a source with an encoder.
func readPaths(path string, src archive.SourceID) map[string]func(t *testing.T, enc archive.SegmentEncoder) error {
	ctx := context.Background()
	inView := func(f func(tx *archive.ReadTx, enc archive.SegmentEncoder) error) func(t *testing.T, enc archive.SegmentEncoder) error {
		return func(t *testing.T, enc archive.SegmentEncoder) error {
			return openRead(t, path).View(ctx, func(tx *archive.ReadTx) error { return f(tx, enc) })
		}
	}
	return map[string]func(t *testing.T, enc archive.SegmentEncoder) error{
		"ReadArchive": func(t *testing.T, enc archive.SegmentEncoder) error {
			_, err := openRead(t, path).ReadArchive(ctx, enc)
			return err
		},
		"StreamSegments": inView(func(tx *archive.ReadTx, enc archive.SegmentEncoder) error {
			_, err := tx.StreamSegments(src, "s", enc)
			return err
		}),
		"Probe": inView(func(tx *archive.ReadTx, enc archive.SegmentEncoder) error {
			_, err := tx.Probe(src, "s", enc)
			return err
		}),
		"StreamRange": inView(func(tx *archive.ReadTx, enc archive.SegmentEncoder) error {
			_, err := tx.StreamRange(src, "s", 0, 10, enc)
			return err
		}),
		"StreamIndexes": inView(func(tx *archive.ReadTx, enc archive.SegmentEncoder) error {
			_, err := tx.StreamIndexes(src, "s", enc)
			return err
		}),
		"CopySourcesInto": func(t *testing.T, enc archive.SegmentEncoder) error {
			dest, err := archive.Create(t.TempDir() + "/copy.dendro")
			must(t, err)
			defer dest.Close()
			return dest.Update(ctx, func(tx *archive.WriteTx) error {
				_, err := openRead(t, path).CopySourcesInto(ctx, tx, archive.Everything(), enc)
				return err
			})
		},
		"ResumeSource": func(t *testing.T, enc archive.SegmentEncoder) error {
			w, err := archive.OpenWriter(path, archive.WriterOptions{Encoder: enc, CheckpointInterval: -1})
			must(t, err)
			defer w.Close()
			_, err = w.ResumeSource(ctx, src, 1000)
			return err
		},
	}
}

func TestRefReadingWithAnotherEncoderVersionIsRefused(t *testing.T) {
	path, src := versionedArchive(t, "v1")
	for name, read := range readPaths(path, src) {
		t.Run(name, func(t *testing.T) {
			err := read(t, at.Tags{Ver: "v2"})
			var m *archive.EncoderMismatchError
			if !errors.As(err, &m) {
				t.Fatalf("%s with v2 = %v, want EncoderMismatch{wrote v1, reading v2}", name, err)
			}
			eq(t, "mismatch", []any{m.Source, m.Wrote, m.Reading}, []any{src, "v1", "v2"})
		})
	}
}

func TestRefAnUnversionedEncoderOrSourceIsNeverChecked(t *testing.T) {
	cases := []struct {
		name        string
		wrote, read string
	}{
		{"unversioned reader of a v1 source", "v1", ""},
		{"v2 reader of an unversioned source", "", "v2"},
		{"same version", "v1", "v1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path, src := versionedArchive(t, c.wrote)
			// ResumeSource last: it changes the archive.
			paths := readPaths(path, src)
			for _, name := range []string{"ReadArchive", "StreamSegments", "Probe", "StreamRange", "StreamIndexes", "CopySourcesInto", "ResumeSource"} {
				if err := paths[name](t, at.Tags{Ver: c.read}); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
		})
	}
}
