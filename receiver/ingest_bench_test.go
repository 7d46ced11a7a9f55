package receiver

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/prompb"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// rwloadRequests builds remote-write 1.0 bodies shaped like rwload's
// default set: series over 6 metric names and 100 instances, perSeries
// consecutive samples of each series per request, batch samples a request.
func rwloadRequests(tb testing.TB, series, perSeries, batch, requests int) [][]byte {
	metrics := []string{"http_requests_total", "node_cpu_seconds_total", "process_resident_memory_bytes",
		"queue_depth", "temperature_celsius", "build_info"}
	perReq := batch / perSeries
	start := time.Now().Add(-time.Hour).UnixMilli()
	out := make([][]byte, 0, requests)
	for r := 0; r < requests; r++ {
		var wr prompb.WriteRequest
		round := (r * perReq) / series // how many times every series was sent
		for j := 0; j < perReq; j++ {
			i := (r*perReq + j) % series
			inst := i % 100
			ts := prompb.TimeSeries{Labels: []prompb.Label{
				{Name: "__name__", Value: metrics[(i/100)%6]}, {Name: "env", Value: "bench"},
				{Name: "id", Value: fmt.Sprint(i / 600)}, {Name: "instance", Value: fmt.Sprintf("host-%04d:9100", inst)},
				{Name: "job", Value: []string{"api", "node", "db"}[inst%3]}, {Name: "zone", Value: fmt.Sprintf("zone-%d", inst%4)}}}
			for s := 0; s < perSeries; s++ {
				n := round*perSeries + s
				v := float64(n * (i%50 + 1))
				if (i/100)%6 == 4 {
					v = 20 + math.Sin(float64(n+i))
				}
				ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: start + int64(n)*15000, Value: v})
			}
			wr.Timeseries = append(wr.Timeseries, ts)
		}
		out = append(out, encodeV1(tb, &wr))
	}
	return out
}

// BenchmarkIngest posts rwload-shaped requests (2,000 samples, 4 per
// series) from 4 concurrent senders through the real handler and Ingester
// into a real archive on disk, fsync per commit, seals by the default
// policy as they fall due.
func BenchmarkIngest(b *testing.B) {
	reqs := rwloadRequests(b, 10000, 4, 2000, 200)
	dir := b.TempDir()
	s := &stack{}
	{
		path := filepath.Join(dir, "bench.db")
		w, err := archive.CreateWriter(path, archive.WriterOptions{Encoder: encoderForBench()})
		if err != nil {
			b.Fatal(err)
		}
		reader, _ := archive.Open(path)
		ing, err := NewIngester(context.Background(), IngestOptions{Writer: w, Reader: reader})
		if err != nil {
			b.Fatal(err)
		}
		h, _ := NewHandler(ing, Options{})
		srv := newLoopback(b, h)
		s = &stack{path: path, url: srv + "/api/v1/write", w: w, reader: reader, ing: ing}
		b.Cleanup(func() { reader.Close(); w.Close() })
	}
	stop := make(chan struct{})
	go func() { // the seal policy, as Ingester.Run applies it
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				s.ing.SealDue(context.Background())
			}
		}
	}()
	defer close(stop)
	var next atomic.Int64
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	b.ResetTimer()
	for k := 0; k < 4; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := next.Add(1) - 1
				if n >= int64(b.N) {
					return
				}
				req, _ := http.NewRequest(http.MethodPost, s.url, bytes.NewReader(reqs[n%int64(len(reqs))]))
				for k, v := range v1Headers() {
					req.Header.Set(k, v)
				}
				resp, err := client.Do(req)
				if err != nil || resp.StatusCode != http.StatusNoContent {
					b.Errorf("request %d: %v %v", n, err, resp)
					return
				}
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N*2000)/b.Elapsed().Seconds(), "samples/s")
	st := s.w.Stats()
	b.ReportMetric(float64(st.GroupedCommits), "grouped-commits")
}

func encoderForBench() archive.SegmentEncoder { return &promsample.Encoder{} }

func newLoopback(tb testing.TB, h http.Handler) string {
	srv := httptest.NewServer(h)
	tb.Cleanup(srv.Close)
	return srv.URL
}
