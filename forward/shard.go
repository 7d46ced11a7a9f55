package forward

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/golang/snappy"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// A shard batches the pieces its series are dispatched in and sends them,
// one request at a time, in order: a series always goes to one shard, so
// its samples reach the upstream in the order they were dispatched.
//
// The sender's contract (remote-write 1.0 and 2.0): a 2xx is success (for
// 2.0, only if the *-Written headers account for everything sent); 5xx,
// 429 and transport errors are retried, after Retry-After when the
// upstream gives one, else after an exponential backoff (MinBackoff
// doubling to MaxBackoff), until they succeed or the forwarder stops; a
// 415 to a 2.0 request, or a 2xx without the headers, switches the
// upstream to 1.0 and sends again; any other 4xx is never retried as is.
//
// A 4xx refuses the request, not necessarily every series in it: the
// shard halves the request and sends each half, down to one series, so
// that one series the upstream refuses does not take the rest of the
// batch with it. What a one-series request has refused is dropped and
// counted (reason "http_<status>", one log line at most every 10 s), and
// the series is sent in requests of its own for a while (quarantine), so
// the next batches need no halving. A piece that may have reached the
// upstream before a restart (resent) is halved down to single samples: a
// strict upstream refuses a resent sample older than the series' newest,
// and the newer samples behind it must still go.

type shard struct {
	u     *upstream
	id    int
	in    chan []*piece
	flush chan struct{} // capacity 1: send what is batched now

	batch    []*piece
	items    int
	parts    []part // send's scratch
	deadline *time.Timer

	req  request
	enc1 rw1Encoder
	enc2 rw2Encoder
	buf  []byte
	comp []byte
	idx  map[*seriesState]int

	quarantine map[*seriesState]time.Time
	metaSent   map[string]metaSent

	backoff atomic.Int64 // the wait before a retry now (ns), 0 when none
}

type metaSent struct {
	m  promsample.Metadata
	at time.Time
}

const (
	// quarantineFor: a series refused alone is sent alone this long.
	quarantineFor = 5 * time.Minute
	// metadataEvery: remote-write 1.0 metadata of a family goes again
	// after this long (Prometheus sends it every minute).
	metadataEvery = time.Minute
	// maxRetryAfter caps the wait an upstream's Retry-After asks for.
	maxRetryAfter = 10 * time.Minute
)

func newShard(u *upstream, id int) *shard {
	// The window, not the channel, bounds what is queued: a shard's
	// channel holds the whole window in half-requests (see upstream.send),
	// so that the reader never waits on one busy shard while the others
	// have nothing to send.
	slots := int(u.window/int64(max(u.cfg.Queue.MaxSamplesPerSend/2, 1))) + 4
	s := &shard{u: u, id: id, in: make(chan []*piece, slots), flush: make(chan struct{}, 1),
		deadline: time.NewTimer(time.Hour), idx: map[*seriesState]int{},
		quarantine: map[*seriesState]time.Time{}, metaSent: map[string]metaSent{}}
	s.deadline.Stop()
	return s
}

func (s *shard) run() {
	for {
		select {
		case <-s.u.stop:
			return
		case ps := <-s.in:
			for _, p := range ps {
				s.add(p)
			}
		case <-s.flush:
			s.drain()
			s.send()
		case <-s.deadline.C:
			s.send()
		}
	}
}

func (s *shard) add(p *piece) {
	max := s.u.cfg.Queue.MaxSamplesPerSend
	if s.items > 0 && s.items+p.items() > max {
		s.send()
	}
	if len(s.batch) == 0 {
		s.deadline.Reset(s.u.cfg.Queue.BatchSendDeadline)
	}
	s.batch = append(s.batch, p)
	s.items += p.items()
	if s.items >= max {
		s.send()
	}
}

// drain takes every piece already queued.
func (s *shard) drain() {
	for {
		select {
		case ps := <-s.in:
			for _, p := range ps {
				s.add(p)
			}
		default:
			return
		}
	}
}

// part is (a run of) a piece's items in a request.
type part struct {
	p          *piece
	samples    []promsample.Sample
	histograms []promsample.Histogram
	exemplars  []promsample.Exemplar
}

func (pt part) items() int { return len(pt.samples) + len(pt.histograms) + len(pt.exemplars) }

func itemsOf(parts []part) int {
	n := 0
	for _, pt := range parts {
		n += pt.items()
	}
	return n
}

// halves splits a part's items in two, keeping their order.
func (pt part) halves() (part, part) {
	n := pt.items()
	h := n / 2
	a, b := part{p: pt.p}, part{p: pt.p}
	ns, nh := len(pt.samples), len(pt.histograms)
	switch {
	case h <= ns:
		a.samples, b.samples = pt.samples[:h], pt.samples[h:]
		b.histograms, b.exemplars = pt.histograms, pt.exemplars
	case h <= ns+nh:
		a.samples, a.histograms = pt.samples, pt.histograms[:h-ns]
		b.histograms, b.exemplars = pt.histograms[h-ns:], pt.exemplars
	default:
		a.samples, a.histograms, a.exemplars = pt.samples, pt.histograms, pt.exemplars[:h-ns-nh]
		b.exemplars = pt.exemplars[h-ns-nh:]
	}
	return a, b
}

// send delivers the batch and reports its pieces finished. A batch the
// forwarder stopped in the middle of is not reported: its pieces stay
// unacknowledged, and the next process sends them again.
func (s *shard) send() {
	s.deadline.Stop()
	if len(s.batch) == 0 {
		return
	}
	pieces := s.batch
	s.batch, s.items = nil, 0
	now := time.Now()
	// normal is reused from batch to batch: deliver is done with it when
	// it returns.
	normal := s.parts[:0]
	var alone [][]part
	var where map[*seriesState]int
	for _, p := range pieces {
		pt := part{p: p, samples: p.samples, histograms: p.histograms, exemplars: p.exemplars}
		if t, ok := s.quarantine[p.s]; ok {
			if now.Sub(t) < quarantineFor {
				if where == nil {
					where = map[*seriesState]int{}
				}
				i, ok := where[p.s]
				if !ok {
					i = len(alone)
					where[p.s] = i
					alone = append(alone, nil)
				}
				alone[i] = append(alone[i], pt)
				continue
			}
			delete(s.quarantine, p.s)
		}
		normal = append(normal, pt)
	}
	ok := s.deliver(normal)
	clear(normal) // let the pieces go with their units
	s.parts = normal[:0]
	for _, parts := range alone {
		ok = ok && s.deliver(parts)
	}
	if !ok {
		return
	}
	// Always reported, stopping or not: the loop takes completions until
	// every shard has returned, and a piece acknowledged and not reported
	// would be sent again by the next process.
	s.u.done <- pieces
}

// outcome is what one request came to.
type outcome int

const (
	outOK outcome = iota
	outRetry
	outUnsupported
	outRejected
	outPartial
)

// deliver sends parts until they are accepted or refused for good (see
// the type's comment); false when the forwarder stopped first.
func (s *shard) deliver(parts []part) bool {
	u := s.u
	q := u.cfg.Queue
	wait := q.MinBackoff
	for attempt := 0; ; attempt++ {
		parts = s.dropTooOld(parts)
		n := itemsOf(parts)
		if n == 0 {
			return true
		}
		if attempt == 0 && u.limiter != nil {
			if err := u.limiter.WaitN(u.ctx, min(n, u.limiter.Burst())); err != nil {
				return false
			}
		}
		res, retryAfter, status, msg := s.post(parts)
		switch res {
		case outOK:
			s.backoff.Store(0)
			return true
		case outRetry:
			u.stats.failed.Add(int64(n))
			u.stats.retried.Add(1)
			d := wait
			if retryAfter > 0 {
				d = min(retryAfter, maxRetryAfter)
			}
			wait = min(2*wait, q.MaxBackoff)
			s.backoff.Store(int64(d))
			u.warnShared(fmt.Sprintf("retry:%d", status), "sending failed; retrying", "status", status, "err", msg, "backoff", d)
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-u.stop:
				t.Stop()
				return false
			}
			s.backoff.Store(0)
			continue
		case outUnsupported:
			// Not written: send the same parts again, as 1.0.
			if u.proto.CompareAndSwap(int32(RW2), int32(RW1)) {
				u.log.Warn("the upstream does not take remote-write 2.0; sending 1.0 from now on", "status", status, "err", msg)
			}
			continue
		}
		// Refused (4xx), or a 2.0 write that wrote less than it was sent.
		u.stats.failed.Add(int64(n))
		if len(parts) > 1 {
			h := len(parts) / 2
			return s.deliver(parts[:h]) && s.deliver(parts[h:])
		}
		pt := parts[0]
		if pt.p.resent && pt.items() > 1 {
			a, b := pt.halves()
			return s.deliver([]part{a}) && s.deliver([]part{b})
		}
		reason := "http_" + strconv.Itoa(status)
		if res == outPartial {
			reason = reasonPartial
		}
		u.stats.drop(reason, int64(n))
		s.quarantine[pt.p.s] = time.Now()
		u.warnShared("drop:"+reason, "the upstream refused a series' samples; dropped, not retried",
			"reason", reason, "series", pt.p.s.lbls.String(), "samples", n, "err", msg)
		return true
	}
}

// dropTooOld removes samples older than MaxAge (counted), as Prometheus's
// sample_age_limit does, before every attempt.
func (s *shard) dropTooOld(parts []part) []part {
	age := s.u.cfg.MaxAge
	if age <= 0 {
		return parts
	}
	limit := s.u.now().Add(-age).UnixMilli()
	var dropped int64
	out := parts[:0:0]
	for _, pt := range parts {
		keep := pt
		keep.samples = nil
		for i, smp := range pt.samples {
			if smp.T >= limit {
				keep.samples = pt.samples[i:]
				break
			}
		}
		dropped += int64(len(pt.samples) - len(keep.samples))
		keep.histograms = keep.histograms[:0:0]
		for _, h := range pt.histograms {
			if h.T >= limit {
				keep.histograms = append(keep.histograms, h)
			} else {
				dropped++
			}
		}
		keep.exemplars = keep.exemplars[:0:0]
		for _, e := range pt.exemplars {
			if e.T == 0 || e.T >= limit {
				keep.exemplars = append(keep.exemplars, e)
			} else {
				dropped++
			}
		}
		if keep.items() > 0 {
			out = append(out, keep)
		}
	}
	s.u.stats.drop(reasonTooOld, dropped)
	return out
}

// build fills s.req from parts: each series once, its items in order.
func (s *shard) build(parts []part, proto Protocol) {
	r := &s.req
	r.reset()
	clear(s.idx)
	for _, pt := range parts {
		i, ok := s.idx[pt.p.s]
		if !ok {
			i = len(r.series)
			s.idx[pt.p.s] = i
			r.series = append(r.series, reqSeries{s: pt.p.s, meta: pt.p.meta})
		}
		rs := &r.series[i]
		if !ok {
			// A series' first part (most often its only one) is sent from
			// the piece's own slices, not copied. They are clipped to
			// their length: a second part of the series appends, and must
			// copy rather than write over the unit's items after them.
			rs.samples = pt.samples[:len(pt.samples):len(pt.samples)]
			rs.histograms = pt.histograms[:len(pt.histograms):len(pt.histograms)]
			rs.exemplars = pt.exemplars[:len(pt.exemplars):len(pt.exemplars)]
		} else {
			rs.samples = append(rs.samples, pt.samples...)
			rs.histograms = append(rs.histograms, pt.histograms...)
			rs.exemplars = append(rs.exemplars, pt.exemplars...)
		}
		r.samples += len(pt.samples)
		r.histograms += len(pt.histograms)
		r.exemplar += len(pt.exemplars)
	}
	if proto != RW1 {
		return
	}
	now := time.Now()
	for i := range r.series {
		m := r.series[i].meta
		if m == nil {
			continue
		}
		if ms, ok := s.metaSent[m.MetricFamily]; ok && ms.m == *m && now.Sub(ms.at) < metadataEvery {
			continue
		}
		s.metaSent[m.MetricFamily] = metaSent{m: *m, at: now}
		r.meta = append(r.meta, *m)
	}
}

// post sends parts as one request and classifies the answer.
func (s *shard) post(parts []part) (res outcome, retryAfter time.Duration, status int, msg string) {
	u := s.u
	proto := Protocol(u.proto.Load())
	s.build(parts, proto)
	r := &s.req
	if proto == RW2 {
		s.buf = s.enc2.encode(s.buf[:0], r)
	} else {
		s.buf = s.enc1.encode(s.buf[:0], r)
	}
	s.comp = snappy.Encode(s.comp[:cap(s.comp)], s.buf)
	ctx, cancel := context.WithTimeout(u.ctx, u.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.cfg.URL, bytes.NewReader(s.comp))
	if err != nil {
		return outRejected, 0, 0, err.Error()
	}
	for k, v := range u.cfg.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("User-Agent", u.f.opts.UserAgent)
	if proto == RW2 {
		req.Header.Set("Content-Type", "application/x-protobuf;proto=io.prometheus.write.v2.Request")
		req.Header.Set("X-Prometheus-Remote-Write-Version", "2.0.0")
	} else {
		req.Header.Set("Content-Type", "application/x-protobuf")
		req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	}
	u.stats.requests.Add(1)
	resp, err := u.client.Do(req)
	if err != nil {
		if u.ctx.Err() != nil {
			return outRetry, 0, 0, "stopping"
		}
		return outRetry, 0, 0, err.Error()
	}
	defer resp.Body.Close()
	status = resp.StatusCode
	if status/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		msg = string(bytes.TrimSpace(b))
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case status/100 == 2:
		if proto == RW2 {
			if res, msg := s.checkWritten(resp.Header); res != outOK {
				return res, 0, status, msg
			}
		}
		u.stats.samples.Add(int64(r.samples))
		u.stats.histograms.Add(int64(r.histograms))
		u.stats.exemplars.Add(int64(r.exemplar))
		u.stats.lastSuccess.Store(time.Now().UnixNano())
		return outOK, 0, status, ""
	case status/100 == 5, status == http.StatusTooManyRequests:
		return outRetry, parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()), status, msg
	case status == http.StatusUnsupportedMediaType && proto == RW2:
		return outUnsupported, 0, status, msg
	}
	return outRejected, 0, status, msg
}

// Remote-write 2.0 response headers.
const (
	headerSamplesWritten    = "X-Prometheus-Remote-Write-Samples-Written"
	headerHistogramsWritten = "X-Prometheus-Remote-Write-Histograms-Written"
	headerExemplarsWritten  = "X-Prometheus-Remote-Write-Exemplars-Written"
)

// checkWritten reads a 2.0 success's headers: none at all means the
// upstream did not read the request as 2.0 (a 1.0 receiver answers 2xx to
// a body it decoded as an empty 1.0 message), which the spec says to take
// as a 415; fewer samples or histograms written than sent is a failure.
func (s *shard) checkWritten(h http.Header) (outcome, string) {
	r := &s.req
	vs, hs, es := h.Get(headerSamplesWritten), h.Get(headerHistogramsWritten), h.Get(headerExemplarsWritten)
	if vs == "" && hs == "" && es == "" {
		return outUnsupported, "2xx without " + headerSamplesWritten
	}
	num := func(v string) int {
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0 // a missing or unreadable header means 0
		}
		return n
	}
	if num(vs) < r.samples || num(hs) < r.histograms {
		return outPartial, fmt.Sprintf("wrote %s samples of %d and %s histograms of %d", vs, r.samples, hs, r.histograms)
	}
	if w := num(es); w < r.exemplar {
		s.u.stats.drop(reasonExemplars, int64(r.exemplar-w))
	}
	return outOK, ""
}

// parseRetryAfter reads a Retry-After value: seconds, or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil {
		return max(time.Duration(n)*time.Second, 0)
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}
