package archive_test

// A bounded seal (WriterOptions.MaxSealRows, MaxSealBytes) takes a stream's
// oldest live rows and leaves the rest live above the new watermark; the
// writer tells EncodeOn whether the stream is falling behind.

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

// behindLog is an EncodeOn that records each seal's behind flag and runs
// the encode on a goroutine of its own, as a caller's thread would.
type behindLog struct {
	mu  sync.Mutex
	got []bool
}

func (b *behindLog) encodeOn(behind bool, encode func()) {
	b.mu.Lock()
	b.got = append(b.got, behind)
	b.mu.Unlock()
	go encode()
}

func (b *behindLog) flags() []bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.got)
}

func TestABoundedSealTakesTheOldestRows(t *testing.T) {
	ts := func(from, to int64) []int64 {
		var out []int64
		for v := from; v <= to; v++ {
			out = append(out, v)
		}
		return out
	}
	// Rows 10..19: each row's data is its ts in decimal, 2 bytes.
	cases := []struct {
		name     string
		rows     int
		bytes    int64
		segments [][]int64 // what each successive seal takes
		behind   []bool    // EncodeOn's flag for each seal
	}{
		{"rows", 3, 0, [][]int64{ts(10, 12), ts(13, 15), ts(16, 18), {19}},
			[]bool{true, false, false, false}}, // 7 left >= 2x3; then 4, 1, 0
		{"bytes", 0, 5, [][]int64{ts(10, 11), ts(12, 13), ts(14, 15), ts(16, 17), ts(18, 19)},
			[]bool{false, false, false, false, false}}, // behind counts rows: off without MaxSealRows
		{"bytes below one row: one row a seal", 0, 1, [][]int64{{10}, {11}, {12}, {13}, {14}, {15}, {16}, {17}, {18}, {19}},
			slices.Repeat([]bool{false}, 10)},
		{"rows and bytes: the first bound reached", 4, 5, [][]int64{ts(10, 11), ts(12, 13), ts(14, 15), ts(16, 17), ts(18, 19)},
			[]bool{true, false, false, false, false}}, // 8 left >= 2x4; then 6, 4, 2, 0
		{"unbounded", 0, 0, [][]int64{ts(10, 19)}, []bool{false}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := at.Ctx(t)
			var log behindLog
			w, s := newSource(t, archive.WriterOptions{MaxSealRows: c.rows, MaxSealBytes: c.bytes, EncodeOn: log.encodeOn})
			appendWait(t, s, at.Rows("s", ts(10, 19)...)...)
			for i, want := range c.segments {
				out, err := w.SealWait(ctx, s.ID(), []string{"s"})
				must(t, err)
				if len(out) != 1 || out[0].Rows != int64(len(want)) || out[0].FirstTS != want[0] || out[0].LastTS != want[len(want)-1] {
					t.Fatalf("seal %d: %+v, want rows %v", i, out, want)
				}
				if live, want := liveTS(t, openRead(t, w.Path()), s.ID(), "s"), ts(want[len(want)-1]+1, 19); !slices.Equal(live, want) {
					t.Fatalf("seal %d: live after it %v, want %v", i, live, want)
				}
			}
			out, err := w.SealWait(ctx, s.ID(), []string{"s"})
			must(t, err)
			eq(t, "a seal with nothing live", len(out), 0)
			eq(t, "EncodeOn's behind flags", log.flags(), c.behind)
			eq(t, "Stats().SealsBehind", w.Stats().SealsBehind, int64(len(slices.DeleteFunc(slices.Clone(c.behind), func(b bool) bool { return !b }))))
			exactlyOnce(t, everyRow(t, w.Path(), s.ID(), "s"), ts(10, 19))
			must(t, w.Err())
		})
	}
}

// Bounded seals racing stamped appends, the encode on the caller's
// goroutine: every acknowledged row is read exactly once, and the rows a
// seal leaves stay live until a later seal takes them.
func TestBoundedSealsRacingAppendsReadEveryRowOnce(t *testing.T) {
	ctx := at.Ctx(t)
	var log behindLog
	w, s := newSource(t, archive.WriterOptions{MaxSealRows: 5, EncodeOn: log.encodeOn,
		Now: func() time.Time { return time.Unix(0, 1) }})
	acked := appendRacingSeals(t, w, s, 300, 13)
	must(t, s.Sync(ctx))
	exactlyOnce(t, everyRow(t, w.Path(), s.ID(), "s"), acked)
	// 23 seals of at most 5 rows each took 115 rows at most: the rest are
	// live, the newest ones.
	live := liveTS(t, openRead(t, w.Path()), s.ID(), "s")
	if len(live) < 300-23*5 || !slices.Equal(live, acked[300-len(live):]) {
		t.Fatalf("%d rows live, want at least %d, the newest", len(live), 300-23*5)
	}
	if !slices.Contains(log.flags(), true) {
		t.Fatal("no seal ran behind, with at most 5 of every 13 rows sealed")
	}
	must(t, w.Err())
}
