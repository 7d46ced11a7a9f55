package receiver

import (
	"bytes"
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/prompb"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// Floors keep retention and compaction off what a forwarder still needs;
// size retention goes below them and says so first.

type floorStack struct {
	w      *archive.Writer
	reader *archive.Archive
	ing    *Ingester
	url    string
}

func openFloorStack(t *testing.T, opts IngestOptions) *floorStack {
	t.Helper()
	path := filepath.Join(t.TempDir(), "floors.db")
	w, err := archive.CreateWriter(path, archive.WriterOptions{Encoder: &promsample.Encoder{}, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	reader, err := archive.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	opts.Writer, opts.Reader = w, reader
	ing, err := NewIngester(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHandler(ing, Options{Registerer: prometheus.NewRegistry(), Series: ing.Series()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		reader.Close()
		if err := w.Close(); err != nil {
			t.Errorf("writer close: %v", err)
		}
	})
	return &floorStack{w: w, reader: reader, ing: ing, url: srv.URL}
}

// writeSealed writes n requests of one series, sealing after each, so the
// stream has n segments.
func (s *floorStack) writeSealed(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		wr := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{
			Labels:  []prompb.Label{{Name: "__name__", Value: "floor_test"}, {Name: "job", Value: "x"}},
			Samples: []prompb.Sample{{Value: float64(i), Timestamp: int64(1000 * (i + 1))}},
		}}}
		if a := post(t, s.url, bytes.NewReader(encodeV1(t, wr)), v1Headers()); a.code != http.StatusNoContent {
			t.Fatalf("write %d: %d %s", i, a.code, a.body)
		}
		if err := s.ing.SealAll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func (s *floorStack) segments(t *testing.T) (n int64, lastTS int64) {
	t.Helper()
	err := s.reader.View(context.Background(), func(tx *archive.ReadTx) error {
		srcs, err := tx.Sources()
		if err != nil {
			return err
		}
		for _, src := range srcs {
			metas, err := tx.SourceSegmentMetas(src.ID)
			if err != nil {
				return err
			}
			for _, m := range metas {
				n++
				lastTS = max(lastTS, m.LastTS)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n, lastTS
}

func TestTimeRetentionKeepsWhatTheFloorNeeds(t *testing.T) {
	var mu sync.Mutex
	floor, has := int64(math.MinInt64), true
	s := openFloorStack(t, IngestOptions{Retention: time.Millisecond, CompactTargetRows: -1,
		Floors: Floors{Retention: func(archive.SourceID) (int64, bool) {
			mu.Lock()
			defer mu.Unlock()
			return floor, has
		}}})
	s.writeSealed(t, 3)
	time.Sleep(5 * time.Millisecond)
	if err := s.ing.EnforceRetention(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.segments(t); n != 3 {
		t.Fatalf("%d segments after retention under a floor that needs everything, want 3", n)
	}
	// The floor moves past the first segment only.
	var firstLast int64
	s.reader.View(context.Background(), func(tx *archive.ReadTx) error {
		srcs, _ := tx.Sources()
		metas, _ := tx.SourceSegmentMetas(srcs[0].ID)
		firstLast = metas[0].LastTS
		return nil
	})
	mu.Lock()
	floor = firstLast + 1
	mu.Unlock()
	if err := s.ing.EnforceRetention(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.segments(t); n != 2 {
		t.Fatalf("%d segments after the floor passed one, want 2", n)
	}
	mu.Lock()
	has = false
	mu.Unlock()
	if err := s.ing.EnforceRetention(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.segments(t); n != 0 {
		t.Fatalf("%d segments without a floor, want 0", n)
	}
}

func TestSizeRetentionGoesBelowTheFloorAndSaysSoFirst(t *testing.T) {
	type call struct {
		source archive.SourceID
		cutoff int64
	}
	var calls []call
	s := openFloorStack(t, IngestOptions{RetentionBytes: 1, CompactTargetRows: -1,
		Floors: Floors{
			Retention: func(archive.SourceID) (int64, bool) { return math.MinInt64, true },
			Evicting: func(_ context.Context, src archive.SourceID, cutoff int64) {
				calls = append(calls, call{src, cutoff})
			},
		}})
	s.writeSealed(t, 3)
	_, last := s.segments(t)
	if err := s.ing.EnforceRetention(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || calls[0].cutoff <= last {
		t.Fatalf("Evicting calls %v, want one with a cutoff above %d", calls, last)
	}
	if n, _ := s.segments(t); n != 0 {
		t.Fatalf("%d segments left: size retention must fit the archive whatever the floor", n)
	}
}

func TestCompactionWaitsForTheFloor(t *testing.T) {
	var mu sync.Mutex
	floor := int64(math.MinInt64)
	s := openFloorStack(t, IngestOptions{Floors: Floors{Compact: func(archive.SourceID, string) (int64, bool) {
		mu.Lock()
		defer mu.Unlock()
		return floor, true
	}}})
	s.writeSealed(t, compactMinSegs+1)
	if err := s.ing.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	n, last := s.segments(t)
	if n != compactMinSegs+1 {
		t.Fatalf("%d segments: compaction ran below a floor", n)
	}
	mu.Lock()
	floor = last + 1
	mu.Unlock()
	if err := s.ing.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.segments(t); n != 1 {
		t.Fatalf("%d segments after the floor passed them all, want 1", n)
	}
}
