package soak

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"
)

// The data set: series i is metric soak_metric_<i mod metrics> with labels
// id=<i> and job=soak; its sample n is at startMs + n*stepMs. Even series
// are counters (integer steps), odd ones gauges with arbitrary float bits,
// so that every sample can be checked bit for bit from (i, n) alone.
const (
	metrics = 10
	senders = 4    // series shard i mod senders, as Prometheus's queue shards
	batch   = 2000 // samples per request, Prometheus's max_samples_per_send
)

type dataSet struct {
	series          int
	startMs, stepMs int64
}

func metricOf(i int) string { return "soak_metric_" + strconv.Itoa(i%metrics) }

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func value(i, n int) float64 {
	if i%2 == 0 {
		return float64(n * (1 + i%5))
	}
	return math.Float64frombits(splitmix(uint64(i)<<32|uint64(n))>>12 | 0x3ff0000000000000)
}

func (d dataSet) labels(i int) []prompb.Label {
	return []prompb.Label{{Name: "__name__", Value: metricOf(i)}, {Name: "id", Value: strconv.Itoa(i)}, {Name: "job", Value: "soak"}}
}

// round is a shard's requests of round n: one sample of each of its series.
func (d dataSet) round(shard, n int) [][]byte {
	var bodies [][]byte
	var wr prompb.WriteRequest
	flush := func() {
		raw, _ := wr.Marshal()
		bodies = append(bodies, snappy.Encode(nil, raw))
		wr.Timeseries = wr.Timeseries[:0]
	}
	for i := shard; i < d.series; i += senders {
		wr.Timeseries = append(wr.Timeseries, prompb.TimeSeries{Labels: d.labels(i),
			Samples: []prompb.Sample{{Timestamp: d.startMs + int64(n)*d.stepMs, Value: value(i, n)}}})
		if len(wr.Timeseries) == batch {
			flush()
		}
	}
	if len(wr.Timeseries) > 0 {
		flush()
	}
	return bodies
}

// roundRec is when a shard's round was first sent and when its last
// request was acknowledged.
type roundRec struct{ start, acked time.Time }

// load sends the data set steadily: round n of every shard is due at
// wallStart + n*every, and each shard sends its rounds in order, retrying
// every request like Prometheus (5xx and transport errors, backoff 30 ms to
// 5 s) until it is acknowledged.
type load struct {
	d         dataSet
	url       string
	wallStart time.Time
	every     time.Duration

	mu     sync.Mutex
	rounds [senders][]roundRec
	lat    []time.Duration // successful requests' latencies since the last take
	acked  atomic.Int64    // samples
	fatal  chan error
}

func (l *load) run(ctx context.Context) *sync.WaitGroup {
	var wg sync.WaitGroup
	for s := 0; s < senders; s++ {
		wg.Add(1)
		go func(s int) {
			defer wg.Done()
			client := &http.Client{Timeout: time.Minute}
			for n := 0; ; n++ {
				due := l.wallStart.Add(time.Duration(n) * l.every)
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(due)):
				}
				rec := roundRec{start: time.Now()}
				// A round once started is finished, so that every series'
				// samples end at the same round of its shard.
				for _, body := range l.d.round(s, n) {
					if err := l.send(client, body); err != nil {
						l.fatal <- fmt.Errorf("sender %d round %d: %w", s, n, err)
						return
					}
				}
				rec.acked = time.Now()
				l.mu.Lock()
				l.rounds[s] = append(l.rounds[s], rec)
				l.mu.Unlock()
			}
		}(s)
	}
	return &wg
}

func (l *load) send(client *http.Client, body []byte) error {
	backoff := 30 * time.Millisecond
	for deadline := time.Now().Add(10 * time.Minute); ; {
		t0 := time.Now()
		req, _ := http.NewRequest(http.MethodPost, l.url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/x-protobuf")
		req.Header.Set("Content-Encoding", "snappy")
		req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
		resp, err := client.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch {
			case resp.StatusCode/100 == 2:
				l.mu.Lock()
				l.lat = append(l.lat, time.Since(t0))
				l.mu.Unlock()
				l.acked.Add(int64(countSamples(body)))
				return nil
			case resp.StatusCode/100 == 4 && resp.StatusCode != http.StatusTooManyRequests:
				return fmt.Errorf("refused: %s", resp.Status)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not acknowledged in 10 minutes (last: %v)", err)
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, 5*time.Second)
	}
}

// countSamples is a request's sample count (one per series here).
func countSamples(body []byte) int {
	raw, err := snappy.Decode(nil, body)
	if err != nil {
		return 0
	}
	var wr prompb.WriteRequest
	if wr.Unmarshal(raw) != nil {
		return 0
	}
	return len(wr.Timeseries)
}

// takeLatencies returns and forgets the latencies recorded so far.
func (l *load) takeLatencies() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.lat
	l.lat = nil
	return out
}

func (l *load) roundsOf(shard int) []roundRec {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.rounds[shard])
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Ceil(p*float64(len(s))))-1)]
}
