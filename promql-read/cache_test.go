package promread

import "testing"

// TestSegNamesNeverReuseANumber: a segment keeps its number while the map
// holds it, two segments never share one, and a number once given is never
// given again, also after the map starts over (a stale cache entry must
// never be found under another segment's name).
func TestSegNamesNeverReuseANumber(t *testing.T) {
	var n segNames
	id := func(seq int64) segmentID {
		return segmentID{path: "a.db", source: 1, stream: "samples/00", seq: seq, rows: 10, size: 100}
	}
	first := n.of(id(0))
	if first == 0 {
		t.Fatal("segment 0 got number 0, which names no segment")
	}
	if again := n.of(id(0)); again != first {
		t.Fatalf("segment 0 is %d, then %d", first, again)
	}
	merged := id(0)
	merged.rows, merged.size = 20, 180 // a compaction's segment that took seq 0
	if m := n.of(merged); m == first {
		t.Fatalf("a merged segment with seq 0 got the number of the segment it replaced (%d)", m)
	}
	seen := map[segNo]segmentID{first: id(0)}
	last := first
	for seq := int64(1); seq <= maxSegNames+1; seq++ {
		no := n.of(id(seq))
		if other, dup := seen[no]; dup {
			t.Fatalf("segment %d got number %d, segment %d's", seq, no, other.seq)
		}
		if no <= last {
			t.Fatalf("segment %d got number %d, not above the last given (%d)", seq, no, last)
		}
		seen[no], last = id(seq), no
	}
	// The map started over on the way: segment 0 is numbered anew.
	if again := n.of(id(0)); again == first || again <= last {
		t.Fatalf("after the map started over segment 0 is %d (was %d, last given %d)", again, first, last)
	}
	if len(n.nos) > maxSegNames {
		t.Fatalf("the map holds %d segments, more than %d", len(n.nos), maxSegNames)
	}
}
