package receiver

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

// stack is a receiver over a real archive file: the Ingester behind a
// Handler on a loopback server.
type stack struct {
	path   string
	url    string
	w      *archive.Writer
	reader *archive.Archive
	ing    *Ingester
	srv    *httptest.Server
	closed bool
}

func openStack(t *testing.T, path string, seal archive.SealPolicy) *stack {
	t.Helper()
	return openStackBuckets(t, path, seal, 0)
}

func openStackBuckets(t *testing.T, path string, seal archive.SealPolicy, buckets int) *stack {
	t.Helper()
	return openStackWriter(t, path, seal, buckets, archive.WriterOptions{})
}

// openStackWriter is openStackBuckets with the writer's options (its
// Encoder and CheckpointInterval are set here).
func openStackWriter(t *testing.T, path string, seal archive.SealPolicy, buckets int, opts archive.WriterOptions) *stack {
	t.Helper()
	return openStackIngest(t, path, opts, IngestOptions{Seal: seal, Buckets: buckets})
}

// openStackIngest is openStackWriter with the ingester's options (its
// Writer and Reader are set here).
func openStackIngest(t *testing.T, path string, opts archive.WriterOptions, io IngestOptions) *stack {
	t.Helper()
	ctx := context.Background()
	opts.Encoder, opts.CheckpointInterval = &promsample.Encoder{}, -1
	var w *archive.Writer
	var err error
	if _, statErr := filepath.Glob(path); statErr == nil && fileExists(path) {
		w, err = archive.OpenWriter(path, opts)
	} else {
		w, err = archive.CreateWriter(path, opts)
	}
	if err != nil {
		t.Fatal(err)
	}
	reader, err := archive.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	io.Writer, io.Reader = w, reader
	ing, err := NewIngester(ctx, io)
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHandler(ing, Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	s := &stack{path: path, url: srv.URL + "/api/v1/write", w: w, reader: reader, ing: ing, srv: srv}
	t.Cleanup(func() { s.close(t) })
	return s
}

// close stops the stack the way the binary does: finalize, close the read
// handle, close the writer.
func (s *stack) close(t *testing.T) {
	if s.closed {
		return
	}
	s.closed = true
	s.srv.Close()
	if err := s.ing.Finalize(context.Background()); err != nil {
		t.Errorf("finalize: %v", err)
	}
	s.reader.Close()
	if err := s.w.Close(); err != nil {
		t.Errorf("writer close: %v", err)
	}
}

func fileExists(p string) bool {
	m, _ := filepath.Glob(p)
	return len(m) == 1
}

// readBack reads every series of the archive at path (promsample's
// reference reader: merged, in time order, exact duplicates dropped).
func readBack(t testing.TB, path string) []promsample.Series {
	t.Helper()
	a, err := archive.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	got, err := promsample.ReadArchive(context.Background(), a, promsample.AllTime())
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func walRows(t testing.TB, path string) int64 {
	a, err := archive.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	st, err := a.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.WALRows
}

func sortSeries(ss []promsample.Series) []promsample.Series {
	out := append([]promsample.Series(nil), ss...)
	sort.Slice(out, func(i, j int) bool { return labels.Compare(out[i].Labels, out[j].Labels) < 0 })
	return out
}

// TestIngestRoundTripsThroughTheArchive: what 1.0 and 2.0 requests carry
// is read back from the archive file bit for bit, across a seal (part
// sealed into Parquet, part in the live tail).
func TestIngestRoundTripsThroughTheArchive(t *testing.T) {
	wr, want, _ := v1Fixture()
	s := openStack(t, filepath.Join(t.TempDir(), "rt.db"), archive.SealPolicy{})
	if a := post(t, s.url, bytes.NewReader(encodeV1(t, wr)), v1Headers()); a.code != http.StatusNoContent {
		t.Fatalf("1.0: %d %s", a.code, a.body)
	}
	if err := s.ing.SealAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The same series again, 1 hour later, as 2.0: the live tail.
	v2 := &writev2.Request{Symbols: []string{"", "__name__", "late_metric", "job", "x"},
		Timeseries: []writev2.TimeSeries{{LabelsRefs: []uint32{1, 2, 3, 4},
			Samples: []writev2.Sample{{Value: 42.5, Timestamp: 3_600_000}, {Value: -1, Timestamp: 3_600_001}}}}}
	a := post(t, s.url, bytes.NewReader(encodeV2(t, v2)), v2Headers())
	if a.code != http.StatusNoContent || a.header.Get(HeaderSamplesWritten) != "2" {
		t.Fatalf("2.0: %d %s, samples written %q", a.code, a.body, a.header.Get(HeaderSamplesWritten))
	}
	want = append(want, promsample.Series{Labels: labels.FromStrings("__name__", "late_metric", "job", "x"),
		Samples: []promsample.Sample{{T: 3_600_000, V: 42.5}, {T: 3_600_001, V: -1}}})
	// An exact retry of a committed request changes nothing a reader sees.
	if a := post(t, s.url, bytes.NewReader(encodeV1(t, wr)), v1Headers()); a.code != http.StatusNoContent {
		t.Fatalf("retry: %d %s", a.code, a.body)
	}
	got := readBack(t, s.path)
	if d := diffSeries(got, sortSeries(want)); d != "" {
		t.Fatal(d)
	}
}

// TestBadInputChangesNothing: a refused request writes no row.
func TestBadInputChangesNothing(t *testing.T) {
	s := openStack(t, filepath.Join(t.TempDir(), "bad.db"), archive.SealPolicy{})
	one := []prompb.Sample{{Timestamp: 1, Value: 1}}
	for _, c := range []struct {
		name string
		body []byte
		hdr  map[string]string
		code int
	}{
		{"unsorted labels", v1Body(t, prompb.TimeSeries{Labels: lbl("__name__", "m", "b", "1", "a", "2"), Samples: one}), v1Headers(), 400},
		{"missing __name__", v1Body(t, prompb.TimeSeries{Labels: lbl("job", "x"), Samples: one}), v1Headers(), 400},
		{"not snappy", []byte("plain text"), v1Headers(), 400},
		{"empty body", nil, v1Headers(), 400},
		{"unsupported content type", v1Body(t, prompb.TimeSeries{Labels: lbl("__name__", "m"), Samples: one}), map[string]string{"Content-Type": "application/json", "Content-Encoding": "snappy"}, 415},
	} {
		a := post(t, s.url, bytes.NewReader(c.body), c.hdr)
		if a.code != c.code {
			t.Errorf("%s: %d %s, want %d", c.name, a.code, a.body, c.code)
		}
	}
	if n := walRows(t, s.path); n != 0 {
		t.Fatalf("refused requests left %d wal rows", n)
	}
}

// TestConcurrentLaggingSendersLoseNothing: 8 senders over two sources,
// each sending its series in order but lagging the others (as Prometheus
// shards do), while seals run: every sample is present afterwards.
func TestConcurrentLaggingSendersLoseNothing(t *testing.T) {
	s := openStack(t, filepath.Join(t.TempDir(), "conc.db"), archive.SealPolicy{})
	const senders, rounds, seriesPer = 8, 30, 5
	base := int64(1_700_000_000_000)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var sealErr error
	go func() { // seal continuously while the senders write
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := s.ing.SealAll(context.Background()); err != nil {
				sealErr = err
				return
			}
		}
	}()
	var want []promsample.Series
	var mu sync.Mutex
	for k := 0; k < senders; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			lag := int64(k) * 600_000 // sender k lags 10 minutes per index
			hdr := v1Headers()
			hdr["X-Scope-OrgID"] = fmt.Sprintf("prom-%d", k%2)
			var mine []promsample.Series
			for i := 0; i < seriesPer; i++ {
				mine = append(mine, promsample.Series{Labels: labels.FromStrings("__name__", "m", "sender", fmt.Sprint(k), "i", fmt.Sprint(i))})
			}
			for r := 0; r < rounds; r++ {
				var wr prompb.WriteRequest
				for i := range mine {
					ts := base - lag + int64(r)*15_000
					v := float64(k*1000 + r*10 + i)
					wr.Timeseries = append(wr.Timeseries, prompb.TimeSeries{
						Labels:  lbl("__name__", "m", "i", fmt.Sprint(i), "sender", fmt.Sprint(k)),
						Samples: []prompb.Sample{{Timestamp: ts, Value: v}}})
					mine[i].Samples = append(mine[i].Samples, promsample.Sample{T: ts, V: v})
				}
				if a := post(t, s.url, bytes.NewReader(encodeV1(t, &wr)), hdr); a.code != http.StatusNoContent {
					t.Errorf("sender %d round %d: %d %s", k, r, a.code, a.body)
					return
				}
			}
			mu.Lock()
			want = append(want, mine...)
			mu.Unlock()
		}(k)
	}
	wg.Wait()
	close(stop)
	if sealErr != nil {
		t.Fatal(sealErr)
	}
	if st := s.w.Stats(); st.Seals == 0 || st.RowsDropped != 0 {
		t.Fatalf("writer stats %+v: want seals and no dropped rows", st)
	}
	if d := diffSeries(readBack(t, s.path), sortSeries(want)); d != "" {
		t.Fatal(d)
	}
}

// TestABacklogOlderThanSealedDataIsKept: samples two hours older than data
// already sealed are acknowledged and read back.
func TestABacklogOlderThanSealedDataIsKept(t *testing.T) {
	s := openStack(t, filepath.Join(t.TempDir(), "backlog.db"), archive.SealPolicy{})
	now := time.Now().UnixMilli()
	send := func(ts int64, v float64) {
		t.Helper()
		wr := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{Labels: lbl("__name__", "up", "job", "a"),
			Samples: []prompb.Sample{{Timestamp: ts, Value: v}}}}}
		if a := post(t, s.url, bytes.NewReader(encodeV1(t, wr)), v1Headers()); a.code != http.StatusNoContent {
			t.Fatalf("ts %d: %d %s", ts, a.code, a.body)
		}
	}
	send(now, 1)
	if err := s.ing.SealAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	send(now-2*3600_000, 0.5)
	if err := s.ing.SealAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	send(now-2*3600_000+15_000, 0.75) // and one still live
	want := []promsample.Series{{Labels: labels.FromStrings("__name__", "up", "job", "a"),
		Samples: []promsample.Sample{{T: now - 2*3600_000, V: 0.5}, {T: now - 2*3600_000 + 15_000, V: 0.75}, {T: now, V: 1}}}}
	if d := diffSeries(readBack(t, s.path), want); d != "" {
		t.Fatal(d)
	}
}

// TestRestartKeepsSourcesAndUUIDs: a reopened archive resumes its sources
// with the same ids and uuids, keeps accepting writes, and seals again.
func TestRestartKeepsSourcesAndUUIDs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "restart.db")
	policy := archive.SealPolicy{MaxRows: 4}
	write := func(s *stack, source string, ts int64) {
		t.Helper()
		hdr := v1Headers()
		hdr["X-Scope-OrgID"] = source
		wr := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{Labels: lbl("__name__", "m", "src", source),
			Samples: []prompb.Sample{{Timestamp: ts, Value: float64(ts)}}}}}
		if a := post(t, s.url, bytes.NewReader(encodeV1(t, wr)), hdr); a.code != http.StatusNoContent {
			t.Fatalf("%d %s", a.code, a.body)
		}
	}
	catalog := func() []archive.SourceCatalog {
		a, err := archive.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		c, err := a.Catalog(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	s := openStack(t, path, policy)
	write(s, "a", 1)
	write(s, "b", 1)
	s.close(t)
	before := catalog()

	s = openStack(t, path, policy)
	for ts := int64(2); ts <= 9; ts++ {
		write(s, "a", ts)
	}
	s.ing.SealDue(context.Background())
	if st := s.w.Stats(); st.Seals == 0 {
		t.Fatalf("no seal after the restart with %d rows against a %d-row policy", 8, policy.MaxRows)
	}
	s.close(t)
	after := catalog()
	if len(before) != 2 || len(after) != 2 {
		t.Fatalf("sources before %d, after %d; want 2 and 2", len(before), len(after))
	}
	for i := range before {
		if before[i].ID != after[i].ID || before[i].UUID != after[i].UUID || before[i].UUID == "" {
			t.Errorf("source %d: %d %s before, %d %s after", i, before[i].ID, before[i].UUID, after[i].ID, after[i].UUID)
		}
	}
	if got := readBack(t, path); len(got) != 2 || len(got[0].Samples) != 9 {
		t.Fatalf("read back %d series (first has %d samples); want 2 series, 9 samples of a", len(got), len(got[0].Samples))
	}
}

// TestSealDuePrunesItsRoundOnce: with a writer that defers prunes, as the
// binary's does, the streams a round sealed lose their sealed wal rows once
// the round is over, and reads are the same before and after.
func TestSealDuePrunesItsRoundOnce(t *testing.T) {
	s := openStackWriter(t, filepath.Join(t.TempDir(), "a.db"), archive.SealPolicy{MaxRows: 2}, 0, archive.WriterOptions{DeferPrunes: true})
	var series []prompb.TimeSeries
	for _, name := range []string{"m1", "m2", "m3", "m4", "m5", "m6"} {
		series = append(series, prompb.TimeSeries{Labels: lbl("__name__", name), Samples: []prompb.Sample{{Timestamp: 1, Value: 1}}})
	}
	for ts := int64(1); ts <= 3; ts++ {
		for i := range series {
			series[i].Samples[0] = prompb.Sample{Timestamp: ts, Value: float64(ts)}
		}
		if a := post(t, s.url, bytes.NewReader(encodeV1(t, &prompb.WriteRequest{Timeseries: series})), v1Headers()); a.code != http.StatusNoContent {
			t.Fatalf("%d %s", a.code, a.body)
		}
	}
	before := readBack(t, s.path)
	s.ing.SealDue(context.Background())
	// A call that waits is answered after the Prune SealDue sent; Sync
	// would prune by itself.
	if err := s.w.Checkpoint(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := s.w.Stats()
	if st.Seals < 2 {
		t.Fatalf("%d seals; the test needs several streams sealed in one round", st.Seals)
	}
	if st.PrunedRows != st.RowsCommitted {
		t.Errorf("pruned %d of the %d rows sealed", st.PrunedRows, st.RowsCommitted)
	}
	if after := readBack(t, s.path); !reflect.DeepEqual(after, before) || len(after) != len(series) {
		t.Errorf("read back %d series after the round, %d before", len(after), len(before))
	}
}

// TestASourceKeepsItsStreamBuckets: restarted with another bucket count, an
// existing source keeps the count it was created with, so every metric stays
// in the one stream readers look for it in.
func TestASourceKeepsItsStreamBuckets(t *testing.T) {
	path := filepath.Join(t.TempDir(), "buckets.db")
	names := []string{"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"}
	send := func(s *stack, ts int64) {
		t.Helper()
		var wr prompb.WriteRequest
		for _, n := range names {
			wr.Timeseries = append(wr.Timeseries, prompb.TimeSeries{Labels: lbl("__name__", n), Samples: []prompb.Sample{{Timestamp: ts, Value: 1}}})
		}
		if a := post(t, s.url, bytes.NewReader(encodeV1(t, &wr)), v1Headers()); a.code != http.StatusNoContent {
			t.Fatalf("%d %s", a.code, a.body)
		}
	}
	s := openStackBuckets(t, path, archive.SealPolicy{}, 4)
	send(s, 1000)
	s.close(t)
	s = openStackBuckets(t, path, archive.SealPolicy{}, 16)
	send(s, 2000)
	s.close(t)
	a, err := archive.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.View(context.Background(), func(tx *archive.ReadTx) error {
		streams, err := tx.Streams(1)
		if err != nil {
			return err
		}
		allowed := map[string]bool{}
		for _, st := range promsample.StreamsFor(4) {
			allowed[st] = true
		}
		for _, st := range streams {
			if !allowed[st] {
				t.Errorf("stream %s is not one of the source's 4 buckets", st)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, series := range readBack(t, path) {
		if len(series.Samples) != 2 {
			t.Errorf("%s: %d samples, want 2", series.Labels, len(series.Samples))
		}
	}
}

// TestAnOutgrownEpochClosesOnce: requests that commit together can each
// find their epoch outgrown; the first closes it, and the others must not
// close the epoch that started then.
func TestAnOutgrownEpochClosesOnce(t *testing.T) {
	s := openStackWriter(t, filepath.Join(t.TempDir(), "a.db"), archive.SealPolicy{MaxRows: 100}, 0, archive.WriterOptions{})
	send := func(ts int64) {
		t.Helper()
		wr := prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{Labels: lbl("__name__", "m1"), Samples: []prompb.Sample{{Timestamp: ts, Value: 1}}}}}
		if a := post(t, s.url, bytes.NewReader(encodeV1(t, &wr)), v1Headers()); a.code != http.StatusNoContent {
			t.Fatalf("%d %s", a.code, a.body)
		}
	}
	send(1)
	st := s.ing.sourceByID(1)
	b := st.bucketOf(promsample.StreamFor("m1", promsample.DefaultStreamBuckets))
	first := st.epochs[b]
	var second *epochState
	for i := range 2 {
		if err := s.ing.closeOutgrown(context.Background(), st, map[int]*epochState{b: first}); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			second = st.epochs[b]
		}
		if st.epochs[b] == first || st.epochs[b] != second {
			t.Fatalf("after close %d: the first epoch current %v, the second %v; want the second", i+1, st.epochs[b] == first, st.epochs[b] == second)
		}
		send(int64(i + 2)) // the second epoch holds rows: only its own outgrowing closes it
	}
}

// TestARoundsMarkersCountWithTheRowsItSeals: the close marker a seal
// round appends is taken by the seal that follows; it must not be counted
// toward the stream's next seal (a row that is not live, which made the
// stream due a row early).
func TestARoundsMarkersCountWithTheRowsItSeals(t *testing.T) {
	// Due by age only: the round closes an epoch that has not outgrown.
	s := openStackWriter(t, filepath.Join(t.TempDir(), "a.db"), archive.SealPolicy{MaxRows: 100, MaxAge: time.Millisecond}, 0, archive.WriterOptions{})
	wr := prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{Labels: lbl("__name__", "m1"), Samples: []prompb.Sample{{Timestamp: 1, Value: 1}}}}}
	if a := post(t, s.url, bytes.NewReader(encodeV1(t, &wr)), v1Headers()); a.code != http.StatusNoContent {
		t.Fatalf("%d %s", a.code, a.body)
	}
	time.Sleep(5 * time.Millisecond)
	s.ing.SealDue(context.Background())
	if n := s.w.Stats().Seals; n != 1 {
		t.Fatalf("%d seals, want 1", n)
	}
	k := streamKey{1, promsample.StreamFor("m1", promsample.DefaultStreamBuckets)}
	s.ing.mu.Lock()
	rows := s.ing.accounts[k].Rows()
	s.ing.mu.Unlock()
	if rows != 0 {
		t.Fatalf("the account counts %d rows after a seal that took every one", rows)
	}
}

// TestBoundedSealsCarryTheirLeftRows: with a writer that bounds what a
// seal takes, as the binary's does, the rows a seal leaves live stay
// counted toward the stream's next seal: SealDue seals again while the
// stream is still due, and SealAll until nothing is live. An epoch that
// reaches the policy is closed on its own (epochs.go), so that the bound,
// set above that, always holds a closed epoch.
func TestBoundedSealsCarryTheirLeftRows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.db")
	s := openStackWriter(t, path, archive.SealPolicy{MaxRows: 2}, 0, archive.WriterOptions{MaxSealRows: 6, DeferPrunes: true})
	send := func(ts int64) {
		t.Helper()
		wr := prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{Labels: lbl("__name__", "m1"), Samples: []prompb.Sample{{Timestamp: ts, Value: float64(ts)}}}}}
		if a := post(t, s.url, bytes.NewReader(encodeV1(t, &wr)), v1Headers()); a.code != http.StatusNoContent {
			t.Fatalf("%d %s", a.code, a.body)
		}
	}
	live := func() int {
		t.Helper()
		a, err := archive.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		n := 0
		if err := a.View(context.Background(), func(tx *archive.ReadTx) error {
			rows, err := tx.LiveWAL(1, promsample.StreamFor("m1", promsample.DefaultStreamBuckets))
			n = len(rows)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for ts := int64(1); ts <= 7; ts++ {
		send(ts) // one row each, all in m1's stream
	}
	// Epochs closed themselves every 2 rows: 7 rows and 3 markers.
	if n := live(); n != 10 {
		t.Fatalf("%d rows live, want 10 (7 rows and 3 close markers)", n)
	}
	before := readBack(t, path)
	s.ing.SealDue(context.Background())
	// SealDue closes the open epoch (a fourth marker): 11 rows, sealed as
	// the bound of 6 allows: two epochs (6 rows), then the rest (5).
	if st := s.w.Stats(); st.Seals != 2 {
		t.Fatalf("%d seals after SealDue, want 2", st.Seals)
	}
	if n := live(); n != 0 {
		t.Fatalf("%d rows live after SealDue, want 0", n)
	}
	send(8) // below the policy's 2
	s.ing.SealDue(context.Background())
	if st, n := s.w.Stats(), live(); st.Seals != 2 || n != 1 {
		t.Fatalf("%d seals and %d rows live, want 2 and 1", st.Seals, n)
	}
	for ts := int64(9); ts <= 13; ts++ {
		send(ts)
	}
	if err := s.ing.SealAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := live(); n != 0 {
		t.Fatalf("%d rows live after SealAll, want 0", n)
	}
	after := readBack(t, path)
	if len(before) != 1 || len(before[0].Samples) != 7 || len(after) != 1 || len(after[0].Samples) != 13 {
		t.Fatalf("read back %v before and %v after; want m1 with 7 and 13 samples", before, after)
	}
}

// TestThinEpochsWaitForSamples: a stream of many series due only by its
// row count is not sealed while its epoch holds fewer than
// minSamplesPerSeries samples a series, and is once it does.
func TestThinEpochsWaitForSamples(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.db")
	s := openStackBuckets(t, path, archive.SealPolicy{MaxRows: 4}, 1)
	send := func(r int) {
		t.Helper()
		var wr prompb.WriteRequest
		for i := 0; i < manySeries+100; i++ {
			wr.Timeseries = append(wr.Timeseries, prompb.TimeSeries{Labels: lbl("__name__", "m", "i", fmt.Sprint(i)),
				Samples: []prompb.Sample{{Timestamp: int64(r) * 1000, Value: float64(r)}}})
		}
		if a := post(t, s.url, bytes.NewReader(encodeV1(t, &wr)), v1Headers()); a.code != http.StatusNoContent {
			t.Fatalf("%d %s", a.code, a.body)
		}
	}
	for r := 0; r < minSamplesPerSeries-1; r++ {
		send(r)
	}
	s.ing.SealDue(context.Background())
	if n := s.w.Stats().Seals; n != 0 {
		t.Fatalf("%d seals of a thin epoch (%d rows, policy 4)", n, minSamplesPerSeries-1)
	}
	send(minSamplesPerSeries)
	s.ing.SealDue(context.Background())
	if n := s.w.Stats().Seals; n != 1 {
		t.Fatalf("%d seals once the epoch holds %d samples a series, want 1", n, minSamplesPerSeries)
	}
}

// TestARestartSealsTheLiveTailItInherits: rows a previous session left live
// (here, a policy that never sealed) are counted into the seal accounts
// when the ingester starts, so the next SealDue seals them, bounded, and
// every sample still reads back.
func TestARestartSealsTheLiveTailItInherits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.db")
	s := openStackWriter(t, path, archive.SealPolicy{MaxRows: 1000}, 0, archive.WriterOptions{DeferPrunes: true})
	for ts := int64(1); ts <= 7; ts++ {
		wr := prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{Labels: lbl("__name__", "m1"), Samples: []prompb.Sample{{Timestamp: ts, Value: float64(ts)}}}}}
		if a := post(t, s.url, bytes.NewReader(encodeV1(t, &wr)), v1Headers()); a.code != http.StatusNoContent {
			t.Fatalf("%d %s", a.code, a.body)
		}
	}
	s.ing.SealDue(context.Background())
	if n := s.w.Stats().Seals; n != 0 {
		t.Fatalf("%d seals under a 1000-row policy", n)
	}
	s.close(t)

	// Under a 2-row policy the seven inherited rows (one epoch, which the
	// restart closes with a marker row) are due at once; without them in
	// the account only the marker would be, one row, below the policy.
	s = openStackWriter(t, path, archive.SealPolicy{MaxRows: 2}, 0, archive.WriterOptions{MaxSealRows: 64, DeferPrunes: true})
	s.ing.SealDue(context.Background()) // no new row: only the inherited seven
	if st := s.w.Stats(); st.Seals == 0 {
		t.Fatal("the 7 inherited rows were not sealed")
	}
	if err := s.w.Sync(context.Background()); err != nil { // the round's prune applied
		t.Fatal(err)
	}
	if n := walRows(t, path); n != 0 {
		t.Errorf("%d wal rows left after SealDue", n)
	}
	if got := readBack(t, path); len(got) != 1 || len(got[0].Samples) != 7 {
		t.Fatalf("read back %v, want m1 with 7 samples", got)
	}
}

// TestSealBacklogSealsPastTheRounds: a backlog larger than SealDue's
// rounds of bounded seals can take (here eight inherited epochs, each
// left by a run that stopped, and a seal bounded to about one) is left due
// by SealDue and sealed by SealBacklog until nothing is due, every sample
// still reading back.
func TestSealBacklogSealsPastTheRounds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.db")
	const runs, perRun = 8, 2
	ts := int64(0)
	for range runs {
		s := openStackWriter(t, path, archive.SealPolicy{MaxRows: 1000}, 0, archive.WriterOptions{DeferPrunes: true})
		for range perRun {
			ts++
			wr := prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{Labels: lbl("__name__", "m1"), Samples: []prompb.Sample{{Timestamp: ts, Value: float64(ts)}}}}}
			if a := post(t, s.url, bytes.NewReader(encodeV1(t, &wr)), v1Headers()); a.code != http.StatusNoContent {
				t.Fatalf("%d %s", a.code, a.body)
			}
		}
		s.close(t)
	}
	// A seal takes whole epochs: perRun rows and the marker that closed
	// them is one epoch, which a bound of perRun+1 rows lets through alone.
	wopts := archive.WriterOptions{MaxSealRows: perRun + 1, DeferPrunes: true}
	policy := archive.SealPolicy{MaxRows: 2}
	s := openStackWriter(t, path, policy, 0, wopts)
	applied := func() {
		t.Helper()
		if err := s.w.Sync(context.Background()); err != nil { // the rounds' prunes applied
			t.Fatal(err)
		}
	}
	s.ing.SealDue(context.Background())
	applied()
	if n := walRows(t, path); n < policy.MaxRows {
		t.Fatalf("%d wal rows left after SealDue's %d rounds, want a backlog still due", n, maxSealRounds)
	}
	s.ing.SealBacklog(context.Background(), time.Minute)
	applied()
	if n := walRows(t, path); n >= policy.MaxRows {
		t.Fatalf("%d wal rows left after SealBacklog, want fewer than the policy's %d", n, policy.MaxRows)
	}
	if got := readBack(t, path); len(got) != 1 || len(got[0].Samples) != int(ts) {
		t.Fatalf("read back %v, want m1 with %d samples", got, ts)
	}
}

// TestRetentionDoesNotCutAnEpoch: a retention that reaches into live rows
// (here, one epoch that was never sealed) must not evict the epoch's first
// rows, whose anchors its later rows need: every sample received after the
// cutoff reads back, none is left undecodable.
func TestRetentionDoesNotCutAnEpoch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.db")
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s := openStackIngest(t, path, archive.WriterOptions{}, IngestOptions{
		Seal: archive.SealPolicy{MaxRows: 1 << 20, MaxBytes: 1 << 30, MaxAge: time.Hour}, Buckets: 1,
		Retention: time.Hour, Now: clock})
	const series = 20
	send := func(r int) {
		t.Helper()
		var wr prompb.WriteRequest
		for i := range series {
			wr.Timeseries = append(wr.Timeseries, prompb.TimeSeries{Labels: lbl("__name__", "m", "i", fmt.Sprint(i)),
				Samples: []prompb.Sample{{Timestamp: int64(r) * 1000, Value: float64(r)}}})
		}
		if a := post(t, s.url, bytes.NewReader(encodeV1(t, &wr)), v1Headers()); a.code != http.StatusNoContent {
			t.Fatalf("%d %s", a.code, a.body)
		}
	}
	send(0)
	time.Sleep(20 * time.Millisecond)
	cut := time.Now() // rows are stamped with the writer's clock, the real one
	time.Sleep(20 * time.Millisecond)
	send(1)
	send(2)
	if n := s.w.Stats().Seals; n != 0 {
		t.Fatalf("%d seals before retention, want the rows live", n)
	}
	mu.Lock()
	now = cut.Add(time.Hour) // the cutoff falls between the first row and the rest
	mu.Unlock()
	if err := s.ing.EnforceRetention(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := readBack(t, path)
	if len(got) != series {
		t.Fatalf("%d series read back, want %d", len(got), series)
	}
	for _, sr := range got {
		var ts []int64
		for _, smp := range sr.Samples {
			ts = append(ts, smp.T)
		}
		// What was received after the cutoff is all there; what came
		// before may stay (it shares a segment with what came after).
		if n := len(ts); n < 2 || ts[n-2] != 1000 || ts[n-1] != 2000 {
			t.Fatalf("%s: samples at %v, want those at 1000 and 2000", sr.Labels, ts)
		}
	}
}

// TestWriteTouchesItsSeries: a series goes idle (its ingest state leaves:
// IngestOptions.IdleTimeout) only when no committed request has held it
// for the timeout, and a request, whatever its other series, keeps each of
// its own from going idle.
func TestWriteTouchesItsSeries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.db")
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	s := openStackIngest(t, path, archive.WriterOptions{}, IngestOptions{
		Seal: archive.SealPolicy{MaxRows: 1 << 20, MaxBytes: 1 << 30, MaxAge: time.Hour}, Now: clock})
	send := func(ts int64, ids ...string) {
		t.Helper()
		var wr prompb.WriteRequest
		for _, id := range ids {
			wr.Timeseries = append(wr.Timeseries, prompb.TimeSeries{Labels: lbl("__name__", "m", "id", id),
				Samples: []prompb.Sample{{Timestamp: ts, Value: 1}}})
		}
		if a := post(t, s.url, bytes.NewReader(encodeV1(t, &wr)), v1Headers()); a.code != http.StatusNoContent {
			t.Fatalf("%d %s", a.code, a.body)
		}
	}
	send(1000, "kept", "gone", "also-kept")
	x := s.ing.x
	ref := func(id string) seriesindex.Ref {
		t.Helper()
		r := x.Get(labels.FromStrings("__name__", "m", "id", id))
		if r == 0 {
			t.Fatalf("series %s not in the index", id)
		}
		return r
	}
	kept, gone, alsoKept := ref("kept"), ref("gone"), ref("also-kept")
	for _, r := range []seriesindex.Ref{kept, gone, alsoKept} {
		if x.Anchor(r) == 0 {
			t.Fatalf("series %d has no anchor after its write", r)
		}
	}
	advance(40 * time.Minute)
	send(2000, "also-kept", "kept") // another order, another request
	advance(30 * time.Minute)
	if n := x.Idle(clock(), time.Hour); n != 1 {
		t.Fatalf("%d series went idle, want 1 (the one not written for 70 minutes)", n)
	}
	if x.Anchor(gone) != 0 {
		t.Fatal("the idle series kept its anchor")
	}
	if x.Anchor(kept) == 0 || x.Anchor(alsoKept) == 0 {
		t.Fatal("a series written 30 minutes ago went idle")
	}
}

// TestASeriesListedTwiceInARequest: a request may list a series more than
// once, new or anchored already in the epoch, beside series of either
// kind; every sample reads back under its series, in the live tail and
// after a seal.
func TestASeriesListedTwiceInARequest(t *testing.T) {
	s := openStack(t, filepath.Join(t.TempDir(), "twice.db"), archive.SealPolicy{})
	one := func(name string, ts int64) prompb.TimeSeries {
		return prompb.TimeSeries{Labels: lbl("__name__", name, "job", "j"), Samples: []prompb.Sample{{Timestamp: ts, Value: float64(ts)}}}
	}
	reqs := [][]prompb.TimeSeries{
		{one("a", 1), one("b", 1), one("a", 2)},              // a new, twice
		{one("a", 3), one("c", 3), one("a", 4), one("c", 4)}, // a anchored, c new, each twice
		{one("b", 5), one("d", 5), one("b", 6), one("c", 5)},
	}
	want := map[string][]promsample.Sample{}
	for i, ts := range reqs {
		if a := post(t, s.url, bytes.NewReader(encodeV1(t, &prompb.WriteRequest{Timeseries: ts})), v1Headers()); a.code != http.StatusNoContent {
			t.Fatalf("request %d: %d %s", i, a.code, a.body)
		}
		for _, x := range ts {
			n := x.Labels[0].Value
			want[n] = append(want[n], promsample.Sample{T: x.Samples[0].Timestamp, V: x.Samples[0].Value})
		}
	}
	var ws []promsample.Series
	for n, smp := range want {
		slices.SortFunc(smp, func(a, b promsample.Sample) int { return cmp.Compare(a.T, b.T) })
		ws = append(ws, promsample.Series{Labels: labels.FromStrings("__name__", n, "job", "j"), Samples: smp})
	}
	ws = sortSeries(ws)
	if d := diffSeries(readBack(t, s.path), ws); d != "" {
		t.Fatalf("live tail: %s", d)
	}
	if err := s.ing.SealAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := diffSeries(readBack(t, s.path), ws); d != "" {
		t.Fatalf("sealed: %s", d)
	}
}
