package archive_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// Streams seeks from one stream name to the next rather than reading every
// wal row's name. Whatever the names and wherever they live, it must answer
// what the plain union answers: each stream of the source once, sorted, and
// none of another source's.
func TestStreamsSeeksToEachName(t *testing.T) {
	for _, tc := range []struct {
		name     string
		segments []string // a segment in each
		wal      []string // three rows in each
		other    []string // a segment and a wal row of each other source
	}{
		{name: "empty"},
		{name: "wal only", wal: []string{"b", "a"}},
		{name: "segments only", segments: []string{"x"}},
		{name: "both, overlapping", segments: []string{"a", "c"}, wal: []string{"b", "c", "d"}},
		{name: "prefixes and bytes", segments: []string{"a/b", "ab"}, wal: []string{"a", "a/", "a/b/c", "é", "Z", ""}},
		{name: "another source between", segments: []string{"m"}, wal: []string{"n"}, other: []string{"a", "m", "n", "z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := newHandle(t)
			before := addSrc(t, h, map[string]string{"job": "before"})
			src := addSrc(t, h, nil)
			after := addSrc(t, h, map[string]string{"job": "after"})
			for i, st := range tc.segments {
				putSeg(t, h, src, st, int64(i), 1)
			}
			for _, st := range tc.wal {
				putWAL(t, h, src, st, 10, 11, 12)
			}
			for i, st := range tc.other {
				for _, o := range []archive.SourceID{before, after} {
					putSeg(t, h, o, st, int64(i), 1)
					putWAL(t, h, o, st, 10)
				}
			}
			want := slices.Concat(tc.segments, tc.wal)
			slices.Sort(want)
			want = slices.Compact(want)
			if want == nil {
				want = []string{}
			}
			got := streamsOf(t, h, src)
			if got == nil {
				got = []string{}
			}
			eq(t, "streams", got, want)
		})
	}
}

// The seeks must stay seeks: a plan that reads the wal table or its index
// row by row would make every question under ingest pay for every live row.
func TestStreamsPlanDoesNotScanTheWAL(t *testing.T) {
	h, _ := newHandle(t)
	plan, err := archive.StreamsPlanForTest(h)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plan, "SCAN wal") || strings.Contains(plan, "SCAN segments") {
		t.Errorf("Streams reads a table row by row:\n%s", plan)
	}
	for _, idx := range []string{"sqlite_autoindex_wal_1 (source_id=? AND stream>?)", "segments_by_time (source_id=? AND stream>?)"} {
		if !strings.Contains(plan, idx) {
			t.Errorf("Streams does not seek on %s:\n%s", idx, plan)
		}
	}
}
