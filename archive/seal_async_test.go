package archive_test

// The seal's encode runs off the writer goroutine: appends keep committing
// while a segment is being encoded, and whatever lands meanwhile must leave
// every row readable exactly once.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

// gatedTags is a Tags encoder whose first encode signals entered and then
// blocks until release is closed.
func gatedTags(t *testing.T) (enc archive.SegmentEncoder, entered <-chan struct{}, release func()) {
	in, rel := make(chan struct{}), make(chan struct{})
	var enterOnce, releaseOnce sync.Once
	release = func() { releaseOnce.Do(func() { close(rel) }) }
	// A failing test must not leave an encode blocked. Cleanups run after
	// the writer's close (registered later, run earlier), so tests also
	// defer release: deferred calls run before any cleanup.
	t.Cleanup(release)
	enc = at.EncoderFunc(func(stream string, rows []archive.Row) (*archive.Segment, error) {
		first := false
		enterOnce.Do(func() { first = true })
		if first {
			close(in)
			<-rel
		}
		return at.Tags{}.Encode(stream, rows)
	})
	return enc, in, release
}

// everyRow returns every ts the stream holds, reading each segment (Tags
// bytes) and the live wal in one snapshot.
func everyRow(t *testing.T, path string, src archive.SourceID, stream string) []int64 {
	t.Helper()
	var out []int64
	view(t, openRead(t, path), func(tx *archive.ReadTx) error {
		metas, err := tx.SegmentMetas(src, stream)
		if err != nil {
			return err
		}
		for _, m := range metas {
			b, ok, err := tx.SegmentBytes(src, stream, m.Seq)
			if err != nil || !ok {
				return fmt.Errorf("segment %d: ok=%v err=%v", m.Seq, ok, err)
			}
			for _, f := range strings.Split(string(b), ",") {
				v, err := strconv.ParseInt(f, 10, 64)
				if err != nil {
					return err
				}
				out = append(out, v)
			}
		}
		live, err := tx.LiveWAL(src, stream)
		out = append(out, tsOf(live)...)
		return err
	})
	return out
}

// exactlyOnce fails unless got holds every element of want once, no other.
func exactlyOnce(t *testing.T, got, want []int64) {
	t.Helper()
	got, want = slices.Clone(got), slices.Clone(want)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("rows read: %d, want %d exactly once; first differences: got %v want %v",
			len(got), len(want), head(got), head(want))
	}
}

func head(v []int64) []int64 { return v[:min(len(v), 10)] }

func TestAppendsCommitWhileASealEncodes(t *testing.T) {
	ctx := at.Ctx(t)
	enc, entered, release := gatedTags(t)
	w, s := newSource(t, archive.WriterOptions{Encoder: enc})
	defer release() // before the writer's close (a cleanup)
	appendWait(t, s, at.Rows("s", 1, 2, 3)...)
	sealed := make(chan []archive.Sealed, 1)
	go func() { out, _ := w.SealWait(ctx, s.ID(), []string{"s"}); sealed <- out }()
	<-entered
	// The encode is blocked: appends (stamped, as the receiver sends them)
	// must still commit.
	var want []int64
	want = append(want, 1, 2, 3)
	for i := 0; i < 5; i++ {
		r, err := w.AppendWait(ctx, []archive.SourceRows{{Source: s.ID(), Rows: at.Rows("s", 0)}}, true)
		must(t, err)
		eq(t, "committed while the seal encodes", r.Streams, []archive.StreamResult{{Source: s.ID(), Stream: "s", Committed: 1}})
	}
	select {
	case <-sealed:
		t.Fatal("the seal finished before its encode was released")
	default:
	}
	release()
	out := <-sealed
	if len(out) != 1 || out[0].Rows != 3 || out[0].FirstTS != 1 || out[0].LastTS != 3 {
		t.Fatalf("sealed %+v, want one segment of rows 1..3", out)
	}
	all := everyRow(t, w.Path(), s.ID(), "s")
	if len(all) != 8 {
		t.Fatalf("read %v, want 8 rows", all)
	}
	exactlyOnce(t, all[:3], want)
	eq(t, "live after the seal", len(liveTS(t, openRead(t, w.Path()), s.ID(), "s")), 5)
	must(t, w.Err())
}

// Appends from several goroutines race seals of the same streams; every
// acknowledged row is read exactly once (in a segment or live, never both,
// never neither).
func TestAppendsRacingBackgroundSealsAreReadExactlyOnce(t *testing.T) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{Now: func() time.Time { return time.Unix(0, 1) }})
	streams := []string{"a", "b", "c"}
	const senders, perSender = 4, 60
	var mu sync.Mutex
	acked := map[string][]int64{}
	var wg sync.WaitGroup
	for g := 0; g < senders; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < perSender; i++ {
				rows := at.Rows(streams[(g+i)%len(streams)], 0)
				r, err := w.AppendWait(ctx, []archive.SourceRows{{Source: s.ID(), Rows: rows}}, true)
				if err != nil || r.Dropped() != 0 {
					t.Errorf("append: %v %+v", err, r.Streams)
					return
				}
				mu.Lock()
				acked[rows[0].Stream] = append(acked[rows[0].Stream], rows[0].TS) // stamped in place
				mu.Unlock()
			}
		}(g)
	}
	stop := make(chan struct{})
	sealerDone := make(chan struct{})
	seals := 0
	go func() {
		defer close(sealerDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := w.SealWait(ctx, s.ID(), streams); err != nil {
				t.Errorf("seal: %v", err)
				return
			}
			seals++
		}
	}()
	wg.Wait()
	close(stop)
	<-sealerDone
	must(t, s.Sync(ctx))
	if seals == 0 || w.Stats().Seals == 0 {
		t.Fatalf("no seal ran during the appends (%d calls, %+v)", seals, w.Stats())
	}
	total := 0
	for _, st := range streams {
		exactlyOnce(t, everyRow(t, w.Path(), s.ID(), st), acked[st])
		total += len(acked[st])
	}
	eq(t, "rows acknowledged", total, senders*perSender)
	eq(t, "dropped out of order", s.DroppedOutOfOrder(), int64(0))
	must(t, w.Err())
}

// An eviction sent while a seal's encode is in flight is applied after the
// seal, as in message order: the rows it removes are gone (not resurrected
// by the segment), the rows it keeps are read exactly once.
func TestAnEvictionSentDuringAnEncodeLandsAfterTheSeal(t *testing.T) {
	ctx := at.Ctx(t)
	enc, entered, release := gatedTags(t)
	w, s := newSource(t, archive.WriterOptions{Encoder: enc})
	// Deferred calls run before cleanups: the writer's close (a cleanup)
	// must not wait on an encode a failed assertion left gated.
	defer release()
	appendWait(t, s, at.Rows("s", 10, 20, 30)...)
	appendWait(t, s, at.Rows("t", 10, 20, 30)...)
	sealed := make(chan error, 1)
	go func() { _, err := w.SealWait(ctx, s.ID(), []string{"s"}); sealed <- err }()
	<-entered
	// Appends go through while the encode runs. (Once the eviction below
	// is queued, messages behind it wait for the seal too: the writer
	// finishes the seal before it applies the eviction, in message order.)
	appendWait(t, s, at.Rows("s", 40)...)
	evicted := make(chan archive.Evicted, 1)
	go func() {
		ev, err := w.EvictBefore(ctx, s.ID(), 25)
		if err != nil {
			t.Errorf("EvictBefore: %v", err)
		}
		evicted <- ev
	}()
	select {
	case <-evicted:
		t.Fatal("the eviction was applied before the seal sent ahead of it")
	case <-time.After(50 * time.Millisecond):
	}
	release()
	must(t, <-sealed)
	ev := <-evicted
	// The segment [10, 30] straddles the cutoff and is kept whole; stream
	// t's live rows 10 and 20 are evicted.
	eq(t, "evicted", ev, archive.Evicted{Segments: 0, WALRows: 2, LiveRows: 2})
	exactlyOnce(t, everyRow(t, w.Path(), s.ID(), "s"), []int64{10, 20, 30, 40})
	exactlyOnce(t, everyRow(t, w.Path(), s.ID(), "t"), []int64{30})
	eq(t, "live s", liveTS(t, openRead(t, w.Path()), s.ID(), "s"), []int64{40})
	must(t, w.Err())
}

// An unstamped row at or below the rows being encoded is judged as if the
// seal had committed first (message order): dropped as out of order.
func TestALateUnstampedRowDuringAnEncodeIsJudgedAfterTheSeal(t *testing.T) {
	ctx := at.Ctx(t)
	enc, entered, release := gatedTags(t)
	w, s := newSource(t, archive.WriterOptions{Encoder: enc})
	defer release() // before the writer's close (a cleanup)
	appendWait(t, s, at.Rows("s", 10, 20, 30)...)
	must(t, s.Seal(ctx, "s"))
	<-entered
	done := make(chan archive.AppendResult, 1)
	go func() {
		r, err := w.AppendWait(ctx, []archive.SourceRows{{Source: s.ID(), Rows: at.Rows("s", 25, 50)}}, false)
		if err != nil {
			t.Errorf("AppendWait: %v", err)
		}
		done <- r
	}()
	release()
	r := <-done
	eq(t, "late row", r.Streams, []archive.StreamResult{{Source: s.ID(), Stream: "s", Committed: 1, Dropped: 1}})
	exactlyOnce(t, everyRow(t, w.Path(), s.ID(), "s"), []int64{10, 20, 30, 50})
	must(t, w.Err())
}

// A seal pulls its rows and its segment through the writer's page cache;
// the writer hands that memory back once the seal commits.
func TestASealReleasesTheWritersPageCache(t *testing.T) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{})
	payload := strings.Repeat("x", 3000) // a page each: the cache fills
	for i := 0; i < 400; i++ {
		rows := at.Rows("s", 0)
		rows[0].Data = []byte(fmt.Sprintf("%d%s", i, payload))
		_, err := w.AppendWait(ctx, []archive.SourceRows{{Source: s.ID(), Rows: rows}}, true)
		must(t, err)
	}
	before := w.Stats().CacheBytes
	if before < 400*3000 {
		t.Fatalf("writer cache holds %d bytes after 400 rows of 3 KB: the test does not fill it", before)
	}
	if _, err := w.SealWait(ctx, s.ID(), []string{"s"}); err != nil {
		t.Fatal(err)
	}
	if after := w.Stats().CacheBytes; after > before/4 {
		t.Fatalf("writer cache holds %d bytes after the seal, %d before: not released", after, before)
	}
	must(t, w.Err())
}

// consumingTags is Tags as a ConsumingEncoder: EncodeConsuming drops each
// row's Data, and counts its calls.
type consumingTags struct {
	at.Tags
	calls *atomic.Int64
}

func (c consumingTags) EncodeConsuming(stream string, rows []archive.Row) (*archive.Segment, error) {
	c.calls.Add(1)
	seg, err := c.Encode(stream, rows)
	for i := range rows {
		rows[i].Data = nil
	}
	return seg, err
}

// The writer's seal hands its rows to a ConsumingEncoder's EncodeConsuming,
// which may drop their Data while the writer reads their TS (appends racing
// the encode, under -race) and still records every row exactly once; the
// public Materialize never consumes its caller's rows.
// appendRacingSeals appends n stamped one-row ticks to stream "s" and sends
// a seal of it, not waited for, after every sealEvery-th: the appends race
// the encodes. It returns the acknowledged ts.
func appendRacingSeals(t *testing.T, w *archive.Writer, s *archive.Source, n, sealEvery int) []int64 {
	t.Helper()
	ctx := at.Ctx(t)
	var acked []int64
	for i := range n {
		rows := at.Rows("s", 0)
		r, err := w.AppendWait(ctx, []archive.SourceRows{{Source: s.ID(), Rows: rows}}, true)
		if err != nil || r.Dropped() != 0 {
			t.Fatalf("append %d: %v %+v", i, err, r.Streams)
		}
		acked = append(acked, rows[0].TS)
		if i%sealEvery == sealEvery-1 {
			must(t, w.Seal(ctx, s.ID(), []string{"s"}))
		}
	}
	return acked
}

func TestASealMayConsumeItsRows(t *testing.T) {
	ctx := at.Ctx(t)
	var calls atomic.Int64
	enc := consumingTags{calls: &calls}
	w, s := newSource(t, archive.WriterOptions{Encoder: enc, Now: func() time.Time { return time.Unix(0, 1) }})
	acked := appendRacingSeals(t, w, s, 200, 7)
	must(t, s.Sync(ctx))
	if calls.Load() == 0 {
		t.Fatal("the seal never called EncodeConsuming")
	}
	exactlyOnce(t, everyRow(t, w.Path(), s.ID(), "s"), acked)

	rows := at.Rows("s", 1, 2, 3)
	if _, err := archive.Materialize(enc, "s", rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Data == nil {
			t.Fatal("Materialize let the encoder consume its caller's rows")
		}
	}
	must(t, w.Err())
}
