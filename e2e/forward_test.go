package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// Store and forward (issue 17) against real upstreams on loopback: a
// Prometheus 2.42 remote-write receiver, a VictoriaMetrics 1.79 and a
// second dendro-receiver sent remote-write 2.0. Every sample the source
// archive holds must be in each, bit for bit, read back from each.

// vmetrics is a running VictoriaMetrics single node.
type vmetrics struct {
	*proc
	addr, dir string
}

func startVM(t *testing.T, bin, addr, dir, logDir string) *vmetrics {
	t.Helper()
	p := startProc(t, "victoria-metrics", logDir, 10*time.Second, bin,
		"-storageDataPath="+dir, "-httpListenAddr="+addr, "-retentionPeriod=100y", "-loggerLevel=WARN")
	waitReady(t, p, "http://"+addr+"/health", 60*time.Second)
	return &vmetrics{proc: p, addr: addr, dir: dir}
}

// startPromReceiver starts a Prometheus that scrapes nothing and takes
// remote writes, with its TSDB in dir (so it can be restarted on it).
func startPromReceiver(t *testing.T, bin, addr, dir, logDir string) *prometheus {
	t.Helper()
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte("global: {scrape_interval: 1m}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, "prometheus", logDir, 10*time.Second, bin, "--config.file="+cfg,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr,
		"--web.enable-remote-write-receiver", "--log.level=warn")
	base := "http://" + addr
	waitReady(t, p, base+"/-/ready", 60*time.Second)
	return &prometheus{proc: p, url: base}
}

// fwdLoad is the load the source is sent: series of counters and gauges
// whose values every upstream keeps exactly (VictoriaMetrics keeps about
// 12 significant decimal digits per block, so nothing wider), ending in a
// stale marker now and then.
type fwdLoad struct {
	series, perRequest int
	base, step         int64 // Unix ms
}

func (l fwdLoad) value(i, j int) float64 {
	if j%97 == 96 {
		return math.Float64frombits(staleNaN)
	}
	if i%2 == 0 {
		return float64(i*100000 + j) // a counter
	}
	return float64((i*31+j*7)%4000) / 4 // a gauge in quarters
}

// request r holds samples r*perRequest ... of every series.
func (l fwdLoad) request(r int) *prompb.WriteRequest {
	wr := &prompb.WriteRequest{}
	for i := range l.series {
		ts := prompb.TimeSeries{Labels: []prompb.Label{{Name: "__name__", Value: fmt.Sprintf("fwd_e2e_%d", i%7)},
			{Name: "id", Value: strconv.Itoa(i)}, {Name: "job", Value: "forward"}}}
		for s := range l.perRequest {
			j := r*l.perRequest + s
			ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: l.base + int64(j)*l.step, Value: l.value(i, j)})
		}
		wr.Timeseries = append(wr.Timeseries, ts)
	}
	return wr
}

// postRW1 sends one remote-write 1.0 request; an error for anything but 2xx.
func postRW1(ctx context.Context, url string, wr *prompb.WriteRequest) error {
	b, err := wr.Marshal()
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(snappy.Encode(nil, b)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// metric sums the values of a metric's lines whose labels contain match.
func metric(base, name, match string) (float64, error) {
	code, body, err := httpGet(context.Background(), base+"/metrics")
	if err != nil {
		return 0, err
	}
	if code != 200 {
		return 0, fmt.Errorf("/metrics: %d", code)
	}
	var sum float64
	found := false
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != '{' && line[len(name)] != ' ') {
			continue
		}
		if match != "" && !strings.Contains(line, match) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, err
		}
		sum += v
		found = true
	}
	if !found {
		return 0, fmt.Errorf("no %s{%s}", name, match)
	}
	return sum, nil
}

// vmExport reads every sample of series matching match from
// VictoriaMetrics's /api/v1/export (its stale markers read back as null;
// it keeps no other NaN).
func vmExport(ctx context.Context, addr, match string) (map[string][]sample, error) {
	q := url.Values{"match[]": {match}, "start": {"0"}}
	code, body, err := httpGet(ctx, "http://"+addr+"/api/v1/export?"+q.Encode())
	if err != nil {
		return nil, err
	}
	if code != 200 {
		return nil, fmt.Errorf("export: %d %s", code, body)
	}
	out := map[string][]sample{}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	for dec.More() {
		var line struct {
			Metric     map[string]string
			Values     []any
			Timestamps []int64
		}
		if err := dec.Decode(&line); err != nil {
			return nil, err
		}
		k := labels.FromMap(line.Metric).String()
		for i, v := range line.Values {
			bits := uint64(staleNaN)
			switch x := v.(type) {
			case json.Number:
				f, err := strconv.ParseFloat(x.String(), 64)
				if err != nil {
					return nil, err
				}
				bits = math.Float64bits(f)
			case string:
				f, err := strconv.ParseFloat(x, 64)
				if err != nil {
					return nil, err
				}
				bits = math.Float64bits(f)
			}
			out[k] = append(out[k], sample{T: line.Timestamps[i], Bits: bits})
		}
	}
	for k := range out {
		sort.SliceStable(out[k], func(i, j int) bool { return out[k][i].T < out[k][j].T })
	}
	return out, nil
}

// promRemoteRead reads every sample of the fwd_e2e series from a Prometheus
// through its remote-read (bit-exact, NaN payloads included).
func promRemoteRead(ctx context.Context, base string) (map[string][]sample, error) {
	raw, err := remoteRead(ctx, base, 0, math.MaxInt64, &prompb.LabelMatcher{Type: prompb.LabelMatcher_RE, Name: "__name__", Value: "fwd_e2e_.*"})
	if err != nil {
		return nil, err
	}
	out := map[string][]sample{}
	for k, ss := range raw {
		for _, s := range ss {
			var t int64
			var b uint64
			fmt.Sscanf(s, "%d:%x", &t, &b)
			out[k] = append(out[k], sample{T: t, Bits: b})
		}
	}
	return out, nil
}

// compareSeries says how got differs from want ("" when it does not):
// every sample of want, at its timestamp, with its bits, and nothing else.
// dups counts samples got holds twice (same timestamp and bits).
func compareSeries(want, got map[string][]sample) (diff string, dups int) {
	var b strings.Builder
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		g := got[k]
		var uniq []sample
		for i, s := range g {
			if i > 0 && s == g[i-1] {
				dups++
				continue
			}
			uniq = append(uniq, s)
		}
		w := want[k]
		if len(uniq) != len(w) {
			fmt.Fprintf(&b, "%s: %d samples, want %d\n", k, len(uniq), len(w))
			continue
		}
		for i := range w {
			if uniq[i] != w[i] {
				fmt.Fprintf(&b, "%s: sample %d is %v, want %v\n", k, i, uniq[i], w[i])
				break
			}
		}
		if b.Len() > 3000 {
			return b.String(), dups
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			fmt.Fprintf(&b, "extra series %s\n", k)
		}
	}
	return b.String(), dups
}

// fwdSeries is what the source archive holds of the load.
func fwdSeries(t *testing.T, path string) map[string][]sample {
	t.Helper()
	return fwdArchive(t, path).Series
}

// fwdArchive is what the archive at path holds of fwdLoad's series.
func fwdArchive(t *testing.T, path string) *archived {
	t.Helper()
	got, err := readArchive(context.Background(), path, labels.MustNewMatcher(labels.MatchRegexp, "__name__", "fwd_e2e_.*"))
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// rekey re-keys promRemoteRead's answer by labels.String() (its
// keys are metricKey's).
func rekey(in map[string][]sample) map[string][]sample {
	out := make(map[string][]sample, len(in))
	re := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
	for k, v := range in {
		m := map[string]string{}
		for _, sm := range re.FindAllStringSubmatch(k, -1) {
			m[sm[1]] = sm[2]
		}
		if len(m) == 0 {
			out[k] = v
			continue
		}
		out[labels.FromMap(m).String()] = v
	}
	return out
}

// TestForwardToPrometheusVictoriaMetricsAndDendro: one dendro-receiver
// forwards its archive to a Prometheus 2.42 (remote-write 1.0), a
// VictoriaMetrics 1.79 (1.0) and a second dendro-receiver (2.0); after a
// load that crosses seals, each holds every sample, bit for bit.
func TestForwardToPrometheusVictoriaMetricsAndDendro(t *testing.T) {
	t.Parallel()
	bin := needBinary(t)
	promBin := requireTool(t, "prometheus", "prometheus")
	vmBin := requireTool(t, "victoria-metrics", "victoria-metrics")
	logDir := t.TempDir()
	prom := startPromReceiver(t, promBin, freeAddr(t), t.TempDir(), logDir)
	vm := startVM(t, vmBin, freeAddr(t), t.TempDir(), logDir)
	b := startDendro(t, bin, freeAddr(t), filepath.Join(t.TempDir(), "b.db"), logDir, "--seal.max-rows=7")
	cfg := filepath.Join(t.TempDir(), "forward.yml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`upstreams:
  - url: http://%s/api/v1/write
    name: dendro-b
    protocol: rw2
    headers: {X-Scope-OrgID: from-a}
`, b.addr)), 0o644)
	a := startDendro(t, bin, freeAddr(t), filepath.Join(t.TempDir(), "a.db"), logDir, "--seal.max-rows=5",
		"--forward.url="+prom.url+"/api/v1/write", "--forward.url=http://"+vm.addr+"/api/v1/write", "--forward.config.file="+cfg)

	load := fwdLoad{series: 150, perRequest: 3, base: time.Now().Add(-40 * time.Minute).UnixMilli(), step: 1000}
	ctx := context.Background()
	for r := range 40 {
		if err := postRW1(ctx, "http://"+a.addr+"/api/v1/write", load.request(r)); err != nil {
			t.Fatal(err)
		}
	}
	want := fwdSeries(t, a.archive)
	if n := len(want); n != load.series {
		t.Fatalf("the source holds %d series, want %d", n, load.series)
	}
	check := func(name string, read func() (map[string][]sample, error)) {
		poll(t, 60*time.Second, 500*time.Millisecond, name+" holds every sample", func() (bool, string) {
			got, err := read()
			if err != nil {
				return false, err.Error()
			}
			d, dups := compareSeries(want, got)
			if d == "" && dups != 0 {
				d = fmt.Sprintf("%d duplicates", dups)
			}
			return d == "", d
		})
	}
	check("Prometheus", func() (map[string][]sample, error) {
		got, err := promRemoteRead(ctx, prom.url)
		return rekey(got), err
	})
	check("VictoriaMetrics", func() (map[string][]sample, error) {
		http.Get("http://" + vm.addr + "/internal/force_flush")
		return vmExport(ctx, vm.addr, `{__name__=~"fwd_e2e_.*"}`)
	})
	check("dendro-receiver (remote-write 2.0)", func() (map[string][]sample, error) {
		got, err := readArchive(ctx, b.archive, labels.MustNewMatcher(labels.MatchRegexp, "__name__", "fwd_e2e_.*"))
		if err != nil {
			return nil, err
		}
		return got.Series, nil
	})
	if v, err := metric("http://"+a.addr, "dendro_forward_samples_dropped_total", ""); err == nil && v != 0 {
		t.Errorf("dropped %v samples", v)
	}
	if v, err := metric("http://"+a.addr, "dendro_forward_upstream_info", `protocol="rw2"`); err != nil || v != 1 {
		t.Errorf("upstreams sent remote-write 2.0: %v %v, want 1", v, err)
	}
}

// sender posts the load's requests to url one after another, each until
// it is answered 2xx (as Prometheus retries), until stop is closed; done
// is closed when it returns, after sent counts the requests acknowledged.
type sender struct {
	stop, done chan struct{}
	once       sync.Once
	sent       int
}

func startSender(url func() string, load fwdLoad, every time.Duration) *sender {
	s := &sender{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for r := 0; ; r++ {
			wr := load.request(r)
			for {
				select {
				case <-s.stop:
					return
				case <-time.After(every):
				}
				if postRW1(context.Background(), url(), wr) == nil {
					s.sent++
					break
				}
			}
		}
	}()
	return s
}

func (s *sender) halt() int {
	s.once.Do(func() { close(s.stop) })
	<-s.done
	return s.sent
}

// TestForwardOutageLosesNothing: the upstream (a Prometheus, which refuses
// any sample older than a series' newest) is stopped for a while under
// steady ingest, with seals going on, and started again: every sample
// arrives, none is refused as out of order or dropped, and the lag the
// source reports rose and fell back to zero.
func TestForwardOutageLosesNothing(t *testing.T) {
	t.Parallel()
	bin := needBinary(t)
	promBin := requireTool(t, "prometheus", "prometheus")
	logDir, promDir, promAddr := t.TempDir(), t.TempDir(), freeAddr(t)
	prom := startPromReceiver(t, promBin, promAddr, promDir, logDir)
	a := startDendro(t, bin, freeAddr(t), filepath.Join(t.TempDir(), "a.db"), logDir, "--seal.max-rows=20", "--seal.max-age=2s",
		"--forward.url="+prom.url+"/api/v1/write")
	base := "http://" + a.addr
	load := fwdLoad{series: 100, perRequest: 1, base: time.Now().Add(-20 * time.Minute).UnixMilli(), step: 100}
	snd := startSender(func() string { return base + "/api/v1/write" }, load, 40*time.Millisecond)
	defer snd.halt()

	time.Sleep(2 * time.Second)
	prom.signal(15)
	if !prom.waitExit(30 * time.Second) {
		t.Fatal("Prometheus did not stop")
	}
	var maxLag float64
	// Until the forwarder has tried the stopped upstream, not only until
	// the lag has risen: on a host whose CPUs the other tests saturate (CI
	// runs them in parallel under -race) the lag can rise before any
	// attempt fails, and the upstream would be back before one did.
	poll(t, 60*time.Second, 250*time.Millisecond, "the lag rising during the outage and a send failing", func() (bool, string) {
		v, err := metric(base, "dendro_forward_lag_seconds", "")
		maxLag = max(maxLag, v)
		r, rerr := metric(base, "dendro_forward_requests_retried_total", "")
		return err == nil && rerr == nil && v >= 6 && r > 0, fmt.Sprintf("lag %v (%v), requests retried %v (%v)", v, err, r, rerr)
	})
	prom = startPromReceiver(t, promBin, promAddr, promDir, logDir)
	time.Sleep(time.Second)
	sent := snd.halt()
	want := fwdSeries(t, a.archive)
	total := 0
	for _, ss := range want {
		total += len(ss)
	}
	t.Logf("%d requests, %d samples; lag reached %.1f s", sent, total, maxLag)
	poll(t, 60*time.Second, 500*time.Millisecond, "Prometheus holding every sample", func() (bool, string) {
		got, err := promRemoteRead(context.Background(), prom.url)
		if err != nil {
			return false, err.Error()
		}
		d, _ := compareSeries(want, rekey(got))
		return d == "", d
	})
	poll(t, 20*time.Second, 250*time.Millisecond, "the lag back at zero", func() (bool, string) {
		v, err := metric(base, "dendro_forward_lag_seconds", "")
		return err == nil && v == 0, fmt.Sprintf("lag %v (%v)", v, err)
	})
	if v, err := metric(base, "dendro_forward_samples_dropped_total", ""); err == nil && v != 0 {
		t.Errorf("%v samples dropped", v)
	}
	if v, err := metric(base, "dendro_forward_requests_retried_total", ""); err != nil || v == 0 {
		t.Errorf("requests retried %v (%v): the outage was not noticed", v, err)
	}
}

// rwStub is a remote-write 1.0 receiver that keeps every sample it gets
// and counts what it got twice.
type rwStub struct {
	srv  *httptest.Server
	mu   sync.Mutex
	got  map[string][]sample
	seen map[string]map[sample]bool
	dups int
	down atomic.Bool // answer 503 to everything
	n    int         // samples taken, duplicates included
}

func newRWStub(t *testing.T) *rwStub {
	s := &rwStub{got: map[string][]sample{}, seen: map[string]map[sample]bool{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		body, _ := io.ReadAll(r.Body)
		raw, err := snappy.Decode(nil, body)
		var wr prompb.WriteRequest
		if err == nil {
			err = wr.Unmarshal(raw)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		for _, ts := range wr.Timeseries {
			m := map[string]string{}
			for _, l := range ts.Labels {
				m[l.Name] = l.Value
			}
			k := labels.FromMap(m).String()
			if s.seen[k] == nil {
				s.seen[k] = map[sample]bool{}
			}
			s.n += len(ts.Samples)
			for _, x := range ts.Samples {
				smp := sample{T: x.Timestamp, Bits: math.Float64bits(x.Value)}
				if s.seen[k][smp] {
					s.dups++
					continue
				}
				s.seen[k][smp] = true
				s.got[k] = append(s.got[k], smp)
			}
		}
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *rwStub) snapshot() (map[string][]sample, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]sample, len(s.got))
	for k, v := range s.got {
		c := append([]sample(nil), v...)
		sort.SliceStable(c, func(i, j int) bool { return c[i].T < c[j].T })
		out[k] = c
	}
	return out, s.dups
}

// TestForwardSurvivesKill9: dendro-receiver is SIGKILLed again and again
// while it forwards (and takes writes); after each restart it resumes at
// its cursor. Every sample reaches the upstream; every sample that reached
// it twice was counted as sent again (resent) by the process that sent it
// again, and what each process sent again is bounded by the cursor's
// written-ahead position (see the bounds at the end, and forward/cursor.go).
func TestForwardSurvivesKill9(t *testing.T) {
	t.Parallel()
	bin := needBinary(t)
	logDir := t.TempDir()
	up := newRWStub(t)
	addr, path := freeAddr(t), filepath.Join(t.TempDir(), "a.db")
	args := []string{"--seal.max-rows=10", "--seal.max-age=1s", "--forward.url=" + up.srv.URL + "/api/v1/write", "--forward.shards=2"}
	a := startDendro(t, bin, addr, path, logDir, args...)
	load := fwdLoad{series: 300, perRequest: 2, base: time.Now().Add(-time.Hour).UnixMilli(), step: 1000}
	snd := startSender(func() string { return "http://" + addr + "/api/v1/write" }, load, 5*time.Millisecond)
	defer snd.halt()

	// resentBy reads a process's resent count once it is final: what it
	// sends again after a restart it sends first, so the count stops
	// moving once it has (stable for 300 ms, and read at least once).
	resentBy := func(minUp time.Duration) float64 {
		t0 := time.Now()
		last, since, read := 0.0, time.Now(), false
		for !read || time.Since(t0) < minUp || time.Since(since) < 300*time.Millisecond {
			v, err := metric("http://"+addr, "dendro_forward_samples_resent_total", "")
			if err == nil && (!read || v != last) {
				last, since, read = v, time.Now(), true
			}
			time.Sleep(10 * time.Millisecond)
		}
		return last
	}
	const kills = 5
	const window = 2 * forwardDefaultCapacity
	var resent, most float64
	for k := range kills {
		// Kill while it forwards new data, once its count is final.
		r := resentBy(time.Duration(400+k*150) * time.Millisecond)
		resent, most = resent+r, max(most, r)
		a.kill(t)
		a = startDendro(t, bin, addr, path, logDir, args...)
	}
	sent := snd.halt()
	want := fwdSeries(t, a.archive)
	awaitEverySample(t, up, want, 60*time.Second)
	r := resentBy(0)
	resent, most = resent+r, max(most, r)
	_, dups := up.snapshot()
	t.Logf("%d requests over %d kills; the upstream got %d samples twice; the forwarders counted %.0f resent (at most %.0f by one process)",
		sent, kills, dups, resent, most)
	if float64(dups) > resent {
		t.Errorf("%d duplicates but only %.0f counted as resent", dups, resent)
	}
	// The bounds. What reached the upstream twice was in flight at a kill
	// (a window) or acknowledged in the CursorInterval before it, whose
	// cursor was not committed yet. What one process counts is what its
	// cursor's h covers past p: that, and the window h runs ahead of the
	// dispatch. At this load (300 x 2 samples per 5 ms), a CursorInterval
	// (100 ms) acknowledges at most 12,000 samples: less than a window.
	if dups > kills*2*window {
		t.Errorf("%d duplicates over %d kills: more than two windows (%d) each", dups, kills, window)
	}
	if limit := 3 * window; most > float64(limit) {
		t.Errorf("one process sent %.0f samples again: more than three windows (%d)", most, limit)
	}
}

// TestForwardSurvivesKill9DrainingABacklog: the load goes in while the
// upstream is down, so that it is sealed into segments that straddle the
// place the forwarder had reached on the live tail (it reads them as
// segments over the rows it had sent); dendro-receiver is SIGKILLed
// again and again while the backlog drains. Every sample arrives, every
// duplicate is counted, and what one process counts as sent again stays
// within its cursor's bound, which here, with every stream's backlog
// dispatched in turn, grows with the streams (see the end).
func TestForwardSurvivesKill9DrainingABacklog(t *testing.T) {
	t.Parallel()
	bin := needBinary(t)
	logDir := t.TempDir()
	up := newRWStub(t)
	up.down.Store(true)
	addr, path := freeAddr(t), filepath.Join(t.TempDir(), "a.db")
	args := []string{"--seal.max-rows=150", "--forward.url=" + up.srv.URL + "/api/v1/write", "--forward.shards=2"}
	a := startDendro(t, bin, addr, path, logDir, args...)
	load := fwdLoad{series: 300, perRequest: 2, base: time.Now().Add(-time.Hour).UnixMilli(), step: 1000}
	ctx := context.Background()
	const requests = 1200 // 720,000 samples, 8 seals of each stream
	for r := range requests {
		if err := postRW1(ctx, "http://"+addr+"/api/v1/write", load.request(r)); err != nil {
			t.Fatal(err)
		}
	}
	total := requests * load.series * load.perRequest
	poll(t, 30*time.Second, 100*time.Millisecond, "the backlog sealed", func() (bool, string) {
		v, err := metric("http://"+addr, "dendro_forward_samples_failed_total", "")
		return err == nil && v > 0, fmt.Sprintf("failed %v (%v)", v, err)
	})
	up.down.Store(false)
	resentNow := func() float64 {
		var v float64
		poll(t, 10*time.Second, 10*time.Millisecond, "the resent count", func() (bool, string) {
			var err error
			v, err = metric("http://"+addr, "dendro_forward_samples_resent_total", "")
			return err == nil, fmt.Sprint(err)
		})
		return v
	}
	const kills = 3
	var resent, most float64
	for k := range kills {
		// Kill while the backlog drains: once the upstream has taken
		// another sixth of it.
		want := (k + 1) * total / 6
		poll(t, 60*time.Second, 5*time.Millisecond, "the drain going on", func() (bool, string) {
			up.mu.Lock()
			n := up.n
			up.mu.Unlock()
			return n >= want, fmt.Sprintf("%d of %d taken", n, want)
		})
		r := resentNow()
		a.kill(t)
		resent, most = resent+r, max(most, r)
		a = startDendro(t, bin, addr, path, logDir, args...)
	}
	held := fwdArchive(t, a.archive)
	awaitEverySample(t, up, held.Series, 120*time.Second)
	r := resentNow()
	resent, most = resent+r, max(most, r)
	_, dups := up.snapshot()
	// Segments read whole because the rows a cursor was in were gone
	// (forward's upstream logs each).
	whole := logLines(t, logDir, "the unit the cursor was inside is gone")
	t.Logf("%d samples in %d streams (at most %d in a segment); %d kills while draining; the upstream got %d twice; the forwarders counted %.0f resent (at most %.0f by one process); %d segments read whole",
		total, held.Streams, held.MostInASegment, kills, dups, resent, most, whole)
	if float64(dups) > resent {
		t.Errorf("%d duplicates but only %.0f counted as resent", dups, resent)
	}
	// What reached the upstream twice was in flight at a kill (a window)
	// or acknowledged since the cursor's last commit (at most half a
	// window more, and what the commit's latency lets through); and where
	// the rows a cursor was in had been sealed and pruned, the segment
	// that holds them, read whole by the next process (forward/doc.go).
	// The load went in while the upstream was down, so the floors let
	// such rows go, and compactions may have merged their segment with
	// others: each such read may add the largest segment.
	const window = 2 * forwardDefaultCapacity
	if limit := kills*2*window + whole*held.MostInASegment; dups > limit {
		t.Errorf("%d duplicates over %d kills and %d segments read whole: more than two windows each and the segments (%d)",
			dups, kills, whole, limit)
	}
	// What a process counts is an upper bound of that: per stream, what
	// its cursor's h ran ahead of the stream's dispatch, a window and a
	// half (the next window is staged once half the last is sent), more
	// where it runs into rows read ahead, whose items it estimates by the
	// upstream's average row, not this stream's (two windows here), or a
	// segment read whole; and behind the dispatch, the window in flight,
	// up to a window acknowledged by one shard while the other's batch
	// held p back, and half a window acknowledged since p's last commit.
	// Measured with two busy loops beside -race: up to 166,974 by one
	// process with no segment read whole (5 streams), 228,562 with one.
	limit := held.Streams*2*window + 5*window/2 + whole*held.MostInASegment
	if most > float64(limit) {
		t.Errorf("one process sent %.0f samples again: more than %d streams' two windows, two and a half windows and %d segments read whole (%d)",
			most, held.Streams, whole, limit)
	}
}

// logLines counts the lines of the logs in logDir that hold s.
func logLines(t *testing.T, logDir, s string) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(logDir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n += strings.Count(string(b), s)
	}
	return n
}

// forwardDefaultCapacity is forward.DefaultCapacity (samples per shard).
const forwardDefaultCapacity = 10000

// TestForwardEverythingToADendroRW2Upstream: native histograms (integer
// and float), exemplars and metadata travel too, over remote-write 2.0 to
// a second dendro-receiver, which then holds what the source holds.
func TestForwardEverythingToADendroRW2Upstream(t *testing.T) {
	t.Parallel()
	bin := needBinary(t)
	logDir := t.TempDir()
	b := startDendro(t, bin, freeAddr(t), filepath.Join(t.TempDir(), "b.db"), logDir)
	a := startDendro(t, bin, freeAddr(t), filepath.Join(t.TempDir(), "a.db"), logDir, "--seal.max-rows=4",
		"--forward.url=http://"+b.addr+"/api/v1/write", "--forward.protocol=rw2")
	ctx := context.Background()
	base := time.Now().Add(-10 * time.Minute).UnixMilli()
	for r := range 12 {
		wr := &prompb.WriteRequest{Metadata: []prompb.MetricMetadata{
			{Type: prompb.MetricMetadata_COUNTER, MetricFamilyName: "fwd_rich_requests_total", Help: "Requests.", Unit: ""},
			{Type: prompb.MetricMetadata_HISTOGRAM, MetricFamilyName: "fwd_rich_latency_seconds", Help: "Latency.", Unit: "seconds"}}}
		for i := range 20 {
			ts := prompb.TimeSeries{Labels: []prompb.Label{{Name: "__name__", Value: "fwd_rich_requests_total"}, {Name: "id", Value: strconv.Itoa(i)}},
				Samples: []prompb.Sample{{Timestamp: base + int64(r)*1000, Value: float64(r*i) + 0.5}}}
			if i%5 == 0 {
				ts.Exemplars = []prompb.Exemplar{{Labels: []prompb.Label{{Name: "trace_id", Value: fmt.Sprintf("%d-%d", r, i)}},
					Value: float64(i), Timestamp: base + int64(r)*1000}}
			}
			wr.Timeseries = append(wr.Timeseries, ts)
		}
		h := &histogram.Histogram{Schema: 2, Count: uint64(6 + 2*r), Sum: float64(r) * 0.75, ZeroThreshold: 0.001, ZeroCount: 1,
			PositiveSpans: []histogram.Span{{Offset: -1, Length: 2}}, PositiveBuckets: []int64{int64(2 + r), 1}}
		fh := &histogram.FloatHistogram{Schema: 0, Count: 2.5 + float64(r), Sum: 1.125,
			PositiveSpans: []histogram.Span{{Offset: 3, Length: 1}}, PositiveBuckets: []float64{2.5 + float64(r)}}
		wr.Timeseries = append(wr.Timeseries,
			prompb.TimeSeries{Labels: []prompb.Label{{Name: "__name__", Value: "fwd_rich_latency_seconds"}},
				Histograms: []prompb.Histogram{prompb.FromIntHistogram(base+int64(r)*1000, h)}},
			prompb.TimeSeries{Labels: []prompb.Label{{Name: "__name__", Value: "fwd_rich_float_histogram"}},
				Histograms: []prompb.Histogram{prompb.FromFloatHistogram(base+int64(r)*1000, fh)}})
		if err := postRW1(ctx, "http://"+a.addr+"/api/v1/write", wr); err != nil {
			t.Fatal(err)
		}
	}
	read := func(path string) []promsample.Series {
		ar, err := archive.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer ar.Close()
		ss, err := promsample.ReadArchive(ctx, ar, promsample.AllTime())
		if err != nil {
			t.Fatal(err)
		}
		return ss
	}
	want := read(a.archive)
	poll(t, 30*time.Second, 300*time.Millisecond, "the 2.0 upstream holding everything", func() (bool, string) {
		got := read(b.archive)
		if len(got) != len(want) {
			return false, fmt.Sprintf("%d series, want %d", len(got), len(want))
		}
		for i := range want {
			w, g := want[i], got[i]
			if !labels.Equal(w.Labels, g.Labels) || len(w.Samples) != len(g.Samples) || len(w.Histograms) != len(g.Histograms) ||
				len(w.Exemplars) != len(g.Exemplars) {
				return false, fmt.Sprintf("%v: %d/%d/%d, want %d/%d/%d", g.Labels, len(g.Samples), len(g.Histograms), len(g.Exemplars),
					len(w.Samples), len(w.Histograms), len(w.Exemplars))
			}
			for j := range w.Samples {
				if w.Samples[j].T != g.Samples[j].T || math.Float64bits(w.Samples[j].V) != math.Float64bits(g.Samples[j].V) {
					return false, fmt.Sprintf("%v sample %d", w.Labels, j)
				}
			}
			for j := range w.Histograms {
				wh, gh := w.Histograms[j], g.Histograms[j]
				if wh.T != gh.T || (wh.H != nil && (gh.H == nil || !wh.H.Equals(gh.H))) || (wh.FH != nil && (gh.FH == nil || !wh.FH.Equals(gh.FH))) {
					return false, fmt.Sprintf("%v histogram %d", w.Labels, j)
				}
			}
			for j := range w.Exemplars {
				we, ge := w.Exemplars[j], g.Exemplars[j]
				if we.T != ge.T || we.V != ge.V || !labels.Equal(we.Labels, ge.Labels) {
					return false, fmt.Sprintf("%v exemplar %d", w.Labels, j)
				}
			}
		}
		return true, ""
	})
	metaOf := func(addr string) string {
		_, body, err := httpGet(ctx, "http://"+addr+"/api/v1/metadata")
		if err != nil {
			t.Fatal(err)
		}
		return string(body)
	}
	if ma, mb := metaOf(a.addr), metaOf(b.addr); ma != mb || !strings.Contains(mb, "fwd_rich_latency_seconds") {
		t.Errorf("metadata differs:\nsource   %s\nupstream %s", ma, mb)
	}
}

// awaitEverySample waits until the stub upstream up holds every
// sample of want (duplicates allowed: they are counted apart).
func awaitEverySample(t *testing.T, up *rwStub, want map[string][]sample, timeout time.Duration) {
	t.Helper()
	poll(t, timeout, 250*time.Millisecond, "the upstream holding every sample", func() (bool, string) {
		got, _ := up.snapshot()
		d, _ := compareSeries(want, got)
		return d == "", d
	})
}
