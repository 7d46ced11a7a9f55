package archive_test

// Reference-notes §8.15 tests/catalog.rs: Catalog, Probe, StreamRange and
// SegmentBytesAt, all from one fixture.

import (
	"context"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

// catalogFixture: stream a has segments [1,2] and [3,4] plus wal rows 5 and
// 6; stream b has wal row 7; stream c has segment [9].
func catalogFixture(t *testing.T) (string, archive.SourceID) {
	h, path := newHandle(t)
	src := addSrc(t, h, map[string]string{"host": "c"})
	putSeg(t, h, src, "a", 0, 1, 2)
	putSeg(t, h, src, "a", 1, 3, 4)
	putWAL(t, h, src, "a", 5, 6)
	putWAL(t, h, src, "b", 7)
	putSeg(t, h, src, "c", 0, 9)
	must(t, h.Close())
	return path, src
}

func TestRefCatalogDescribesEveryStreamWithoutReadingABlob(t *testing.T) {
	path, src := catalogFixture(t)
	cat, err := openRead(t, path).Catalog(context.Background())
	must(t, err)
	if len(cat) != 1 || cat[0].ID != src {
		t.Fatalf("catalog %+v", cat)
	}
	type row struct {
		Name         string
		Segments     int64
		Sealed, Live archive.Span
		Bytes        int64
	}
	var got []row
	first, last := int64(1<<62), int64(-1<<62)
	for _, st := range cat[0].Streams {
		got = append(got, row{st.Name, st.Segments, st.Sealed, st.Live, st.Bytes})
		for _, sp := range []archive.Span{st.Sealed, st.Live} {
			if sp.Rows > 0 {
				first, last = min(first, sp.FirstTS), max(last, sp.LastTS)
			}
		}
	}
	eq(t, "streams", got, []row{
		{"a", 2, archive.Span{Rows: 4, FirstTS: 1, LastTS: 4}, archive.Span{Rows: 2, FirstTS: 5, LastTS: 6}, 6},
		{"b", 0, archive.Span{}, archive.Span{Rows: 1, FirstTS: 7, LastTS: 7}, 0},
		{"c", 1, archive.Span{Rows: 1, FirstTS: 9, LastTS: 9}, archive.Span{}, 1},
	})
	eq(t, "source span", []int64{first, last}, []int64{1, 9})
	eq(t, "labels", cat[0].Labels, map[string]string{"host": "c"})
}

func TestRefProbe(t *testing.T) {
	path, src := catalogFixture(t)
	a := openRead(t, path)
	for _, c := range []struct {
		stream string
		want   []byte
	}{{"a", []byte("1,2")}, {"b", []byte("7")}, {"c", []byte("9")}, {"missing", nil}} {
		view(t, a, func(tx *archive.ReadTx) error {
			got, err := tx.Probe(src, c.stream, at.Tags{})
			eq(t, "probe "+c.stream, got, c.want)
			return err
		})
	}
}

func TestRefStreamRange(t *testing.T) {
	path, src := catalogFixture(t)
	a := openRead(t, path)
	for _, c := range []struct {
		start, end int64
		want       []string
	}{
		{3, 5, []string{"3,4", "5"}},
		{6, 100, []string{"6"}},
		{-10, 0, nil},
		{2, 3, []string{"1,2", "3,4"}},
	} {
		view(t, a, func(tx *archive.ReadTx) error {
			segs, err := tx.StreamRange(src, "a", c.start, c.end, at.Tags{})
			var got []string
			for _, s := range segs {
				got = append(got, string(s))
			}
			eq(t, "range", got, c.want)
			return err
		})
	}
}

func TestRefStreamSegmentsReadsSealedThenTheTail(t *testing.T) {
	path, src := catalogFixture(t)
	view(t, openRead(t, path), func(tx *archive.ReadTx) error {
		segs, err := tx.StreamSegments(src, "a", at.Tags{})
		var got []string
		for _, s := range segs {
			got = append(got, string(s))
		}
		eq(t, "a", got, []string{"1,2", "3,4", "5,6"})
		return err
	})
}

func TestRefSegmentBytesAtReopensPerFetch(t *testing.T) {
	path, src := catalogFixture(t)
	ctx := context.Background()
	for _, c := range []struct {
		seq  int64
		want string
		ok   bool
	}{{0, "1,2", true}, {1, "3,4", true}, {2, "", false}} {
		b, ok, err := archive.SegmentBytesAt(ctx, path, src, "a", c.seq)
		must(t, err)
		eq(t, "fetch", []any{string(b), ok}, []any{c.want, c.ok})
	}
	// No handle stays open: the file can be taken exclusively afterwards.
	h, err := archive.OpenWrite(path)
	must(t, err)
	must(t, h.Close())
}
