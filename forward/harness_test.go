package forward_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	"github.com/dendro-receiver/dendro-receiver/forward"
	"github.com/dendro-receiver/dendro-receiver/receiver"
)

// node is a receiver over a real archive with a forwarder wired the way
// cmd/dendro-receiver wires it: the writer's prune floor, the ingester's
// retention and compaction floors.
type node struct {
	path string
	w    *archive.Writer
	r    *archive.Archive
	ing  *receiver.Ingester
	srv  *httptest.Server
	fwd  *forward.Forwarder
	url  string

	stopRun context.CancelFunc
	runDone chan struct{}
	closed  bool
}

type nodeOptions struct {
	fwd  forward.Options
	seal archive.SealPolicy
	// background runs the ingester's sealing, retention and compaction.
	background bool
	ingest     receiver.IngestOptions // Retention, RetentionBytes, CompactTargetRows
}

func openNode(t *testing.T, path string, o nodeOptions) *node {
	t.Helper()
	ctx := context.Background()
	if o.fwd.PollInterval == 0 {
		o.fwd.PollInterval = 20 * time.Millisecond
	}
	fwd, err := forward.New(o.fwd)
	if err != nil {
		t.Fatal(err)
	}
	wopts := archive.WriterOptions{Encoder: &promsample.Encoder{}, CheckpointInterval: -1, DeferPrunes: true,
		KeepWAL: fwd.KeepWAL}
	var w *archive.Writer
	if _, err := os.Stat(path); err == nil {
		w, err = archive.OpenWriter(path, wopts)
		if err != nil {
			t.Fatal(err)
		}
	} else if w, err = archive.CreateWriter(path, wopts); err != nil {
		t.Fatal(err)
	}
	r, err := archive.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	io := o.ingest
	io.Writer, io.Reader, io.Seal = w, r, o.seal
	io.Floors = receiver.Floors{Retention: fwd.RetentionFloor, Evicting: fwd.ForcedEviction, Compact: fwd.CompactFloor}
	ing, err := receiver.NewIngester(ctx, io)
	if err != nil {
		t.Fatal(err)
	}
	h, err := receiver.NewHandler(ing, receiver.Options{Registerer: prometheus.NewRegistry(), Series: ing.Series()})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{path: path, w: w, r: r, ing: ing, fwd: fwd, srv: httptest.NewServer(h)}
	n.url = n.srv.URL + "/api/v1/write"
	if err := fwd.Start(ctx, r, w); err != nil {
		t.Fatal(err)
	}
	if o.background {
		bg, cancel := context.WithCancel(ctx)
		n.stopRun, n.runDone = cancel, make(chan struct{})
		go func() { defer close(n.runDone); ing.Run(bg) }()
	}
	t.Cleanup(func() { n.close(t) })
	return n
}

// close stops the node in the binary's order.
func (n *node) close(t *testing.T) {
	if n.closed {
		return
	}
	n.closed = true
	n.srv.Close()
	if n.stopRun != nil {
		n.stopRun()
		<-n.runDone
	}
	if err := n.fwd.Close(); err != nil {
		t.Errorf("forwarder close: %v", err)
	}
	if err := n.ing.Finalize(context.Background()); err != nil {
		t.Errorf("finalize: %v", err)
	}
	n.r.Close()
	if err := n.w.Close(); err != nil {
		t.Errorf("writer close: %v", err)
	}
}

// write posts a remote-write 1.0 request to the node.
func (n *node) write(t testing.TB, wr *prompb.WriteRequest) {
	t.Helper()
	b, err := wr.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, n.url, bytes.NewReader(snappy.Encode(nil, b)))
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("write: %d %s", resp.StatusCode, body)
	}
}

func (n *node) sealAll(t testing.TB) {
	t.Helper()
	if err := n.ing.SealAll(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (n *node) stats(t testing.TB) forward.UpstreamStats {
	t.Helper()
	st := n.fwd.Stats()
	if len(st) == 0 {
		t.Fatal("no upstream")
	}
	return st[0]
}

// archiveSeries reads everything the node's archive holds (the reference
// reader: exact duplicates dropped).
func archiveSeries(t testing.TB, path string) []promsample.Series {
	t.Helper()
	a, err := archive.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ss, err := promsample.ReadArchive(context.Background(), a, promsample.AllTime())
	if err != nil {
		t.Fatal(err)
	}
	return ss
}

// ---- the load ----

// gen is a deterministic load: series names, values that test a float's
// bits (stale markers, infinities, the largest and smallest doubles),
// native histograms, exemplars and metadata.
type gen struct {
	series     int
	perSeries  int
	histograms bool
	exemplars  bool
	base       int64 // first sample's ts, Unix ms
	step       int64 // ms between a series' samples
}

func (g gen) value(i, j int) float64 {
	switch (i*7 + j) % 41 {
	case 0:
		return math.Float64frombits(0x7ff0000000000002) // stale marker
	case 1:
		return math.Inf(1)
	case 2:
		return 5e-324
	case 3:
		return 1.7976931348623157e308
	}
	if i%3 == 0 {
		return float64(i*1000 + j) // a counter
	}
	x := uint64(i+1)*0x9e3779b97f4a7c15 ^ uint64(j+1)*0xbf58476d1ce4e5b9
	return math.Float64frombits(x>>12 | 0x3ff0000000000000)
}

func (g gen) labels(i int) []prompb.Label {
	return []prompb.Label{{Name: "__name__", Value: fmt.Sprintf("fwd_metric_%d", i%5)}, {Name: "id", Value: strconv.Itoa(i)},
		{Name: "job", Value: "forward"}}
}

// request r: perSeries samples of every series.
func (g gen) request(r int) *prompb.WriteRequest {
	wr := &prompb.WriteRequest{}
	for i := range g.series {
		ts := prompb.TimeSeries{Labels: g.labels(i)}
		for s := range g.perSeries {
			j := r*g.perSeries + s
			ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: g.base + int64(j)*g.step, Value: g.value(i, j)})
		}
		if g.exemplars && i%4 == 1 {
			j := r * g.perSeries
			ts.Exemplars = append(ts.Exemplars, prompb.Exemplar{Labels: []prompb.Label{{Name: "trace_id", Value: fmt.Sprintf("t%d-%d", i, j)}},
				Value: float64(j), Timestamp: g.base + int64(j)*g.step})
		}
		wr.Timeseries = append(wr.Timeseries, ts)
	}
	if g.histograms {
		for s := range g.perSeries {
			j := r*g.perSeries + s
			h := &histogram.Histogram{Schema: 1, Count: uint64(9 + 2*j), Sum: float64(j) * 1.25, ZeroThreshold: 0.001, ZeroCount: 2,
				PositiveSpans: []histogram.Span{{Offset: 0, Length: 2}}, PositiveBuckets: []int64{int64(4 + j), -1}}
			ts := prompb.TimeSeries{Labels: []prompb.Label{{Name: "__name__", Value: "fwd_latency_seconds"}, {Name: "job", Value: "forward"}},
				Histograms: []prompb.Histogram{prompb.FromIntHistogram(g.base+int64(j)*g.step, h)}}
			wr.Timeseries = append(wr.Timeseries, ts)
		}
	}
	wr.Metadata = []prompb.MetricMetadata{{Type: prompb.MetricMetadata_GAUGE, MetricFamilyName: "fwd_metric_1", Help: "A gauge."},
		{Type: prompb.MetricMetadata_HISTOGRAM, MetricFamilyName: "fwd_latency_seconds", Help: "Latency.", Unit: "seconds"}}
	return wr
}

func (g gen) samples(requests int) int {
	return requests * g.perSeries * g.series
}

// ---- the upstream ----

// stub is a remote-write receiver that keeps everything it is sent, in
// order, with what it could count: duplicates (a sample it already had)
// and samples older than the series' newest.
type stub struct {
	srv *httptest.Server
	t   testing.TB

	mu         sync.Mutex
	series     map[string]*received
	requests   int
	protocols  map[string]int
	duplicates int
	outOfOrder int
	headers    http.Header
	meta       map[string]prompb.MetricMetadata
	// respond, if set, answers a decoded request: a status (0: 204) and
	// headers; only a 2xx is kept.
	respond func(d *decoded) (int, http.Header)
	// noWritten: a 2.0 answer without the *-Written headers (a 1.0
	// receiver's answer).
	noWritten bool
}

type received struct {
	lbls       labels.Labels
	samples    []promsample.Sample
	histograms []promsample.Histogram
	exemplars  []promsample.Exemplar
	seen       map[[2]uint64]bool
}

// decoded is one request as the stub read it.
type decoded struct {
	v2                           bool
	series                       []promsample.Series
	meta                         []prompb.MetricMetadata
	samples, histograms, exempls int
}

func (d *decoded) has(name, value string) bool {
	for _, s := range d.series {
		if s.Labels.Get(name) == value {
			return true
		}
	}
	return false
}

func newStub(t testing.TB) *stub {
	s := &stub{t: t, series: map[string]*received{}, protocols: map[string]int{}, meta: map[string]prompb.MetricMetadata{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *stub) url() string { return s.srv.URL + "/api/v1/write" }

func (s *stub) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	raw, err := snappy.Decode(nil, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	d := &decoded{v2: strings.Contains(r.Header.Get("Content-Type"), "io.prometheus.write.v2.Request")}
	if d.v2 {
		err = decodeV2(raw, d)
	} else {
		err = decodeV1(raw, d)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.requests++
	s.headers = r.Header.Clone()
	respond, noWritten := s.respond, s.noWritten
	s.mu.Unlock()
	status, hdr := 0, http.Header(nil)
	if respond != nil {
		status, hdr = respond(d)
	}
	if status == 0 {
		status = http.StatusNoContent
	}
	for k, v := range hdr {
		w.Header()[k] = v
	}
	if status/100 == 2 {
		s.keep(d)
		if d.v2 && !noWritten && hdr == nil {
			w.Header().Set("X-Prometheus-Remote-Write-Samples-Written", strconv.Itoa(d.samples))
			w.Header().Set("X-Prometheus-Remote-Write-Histograms-Written", strconv.Itoa(d.histograms))
			w.Header().Set("X-Prometheus-Remote-Write-Exemplars-Written", strconv.Itoa(d.exempls))
		}
	}
	w.WriteHeader(status)
}

func (s *stub) keep(d *decoded) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.v2 {
		s.protocols["rw2"]++
	} else {
		s.protocols["rw1"]++
	}
	for _, m := range d.meta {
		s.meta[m.MetricFamilyName] = m
	}
	for _, ss := range d.series {
		k := ss.Labels.String()
		g := s.series[k]
		if g == nil {
			g = &received{lbls: ss.Labels, seen: map[[2]uint64]bool{}}
			s.series[k] = g
		}
		for _, smp := range ss.Samples {
			key := [2]uint64{uint64(smp.T), math.Float64bits(smp.V)}
			if g.seen[key] {
				s.duplicates++
				continue
			}
			g.seen[key] = true
			if n := len(g.samples); n > 0 && smp.T <= g.samples[n-1].T {
				s.outOfOrder++
			}
			g.samples = append(g.samples, smp)
		}
		for _, h := range ss.Histograms {
			key := [2]uint64{uint64(h.T), 1}
			if g.seen[key] {
				s.duplicates++
				continue
			}
			g.seen[key] = true
			g.histograms = append(g.histograms, h)
		}
		for _, e := range ss.Exemplars {
			key := [2]uint64{uint64(e.T), math.Float64bits(e.V) ^ 2}
			if g.seen[key] {
				continue
			}
			g.seen[key] = true
			g.exemplars = append(g.exemplars, e)
		}
	}
}

func decodeV1(raw []byte, d *decoded) error {
	var wr prompb.WriteRequest
	if err := wr.Unmarshal(raw); err != nil {
		return err
	}
	for _, ts := range wr.Timeseries {
		var sb labels.ScratchBuilder
		for _, l := range ts.Labels {
			sb.Add(l.Name, l.Value)
		}
		sb.Sort()
		ps := promsample.Series{Labels: sb.Labels()}
		for _, smp := range ts.Samples {
			ps.Samples = append(ps.Samples, promsample.Sample{T: smp.Timestamp, V: smp.Value})
		}
		for _, h := range ts.Histograms {
			if h.IsFloatHistogram() {
				ps.Histograms = append(ps.Histograms, promsample.Histogram{T: h.Timestamp, FH: h.ToFloatHistogram()})
			} else {
				ps.Histograms = append(ps.Histograms, promsample.Histogram{T: h.Timestamp, H: h.ToIntHistogram()})
			}
		}
		for _, e := range ts.Exemplars {
			var eb labels.ScratchBuilder
			for _, l := range e.Labels {
				eb.Add(l.Name, l.Value)
			}
			ps.Exemplars = append(ps.Exemplars, promsample.Exemplar{Labels: eb.Labels(), T: e.Timestamp, V: e.Value})
		}
		d.samples += len(ps.Samples)
		d.histograms += len(ps.Histograms)
		d.exempls += len(ps.Exemplars)
		d.series = append(d.series, ps)
	}
	d.meta = wr.Metadata
	return nil
}

func decodeV2(raw []byte, d *decoded) error {
	var req writev2.Request
	if err := req.Unmarshal(raw); err != nil {
		return err
	}
	if len(req.Symbols) == 0 || req.Symbols[0] != "" {
		return fmt.Errorf("symbols[0] is not empty")
	}
	for _, ts := range req.Timeseries {
		var sb labels.ScratchBuilder
		ls, err := ts.ToLabels(&sb, req.Symbols)
		if err != nil {
			return err
		}
		ps := promsample.Series{Labels: ls}
		for _, smp := range ts.Samples {
			ps.Samples = append(ps.Samples, promsample.Sample{T: smp.Timestamp, V: smp.Value})
		}
		for _, h := range ts.Histograms {
			if h.IsFloatHistogram() {
				ps.Histograms = append(ps.Histograms, promsample.Histogram{T: h.Timestamp, FH: h.ToFloatHistogram()})
			} else {
				ps.Histograms = append(ps.Histograms, promsample.Histogram{T: h.Timestamp, H: h.ToIntHistogram()})
			}
		}
		for _, e := range ts.Exemplars {
			ex, err := e.ToExemplar(&sb, req.Symbols)
			if err != nil {
				return err
			}
			ps.Exemplars = append(ps.Exemplars, promsample.Exemplar{Labels: ex.Labels, T: ex.Ts, V: ex.Value})
		}
		if md, err := ts.ToMetadata(req.Symbols); err == nil && md.Type != "" && md.Type != "unknown" {
			d.meta = append(d.meta, prompb.MetricMetadata{MetricFamilyName: ls.Get("__name__"), Help: md.Help, Unit: md.Unit})
		}
		d.samples += len(ps.Samples)
		d.histograms += len(ps.Histograms)
		d.exempls += len(ps.Exemplars)
		d.series = append(d.series, ps)
	}
	return nil
}

// diff compares what the stub holds with want (the archive's series) and
// says what differs, "" when nothing does.
func (s *stub) diff(want []promsample.Series) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	seen := map[string]bool{}
	for _, w := range want {
		k := w.Labels.String()
		seen[k] = true
		g := s.series[k]
		if g == nil {
			fmt.Fprintf(&b, "missing series %s (%d samples)\n", k, len(w.Samples))
			continue
		}
		if d := diffSamples(g.samples, w.Samples); d != "" {
			fmt.Fprintf(&b, "%s: %s\n", k, d)
		}
		if len(g.histograms) != len(w.Histograms) {
			fmt.Fprintf(&b, "%s: %d histograms, want %d\n", k, len(g.histograms), len(w.Histograms))
		} else {
			for i, h := range w.Histograms {
				gh := g.histograms[i]
				if gh.T != h.T || (h.H != nil && (gh.H == nil || !gh.H.Equals(h.H))) || (h.FH != nil && (gh.FH == nil || !gh.FH.Equals(h.FH))) {
					fmt.Fprintf(&b, "%s: histogram %d differs\n", k, i)
				}
			}
		}
		if len(g.exemplars) != len(w.Exemplars) {
			fmt.Fprintf(&b, "%s: %d exemplars, want %d\n", k, len(g.exemplars), len(w.Exemplars))
		}
		if b.Len() > 2000 {
			break
		}
	}
	var extra []string
	for k := range s.series {
		if !seen[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		fmt.Fprintf(&b, "extra series %s\n", k)
	}
	return b.String()
}

func diffSamples(got, want []promsample.Sample) string {
	g := append([]promsample.Sample(nil), got...)
	sort.SliceStable(g, func(i, j int) bool { return g[i].T < g[j].T })
	if len(g) != len(want) {
		return fmt.Sprintf("%d samples, want %d", len(g), len(want))
	}
	for i := range want {
		if g[i].T != want[i].T || math.Float64bits(g[i].V) != math.Float64bits(want[i].V) {
			return fmt.Sprintf("sample %d: %d %x, want %d %x", i, g[i].T, math.Float64bits(g[i].V), want[i].T, math.Float64bits(want[i].V))
		}
	}
	return ""
}

func (s *stub) counts() (requests, duplicates, outOfOrder int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests, s.duplicates, s.outOfOrder
}

func (s *stub) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, g := range s.series {
		n += len(g.samples)
	}
	return n
}

// eventually polls cond until it returns "" or the deadline passes.
func eventually(t testing.TB, d time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for time.Now().Before(deadline) {
		if last = cond(); last == "" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(last) > 3000 {
		last = last[:3000] + "..."
	}
	t.Fatalf("not after %v:\n%s", d, last)
}

func upstreamTo(url string) forward.Options {
	return forward.Options{Upstreams: []forward.Upstream{{URL: url, Queue: forward.QueueConfig{
		MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, BatchSendDeadline: 50 * time.Millisecond}}}}
}

func tempPath(t testing.TB) string { return filepath.Join(t.TempDir(), "node.db") }

func ingestOptions(retention time.Duration, bytes int64) receiver.IngestOptions {
	return receiver.IngestOptions{Retention: retention, RetentionBytes: bytes, CompactTargetRows: -1}
}

// diffArchives says which series lost samples from before to after.
func diffArchives(before, after []promsample.Series) string {
	have := map[string]int{}
	for _, s := range after {
		have[s.Labels.String()] = len(s.Samples)
	}
	for _, s := range before {
		if have[s.Labels.String()] < len(s.Samples) {
			return fmt.Sprintf("%s: %d samples, had %d", s.Labels, have[s.Labels.String()], len(s.Samples))
		}
	}
	return ""
}
