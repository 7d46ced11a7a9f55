package main

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// writeHistory writes an archive whose segments were received over the
// last six hours, one sealed hour at a time, and returns every series
// written. The oldest three hours also hold series of their own (era).
func writeHistory(t *testing.T, path string, now time.Time) map[string]promsample.Series {
	t.Helper()
	ctx := context.Background()
	var ago atomic.Int64
	w, err := archive.CreateWriter(path, archive.WriterOptions{Encoder: &promsample.Encoder{}, CheckpointInterval: -1,
		Now: func() time.Time { return now.Add(-time.Duration(ago.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	src, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"source": "default"},
		Metadata: map[string]string{"stream_buckets": "8"}, ClockAnchorWallNS: now.UnixNano()}, "")
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]promsample.Series{}
	base := now.Add(-6 * time.Hour).UnixMilli()
	for h := range 6 {
		ago.Store(int64(5-h) * int64(time.Hour))
		var b promsample.Batch
		for i := range 40 {
			ls := labels.FromStrings("__name__", fmt.Sprintf("hist_metric_%d", i%5), "i", strconv.Itoa(i))
			if h < 3 && i%4 == 0 {
				ls = labels.FromStrings("__name__", fmt.Sprintf("hist_metric_%d", i%5), "era", strconv.Itoa(h), "i", strconv.Itoa(i))
			}
			var smp []promsample.Sample
			for k := range 60 {
				tm := base + int64(h)*3600_000 + int64(k)*60_000
				smp = append(smp, promsample.Sample{T: tm, V: float64(tm%7919) + float64(i)/8})
			}
			b.Series = append(b.Series, promsample.Series{Labels: ls, Samples: smp})
			s := all[ls.String()]
			s.Labels = ls
			s.Samples = append(s.Samples, smp...)
			all[ls.String()] = s
		}
		appendBatch(t, w, src.ID(), &b)
		if _, err := w.SealWait(ctx, src.ID(), promsample.StreamsFor(8)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return all
}

// TestHistoryBeyondTheWarmWindow: a server whose archive holds six hours
// of receipts, started with --query.warm-window=90m, answers questions
// about the whole history in full as soon as it is ready, and has indexed
// all of it soon after (dendro_read_index_deferred_segments falls to 0).
// On an archive this small the history is indexed within milliseconds of
// ready, so whether a question or WarmHistory indexed it is a race; the
// deferral itself is checked in promql-read (TestWarmWindowDefersHistory).
func TestHistoryBeyondTheWarmWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the server")
	}
	path := filepath.Join(t.TempDir(), "history.db")
	want := writeHistory(t, path, time.Now())
	srv := serve(t, path, "--query.warm-window=90m")
	all := &prompb.LabelMatcher{Type: prompb.LabelMatcher_RE, Name: "__name__", Value: "hist_.*"}
	sameSeries(t, "every series, asked at ready", remoteRead(t, srv.addr, math.MinInt64/2, math.MaxInt64/2, all), want)
	era := map[string]promsample.Series{}
	for k, s := range want {
		if s.Labels.Has("era") {
			era[k] = s
		}
	}
	eraOnly := &prompb.LabelMatcher{Type: prompb.LabelMatcher_RE, Name: "era", Value: ".+"}
	sameSeries(t, "the oldest hours' own series", remoteRead(t, srv.addr, math.MinInt64/2, math.MaxInt64/2, eraOnly), era)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if v := scrape(t, srv.addr, "dendro_read_index_deferred_segments"); v == 0 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("dendro_read_index_deferred_segments = %v 20 s after ready, want 0", v)
		}
	}
	sameSeries(t, "every series, once the history is indexed", remoteRead(t, srv.addr, math.MinInt64/2, math.MaxInt64/2, all), want)
}
