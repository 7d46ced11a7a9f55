package archive_test

import (
	"bytes"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// checkSegments reads every segment of want through a's read handle at
// random ranges (and its first and last byte), compares with want, and
// returns how many segments were not read in place.
func checkSegments(t *testing.T, a *archive.Archive, src archive.SourceID, stream string, want map[int64][]byte, r *rand.Rand) (throughSQLite int) {
	t.Helper()
	view(t, a, func(tx *archive.ReadTx) error {
		for seq, payload := range want {
			b, ok, err := tx.OpenSegment(src, stream, seq)
			if err != nil || !ok {
				t.Fatalf("OpenSegment(%d): %v %v", seq, ok, err)
			}
			if len(payload) == 0 {
				continue
			}
			ranges := [][2]int{{0, 1}, {len(payload) - 1, 1}, {0, len(payload)}}
			for range 40 {
				off := r.IntN(len(payload))
				ranges = append(ranges, [2]int{off, 1 + r.IntN(min(len(payload)-off, 40<<10))})
			}
			for _, rg := range ranges {
				p := make([]byte, rg[1])
				n, err := b.ReadAt(p, int64(rg[0]))
				if n != rg[1] || err != nil {
					t.Fatalf("segment %d: ReadAt(%d, %d) = %d, %v", seq, rg[1], rg[0], n, err)
				}
				if !bytes.Equal(p, payload[rg[0]:rg[0]+rg[1]]) {
					t.Fatalf("segment %d (%d bytes): ReadAt(%d, %d) returned other bytes", seq, len(payload), rg[1], rg[0])
				}
			}
			if !archive.ReadsInPlaceForTest(b) {
				t.Logf("segment %d (%d bytes) was read through sqlite3_blob_read, not in place", seq, len(payload))
				throughSQLite++
			}
		}
		return nil
	})
	return throughSQLite
}

// brokenLinks counts the links of the segments' overflow chains that
// breaks() counts, and the links in all.
func brokenLinks(t *testing.T, path string) (broken, links int) {
	t.Helper()
	for _, chain := range overflowChains(t, path) {
		broken += breaks(chain)
		links += max(len(chain)-1, 0)
	}
	return broken, links
}

// Reading a segment's pages in place (blobpages.go) gives the bytes
// sqlite3_blob_read gives: segments wholly in their leaf, just past it,
// and over many overflow pages; chains in consecutive pages and scattered
// over a fragmented free list; read from the main file and from the -wal
// sidecar while a writer runs; and again after a reclaim moved the pages
// the handle remembered.
func TestRawPagesMatchBlobReads(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	t.Run("main file", func(t *testing.T) {
		h, path := newHandle(t)
		src := addSrc(t, h, map[string]string{"name": "a"})
		want := map[int64][]byte{}
		// 4061 is the most a 4 KiB page's leaf holds of a record; the row's
		// other columns take a few bytes of it.
		for seq, n := range []int{0, 7, 3000, 4030, 4061, 4062, 8200, 100 << 10, 3<<20 + 17} {
			want[int64(seq)] = randomBytes(r, n)
		}
		// Scattered: many one-page segments, every other one deleted, then
		// segments written into that free list (placement skips a list
		// more than twice their size).
		update(t, h, func(tx *archive.WriteTx) error {
			for seq := int64(100); seq < 700; seq++ {
				if err := tx.InsertSegment(src, "pad", seq, &archive.Segment{Bytes: randomBytes(r, 5000), Rows: 1, FirstTS: seq, LastTS: seq}); err != nil {
					return err
				}
			}
			return nil
		})
		update(t, h, func(tx *archive.WriteTx) error {
			for seq := int64(100); seq < 700; seq += 2 {
				if err := tx.DeleteSegment(src, "pad", seq); err != nil {
					return err
				}
			}
			return nil
		})
		update(t, h, func(tx *archive.WriteTx) error {
			for seq, payload := range want {
				if err := tx.InsertSegment(src, "s", seq, &archive.Segment{Bytes: payload, Rows: 1, FirstTS: seq + 1, LastTS: seq + 1}); err != nil {
					return err
				}
			}
			for seq := int64(0); seq < 3; seq++ {
				p := randomBytes(r, 60<<10)
				want[1000+seq] = p
				if err := tx.InsertSegment(src, "s", 1000+seq, &archive.Segment{Bytes: p, Rows: 1, FirstTS: 1000 + seq, LastTS: 1000 + seq}); err != nil {
					return err
				}
			}
			return nil
		})
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		broken, links := brokenLinks(t, path)
		t.Logf("%d of %d links scattered", broken, links)
		if broken < 20 { // breaks() does not count a link to the page after next
			t.Fatalf("only %d of %d links are scattered: the test does not read a scattered chain", broken, links)
		}
		a := openRead(t, path)
		if err := a.WarmPageJumps(at.Ctx(t)); err != nil {
			t.Fatal(err)
		}
		if n := archive.PageJumpsForTest(a); n < broken {
			t.Fatalf("after WarmPageJumps: %d scattered links known, want %d", n, broken)
		}
		if n := checkSegments(t, a, src, "s", want, r); n > 0 {
			t.Fatalf("%d segments were not read in place", n)
		}
	})
	t.Run("64 KiB pages", func(t *testing.T) {
		path := at.Path(t)
		h, err := archive.CreateWithPageSizeForTest(path, 65536)
		if err != nil {
			t.Fatal(err)
		}
		src := addSrc(t, h, map[string]string{"name": "a"})
		want := map[int64][]byte{}
		for seq, n := range []int{1, 65000, 65501, 65600, 200 << 10, 5<<20 + 3} {
			want[int64(seq)] = randomBytes(r, n)
		}
		update(t, h, func(tx *archive.WriteTx) error {
			for seq, payload := range want {
				if err := tx.InsertSegment(src, "s", seq, &archive.Segment{Bytes: payload, Rows: 1, FirstTS: seq + 1, LastTS: seq + 1}); err != nil {
					return err
				}
			}
			return nil
		})
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		a := openRead(t, path)
		if n := checkSegments(t, a, src, "s", want, r); n > 0 {
			t.Fatalf("%d segments were not read in place", n)
		}
	})
	t.Run("sidecar and reclaim", func(t *testing.T) {
		ctx := at.Ctx(t)
		w := at.NewWriter(t, archive.WriterOptions{Encoder: blobEncoder{}})
		s, err := w.AddSource(ctx, archive.SourceSpec{}, "")
		if err != nil {
			t.Fatal(err)
		}
		src := s.ID()
		want := map[int64][]byte{}
		ts := int64(0)
		for seq := range int64(8) {
			var payload []byte
			var rows []archive.Row
			for range 40 + 30*seq {
				ts++
				d := randomBytes(r, 1000+r.IntN(3000))
				rows = append(rows, archive.Row{Stream: "s", TS: ts, Data: d})
				payload = append(payload, d...)
			}
			if _, err := w.AppendWait(ctx, []archive.SourceRows{{Source: src, Rows: rows}}, false); err != nil {
				t.Fatal(err)
			}
			sealed, err := w.SealWait(ctx, src, []string{"s"})
			if err != nil || len(sealed) != 1 {
				t.Fatalf("seal: %v %v", sealed, err)
			}
			want[sealed[0].Seq] = payload
		}
		a, err := archive.Open(w.Path())
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		if n := checkSegments(t, a, src, "s", want, r); n > 0 {
			t.Fatalf("%d segments were not read in place", n)
		}
		// Evict the oldest half: freed pages past a tenth of the file make
		// the writer reclaim, which moves the file's last pages (the newest
		// segments' chains) into the holes.
		ev, err := w.EvictBefore(ctx, src, evictCutoff(t, a, src, 4))
		if err != nil || ev.Segments != 4 {
			t.Fatalf("evict: %+v %v", ev, err)
		}
		for seq := range int64(4) {
			delete(want, seq)
		}
		if st := w.Stats(); st.Reclaims == 0 {
			t.Fatal("the eviction did not reclaim: the chains did not move")
		}
		// A chain the reclaim scattered is read through SQLite and has the
		// links rescanned in the background; the reads after that are in
		// place again.
		if n := checkSegments(t, a, src, "s", want, r); n == 0 {
			t.Log("the reclaim left every chain in consecutive pages")
		}
		deadline := time.Now().Add(10 * time.Second)
		for archive.PageJumpsForTest(a) == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := checkSegments(t, a, src, "s", want, r); n > 0 {
			t.Fatalf("after the rescan, %d segments were not read in place", n)
		}
	})
}

// evictCutoff is the cutoff that evicts the first n segments of stream s.
func evictCutoff(t *testing.T, a *archive.Archive, src archive.SourceID, n int) int64 {
	t.Helper()
	var cutoff int64
	view(t, a, func(tx *archive.ReadTx) error {
		metas, err := tx.StreamSegmentMetas(src, "s")
		if err != nil {
			return err
		}
		if len(metas) <= n {
			return fmt.Errorf("%d segments", len(metas))
		}
		cutoff = metas[n-1].LastTS + 1
		return nil
	})
	return cutoff
}

// While a writer appends, seals, evicts (which reclaims, moving pages) and
// checkpoints, a reader in the same process reads segments in place, and
// every range it reads equals the same range of the BLOB read whole
// through SQL in the same snapshot. A reader that follows the writer
// (ReadOptions.Writer) takes the page chains earlier snapshots walked
// (blobchains.go) wherever no reclaim came between, and must still read
// the right bytes after each one moved pages.
func TestRawPagesUnderAWriter(t *testing.T) {
	for _, follow := range []bool{false, true} {
		t.Run(fmt.Sprintf("follow=%v", follow), func(t *testing.T) { rawPagesUnderAWriter(t, follow) })
	}
}

func rawPagesUnderAWriter(t *testing.T, follow bool) {
	ctx := at.Ctx(t)
	w := at.NewWriter(t, archive.WriterOptions{Encoder: blobEncoder{}, CheckpointInterval: 50 * time.Millisecond})
	s, err := w.AddSource(ctx, archive.SourceSpec{}, "")
	if err != nil {
		t.Fatal(err)
	}
	src := s.ID()
	var opts archive.ReadOptions
	if follow {
		opts.Writer = w
	}
	a, err := archive.OpenWithOptions(w.Path(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	stop := make(chan struct{})
	writerDone := make(chan error, 1)
	go func() {
		r := rand.New(rand.NewPCG(11, 12))
		ts := int64(0)
		for round := 0; ; round++ {
			select {
			case <-stop:
				writerDone <- nil
				return
			default:
			}
			var rows []archive.Row
			for range 20 + r.IntN(200) {
				ts++
				rows = append(rows, archive.Row{Stream: "s", TS: ts, Data: randomBytes(r, 500+r.IntN(6000))})
			}
			if _, err := w.AppendWait(ctx, []archive.SourceRows{{Source: src, Rows: rows}}, false); err != nil {
				writerDone <- err
				return
			}
			if _, err := w.SealWait(ctx, src, []string{"s"}); err != nil {
				writerDone <- err
				return
			}
			if round%4 == 3 { // the older half goes: free pages past a tenth reclaim
				if _, err := w.EvictBefore(ctx, src, ts-ts/3); err != nil {
					writerDone <- err
					return
				}
			}
		}
	}()

	r := rand.New(rand.NewPCG(13, 14))
	var ranges, inPlace, kept, snapshots, page1 int
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		view(t, a, func(tx *archive.ReadTx) error {
			metas, err := tx.StreamSegmentMetas(src, "s")
			if err != nil {
				return err
			}
			for range min(len(metas), 4) {
				m := metas[r.IntN(len(metas))]
				whole, ok, err := tx.SegmentBytes(src, "s", m.Seq)
				if err != nil || !ok {
					t.Fatalf("SegmentBytes(%d): %v %v", m.Seq, ok, err)
				}
				b, ok, err := tx.OpenListedSegment(src, m)
				if err != nil || !ok {
					t.Fatalf("OpenListedSegment(%d): %v %v", m.Seq, ok, err)
				}
				for range 20 {
					off := r.IntN(len(whole))
					p := make([]byte, 1+r.IntN(min(len(whole)-off, 64<<10)))
					if n, err := b.ReadAt(p, int64(off)); n != len(p) || err != nil {
						t.Fatalf("segment %d: ReadAt(%d, %d) = %d, %v", m.Seq, len(p), off, n, err)
					}
					if !bytes.Equal(p, whole[off:off+len(p)]) {
						t.Fatalf("segment %d (%d bytes): ReadAt(%d, %d) differs from the BLOB read whole", m.Seq, len(whole), len(p), off)
					}
					ranges++
				}
				if archive.ReadsInPlaceForTest(b) {
					inPlace++
				}
				if archive.KeptLinksForTest(b) > 0 {
					kept++
				}
			}
			// The geometry a snapshot read from its page 1 is what SQL
			// says of it, whatever the writer did since the last.
			used, asked, fromPage1, ok, err := archive.PageGeometryForTest(tx)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				if used != asked {
					t.Fatalf("in-place reader's page count, root, bytes column %v; SQL says %v", used, asked)
				}
				snapshots++
				if fromPage1 {
					page1++
				}
			}
			return nil
		})
	}
	if snapshots == 0 || page1 < snapshots-1 {
		t.Errorf("%d of %d snapshots took their geometry from page 1, want all but the first", page1, snapshots)
	}
	close(stop)
	if err := <-writerDone; err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	t.Logf("%d ranges compared, %d segment reads in place (%d on kept chains), %d snapshots (%d geometries from page 1); writer: %d reclaims, %d checkpoints",
		ranges, inPlace, kept, snapshots, page1, st.Reclaims, st.Checkpoints)
	if inPlace == 0 || st.Reclaims == 0 {
		t.Fatalf("in place %d, reclaims %d: the test did not read in place while pages moved", inPlace, st.Reclaims)
	}
	if follow != (kept > 0) {
		t.Fatalf("%d segment reads on kept chains by a reader following the writer: %v", kept, follow)
	}
}

// A read handle remembers where the segments table is under the schema
// cookie it found it under. After a schema change (here a table another
// connection adds; in an auto-vacuum file that moves the page where its
// root goes to the end) the next snapshot asks SQL again, reads the
// right bytes, and reads in place again once the moved link is known.
func TestRawPagesAfterASchemaChange(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	h, path := newHandle(t)
	src := addSrc(t, h, map[string]string{"name": "a"})
	want := map[int64][]byte{}
	update(t, h, func(tx *archive.WriteTx) error {
		for seq := int64(0); seq < 4; seq++ {
			want[seq] = randomBytes(r, 50<<10+int(seq))
			if err := tx.InsertSegment(src, "s", seq, &archive.Segment{Bytes: want[seq], Rows: 1, FirstTS: seq + 1, LastTS: seq + 1}); err != nil {
				return err
			}
		}
		return nil
	})
	a := openRead(t, path)
	// geometry reads every segment in one snapshot and reports whether
	// its reader took the geometry from page 1.
	geometry := func() (fromPage1 bool) {
		t.Helper()
		view(t, a, func(tx *archive.ReadTx) error {
			for seq, payload := range want {
				b, ok, err := tx.OpenSegment(src, "s", seq)
				if err != nil || !ok {
					t.Fatalf("OpenSegment: %v %v", ok, err)
				}
				p := make([]byte, 100)
				if _, err := b.ReadAt(p, 20<<10); err != nil || !bytes.Equal(p, payload[20<<10:20<<10+100]) {
					t.Fatalf("segment %d: ReadAt: %v, or other bytes", seq, err)
				}
			}
			used, asked, page1, ok, err := archive.PageGeometryForTest(tx)
			if err != nil || !ok || used != asked {
				t.Fatalf("geometry %v, SQL says %v (reader %v, %v)", used, asked, ok, err)
			}
			fromPage1 = page1
			return nil
		})
		return fromPage1
	}
	// WarmPageJumps's snapshot asks SQL and remembers the answer.
	if err := a.WarmPageJumps(at.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	if !geometry() {
		t.Fatal("the snapshot after WarmPageJumps asked SQL for its geometry again")
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE TABLE later_addition (x INTEGER)"); err != nil {
		t.Fatal(err)
	}
	if geometry() {
		t.Fatal("after a schema change the snapshot took its geometry from page 1")
	}
	if !geometry() {
		t.Fatal("after a schema change the geometry was not remembered again")
	}
	if err := a.WarmPageJumps(at.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	if n := checkSegments(t, a, src, "s", want, r); n > 0 {
		t.Fatalf("%d segments were not read in place", n)
	}
}

// A reader that follows the writer keeps the page chains it walked
// (blobchains.go). Creating a table in an auto-vacuum file moves the
// page where the new root goes, which may be a segment's; the schema
// cookie changes with it, and the kept chains are not taken across it.
func TestKeptChainsAfterASchemaChange(t *testing.T) {
	ctx := at.Ctx(t)
	r := rand.New(rand.NewPCG(17, 18))
	w := at.NewWriter(t, archive.WriterOptions{Encoder: blobEncoder{}, CheckpointInterval: -1})
	s, err := w.AddSource(ctx, archive.SourceSpec{}, "")
	if err != nil {
		t.Fatal(err)
	}
	src := s.ID()
	want := map[int64][]byte{}
	for seq := int64(0); seq < 4; seq++ {
		want[seq] = randomBytes(r, 60<<10+int(seq))
		rows := []archive.Row{{Stream: "s", TS: seq + 1, Data: want[seq]}}
		if _, err := w.AppendWait(ctx, []archive.SourceRows{{Source: src, Rows: rows}}, false); err != nil {
			t.Fatal(err)
		}
		if _, err := w.SealWait(ctx, src, []string{"s"}); err != nil {
			t.Fatal(err)
		}
	}
	a, err := archive.OpenWithOptions(w.Path(), archive.ReadOptions{Writer: w})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// Segments are numbered from 1 by the seals; read each whole once so
	// that its chain is kept, then check it is taken.
	bySeq := map[int64][]byte{}
	view(t, a, func(tx *archive.ReadTx) error {
		metas, err := tx.StreamSegmentMetas(src, "s")
		if err != nil || len(metas) != len(want) {
			t.Fatalf("%d segments, %v", len(metas), err)
		}
		for i, m := range metas {
			bySeq[m.Seq] = want[int64(i)]
		}
		return nil
	})
	if n := checkSegments(t, a, src, "s", bySeq, r); n > 0 {
		t.Fatalf("%d segments were not read in place", n)
	}
	taken := func() (n int) {
		view(t, a, func(tx *archive.ReadTx) error {
			for seq, payload := range bySeq {
				b, ok, err := tx.OpenSegment(src, "s", seq)
				if err != nil || !ok {
					t.Fatalf("OpenSegment(%d): %v %v", seq, ok, err)
				}
				p := make([]byte, 100)
				off := len(payload) - 200
				if _, err := b.ReadAt(p, int64(off)); err != nil || !bytes.Equal(p, payload[off:off+100]) {
					t.Fatalf("segment %d: ReadAt: %v, or other bytes", seq, err)
				}
				if archive.KeptLinksForTest(b) > 0 {
					n++
				}
			}
			return nil
		})
		return n
	}
	if n := taken(); n != len(bySeq) {
		t.Fatalf("%d of %d segments read on kept chains", n, len(bySeq))
	}
	db, err := sql.Open("sqlite", w.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE TABLE later_addition (x INTEGER)"); err != nil {
		t.Fatal(err)
	}
	if n := taken(); n != 0 {
		t.Fatalf("after a schema change %d segments were read on chains kept before it", n)
	}
	if n := checkSegments(t, a, src, "s", bySeq, r); n > 0 {
		t.Fatalf("%d segments were not read in place", n)
	}
}
