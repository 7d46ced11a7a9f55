package promread

import (
	"context"
	"slices"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// segmentLists keep the newest epoch's lists only, and no more segments
// than maxListedSegments.
func TestSegmentListsKeepTheNewestEpoch(t *testing.T) {
	a, b := streamRef{1, "a"}, streamRef{1, "b"}
	list := func(n int) []archive.StreamSegment { return make([]archive.StreamSegment, n) }
	var l segmentLists
	l.put(5, a, list(2))
	for _, c := range []struct {
		name  string
		do    func()
		epoch uint64
		k     streamRef
		want  int // length of the list got; -1: none
	}{
		{"kept", func() {}, 5, a, 2},
		{"not another epoch's", func() {}, 4, a, -1},
		{"an older epoch's is not kept", func() { l.put(4, b, list(1)) }, 4, b, -1},
		{"nor does it drop the newer", func() {}, 5, a, 2},
		{"a second stream of the epoch", func() { l.put(5, b, list(3)) }, 5, b, 3},
		{"a newer epoch drops the older", func() { l.put(6, b, list(1)) }, 5, a, -1},
		{"and is kept", func() {}, 6, b, 1},
		{"not past the bound", func() { l.put(6, a, list(maxListedSegments)) }, 6, a, -1},
	} {
		c.do()
		got, ok := l.get(c.epoch, c.k)
		if n := len(got); !ok && c.want != -1 || ok && n != c.want {
			t.Errorf("%s: get(%d, %v) = %d segments, %v; want %d", c.name, c.epoch, c.k, n, ok, c.want)
		}
	}
}

// Under ingest every commit is a new snapshot version, but not a new
// segments epoch: a question after commits of wal rows only takes its
// segment lists from the store's lists, and sees the rows all the same;
// one after a seal reads them again and sees the new segment.
func TestSegmentListsServeLaterVersions(t *testing.T) {
	f := newFixture(t)
	q, err := NewQueryable(f.a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := ls("__name__", "m", "k", "a")
	write := func(ts int64) {
		f.write("s", promsample.Batch{Series: []promsample.Series{{Labels: l, Samples: []promsample.Sample{{T: ts, V: float64(ts)}}}}})
	}
	count := func() int { t.Helper(); return floatsNamed(t, q, "m") }
	// listed returns the snapshot's segments epoch and how many segments
	// the store's lists hold for it.
	listed := func() (uint64, int) {
		t.Helper()
		var e uint64
		if err := f.a.View(context.Background(), func(tx *archive.ReadTx) error {
			var ok bool
			if e, ok = tx.SegmentsEpoch(); !ok {
				t.Fatal("a quiet archive's snapshot claims no segments epoch")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		q.s.lists.mu.Lock()
		defer q.s.lists.mu.Unlock()
		if q.s.lists.epoch != e {
			return e, -1
		}
		n := 0
		for _, ms := range q.s.lists.lists {
			n += len(ms)
		}
		return e, n
	}

	write(1000)
	f.seal("s")
	if n := count(); n != 1 {
		t.Fatalf("after a seal: %d samples, want 1", n)
	}
	e1, n1 := listed()
	if n1 != 1 {
		t.Fatalf("after a question: the lists hold %d segments for epoch %d, want 1", n1, e1)
	}
	shared, _ := q.s.lists.get(e1, streamRef{f.source("s"), promsample.StreamFor("m", testBuckets)})

	write(2000)
	write(3000)
	if n := count(); n != 3 {
		t.Fatalf("after wal rows: %d samples, want 3", n)
	}
	if e, n := listed(); e != e1 || n != 1 {
		t.Fatalf("after wal rows: epoch %d holding %d segments; want epoch %d still, holding 1", e, n, e1)
	}
	// The question's catalog took the kept list, not a new read of it.
	if err := f.a.View(context.Background(), func(tx *archive.ReadTx) error {
		c, err := q.s.catalogFor(tx)
		if err != nil {
			return err
		}
		got, err := c.segments(f.source("s"), promsample.StreamFor("m", testBuckets))
		if err != nil {
			return err
		}
		if len(got) != 1 || len(shared) != 1 || &got[0] != &shared[0] {
			t.Errorf("a later snapshot of the epoch read its list again (%v) instead of taking the kept one (%v)", got, shared)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	f.seal("s")
	if n := count(); n != 3 {
		t.Fatalf("after a second seal: %d samples, want 3", n)
	}
	e2, n2 := listed()
	if e2 <= e1 || n2 != 2 {
		t.Fatalf("after a second seal: epoch %d holding %d segments; want one after %d, holding 2", e2, n2, e1)
	}
}

// A source's whole list, once kept, serves its streams' questions in
// the same epoch (Warm lists whole sources, so a restart's first
// question about one metric lists nothing).
func TestSegmentListsServeAStreamFromItsSource(t *testing.T) {
	f := newFixture(t)
	q, err := NewQueryable(f.a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"m", "n", "o"} {
		f.write("s", promsample.Batch{Series: []promsample.Series{{Labels: ls("__name__", name), Samples: []promsample.Sample{{T: int64(1000 * (i + 1)), V: 1}}}}})
	}
	f.seal("s")
	src := f.source("s")
	var whole []archive.StreamSegment
	view := func(fn func(c *catalog) error) {
		t.Helper()
		if err := f.a.View(context.Background(), func(tx *archive.ReadTx) error {
			c, err := q.s.catalogFor(tx)
			if err != nil {
				return err
			}
			return fn(c)
		}); err != nil {
			t.Fatal(err)
		}
	}
	view(func(c *catalog) (err error) { whole, err = c.segments(src, ""); return err })
	if len(whole) < 2 {
		t.Fatalf("the source lists %d segments; the test wants several streams", len(whole))
	}
	f.write("s", promsample.Batch{Series: []promsample.Series{{Labels: ls("__name__", "m"), Samples: []promsample.Sample{{T: 9000, V: 1}}}}})
	for _, name := range []string{"m", "n", "o"} {
		stream := promsample.StreamFor(name, testBuckets)
		view(func(c *catalog) error {
			got, err := c.segments(src, stream)
			if err != nil {
				return err
			}
			i := slices.IndexFunc(whole, func(m archive.StreamSegment) bool { return m.Stream == stream })
			if len(got) == 0 || i < 0 || &got[0] != &whole[i] || cap(got) != len(got) {
				t.Errorf("stream %s: %v is not the run of the kept source list %v, capacity cut", stream, got, whole)
			}
			for _, m := range got {
				if m.Stream != stream {
					t.Errorf("stream %s: the run holds %s's segment", stream, m.Stream)
				}
			}
			return nil
		})
	}
}
