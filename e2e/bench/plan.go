package main

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"
)

// Layout is how a data set is cut into remote-write requests.
//
// Sender w of Senders owns the series i with i % Senders == w, as a
// Prometheus queue manager shards series, and sends its requests one at a
// time, so each series' samples arrive in time order. A sender walks time
// in runs of PerSeries samples: for each run it appends every owned
// series' PerSeries consecutive samples, and cuts a request whenever it
// holds Batch samples. PerSeries 1 is a Prometheus in steady state (one
// sample per series per request); 4 is one catching up.
type Layout struct {
	Batch     int `json:"batch"`      // samples per request (the last of a sender may hold fewer)
	PerSeries int `json:"per_series"` // consecutive samples of one series in a request
	Senders   int `json:"senders"`
}

// Validate reports a layout that cannot be planned.
func (l Layout) Validate() error {
	if l.Batch <= 0 || l.PerSeries <= 0 || l.Senders <= 0 {
		return fmt.Errorf("bench: layout %+v: every field must be > 0", l)
	}
	return nil
}

// span is n consecutive samples j0 .. j0+n-1 of one series in a request.
type span struct{ series, j0, n int }

// plan calls emit with sender w's requests, in send order.
func (l Layout) plan(d Dataset, w int, emit func(req []span)) {
	var req []span
	held := 0
	for r := 0; r < d.Samples; r += l.PerSeries {
		end := min(r+l.PerSeries, d.Samples)
		for i := w; i < d.Series; i += l.Senders {
			for j := r; j < end; {
				n := min(end-j, l.Batch-held)
				req = append(req, span{i, j, n})
				held += n
				j += n
				if held == l.Batch {
					emit(req)
					req, held = nil, 0
				}
			}
		}
	}
	if held > 0 {
		emit(req)
	}
}

// request is one encoded remote-write 1.0 request.
type request struct {
	body    []byte // snappy-compressed prompb.WriteRequest
	samples int
}

// Load is every sender's requests for one data set and layout, encoded
// before any clock starts, so the timed phase only sends. It is immutable
// and sent unchanged to every server.
type Load struct {
	Dataset Dataset
	Layout  Layout
	senders [][]request
	bytes   int64
}

// Requests is the number of requests, all senders together.
func (ld *Load) Requests() int {
	n := 0
	for _, s := range ld.senders {
		n += len(s)
	}
	return n
}

// Bytes is the size of every request body together.
func (ld *Load) Bytes() int64 { return ld.bytes }

// Encode builds a Load, encoding the senders' requests in parallel on up
// to GOMAXPROCS goroutines.
func Encode(d Dataset, l Layout) (*Load, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	ld := &Load{Dataset: d, Layout: l, senders: make([][]request, l.Senders)}
	work := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range min(runtime.GOMAXPROCS(0), l.Senders) {
		wg.Go(func() {
			for w := range work {
				reqs, err := encodeSender(d, l, w)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				ld.senders[w] = reqs
				mu.Unlock()
			}
		})
	}
	for w := range l.Senders {
		work <- w
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	for _, s := range ld.senders {
		for _, r := range s {
			ld.bytes += int64(len(r.body))
		}
	}
	return ld, nil
}

// encodeSender encodes sender w's requests. Its series' value generators
// live for the whole walk: runs of one series come in time order.
func encodeSender(d Dataset, l Layout, w int) ([]request, error) {
	type state struct {
		labels []prompb.Label
		values *Values
	}
	owned := make([]*state, (d.Series+l.Senders-1)/l.Senders)
	var (
		out  []request
		raw  []byte
		err  error
		wr   prompb.WriteRequest
		pool []prompb.Sample
	)
	l.plan(d, w, func(req []span) {
		if err != nil {
			return
		}
		wr.Timeseries = wr.Timeseries[:0]
		pool = pool[:0]
		samples := 0
		for _, r := range req {
			st := owned[r.series/l.Senders]
			if st == nil {
				st = &state{labels: d.Labels(r.series), values: d.Values(r.series)}
				owned[r.series/l.Senders] = st
			}
			from := len(pool)
			for k := range r.n {
				pool = append(pool, prompb.Sample{Timestamp: d.Timestamp(r.j0 + k), Value: st.values.Next()})
			}
			wr.Timeseries = append(wr.Timeseries, prompb.TimeSeries{Labels: st.labels, Samples: pool[from:len(pool):len(pool)]})
			samples += r.n
		}
		size := wr.Size()
		if cap(raw) < size {
			raw = make([]byte, size)
		}
		n, merr := wr.MarshalToSizedBuffer(raw[:size])
		if merr != nil {
			err = fmt.Errorf("bench: encode request %d of sender %d: %w", len(out), w, merr)
			return
		}
		out = append(out, request{body: snappy.Encode(nil, raw[:n]), samples: samples})
	})
	return out, err
}
