package archive_test

// Reference-notes §8.11: tests/writer_policy.rs (adopt_segment cases are
// the lead's).

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

func TestRefASourcesCollidingTickIsDroppedWithoutTakingTheArchiveDown(t *testing.T) {
	ctx := at.Ctx(t)
	w := at.NewWriter(t, archive.WriterOptions{})
	a, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"source": "A"}}, "")
	must(t, err)
	b, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"source": "B"}}, "")
	must(t, err)
	ticks := [][2][]int64{
		{{1000}, {1000}},
		{{1000}, {2000}}, // A repeats ts 1000
		{{3000}, {3000}},
	}
	for i, tk := range ticks {
		r, err := w.AppendWait(ctx, []archive.SourceRows{
			{Source: a.ID(), Rows: at.Rows("s", tk[0]...)},
			{Source: b.ID(), Rows: at.Rows("s", tk[1]...)},
		}, false)
		must(t, err)
		if i == 1 {
			if len(r.Streams) != 2 || r.Streams[0].Dropped != 1 || r.Streams[0].Committed != 0 || !archive.IsConstraint(r.Streams[0].Err) ||
				r.Streams[1].Committed != 1 || r.Streams[1].Dropped != 0 {
				t.Errorf("tick 2 result %+v: want A dropped with a constraint error, B committed", r.Streams)
			}
		} else if r.Dropped() != 0 {
			t.Errorf("tick %d dropped %d rows", i+1, r.Dropped())
		}
	}
	must(t, w.Err())
	ra := openRead(t, w.Path())
	eq(t, "A", liveTS(t, ra, a.ID(), "s"), []int64{1000, 3000})
	eq(t, "B", liveTS(t, ra, b.ID(), "s"), []int64{1000, 2000, 3000})
}

func TestRefABusyDatabaseIsRetriedRatherThanFatal(t *testing.T) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{BusyTimeout: 20 * time.Millisecond})
	db := rawDB(t, w.Path())
	conn, err := db.Conn(ctx)
	must(t, err)
	defer conn.Close()
	hold := func() <-chan struct{} {
		mustExec(t, conn, "BEGIN IMMEDIATE")
		released := make(chan struct{})
		time.AfterFunc(150*time.Millisecond, func() {
			conn.ExecContext(ctx, "COMMIT")
			close(released)
		})
		return released
	}
	released := hold()
	must(t, s.Append(ctx, at.Rows("s", 1)...))
	must(t, s.Sync(ctx))
	<-released
	released = hold()
	must(t, s.Seal(ctx, "s"))
	must(t, s.Sync(ctx))
	<-released
	must(t, w.Err())
	if st := w.Stats(); st.Retries == 0 {
		t.Error("the held lock caused no retry (the test did not exercise BUSY)")
	}
	a := openRead(t, w.Path())
	eq(t, "seqs", seqsOf(t, a, s.ID(), "s"), []int64{0})
	eq(t, "live", liveTS(t, a, s.ID(), "s"), []int64{})
	eq(t, "read", at.ReadStrings(t, w.Path(), at.Tags{}), [][]string{{"1"}})
}

func TestRefAnEncoderPanicIsTheEncodersErrorNotWriterGone(t *testing.T) {
	ctx := at.Ctx(t)
	enc := at.EncoderFunc(func(string, []archive.Row) (*archive.Segment, error) { panic("cannot count to 1") })
	w, s := newSource(t, archive.WriterOptions{Encoder: enc})
	must(t, s.Append(ctx, at.Rows("s", 1)...))
	must(t, s.Seal(ctx, "s"))
	err := s.Sync(ctx)
	var ee *archive.EncoderError
	if !errors.As(err, &ee) {
		t.Fatalf("Sync = %v, want an EncoderError", err)
	}
	eq(t, "stream", ee.Stream, "s")
	if !strings.Contains(err.Error(), "cannot count to 1") {
		t.Errorf("error %q does not carry the panic", err)
	}
	isErr(t, err, archive.ErrWriterStopped)
	if errors.Is(err, archive.ErrClosed) {
		t.Errorf("error %v reads as a closed writer", err)
	}
	// Every later call reports the same failure.
	isErr(t, s.Append(ctx, at.Rows("s", 2)...), archive.ErrEncoder)
	eq(t, "wal", walTS(t, openRead(t, w.Path()), s.ID(), "s"), []int64{1})
}

func TestRefASourceCanCarryAnIdentityMintedElsewhere(t *testing.T) {
	ctx := at.Ctx(t)
	w := at.NewWriter(t, archive.WriterOptions{})
	const given = "0b7f7c1e-2a3d-4e5f-8a9b-0c1d2e3f4a5b"
	s, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"h": "1"}}, given)
	must(t, err)
	eq(t, "given uuid", s.UUID(), given)
	m, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"h": "2"}}, "")
	must(t, err)
	if len(m.UUID()) != 36 || !uuidV4.MatchString(m.UUID()) {
		t.Errorf("minted uuid %q", m.UUID())
	}
	must(t, w.Sync(ctx))
	srcs := sourcesOf(t, openRead(t, w.Path()))
	eq(t, "stored uuids", []string{srcs[0].UUID, srcs[1].UUID}, []string{given, m.UUID()})
}

func TestRefAddSourceRecordsTheFirstWriterSession(t *testing.T) {
	ctx := at.Ctx(t)
	w := at.NewWriter(t, archive.WriterOptions{Encoder: at.Tags{Ver: "v1"}})
	s, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"h": "1"}, Metadata: map[string]string{"seed": "x"}, ClockAnchorWallNS: 42}, "")
	must(t, err)
	must(t, w.Sync(ctx))
	info := sourcesOf(t, openRead(t, w.Path()))[0]
	eq(t, "seed", info.Metadata["seed"], "x")
	eq(t, "encoder", info.Metadata["encoder"], "v1")
	sessions := writerSessions(t, info)
	if len(sessions) != 1 {
		t.Fatalf("sessions %v", sessions)
	}
	eq(t, "anchor", sessions[0]["clock_anchor_wall_ns"], float64(42))
	if _, ok := sessions[0]["resumed_after_ts"]; ok {
		t.Error("a first session carries resumed_after_ts")
	}
	_ = s
}
