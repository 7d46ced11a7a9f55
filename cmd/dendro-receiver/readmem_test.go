package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"
)

// TestReadsOfALargeTailStayUnderTheMemoryLimit: under the smallest
// --memory.limit, with 1.6 M samples in the live tail (nothing sealed), a
// remote-read and a PromQL query of the whole metric are refused with 422
// and a one-line reason, narrower reads that together exceed what reads
// may hold wait their turn and are answered in full, and the server's peak
// RSS stays under the limit throughout.
func TestReadsOfALargeTailStayUnderTheMemoryLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 1.6 M samples")
	}
	const (
		limit   = 256 << 20
		series  = 2000
		samples = 800
		step    = 15_000
	)
	path := filepath.Join(t.TempDir(), "a.db")
	srv := serve(t, path, "--memory.limit=256MiB", "--seal.max-rows=10000000", "--seal.max-bytes=4GiB", "--seal.max-age=24h")
	base := time.Now().Add(-4 * time.Hour).UnixMilli()
	for r := 0; r < samples; r++ {
		var wr prompb.WriteRequest
		for i := 0; i < series; i++ {
			wr.Timeseries = append(wr.Timeseries, prompb.TimeSeries{
				Labels: []prompb.Label{{Name: "__name__", Value: "big"}, {Name: "instance", Value: fmt.Sprintf("host-%04d", i)},
					{Name: "quarter", Value: strconv.Itoa(i % 4)}},
				Samples: []prompb.Sample{{Timestamp: base + int64(r)*step, Value: float64(r*series+i) * 1.000001}},
			})
		}
		raw, err := wr.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if err := send(srv.addr, snappy.Encode(nil, raw)); err != nil {
			t.Fatal(err)
		}
	}
	if r := inspectJSONOf(t, path); r.Segments != 0 {
		t.Fatalf("%d segments sealed: the test wants the samples in the live tail", r.Segments)
	}
	end := base + samples*step

	// The whole metric: 1.6 M floats, more than one question may hold.
	code, body := rawRemoteRead(t, srv.addr, base, end, &prompb.LabelMatcher{Type: prompb.LabelMatcher_EQ, Name: "__name__", Value: "big"})
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, "memory") || strings.Count(strings.TrimSpace(body), "\n") > 0 {
		t.Errorf("remote-read of the whole metric: %d %.200q, want 422 with a one-line reason about memory", code, body)
	}
	q := url.Values{"query": {"sum(count_over_time(big[4h]))"}, "time": {strconv.FormatInt(end/1000, 10)}}
	resp, err := http.PostForm("http://"+srv.addr+"/api/v1/query", q)
	if err != nil {
		t.Fatal(err)
	}
	var answer struct{ Status, ErrorType, Error string }
	json.NewDecoder(resp.Body).Decode(&answer)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnprocessableEntity || answer.ErrorType != "execution" || !strings.Contains(answer.Error, "memory") {
		t.Errorf("query of the whole metric: %d %+v, want 422 execution about memory", resp.StatusCode, answer)
	}

	// A quarter each (400 k floats, ~12 MiB reserved), four at once: more
	// than the reads' share left beside the cache, so some wait; all get
	// every sample.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for qn := 0; qn < 4; qn++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := remoteReadSamples(srv.addr, base, end,
				&prompb.LabelMatcher{Type: prompb.LabelMatcher_EQ, Name: "__name__", Value: "big"},
				&prompb.LabelMatcher{Type: prompb.LabelMatcher_EQ, Name: "quarter", Value: strconv.Itoa(qn)})
			if err == nil && got != series/4*samples {
				err = fmt.Errorf("quarter %d: %d samples, want %d", qn, got, series/4*samples)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	hwm := peakRSS(t, srv.cmd.Process.Pid)
	t.Logf("peak RSS %d MiB under --memory.limit=256MiB", hwm>>20)
	switch {
	case raceEnabled:
		// The detector's shadow memory is not the server's: .ci/run
		// runs this test once more without -race to check the bound.
		t.Logf("race detector on: the RSS bound is not checked")
	case hwm > limit:
		t.Errorf("peak RSS %d MiB, over the 256 MiB limit", hwm>>20)
	}
}

// rawRemoteRead posts a SAMPLES remote-read and returns the status and,
// for an error, the body.
func rawRemoteRead(t *testing.T, addr string, mint, maxt int64, ms ...*prompb.LabelMatcher) (int, string) {
	t.Helper()
	req := prompb.ReadRequest{Queries: []*prompb.Query{{StartTimestampMs: mint, EndTimestampMs: maxt, Matchers: ms}}}
	raw, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post("http://"+addr+"/api/v1/read", "application/x-protobuf", bytes.NewReader(snappy.Encode(nil, raw)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// remoteReadSamples counts the samples a SAMPLES remote-read answers.
func remoteReadSamples(addr string, mint, maxt int64, ms ...*prompb.LabelMatcher) (int, error) {
	req := prompb.ReadRequest{Queries: []*prompb.Query{{StartTimestampMs: mint, EndTimestampMs: maxt, Matchers: ms}}}
	raw, err := req.Marshal()
	if err != nil {
		return 0, err
	}
	resp, err := http.Post("http://"+addr+"/api/v1/read", "application/x-protobuf", bytes.NewReader(snappy.Encode(nil, raw)))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("remote-read: %s: %s", resp.Status, body)
	}
	dec, err := snappy.Decode(nil, body)
	if err != nil {
		return 0, err
	}
	var rr prompb.ReadResponse
	if err := rr.Unmarshal(dec); err != nil {
		return 0, err
	}
	n := 0
	for _, ts := range rr.Results[0].Timeseries {
		n += len(ts.Samples)
	}
	return n, nil
}

// peakRSS is a process's VmHWM in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/pid/status")
	return 0
}
