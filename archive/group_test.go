package archive_test

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

// TestGroupCommitKeepsEachAppendWhole queues appends while the writer is
// busy, so they are committed as one group, and checks that every append is
// answered for itself: each committed whole, and the one that violates the
// wal primary key dropped alone, without costing the others anything.
func TestGroupCommitKeepsEachAppendWhole(t *testing.T) {
	t.Run("every append valid: one shared transaction", func(t *testing.T) { testGroupCommit(t, false) })
	t.Run("one duplicate: each append committed on its own", func(t *testing.T) { testGroupCommit(t, true) })
}

func testGroupCommit(t *testing.T, withDup bool) {
	ctx := at.Ctx(t)
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock) // a failing test must not leave the writer blocked
	var armed atomic.Bool
	var blockOnce sync.Once
	entered := make(chan struct{})
	// Once armed, the writer's next transaction blocks just before its
	// commit: the writer goroutine is busy while appends queue.
	opts := archive.WriterOptions{}
	archive.SetFaultForTest(&opts, func(*archive.WriteTx) error {
		if armed.Load() {
			blockOnce.Do(func() { close(entered); <-release })
		}
		return nil
	})
	w := at.NewWriter(t, opts)
	src, err := w.AddSource(ctx, archive.SourceSpec{}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AppendWait(ctx, []archive.SourceRows{{Source: src.ID(), Rows: at.Rows("dup", 5)}}, false); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	blocked := make(chan error, 1)
	go func() {
		_, err := w.AppendWait(ctx, []archive.SourceRows{{Source: src.ID(), Rows: at.Rows("blocker", 1)}}, false)
		blocked <- err
	}()
	<-entered // the writer is busy from here until release

	const senders = 16
	results := make([]archive.AppendResult, senders)
	errs := make([]error, senders)
	var wg sync.WaitGroup
	for i := 0; i < senders; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rows := at.Rows(fmt.Sprintf("s%02d", i), 1, 2, 3)
			if withDup && i == 7 {
				rows = at.Rows("dup", 5) // already committed: a constraint violation
			}
			results[i], errs[i] = w.AppendWait(ctx, []archive.SourceRows{{Source: src.ID(), Rows: rows}}, false)
		}(i)
	}
	// Release the writer only once the senders wait on its channel:
	// one in its slot, the rest parked in a send.
	for deadline := time.Now().Add(10 * time.Second); parkedSenders() < senders-1; {
		if time.Now().After(deadline) {
			t.Fatalf("only %d senders reached the writer's channel", parkedSenders())
		}
		runtime.Gosched()
	}
	unblock()
	wg.Wait()
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	for i := 0; i < senders; i++ {
		if errs[i] != nil {
			t.Fatalf("sender %d: %v", i, errs[i])
		}
		r := results[i]
		if withDup && i == 7 {
			if r.Dropped() != 1 || !archive.IsConstraint(r.Err()) {
				t.Errorf("the duplicate append: %+v; want 1 dropped with a constraint error", r.Streams)
			}
			continue
		}
		if len(r.Streams) != 1 || r.Streams[0].Committed != 3 || r.Dropped() != 0 {
			t.Errorf("sender %d: %+v; want 3 committed, none dropped", i, r.Streams)
		}
	}
	a, err := archive.Open(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.View(ctx, func(tx *archive.ReadTx) error {
		for i := 0; i < senders; i++ {
			if withDup && i == 7 {
				continue
			}
			live, err := tx.LiveWAL(src.ID(), fmt.Sprintf("s%02d", i))
			if err != nil {
				return err
			}
			if len(live) != 3 {
				t.Errorf("stream s%02d holds %d rows, want 3", i, len(live))
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	switch {
	case !withDup && st.GroupedCommits == 0:
		t.Fatalf("the queued appends were not committed as a group: %+v", st)
	case withDup && st.GroupFallbacks == 0:
		t.Fatalf("the group holding a duplicate did not fall back to per-append commits: %+v", st)
	}
}

// parkedSenders counts goroutines waiting in the writer's hand-off (a
// select on its channel).
func parkedSenders() int {
	buf := make([]byte, 4<<20)
	n := runtime.Stack(buf, true)
	parked := 0
	for _, g := range strings.Split(string(buf[:n]), "\n\n") {
		if strings.Contains(g, "[select") && strings.Contains(g, "archive.(*Writer).send(") {
			parked++
		}
	}
	return parked
}

// A commit with nothing more queued waits up to GroupWait while Coming
// says appends are on their way, and takes the one that arrives along; it
// does not wait when Coming says none are, and never longer than
// GroupWait.
func TestAGroupCommitWaitsForAppendsOnTheirWay(t *testing.T) {
	const wait = 2 * time.Second
	appendOne := func(w *archive.Writer, src archive.SourceID, ts int64) (time.Duration, error) {
		start := time.Now()
		_, err := w.AppendWait(at.Ctx(t), []archive.SourceRows{{Source: src, Rows: at.Rows("s", ts)}}, false)
		return time.Since(start), err
	}
	newWriter := func(coming func() int, wait time.Duration) (*archive.Writer, archive.SourceID) {
		w := at.NewWriter(t, archive.WriterOptions{Coming: coming, GroupWait: wait})
		src, err := w.AddSource(at.Ctx(t), archive.SourceSpec{}, "")
		if err != nil {
			t.Fatal(err)
		}
		return w, src.ID()
	}

	t.Run("one on its way is taken along", func(t *testing.T) {
		var coming atomic.Int64
		coming.Store(1)
		w, src := newWriter(func() int { return int(coming.Load()) }, wait)
		first := make(chan error, 1)
		go func() { _, err := appendOne(w, src, 1); first <- err }()
		time.Sleep(100 * time.Millisecond) // the first is waiting for it
		coming.Store(0)
		if _, err := appendOne(w, src, 2); err != nil {
			t.Fatal(err)
		}
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if st := w.Stats(); st.Commits != 2 || st.GroupedCommits != 1 {
			t.Errorf("%d appends in %d grouped transactions; want 2 appends in 1", st.Commits, st.GroupedCommits)
		}
	})
	t.Run("none on its way: no wait", func(t *testing.T) {
		w, src := newWriter(func() int { return 0 }, wait)
		if d, err := appendOne(w, src, 1); err != nil || d >= wait/2 {
			t.Errorf("append took %v (%v); it had nothing to wait for", d, err)
		}
	})
	t.Run("one that never comes: at most GroupWait", func(t *testing.T) {
		const wait = 300 * time.Millisecond
		w, src := newWriter(func() int { return 1 }, wait)
		d, err := appendOne(w, src, 1)
		if err != nil || d < wait || d > wait+time.Second {
			t.Errorf("append took %v (%v); want GroupWait (%v)", d, err, wait)
		}
		if d, err := appendOne(w, src, 2); err != nil || d > wait+time.Second {
			t.Errorf("the next append took %v (%v)", d, err)
		}
	})
}

// An append queued with AppendQueued takes its place before every message
// sent after it: a stamped append sent later commits with a higher ts.
func TestAppendQueuedOrdersBeforeLaterMessages(t *testing.T) {
	w, src := newSource(t, archive.WriterOptions{Encoder: at.Tags{}})
	ctx := at.Ctx(t)
	row := func(data string) []archive.SourceRows {
		return []archive.SourceRows{{Source: src.ID(), Rows: []archive.Row{{Stream: "s", Data: []byte(data)}}}}
	}
	for i := range 20 {
		q, err := w.AppendQueued(ctx, row(fmt.Sprint("queued ", i)), true)
		must(t, err)
		if _, err := w.AppendWait(ctx, row(fmt.Sprint("later ", i)), true); err != nil {
			t.Fatal(err)
		}
		if res, err := q.Wait(ctx); err != nil || res.Dropped() != 0 {
			t.Fatalf("queued append: %+v %v", res, err)
		}
	}
	a := openRead(t, w.Path())
	view(t, a, func(tx *archive.ReadTx) error {
		rows, err := tx.LiveWAL(src.ID(), "s")
		if err != nil {
			return err
		}
		if len(rows) != 40 {
			t.Fatalf("%d rows, want 40", len(rows))
		}
		for i := range 20 {
			if got, want := string(rows[2*i].Data), fmt.Sprint("queued ", i); got != want {
				t.Fatalf("row %d is %q, want %q", 2*i, got, want)
			}
		}
		return nil
	})
}
