package archive_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

// blobEncoder concatenates row payloads: segments as large as their rows.
type blobEncoder struct{}

func (blobEncoder) Encode(_ string, rows []archive.Row) (*archive.Segment, error) {
	var buf bytes.Buffer
	for _, r := range rows {
		buf.Write(r.Data)
	}
	return &archive.Segment{Bytes: buf.Bytes(), Rows: int64(len(rows)), FirstTS: rows[0].TS, LastTS: rows[len(rows)-1].TS}, nil
}
func (blobEncoder) Version() string { return "" }

func payload(n int, seed int) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// BenchmarkAppendMixed is the design's mixed workload: one source, 26
// streams, a 1,925-byte row per stream per tick, one commit per tick. It
// reports the sidecar bytes each tick writes and their ratio to the payload
// (the design measured 3.14x at 4096-byte pages): appends alone, and with
// staggered seals under the default policy (900-row segments of this
// incompressible payload) and their prunes.
func BenchmarkAppendMixed(b *testing.B) {
	for _, seals := range []bool{false, true} {
		b.Run(fmt.Sprintf("seals=%v", seals), func(b *testing.B) { benchAppendMixed(b, seals) })
	}
}

func benchAppendMixed(b *testing.B, seals bool) {
	const streams, rowBytes = 26, 1925
	ctx := at.Ctx(b)
	w := at.NewWriter(b, archive.WriterOptions{Encoder: blobEncoder{}, CheckpointInterval: archive.CheckpointInterval})
	src, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"source": "bench"}}, "")
	if err != nil {
		b.Fatal(err)
	}
	names := make([]string, streams)
	accounts := make([]*archive.SegmentAccount, streams)
	start := time.Now()
	for i := range names {
		names[i] = fmt.Sprintf("stream-%02d", i)
		accounts[i] = archive.OpenFirst(names[i], "source=bench", archive.SealPolicy{}, start)
	}
	rows := make([]archive.Row, streams)
	for i := range rows {
		rows[i] = archive.Row{Stream: names[i], Data: payload(rowBytes, i)}
	}
	before := w.Stats()
	b.ResetTimer()
	for tick := 0; tick < b.N; tick++ {
		for i := range rows {
			rows[i].TS = int64(tick + 1)
			accounts[i].AddRow(rowBytes, rows[i].TS)
		}
		r, err := w.AppendWait(ctx, []archive.SourceRows{{Source: src.ID(), Rows: rows}}, false)
		if err != nil || r.Dropped() != 0 {
			b.Fatalf("tick %d: %v (dropped %d)", tick, err, r.Dropped())
		}
		if !seals {
			continue
		}
		var due []string
		now := time.Now()
		for i, a := range accounts {
			if a.Due(now) {
				due = append(due, names[i])
				a.Rotate(archive.SealPolicy{}, now)
			}
		}
		if len(due) > 0 {
			if err := w.Seal(ctx, src.ID(), due); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := w.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	st := w.Stats()
	sidecar := float64(st.PagesWritten-before.PagesWritten) * (archive.PageSize + 24) / float64(b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ticks/s")
	b.ReportMetric(sidecar, "sidecar-B/tick")
	b.ReportMetric(sidecar/(streams*rowBytes), "x-payload")
	b.ReportMetric(float64(st.Seals-before.Seals), "seals")
}

// BenchmarkAppendWide: 20 sources, a 40 KiB row each per tick, one commit.
func BenchmarkAppendWide(b *testing.B) {
	const sources, rowBytes = 20, 40 << 10
	ctx := at.Ctx(b)
	w := at.NewWriter(b, archive.WriterOptions{Encoder: blobEncoder{}, CheckpointInterval: archive.CheckpointInterval})
	ticks := make([]archive.SourceRows, sources)
	for i := range ticks {
		src, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"source": fmt.Sprint(i)}}, "")
		if err != nil {
			b.Fatal(err)
		}
		ticks[i] = archive.SourceRows{Source: src.ID(), Rows: []archive.Row{{Stream: "wide", Data: payload(rowBytes, i)}}}
	}
	before := w.Stats()
	b.ResetTimer()
	for tick := 0; tick < b.N; tick++ {
		for i := range ticks {
			ticks[i].Rows[0].TS = int64(tick + 1)
		}
		if r, err := w.AppendWait(ctx, ticks, false); err != nil || r.Dropped() != 0 {
			b.Fatalf("tick %d: %v", tick, err)
		}
	}
	b.StopTimer()
	sidecar := float64(w.Stats().PagesWritten-before.PagesWritten) * (archive.PageSize + 24) / float64(b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ticks/s")
	b.ReportMetric(float64(b.N*sources*rowBytes)/b.Elapsed().Seconds()/1e6, "MB/s")
	b.ReportMetric(sidecar/(sources*rowBytes), "x-payload")
}

// BenchmarkSeal seals 900 rows of 1,925 bytes (the default row cap) per op.
func BenchmarkSeal(b *testing.B) {
	const rowsPerSeal, rowBytes = 900, 1925
	ctx := at.Ctx(b)
	w := at.NewWriter(b, archive.WriterOptions{Encoder: blobEncoder{}})
	src, err := w.AddSource(ctx, archive.SourceSpec{}, "")
	if err != nil {
		b.Fatal(err)
	}
	data := payload(rowBytes, 7)
	ts := int64(0)
	var sealNanos int64
	for i := 0; i < b.N; i++ {
		rows := make([]archive.Row, rowsPerSeal)
		for j := range rows {
			ts++
			rows[j] = archive.Row{Stream: "s", TS: ts, Data: data}
		}
		if _, err := w.AppendWait(ctx, []archive.SourceRows{{Source: src.ID(), Rows: rows}}, false); err != nil {
			b.Fatal(err)
		}
		begin := time.Now()
		if _, err := w.SealWait(ctx, src.ID(), []string{"s"}); err != nil {
			b.Fatal(err)
		}
		sealNanos += int64(time.Since(begin))
	}
	b.ReportMetric(float64(sealNanos)/float64(b.N)/1e6, "ms/seal")
	b.ReportMetric(float64(b.N*rowsPerSeal*rowBytes)/(float64(sealNanos)/1e9)/1e6, "MB/s")
}

// BenchmarkReadStream reads one stream of 10,000 rows of 1 KiB held in 1 or
// in 100 segments: query time tracks segment count.
func BenchmarkReadStream(b *testing.B) {
	for _, segs := range []int{1, 100} {
		b.Run(fmt.Sprintf("segments=%d", segs), func(b *testing.B) {
			const total, rowBytes = 10000, 1024
			ctx := at.Ctx(b)
			path := at.Path(b)
			w, err := archive.CreateWriter(path, archive.WriterOptions{Encoder: blobEncoder{}, CheckpointInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			src, _ := w.AddSource(ctx, archive.SourceSpec{}, "")
			per := total / segs
			for s := 0; s < segs; s++ {
				rows := make([]archive.Row, per)
				for j := range rows {
					rows[j] = archive.Row{Stream: "s", TS: int64(s*per + j + 1), Data: payload(rowBytes, j)}
				}
				w.AppendWait(ctx, []archive.SourceRows{{Source: src.ID(), Rows: rows}}, false)
				if _, err := w.SealWait(ctx, src.ID(), []string{"s"}); err != nil {
					b.Fatal(err)
				}
			}
			w.Close()
			a, err := archive.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var n int
				if err := a.View(ctx, func(tx *archive.ReadTx) error {
					got, err := tx.StreamSegments(src.ID(), "s", blobEncoder{})
					for _, g := range got {
						n += len(g)
					}
					return err
				}); err != nil || n != total*rowBytes {
					b.Fatalf("read %d bytes: %v", n, err)
				}
			}
			b.ReportMetric(float64(total*rowBytes)*float64(b.N)/b.Elapsed().Seconds()/1e6, "MB/s")
		})
	}
}

// BenchmarkPruneInterleaved is the receiver's seal round: 5 streams whose
// ~2 KB rows were appended interleaved (one row each per commit) are sealed
// one after another, each seal pruning its stream right after its commit,
// or (DeferPrunes) all pruned by one Prune at the end of the round. It
// reports the sidecar pages the round wrote per row: the seals' segments
// are the same both ways, so the difference is the prunes'.
func BenchmarkPruneInterleaved(b *testing.B) {
	for _, deferred := range []bool{false, true} {
		b.Run(fmt.Sprintf("deferred=%v", deferred), func(b *testing.B) {
			const streams, ticks, rowBytes = 5, 1200, 2000
			var pages, rows int64
			for range b.N {
				b.StopTimer()
				ctx := at.Ctx(b)
				w := at.NewWriter(b, archive.WriterOptions{Encoder: blobEncoder{}, DeferPrunes: deferred})
				src, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"source": "bench"}}, "")
				if err != nil {
					b.Fatal(err)
				}
				for t := range ticks {
					tick := make([]archive.Row, streams)
					for s := range tick {
						tick[s] = archive.Row{Stream: fmt.Sprintf("s%d", s), TS: int64(t + 1), Data: payload(rowBytes, t*streams+s)}
					}
					if _, err := w.AppendWait(ctx, []archive.SourceRows{{Source: src.ID(), Rows: tick}}, false); err != nil {
						b.Fatal(err)
					}
				}
				before := w.Stats().PagesWritten
				b.StartTimer()
				for s := range streams {
					if _, err := w.SealWait(ctx, src.ID(), []string{fmt.Sprintf("s%d", s)}); err != nil {
						b.Fatal(err)
					}
				}
				if err := w.Prune(ctx); err != nil {
					b.Fatal(err)
				}
				if err := w.Sync(ctx); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				st := w.Stats()
				if st.PrunedRows != streams*ticks {
					b.Fatalf("pruned %d rows, want %d", st.PrunedRows, streams*ticks)
				}
				pages += st.PagesWritten - before
				rows += st.PrunedRows
				w.Close()
			}
			b.ReportMetric(float64(pages)/float64(rows), "pages/row")
		})
	}
}
