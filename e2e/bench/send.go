package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"sync"
	"time"
)

// SendResult is what one Load's delivery to one server did.
type SendResult struct {
	Samples  int64    `json:"samples_acked"`    // in requests answered 2xx
	Rejected int64    `json:"samples_rejected"` // in requests answered 4xx (not 429): not retried
	Failed   int64    `json:"samples_failed"`   // in requests still failing after the retries
	Requests int      `json:"requests"`
	Retries  int      `json:"retries"`
	Seconds  float64  `json:"seconds"` // first request sent to last answer
	P50Ms    float64  `json:"request_p50_ms"`
	P99Ms    float64  `json:"request_p99_ms"`
	Errors   []string `json:"errors,omitempty"` // the first few error answers
}

// SamplesPerSecond is the acknowledged samples over the wall time.
func (r SendResult) SamplesPerSecond() float64 {
	if r.Seconds <= 0 {
		return 0
	}
	return float64(r.Samples) / r.Seconds
}

// sendRetries bounds the retries of one request after a 5xx, a 429 or a
// transport error; the backoff doubles from 20 ms to at most 2 s, so a
// request gives up after ~10 s of a failing server, and the run is
// reported as failed rather than waiting on a dead server.
const sendRetries = 8

// Send delivers ld to url, one goroutine per sender, each sending its
// requests in order. It returns when every request was answered or given
// up on, or ctx ended.
func Send(ctx context.Context, client *http.Client, url string, ld *Load) SendResult {
	var (
		mu  sync.Mutex
		res SendResult
		lat []time.Duration
	)
	note := func(s string) {
		if len(res.Errors) < 5 {
			res.Errors = append(res.Errors, s)
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, reqs := range ld.senders {
		wg.Go(func() {
			var (
				mine                    []time.Duration
				acked, rejected, failed int64
				retries                 int
				errs                    []string
			)
			for _, r := range reqs {
				backoff := 20 * time.Millisecond
				for attempt := 0; ; attempt++ {
					t0 := time.Now()
					code, body, err := postWrite(ctx, client, url, r.body)
					d := time.Since(t0)
					if err == nil && code/100 == 2 {
						mine = append(mine, d)
						acked += int64(r.samples)
						break
					}
					if err == nil && code/100 == 4 && code != http.StatusTooManyRequests {
						rejected += int64(r.samples)
						errs = append(errs, fmt.Sprintf("HTTP %d: %s", code, body))
						break
					}
					if attempt == sendRetries || ctx.Err() != nil {
						failed += int64(r.samples)
						if err != nil {
							errs = append(errs, err.Error())
						} else {
							errs = append(errs, fmt.Sprintf("HTTP %d: %s", code, body))
						}
						break
					}
					retries++
					select {
					case <-time.After(backoff):
					case <-ctx.Done():
					}
					backoff = min(2*backoff, 2*time.Second)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, mine...)
			res.Samples += acked
			res.Rejected += rejected
			res.Failed += failed
			res.Retries += retries
			res.Requests += len(reqs)
			for _, e := range errs {
				note(e)
			}
		})
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	res.P50Ms = quantileMs(lat, 0.5)
	res.P99Ms = quantileMs(lat, 0.99)
	return res
}

// postWrite sends one remote-write 1.0 request and returns the status and
// the start of the answer's body.
func postWrite(ctx context.Context, client *http.Client, url string, body []byte) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", fmt.Errorf("bench: write request: %w", err)
	}
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	req.Header.Set("User-Agent", "dendro-bench")
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("bench: write: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, string(bytes.TrimSpace(b)), nil
}

// quantileMs is the nearest-rank q-quantile of d in milliseconds, 0 for
// no samples.
func quantileMs(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	k := max(0, min(int(math.Ceil(q*float64(len(s))))-1, len(s)-1))
	return float64(s[k]) / float64(time.Millisecond)
}
