package archive_test

// Reference-notes §8.15 tests/materialize.rs: the single validation point
// for seal, copy and every read of a live tail.

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

var badEncoders = []struct {
	name string
	enc  at.EncoderFunc
	want error
}{
	{"middle drop", func(s string, rows []archive.Row) (*archive.Segment, error) {
		return &archive.Segment{Bytes: []byte("x"), Rows: int64(len(rows) - 1), FirstTS: rows[0].TS, LastTS: rows[len(rows)-1].TS}, nil
	}, archive.ErrEncoderContract},
	{"over-claim", func(s string, rows []archive.Row) (*archive.Segment, error) {
		return &archive.Segment{Bytes: []byte("x"), Rows: int64(len(rows) + 1), FirstTS: rows[0].TS, LastTS: rows[len(rows)-1].TS}, nil
	}, archive.ErrEncoderContract},
	{"span beyond the input", func(s string, rows []archive.Row) (*archive.Segment, error) {
		return &archive.Segment{Bytes: []byte("x"), Rows: int64(len(rows)), FirstTS: rows[0].TS - 1, LastTS: rows[len(rows)-1].TS}, nil
	}, archive.ErrEncoderContract},
	{"zero rows", func(s string, rows []archive.Row) (*archive.Segment, error) {
		return &archive.Segment{Bytes: []byte("x"), Rows: 0, FirstTS: rows[0].TS, LastTS: rows[0].TS}, nil
	}, archive.ErrEncoderContract},
	{"backwards", func(s string, rows []archive.Row) (*archive.Segment, error) {
		return &archive.Segment{Bytes: []byte("x"), Rows: 1, FirstTS: rows[1].TS, LastTS: rows[0].TS}, nil
	}, archive.ErrEncoderContract},
	{"panic", func(string, []archive.Row) (*archive.Segment, error) { panic("boom") }, archive.ErrEncoder},
	{"error", func(string, []archive.Row) (*archive.Segment, error) { return nil, errors.New("nope") }, archive.ErrEncoder},
}

func TestRefMaterializeRejectsEncodersThatBreakTheContract(t *testing.T) {
	rows := at.Rows("s", 1, 2, 3)
	for _, c := range badEncoders {
		t.Run(c.name, func(t *testing.T) {
			seg, err := archive.Materialize(c.enc, "s", rows)
			if seg != nil {
				t.Errorf("a segment came back: %+v", seg)
			}
			isErr(t, err, c.want)
			if c.name == "panic" && !strings.Contains(err.Error(), "the encoder panicked: boom") {
				t.Errorf("panic error %q", err)
			}
		})
	}
}

func TestRefMaterializeAcceptsDroppedLeadingAndTrailingRuns(t *testing.T) {
	rows := at.Rows("s", 1, 2, 3, 4)
	for _, keep := range [][2]int{{0, 4}, {1, 4}, {0, 3}, {1, 3}, {2, 3}} {
		enc := at.EncoderFunc(func(s string, rows []archive.Row) (*archive.Segment, error) {
			return at.Tags{}.Encode(s, rows[keep[0]:keep[1]])
		})
		seg, err := archive.Materialize(enc, "s", rows)
		must(t, err)
		eq(t, "rows", seg.Rows, int64(keep[1]-keep[0]))
	}
	seg, err := archive.Materialize(at.Never{}, "s", rows)
	if seg != nil || err != nil {
		t.Errorf("Never: %v %v", seg, err)
	}
}

func TestRefAnEmptyInputNeverCallsTheEncoder(t *testing.T) {
	called := false
	enc := at.EncoderFunc(func(string, []archive.Row) (*archive.Segment, error) { called = true; return nil, nil })
	seg, err := archive.Materialize(enc, "s", nil)
	if seg != nil || err != nil || called {
		t.Errorf("empty input: seg %v err %v called %v", seg, err, called)
	}
}

func TestRefReadsRejectTheSameEncoders(t *testing.T) {
	h, path := newHandle(t)
	src := addSrc(t, h, nil)
	putSeg(t, h, src, "s", 0, 0)
	putWAL(t, h, src, "s", 1, 2, 3)
	must(t, h.Close())
	a := openRead(t, path)
	for _, c := range badEncoders {
		t.Run(c.name, func(t *testing.T) {
			_, err := a.ReadArchive(context.Background(), c.enc)
			isErr(t, err, c.want)
			err = a.View(context.Background(), func(tx *archive.ReadTx) error {
				_, err := tx.StreamSegments(src, "s", c.enc)
				return err
			})
			isErr(t, err, c.want)
			err = a.View(context.Background(), func(tx *archive.ReadTx) error {
				_, err := tx.StreamRange(src, "s", 0, 10, c.enc)
				return err
			})
			isErr(t, err, c.want)
			// A copy rejects them too.
			dest, err := archive.Create(t.TempDir() + "/copy.dendro")
			must(t, err)
			defer dest.Close()
			err = dest.Update(context.Background(), func(tx *archive.WriteTx) error {
				_, err := a.CopySourcesInto(context.Background(), tx, archive.Everything(), c.enc)
				return err
			})
			isErr(t, err, c.want)
		})
	}
}
