package archive_test

// Reference-notes §8.12: tests/resume.rs.

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

func writerSessions(t *testing.T, s archive.SourceInfo) []map[string]any {
	t.Helper()
	var out []map[string]any
	if err := json.Unmarshal([]byte(s.Metadata[archive.MetadataKeyWriterSessions]), &out); err != nil {
		t.Fatalf("writer_sessions %q: %v", s.Metadata[archive.MetadataKeyWriterSessions], err)
	}
	return out
}

func events(t *testing.T, s archive.SourceInfo) []map[string]any {
	t.Helper()
	var doc struct {
		Events []map[string]any `json:"events"`
	}
	if raw := s.Metadata[archive.MetadataKeyEvents]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &doc); err != nil {
			t.Fatalf("events %q: %v", raw, err)
		}
	}
	return doc.Events
}

func openWriter(t *testing.T, path string) *archive.Writer {
	t.Helper()
	w, err := archive.OpenWriter(path, archive.WriterOptions{Encoder: at.Tags{}, CheckpointInterval: -1})
	if err != nil {
		t.Fatalf("OpenWriter: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func sourceInfo(t *testing.T, path string, id archive.SourceID) archive.SourceInfo {
	t.Helper()
	var s archive.SourceInfo
	view(t, openRead(t, path), func(tx *archive.ReadTx) error {
		var err error
		s, err = tx.Source(id)
		return err
	})
	return s
}

func TestRefASourceResumesAndContinuesItsSequence(t *testing.T) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{})
	path := w.Path()
	for _, ts := range []int64{1000, 2000} {
		must(t, s.Append(ctx, at.Rows("s", ts)...))
		sealWait(t, s, "s")
	}
	must(t, s.Finalize(ctx, 2000, 0))
	info := sourceInfo(t, path, s.ID())
	eq(t, "complete", info.Complete, true)
	eq(t, "sessions", len(writerSessions(t, info)), 1)
	eq(t, "seqs", seqsOf(t, openRead(t, path), s.ID(), "s"), []int64{0, 1})
	must(t, w.Close())

	w2 := openWriter(t, path)
	r, err := w2.ResumeSource(ctx, s.ID(), 10000)
	must(t, err)
	floor, ok := r.Floor()
	eq(t, "floor", []any{floor, ok}, []any{int64(2000), true})
	eq(t, "uuid", r.UUID(), s.UUID())
	info = sourceInfo(t, path, s.ID())
	eq(t, "complete after resume", info.Complete, false)
	sessions := writerSessions(t, info)
	if len(sessions) != 2 {
		t.Fatalf("sessions %v", sessions)
	}
	eq(t, "second anchor", sessions[1]["clock_anchor_wall_ns"], float64(10000))
	eq(t, "resumed_after_ts", sessions[1]["resumed_after_ts"], float64(2000))
	if sessions[0]["session"] == sessions[1]["session"] {
		t.Error("the resumed session reuses the first session's id")
	}
	ev := events(t, info)
	if len(ev) != 1 {
		t.Fatalf("events %v", ev)
	}
	eq(t, "event kind", ev[0]["kind"], "writer_session")
	eq(t, "event timestamp", ev[0]["timestamp"], float64(10000))
	if id, _ := ev[0]["id"].(string); id != "writer_session:"+sessions[1]["session"].(string) {
		t.Errorf("event id %q", id)
	}
	for _, ts := range []int64{11000, 12000} {
		must(t, r.Append(ctx, at.Rows("s", ts)...))
		sealWait(t, r, "s")
	}
	must(t, r.Finalize(ctx, 12000, 0))
	a := openRead(t, path)
	eq(t, "complete at the end", sourceInfo(t, path, s.ID()).Complete, true)
	eq(t, "seqs at the end", seqsOf(t, a, s.ID(), "s"), []int64{0, 1, 2, 3})
	view(t, a, func(tx *archive.ReadTx) error {
		n, err := tx.TotalRows(s.ID(), "s")
		eq(t, "total rows", n, int64(4))
		return err
	})
	have := map[int64]bool{}
	for _, o := range offsetsOf(t, a, s.ID()) {
		have[o.TS] = true
	}
	if !have[2000] || !have[12000] {
		t.Errorf("offsets %v lack 2000 or 12000", offsetsOf(t, a, s.ID()))
	}
}

func TestRefAResumedSourceRefusesToRunBackwards(t *testing.T) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{})
	path := w.Path()
	must(t, s.Append(ctx, at.Rows("s", 1000)...))
	sealWait(t, s, "s")
	must(t, s.Append(ctx, at.Rows("s", 5000)...))
	must(t, s.Finalize(ctx, 5000, 0))
	must(t, w.Close())
	before := sourceInfo(t, path, s.ID())

	w2 := openWriter(t, path)
	_, err := w2.ResumeSource(ctx, s.ID(), 5000)
	var tb *archive.TimelineBackwardsError
	if !asErr(err, &tb) {
		t.Fatalf("resume at 5000 = %v, want TimelineBackwards", err)
	}
	eq(t, "ts/floor", []int64{tb.TS, tb.Floor}, []int64{5000, 5000})
	eq(t, "nothing changed", sourceInfo(t, path, s.ID()), before)

	r, err := w2.ResumeSource(ctx, s.ID(), 6000)
	must(t, err)
	isErr(t, r.Append(ctx, at.Rows("s", 4000)...), archive.ErrTimelineBackwards)
	res, err := w2.AppendWait(ctx, []archive.SourceRows{{Source: r.ID(), Rows: at.Rows("s", 4500)}}, false)
	must(t, err)
	eq(t, "tick below the floor dropped", res.Dropped(), 1)
	must(t, r.Append(ctx, at.Rows("s", 6001)...))
	must(t, r.Sync(ctx))
	eq(t, "live", liveTS(t, openRead(t, path), s.ID(), "s"), []int64{5000, 6001})
	must(t, w2.Err())
}

func TestRefStampedAppendsOnAResumedSourceStayAboveTheFloor(t *testing.T) {
	ctx := at.Ctx(t)
	w, s := newSource(t, archive.WriterOptions{})
	path := w.Path()
	must(t, s.Append(ctx, at.Rows("s", 5000)...))
	must(t, s.Finalize(ctx, 5000, 0))
	must(t, w.Close())
	w2, err := archive.OpenWriter(path, archive.WriterOptions{Encoder: at.Tags{}, CheckpointInterval: -1,
		Now: func() time.Time { return time.Unix(0, 10) }}) // a clock far behind the floor
	must(t, err)
	defer w2.Close()
	r, err := w2.ResumeSource(ctx, s.ID(), 6000)
	must(t, err)
	res, err := w2.AppendWait(ctx, []archive.SourceRows{{Source: r.ID(), Rows: at.Rows("t", 0, 0)}}, true)
	must(t, err)
	eq(t, "committed", res.Streams, []archive.StreamResult{{Source: r.ID(), Stream: "t", Committed: 2}})
	must(t, w2.Sync(ctx))
	eq(t, "stamped", liveTS(t, openRead(t, path), s.ID(), "t"), []int64{5001, 5002})
}

func TestRefResumeRefusesASourceThatIsNotThereAndStaysUsable(t *testing.T) {
	ctx := at.Ctx(t)
	w := at.NewWriter(t, archive.WriterOptions{})
	_, err := w.ResumeSource(ctx, 999, 1)
	if err == nil || !strings.Contains(err.Error(), "no source with id 999") {
		t.Errorf("resume 999 = %v", err)
	}
	isErr(t, err, archive.ErrNoSource)
	_, err = w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"h": "1"}}, "")
	must(t, err)
	must(t, w.Err())
}
