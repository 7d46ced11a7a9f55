package archive_test

// Reference-notes §8.15 tests/verify.rs (§6.4).

import (
	"context"
	"os"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

func verify(t *testing.T, path string, depth archive.Depth) archive.Report {
	t.Helper()
	a, err := archive.Open(path)
	must(t, err)
	defer a.Close()
	rep, err := a.Verify(context.Background(), depth)
	if err != nil {
		t.Fatalf("Verify(%v): %v (problems are data, not errors)", depth, err)
	}
	return rep
}

func TestRefAHealthyArchiveIsSound(t *testing.T) {
	h, path := newHandle(t)
	src := addSrc(t, h, nil)
	putSeg(t, h, src, "s", 0, 1, 2)
	putWAL(t, h, src, "s", 3, 4)
	must(t, h.Close())
	for _, d := range []archive.Depth{archive.Quick, archive.Full} {
		rep := verify(t, path, d)
		if !rep.Sound() {
			t.Errorf("depth %v: problems %v", d, rep.Problems)
		}
		eq(t, "counts", []int64{rep.Sources, rep.Streams, rep.Segments, rep.WALRows}, []int64{1, 1, 1, 2})
	}
}

func TestRefShadowedWALRowsAreReportedUntilPruned(t *testing.T) {
	h, path := newHandle(t)
	src := addSrc(t, h, nil)
	putSeg(t, h, src, "s", 0, 1, 2)
	putWAL(t, h, src, "s", 1, 2, 9)
	must(t, h.Close())
	rep := verify(t, path, archive.Quick)
	eq(t, "wal rows", rep.WALRows, int64(3))
	eq(t, "problems", rep.Problems, []archive.Problem{{Kind: archive.ProblemUnreadableWAL, Source: src, Stream: "s", Rows: 2}})
	if len(rep.Problems) == 1 {
		eq(t, "text", rep.Problems[0].String(), "source 1, stream s: 2 WAL row(s) at or below the sealed watermark, which no read path can reach")
	}
	h, err := archive.OpenWrite(path)
	must(t, err)
	update(t, h, func(tx *archive.WriteTx) error {
		_, err := tx.PruneWAL(src, "s", 2)
		return err
	})
	must(t, h.Close())
	if rep := verify(t, path, archive.Quick); !rep.Sound() {
		t.Errorf("after prune: %v", rep.Problems)
	}
}

func TestRefSegmentsThatRunBackwardsOrClaimZeroRowsAreReported(t *testing.T) {
	h, path := newHandle(t)
	src := addSrc(t, h, nil)
	update(t, h, func(tx *archive.WriteTx) error {
		if err := tx.InsertSegment(src, "s", 0, &archive.Segment{Bytes: []byte("x"), Rows: 1, FirstTS: 5, LastTS: 4}); err != nil {
			return err
		}
		return tx.InsertSegment(src, "s", 1, &archive.Segment{Bytes: []byte("y"), Rows: 0, FirstTS: 6, LastTS: 7})
	})
	must(t, h.Close())
	rep := verify(t, path, archive.Full)
	if len(rep.Problems) != 2 {
		t.Fatalf("problems %v, want 2", rep.Problems)
	}
	for i, want := range []struct {
		seq    int64
		detail string
	}{{0, "spans [5, 4], which runs backwards"}, {1, "claims no rows; such a segment should not exist"}} {
		p := rep.Problems[i]
		eq(t, "problem", []any{p.Kind, p.Seq, p.Detail}, []any{archive.ProblemSegment, want.seq, want.detail})
	}
}

func TestRefDanglingReferencesAreReported(t *testing.T) {
	h, path := newHandle(t)
	src := addSrc(t, h, nil)
	putWAL(t, h, src, "s", 1)
	must(t, h.Close())
	db := rawDB(t, path)
	mustExec(t, db, "PRAGMA foreign_keys=OFF")
	mustExec(t, db, "DELETE FROM sources")
	must(t, db.Close())
	rep := verify(t, path, archive.Quick)
	found := false
	for _, p := range rep.Problems {
		if p.Kind == archive.ProblemForeignKey {
			found = true
		}
	}
	if !found {
		t.Errorf("problems %v lack a dangling reference", rep.Problems)
	}
}

// corruptArchive makes an archive of several pages and returns it and its
// page count.
func corruptArchive(t *testing.T, segments int64) (string, int64) {
	h, path := newHandle(t)
	src := addSrc(t, h, nil)
	update(t, h, func(tx *archive.WriteTx) error {
		for i := int64(0); i < segments; i++ {
			if err := tx.InsertSegment(src, "s", i, &archive.Segment{Bytes: make([]byte, 3000), Rows: 1, FirstTS: i, LastTS: i}); err != nil {
				return err
			}
			if err := tx.InsertWALRows(src, at.Rows("w", i)); err != nil {
				return err
			}
		}
		return nil
	})
	must(t, h.Close())
	fi, err := os.Stat(path)
	must(t, err)
	return path, fi.Size() / archive.PageSize
}

func scribble(t *testing.T, path string, off int64, n int) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	buf := make([]byte, n)
	_, err = f.ReadAt(buf, off)
	must(t, err)
	for i := range buf {
		buf[i] ^= 0xff
	}
	_, err = f.WriteAt(buf, off)
	must(t, err)
}

func hasCorrupt(rep archive.Report) bool {
	for _, p := range rep.Problems {
		if p.Kind == archive.ProblemCorrupt {
			return true
		}
	}
	return false
}

func TestRefScribblingIntoTheFileIsReportedAsCorrupt(t *testing.T) {
	path, pages := corruptArchive(t, 64)
	scribble(t, path, (pages/2)*archive.PageSize, 4096)
	for _, d := range []archive.Depth{archive.Quick, archive.Full} {
		rep, err := openRead(t, path).Verify(context.Background(), d)
		if err != nil {
			t.Errorf("depth %v: Verify failed (%v); corruption must be reported as a problem", d, err)
			continue
		}
		if !hasCorrupt(rep) {
			t.Errorf("depth %v: problems %v lack Corrupt", d, rep.Problems)
		}
	}
}

func TestRefADamagedPageAnywhereIsCorruptNotAnError(t *testing.T) {
	path, pages := corruptArchive(t, 12)
	orig, err := os.ReadFile(path)
	must(t, err)
	for page := int64(1); page < pages; page++ { // page 0 holds the header: the open would refuse it
		must(t, os.WriteFile(path, orig, 0o644))
		scribble(t, path, page*archive.PageSize, archive.PageSize)
		a, err := archive.Open(path)
		if err != nil {
			t.Errorf("page %d: Open: %v", page+1, err)
			continue
		}
		rep, err := a.Verify(context.Background(), archive.Quick)
		a.Close()
		if err != nil {
			t.Errorf("page %d: Verify returned an error instead of a Corrupt problem: %v", page+1, err)
			continue
		}
		if !hasCorrupt(rep) && rep.Sound() {
			t.Errorf("page %d damaged, but the report is sound", page+1)
		}
	}
}
