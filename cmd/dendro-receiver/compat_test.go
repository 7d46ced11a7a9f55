package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// writeOldArchive writes an archive the way dendro-receiver did before
// anchored rows and the series table (b4fef0d): a source "default" with
// 8 streams, self-contained format-1 rows (one per request and stream),
// segments with a format-1 catalog index and no page index; some sealed,
// some rows left live. It returns every series written.
func writeOldArchive(t *testing.T, path string, base int64) map[string]promsample.Series {
	t.Helper()
	ctx := context.Background()
	w, err := archive.CreateWriter(path, archive.WriterOptions{Encoder: &promsample.Encoder{Opts: promsample.Options{FormatV1: true}}, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	src, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"source": "default"},
		Metadata: map[string]string{"stream_buckets": "8"}, ClockAnchorWallNS: time.Now().UnixNano()}, "")
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]promsample.Series{}
	for r := 0; r < 30; r++ {
		var b promsample.Batch
		for i := 0; i < 40; i++ {
			ls := labels.FromStrings("__name__", fmt.Sprintf("old_metric_%d", i%5), "i", fmt.Sprint(i))
			smp := promsample.Sample{T: base + int64(r)*15000, V: crashSample(0, r, i, 0)}
			b.Series = append(b.Series, promsample.Series{Labels: ls, Samples: []promsample.Sample{smp}})
			s := all[ls.String()]
			s.Labels = ls
			s.Samples = append(s.Samples, smp)
			all[ls.String()] = s
		}
		appendBatch(t, w, src.ID(), &b)
		if r == 19 { // seal two thirds, leave the rest live
			if _, err := w.SealWait(ctx, src.ID(), promsample.StreamsFor(8)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Finalize(ctx, src.ID(), time.Now().UnixNano(), 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return all
}

// appendBatch commits b to src as format-1 rows, one a stream of eight,
// stamped with the writer's clock.
func appendBatch(t *testing.T, w *archive.Writer, src archive.SourceID, b *promsample.Batch) {
	t.Helper()
	var rows []archive.Row
	for _, p := range promsample.SplitBatch(b, 8) {
		data, err := promsample.EncodeBatch(&p.Batch)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, archive.Row{Stream: p.Stream, Data: data})
	}
	if _, err := w.AppendWait(context.Background(), []archive.SourceRows{{Source: src, Rows: rows}}, true); err != nil {
		t.Fatal(err)
	}
}

// remoteRead asks the server at addr for every series matching ms.
func remoteRead(t *testing.T, addr string, mint, maxt int64, ms ...*prompb.LabelMatcher) map[string]promsample.Series {
	t.Helper()
	code, body := rawRemoteRead(t, addr, mint, maxt, ms...)
	if code != http.StatusOK {
		t.Fatalf("remote-read: %d: %s", code, body)
	}
	dec, err := snappy.Decode(nil, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	var rr prompb.ReadResponse
	if err := rr.Unmarshal(dec); err != nil {
		t.Fatal(err)
	}
	out := map[string]promsample.Series{}
	for _, ts := range rr.Results[0].Timeseries {
		b := labels.NewScratchBuilder(len(ts.Labels))
		for _, l := range ts.Labels {
			b.Add(l.Name, l.Value)
		}
		b.Sort()
		s := promsample.Series{Labels: b.Labels()}
		for _, x := range ts.Samples {
			s.Samples = append(s.Samples, promsample.Sample{T: x.Timestamp, V: x.Value})
		}
		out[s.Labels.String()] = s
	}
	return out
}

func sameSeries(t *testing.T, what string, got, want map[string]promsample.Series) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d series, want %d", what, len(got), len(want))
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Fatalf("%s: %s missing", what, k)
		}
		if !slices.EqualFunc(g.Samples, w.Samples, func(a, b promsample.Sample) bool {
			return a.T == b.T && math.Float64bits(a.V) == math.Float64bits(b.V)
		}) {
			t.Fatalf("%s: %s has %d samples, want %d (or other bits)", what, k, len(g.Samples), len(w.Samples))
		}
	}
}

// TestOpensAnArchiveOfThePreviousEncoding: an archive written with
// format-1 rows and segments is read back exactly, takes new samples in
// anchored rows beside the old ones, seals them, and reads back exactly
// again after a restart.
func TestOpensAnArchiveOfThePreviousEncoding(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	path := filepath.Join(t.TempDir(), "old.db")
	base := time.Now().Add(-time.Hour).UnixMilli()
	want := writeOldArchive(t, path, base)
	bin := buildBinary(t)
	addr := freePort(t)
	srv := startServer(t, bin, addr, path)
	all := &prompb.LabelMatcher{Type: prompb.LabelMatcher_RE, Name: "__name__", Value: ".+"}
	sameSeries(t, "old archive", remoteRead(t, addr, base-1, base+3600_000, all), want)

	// New samples, for the old series and for new ones.
	var wr prompb.WriteRequest
	for i := 0; i < 60; i++ {
		name := fmt.Sprintf("old_metric_%d", i%5)
		if i >= 40 {
			name = "new_metric"
		}
		ls := labels.FromStrings("__name__", name, "i", fmt.Sprint(i))
		ts := prompb.TimeSeries{Labels: []prompb.Label{{Name: "__name__", Value: name}, {Name: "i", Value: fmt.Sprint(i)}}}
		for r := 30; r < 34; r++ {
			smp := promsample.Sample{T: base + int64(r)*15000, V: crashSample(1, r, i, 0)}
			ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: smp.T, Value: smp.V})
			s := want[ls.String()]
			s.Labels = ls
			s.Samples = append(s.Samples, smp)
			want[ls.String()] = s
		}
		wr.Timeseries = append(wr.Timeseries, ts)
	}
	raw, _ := wr.Marshal()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/v1/write", bytes.NewReader(snappy.Encode(nil, raw)))
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "snappy")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("write: %s", resp.Status)
	}
	sameSeries(t, "old and new rows", remoteRead(t, addr, base-1, base+3600_000, all), want)

	// A clean stop leaves the new rows live beside the old live ones; the
	// restart closes their epoch (a close marker), so a seal can take both.
	srv.cmd.Process.Signal(syscall.SIGTERM)
	<-srv.exited
	srv = startServer(t, bin, addr, path)
	sameSeries(t, "after a restart", remoteRead(t, addr, base-1, base+3600_000, all), want)
	srv.cmd.Process.Signal(syscall.SIGTERM)
	<-srv.exited

	// The reference reader agrees, and the archive seals everything it
	// holds: the old format-1 rows and the new anchored ones.
	h, err := archive.OpenWriter(path, archive.WriterOptions{Encoder: &promsample.Encoder{}, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.SealWait(context.Background(), 1, promsample.StreamsFor(8)); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	a, err := archive.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	got, err := promsample.ReadArchive(context.Background(), a, promsample.AllTime())
	if err != nil {
		t.Fatal(err)
	}
	ref := map[string]promsample.Series{}
	for _, s := range got {
		ref[s.Labels.String()] = s
	}
	sameSeries(t, "reference reader after sealing both kinds", ref, want)
	if err := a.View(context.Background(), func(tx *archive.ReadTx) error {
		for _, st := range promsample.StreamsFor(8) {
			span, err := tx.LiveSpan(1, st)
			if err != nil {
				return err
			}
			if span.Rows != 0 {
				t.Errorf("stream %s: %d rows still live after the seal", st, span.Rows)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
