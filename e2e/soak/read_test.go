package soak

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// remoteRead asks url for matchers over [mint, maxt] (SAMPLES).
func remoteRead(ctx context.Context, client *http.Client, url string, mint, maxt int64, ms ...*prompb.LabelMatcher) ([]*prompb.TimeSeries, error) {
	rr := prompb.ReadRequest{Queries: []*prompb.Query{{StartTimestampMs: mint, EndTimestampMs: maxt, Matchers: ms}}}
	raw, err := rr.Marshal()
	if err != nil {
		return nil, err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(snappy.Encode(nil, raw)))
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("X-Prometheus-Remote-Read-Version", "0.1.0")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("remote-read: %s: %s", resp.Status, bytes.TrimSpace(body))
	}
	dec, err := snappy.Decode(nil, body)
	if err != nil {
		return nil, err
	}
	var rsp prompb.ReadResponse
	if err := rsp.Unmarshal(dec); err != nil {
		return nil, err
	}
	if len(rsp.Results) != 1 {
		return nil, fmt.Errorf("remote-read: %d results", len(rsp.Results))
	}
	return rsp.Results[0].Timeseries, nil
}

func eqMatcher(name, value string) *prompb.LabelMatcher {
	return &prompb.LabelMatcher{Type: prompb.LabelMatcher_EQ, Name: name, Value: value}
}

// checkSeries checks one returned series against the data set: its id,
// every sample on the grid, in order, once, bit-exact. It returns the id
// and the rounds present.
func (d dataSet) checkSeries(ts *prompb.TimeSeries) (int, []int, error) {
	id := -1
	for _, l := range ts.Labels {
		if l.Name == "id" {
			id, _ = strconv.Atoi(l.Value)
		}
	}
	if id < 0 || id >= d.series {
		return 0, nil, fmt.Errorf("a series the load never sent: %v", ts.Labels)
	}
	rounds := make([]int, 0, len(ts.Samples))
	for j, s := range ts.Samples {
		off := s.Timestamp - d.startMs
		if off < 0 || off%d.stepMs != 0 {
			return id, nil, fmt.Errorf("series %d: a sample at %d, off the grid", id, s.Timestamp)
		}
		n := int(off / d.stepMs)
		if j > 0 && n <= rounds[j-1] {
			return id, nil, fmt.Errorf("series %d: round %d after round %d (duplicate or out of order)", id, n, rounds[j-1])
		}
		if want := value(id, n); math.Float64bits(s.Value) != math.Float64bits(want) {
			return id, nil, fmt.Errorf("series %d round %d: %#x, want %#x", id, n, math.Float64bits(s.Value), math.Float64bits(want))
		}
		rounds = append(rounds, n)
	}
	return id, rounds, nil
}

// The reader process (SOAK_ROLE=reader): this test binary re-executed. It
// queries the server until it is stopped and prints one line per answer:
//
//	series <ms> <samples>   one series over the last ten minutes of samples
//	metric <ms> <samples>   a whole metric over the last minute of samples
//	direct <ms>             the archive opened from its file, one snapshot
//	err <message>
func runReader() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	env := func(k string) int64 { v, _ := strconv.ParseInt(os.Getenv(k), 10, 64); return v }
	d := dataSet{series: int(env("SOAK_SERIES")), startMs: env("SOAK_START_MS"), stepMs: env("SOAK_STEP_MS")}
	wallStart := time.Unix(0, env("SOAK_WALL_START_NS"))
	accel, _ := strconv.ParseFloat(os.Getenv("SOAK_ACCEL"), 64)
	url, path := os.Getenv("SOAK_READ_URL"), os.Getenv("SOAK_ARCHIVE")
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	say := func(format string, args ...any) {
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	sampleNow := func() int64 {
		return d.startMs + int64(float64(time.Since(wallStart).Milliseconds())*accel)
	}
	client := &http.Client{Timeout: 2 * time.Minute}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return 0
		case <-tick.C:
		}
		now := sampleNow()
		switch {
		case n%120 == 60: // once a minute: the file itself, from this process
			t0 := time.Now()
			a, err := archive.Open(path)
			if err == nil {
				_, err = a.Stats(ctx)
				a.Close()
			}
			if err != nil {
				say("err direct read: %v", err)
				continue
			}
			say("direct %d", time.Since(t0).Milliseconds())
		case n%30 == 15: // every 15 s: a whole metric's last minute
			t0 := time.Now()
			got, err := remoteRead(ctx, client, url, now-60_000, now, eqMatcher("__name__", metricOf(rng.Intn(metrics))))
			if err != nil {
				if ctx.Err() == nil {
					say("err metric read: %v", err)
				}
				continue
			}
			samples := 0
			for _, ts := range got {
				if _, r, err := d.checkSeries(ts); err != nil {
					say("err %v", err)
				} else {
					samples += len(r)
				}
			}
			say("metric %d %d", time.Since(t0).Milliseconds(), samples)
		default:
			i := rng.Intn(d.series)
			t0 := time.Now()
			got, err := remoteRead(ctx, client, url, now-600_000, now, eqMatcher("__name__", metricOf(i)), eqMatcher("id", strconv.Itoa(i)))
			if err != nil {
				if ctx.Err() == nil {
					say("err series read: %v", err)
				}
				continue
			}
			samples := 0
			for _, ts := range got {
				if _, r, err := d.checkSeries(ts); err != nil {
					say("err %v", err)
				} else {
					samples += len(r)
				}
			}
			say("series %d %d", time.Since(t0).Milliseconds(), samples)
		}
	}
}
