package promsample

import (
	"fmt"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// BenchmarkMergeMemory measures a compaction's merge at high cardinality:
// two consecutive seals of one stream (the two epochs of sealRows: the
// same series, later samples), each 2 rows of 1 or 4 samples per series,
// merged into one, as archive's compaction asks Encoder.Merge. At a
// million active series a stream's seal holds ~125 k series of a few
// samples each, so what a merge costs per series, not per sample, is
// what compaction costs there: alloc-B/series and allocs/series over the
// timed loop, ns/series its CPU. way=stream is the merge of segments with
// series tables (mergeStream), way=memory the same segments without their
// indexes, decoded whole (mergeInMemory).
func BenchmarkMergeMemory(b *testing.B) {
	for _, n := range []int{10_000, 125_000} {
		for _, per := range []int{1, 4} {
			for _, way := range []string{"stream", "memory"} {
				b.Run(fmt.Sprintf("series=%d/per=%d/way=%s", n, per, way), func(b *testing.B) {
					sh := sealShape{series: n, per: per, rounds: 2, epochs: 2, rowSeries: 2000}
					rows := sealRows(b, sh)
					// Each epoch ends with its close marker: split after the first.
					cut := 0
					for i, r := range rows {
						if h, err := ParseRowHeader(r.Data); err == nil && h.Close {
							cut = i + 1
							break
						}
					}
					if cut == 0 || cut == len(rows) {
						b.Fatalf("no epoch boundary in %d rows", len(rows))
					}
					enc := &Encoder{Opts: Options{MaxMergeBytes: 1 << 40}}
					var stored []archive.StoredSegment
					for seq, part := range [][]archive.Row{rows[:cut], rows[cut:]} {
						seg, err := enc.EncodeConsuming("samples/00", append([]archive.Row(nil), part...))
						if err != nil {
							b.Fatal(err)
						}
						st := archive.StoredSegment{Seq: int64(seq), Bytes: seg.Bytes,
							SegmentMeta: archive.SegmentMeta{Rows: seg.Rows, FirstTS: seg.FirstTS, LastTS: seg.LastTS}}
						if way == "stream" {
							st.Index = seg.Index
						}
						stored = append(stored, st)
					}
					merge := func() {
						seg, consumed, err := enc.Merge("samples/00", stored)
						if err != nil || consumed != 2 || seg.Rows != int64(len(rows)) {
							b.Fatalf("merged %d segment(s) into %v: %v", consumed, seg, err)
						}
					}
					merge() // warm: the encoder's spare buffers
					loopPerSeries(b, n, merge)
				})
			}
		}
	}
}
