package archive_test

import (
	"bytes"
	"database/sql"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// overflowChains returns the overflow pages of every BLOB of the segments
// table, by cell, in chain order (dbstat: each overflow page's path is its
// cell's path, "+", and its place in the chain).
func overflowChains(t *testing.T, path string) map[string][]int64 {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT path, pageno FROM dbstat WHERE name = 'segments' AND pagetype = 'overflow' ORDER BY path`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	chains := map[string][]int64{}
	for rows.Next() {
		var p string
		var pg int64
		if err := rows.Scan(&p, &pg); err != nil {
			t.Fatal(err)
		}
		cell := p[:strings.LastIndexByte(p, '+')]
		chains[cell] = append(chains[cell], pg)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return chains
}

// breaks counts the links of a chain whose next page is not the one after
// (a pointer-map page in between, every ~1,000 pages, is not a break).
func breaks(chain []int64) int {
	n := 0
	for i := 1; i < len(chain); i++ {
		if d := chain[i] - chain[i-1]; d != 1 && d != 2 {
			n++
		}
	}
	return n
}

// A segment written while the free list is scattered (the pages of small
// rows freed among rows still live) gets its pages in one run when the
// free list is at most twice the segment, the free pages stay free for later
// rows, and the transaction writes the segment's pages and the free ones
// once (placeContiguously). With a longer free list the segment takes free
// pages as before: that case is the control that breaks() sees scatter.
func TestSegmentPagesAreConsecutive(t *testing.T) {
	for _, tc := range []struct {
		name   string
		size   int
		placed bool
	}{
		{"free list shorter than the segment", 8 << 20, true},
		{"free list up to twice the segment", 5 << 20, true},
		{"free list longer than twice the segment", 2 << 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, path := newHandle(t)
			src := addSrc(t, h, map[string]string{"name": "a"})
			r := rand.New(rand.NewPCG(3, 4))
			random := func(n int) []byte {
				b := make([]byte, n)
				for i := range b {
					b[i] = byte(r.Uint32())
				}
				return b
			}
			// Interleave two streams' small segments (three overflow pages,
			// below the placeholder's threshold), then drop one stream's.
			update(t, h, func(tx *archive.WriteTx) error {
				for i := range int64(600) {
					for _, s := range []string{"keep", "drop"} {
						if err := tx.InsertSegment(src, s, i, &archive.Segment{Bytes: random(10 << 10), Rows: 1, FirstTS: i, LastTS: i}); err != nil {
							return err
						}
					}
				}
				return nil
			})
			update(t, h, func(tx *archive.WriteTx) error {
				for i := range int64(600) {
					if err := tx.DeleteSegment(src, "drop", i); err != nil {
						return err
					}
				}
				return nil
			})
			var before archive.PageStats
			view(t, h, func(tx *archive.ReadTx) (err error) { before, err = tx.PageStats(); return err })
			if before.Free < 1500 {
				t.Fatalf("setup: %d free pages, want a scattered free list of >= 1500", before.Free)
			}
			if _, err := archive.WALFramesForTest(h); err != nil { // empty the sidecar
				t.Fatal(err)
			}

			big := random(tc.size)
			bigPages := int64(len(big)) / (before.PageSize - 4)
			update(t, h, func(tx *archive.WriteTx) error {
				return tx.InsertSegment(src, "big", 0, &archive.Segment{Bytes: big, Rows: 1, FirstTS: 1, LastTS: 1})
			})
			frames, err := archive.WALFramesForTest(h)
			if err != nil {
				t.Fatal(err)
			}
			var after archive.PageStats
			view(t, h, func(tx *archive.ReadTx) (err error) { after, err = tx.PageStats(); return err })
			var longest []int64
			for _, c := range overflowChains(t, path) {
				if len(c) > len(longest) {
					longest = c
				}
			}
			if int64(len(longest)) < bigPages {
				t.Fatalf("the longest chain has %d pages, the segment needs %d", len(longest), bigPages)
			}
			b := breaks(longest)
			t.Logf("free %d -> %d pages; segment %d pages, %d breaks; %d frames written", before.Free, after.Free, len(longest), b, frames)
			if tc.placed {
				if b > 2 {
					t.Errorf("the segment's %d pages have %d breaks, want at most 2", len(longest), b)
				}
				if after.Free < before.Free-8 {
					t.Errorf("free pages %d -> %d: the segment took the scattered free pages", before.Free, after.Free)
				}
				if frames > bigPages+before.Free+64 {
					t.Errorf("the insert wrote %d pages, want at most the segment's %d and the %d free", frames, bigPages, before.Free)
				}
			} else {
				if b < int(bigPages)/10 {
					t.Errorf("control: a segment written into the scattered free list has %d breaks in %d pages; breaks() sees no scatter", b, len(longest))
				}
				if frames > bigPages+64 {
					t.Errorf("the insert wrote %d pages, the segment has %d: a placeholder was written", frames, bigPages)
				}
			}
			view(t, h, func(tx *archive.ReadTx) error {
				got, ok, err := tx.SegmentBytes(src, "big", 0)
				if err != nil || !ok || !bytes.Equal(got, big) {
					t.Fatalf("segment read back: ok=%v err=%v equal=%v", ok, err, bytes.Equal(got, big))
				}
				metas, err := tx.StreamSegmentMetas(src, "big")
				if err != nil || len(metas) != 1 {
					t.Fatalf("the stream lists %d segments (%v), want 1: the placeholder outlived its transaction", len(metas), err)
				}
				return nil
			})
		})
	}
}
