package archive_test

import (
	"context"
	"math"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

// budgetMerger is Tags with a MergeBudget.
type budgetMerger struct {
	at.Tags
	bytes, span int64
}

func (m budgetMerger) MergeBudget() (int64, int64) { return m.bytes, m.span }

func sizesOf(t *testing.T, h *archive.WriteHandle, src archive.SourceID, stream string) []int64 {
	t.Helper()
	return segmentsField(t, h, src, stream, func(m archive.StoredSegment) int64 { return m.Size })
}

// A merger with a MergeBudget is offered runs past the target rows, up to
// its bytes; past the target rows a run does not start at a segment larger
// than the rest of the run, so that a merged segment is not rewritten to
// take in each small one after it.
func TestCompactionOffersAMergeBudgetRunsOfLargeSegments(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		segs   [][]int64 // each segment's ts
		budget func(sizes []int64) int64
		span   int64 // 0: 1000
		want   []metaRow
		merges int
	}{
		{
			name:   "no budget: nothing passes the target rows",
			segs:   [][]int64{{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11, 12}},
			budget: func([]int64) int64 { return 0 },
			want:   []metaRow{{0, 4, 1, 4}, {1, 4, 5, 8}, {2, 4, 9, 12}},
		},
		{
			name:   "a budget of two segments",
			segs:   [][]int64{{10, 11, 12, 13}, {14, 15, 16, 17}, {18, 19, 20, 21}, {22, 23, 24, 25}}, // of equal sizes
			budget: func(s []int64) int64 { return s[0] + s[1] },
			want:   []metaRow{{0, 8, 10, 17}, {2, 8, 18, 25}},
			merges: 2,
		},
		{
			name:   "a budget of everything",
			segs:   [][]int64{{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11, 12}},
			budget: func(s []int64) int64 { return s[0] + s[1] + s[2] },
			want:   []metaRow{{0, 12, 1, 12}},
			merges: 1,
		},
		{
			name:   "a budget's runs span at most its span",
			segs:   [][]int64{{10, 11, 12, 13}, {14, 15, 16, 17}, {18, 19, 20, 21}, {22, 23, 24, 25}},
			budget: func([]int64) int64 { return 1 << 20 },
			span:   11, // 10..21, not 10..25
			want:   []metaRow{{0, 12, 10, 21}, {3, 4, 22, 25}},
			merges: 1,
		},
		{
			name:   "a span across the whole range of ts is not within the span",
			segs:   [][]int64{{math.MinInt64, math.MinInt64 + 1}, {math.MaxInt64 - 2, math.MaxInt64 - 1, math.MaxInt64}},
			budget: func([]int64) int64 { return 1 << 20 },
			want:   []metaRow{{0, 2, math.MinInt64, math.MinInt64 + 1}, {1, 3, math.MaxInt64 - 2, math.MaxInt64}},
		},
		{
			name:   "a large segment waits for the small ones to outgrow it",
			segs:   [][]int64{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {13}, {14}, {15}},
			budget: func([]int64) int64 { return 1 << 20 },
			want:   []metaRow{{0, 12, 1, 12}, {1, 3, 13, 15}},
			merges: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := newHandle(t)
			src := addSrc(t, h, nil)
			for i, ts := range tc.segs {
				putSeg(t, h, src, "s", int64(i), ts...)
			}
			m := budgetMerger{bytes: tc.budget(sizesOf(t, h, src, "s")), span: tc.span}
			if m.span == 0 {
				m.span = 1000
			}
			c, err := h.CompactStream(ctx, src, "s", 2, m)
			must(t, err)
			eq(t, "compacted", c, archive.Compacted{Before: len(tc.segs), After: len(tc.want), Merges: tc.merges})
			eq(t, "metas", metasOf(t, h, src, "s"), tc.want)
			// A second pass finds nothing more to merge.
			c, err = h.CompactStream(ctx, src, "s", 2, m)
			must(t, err)
			eq(t, "second pass", c, archive.Compacted{Before: len(tc.want), After: len(tc.want)})
		})
	}
}
