package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// dendro is a running dendro-receiver.
type dendro struct {
	*proc
	addr    string // host:port it listens on
	archive string // --archive.path
}

// startDendro starts the built binary on addr with the archive at path and
// waits until /-/ready answers 200. extra flags follow the two fixed ones.
func startDendro(t *testing.T, bin, addr, path, logDir string, extra ...string) *dendro {
	t.Helper()
	args := append([]string{
		"--web.listen-address=" + addr,
		"--archive.path=" + path,
		"--log.level=debug",
	}, extra...)
	// Graceful stop must take at most 10 s (TestSIGTERMLeavesOneSoundFile);
	// the cleanup gives it a little more before SIGKILL.
	p := startProc(t, "dendro-receiver", logDir, 15*time.Second, bin, args...)
	d := &dendro{proc: p, addr: addr, archive: path}
	waitReady(t, p, "http://"+addr+"/-/ready", 30*time.Second)
	return d
}

// prometheus is a running Prometheus 2.42.
type prometheus struct {
	*proc
	url string // http://host:port
}

// promConfig is the Prometheus configuration the tests run: 1 s scrapes of
// itself and the exporter, remote-written to dendro-receiver in small
// batches with short backoffs so that a restarted receiver is refilled
// within seconds.
func promConfig(promAddr, exporterAddr, dendroAddr string) string {
	return fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: prometheus
    static_configs: [{targets: [%q]}]
  - job_name: exporter
    static_configs: [{targets: [%q]}]
remote_write:
  - url: http://%s/api/v1/write
    name: dendro
    remote_timeout: 10s
    queue_config:
      capacity: 2500
      max_samples_per_send: 500
      batch_send_deadline: 1s
      min_backoff: 100ms
      max_backoff: 1s
`, promAddr, exporterAddr, dendroAddr)
}

// readerConfig is a Prometheus that scrapes nothing and reads everything
// through remote_read from dendro-receiver.
func readerConfig(_, dendroAddr string) string {
	return fmt.Sprintf(`global:
  scrape_interval: 1s
remote_read:
  - url: http://%s/api/v1/read
    name: dendro
    read_recent: true
`, dendroAddr)
}

// startPrometheus starts `prometheus` from PATH with promConfig and waits
// for /-/ready.
func startPrometheus(t *testing.T, promBin, exporterAddr, dendroAddr, logDir string) *prometheus {
	t.Helper()
	return startPrometheusWith(t, promBin, logDir, func(addr string) string { return promConfig(addr, exporterAddr, dendroAddr) })
}

// startPrometheusWith starts `prometheus` with the configuration config
// returns for its listen address, and waits for /-/ready.
func startPrometheusWith(t *testing.T, promBin, logDir string, config func(addr string) string) *prometheus {
	t.Helper()
	dir := t.TempDir()
	addr := freeAddr(t)
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(config(addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	// The stop grace is short on purpose: with the receiver gone, Prometheus
	// spends up to a minute trying to flush its queue before it exits, and
	// nothing here needs its data after the test.
	p := startProc(t, "prometheus", logDir, 5*time.Second, promBin,
		"--config.file="+cfg,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=info",
	)
	url := "http://" + addr
	waitReady(t, p, url+"/-/ready", 60*time.Second)
	return &prometheus{proc: p, url: url}
}

// exporter serves a deterministic set of metrics: every value is a function
// of n, the number of the scrape (1, 2, ...). Its values exercise what a
// float's text form can lose: non-terminating decimals, the largest and
// smallest doubles, infinities, negative values.
//
// Not negative zero: remote-write 1.0 cannot carry it from Prometheus.
// Sample.value is a proto3 double, and the sender's generated Marshal omits
// a field equal to 0, which -0 is, so the receiver decodes +0 (seen here:
// Prometheus 2.42 holds -0, every receiver gets 0).
type exporter struct {
	srv     *httptest.Server
	scrapes atomic.Int64
}

func startExporter(t *testing.T) *exporter {
	t.Helper()
	e := &exporter{}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := e.scrapes.Add(1)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Write([]byte(exposition(n)))
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// addr is host:port, as a scrape target.
func (e *exporter) addr() string { return strings.TrimPrefix(e.srv.URL, "http://") }

func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// exposition is scrape n's body in the Prometheus text format.
func exposition(n int64) string {
	f := float64(n)
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# HELP e2e_requests_total Requests handled.\n# TYPE e2e_requests_total counter\n")
	p("e2e_requests_total{code=\"200\",path=\"/api\"} %d\n", 3*n)
	p("e2e_requests_total{code=\"500\",path=\"/api\"} %d\n", n/4)
	p("# HELP e2e_bytes_total Bytes sent.\n# TYPE e2e_bytes_total counter\n")
	p("e2e_bytes_total %s\n", fmtFloat(f*1234567.891))
	p("# HELP e2e_temperature_celsius A gauge.\n# TYPE e2e_temperature_celsius gauge\n")
	p("e2e_temperature_celsius{room=\"lab\"} %s\n", fmtFloat(20+float64(n%17)/10))
	p("e2e_temperature_celsius{room=\"cellar\"} %s\n", fmtFloat(-4+float64(n%5)/3))
	p("# HELP e2e_edge_values Values whose text form is easy to get wrong.\n# TYPE e2e_edge_values gauge\n")
	p("e2e_edge_values{case=\"third\"} %s\n", fmtFloat(f/3))
	p("e2e_edge_values{case=\"huge\"} %s\n", fmtFloat(1.7976931348623157e308))
	p("e2e_edge_values{case=\"tiny\"} %s\n", fmtFloat(5e-324))
	p("e2e_edge_values{case=\"zero\"} 0\n")
	p("e2e_edge_values{case=\"inf\"} +Inf\n")
	p("e2e_edge_values{case=\"neg_inf\"} -Inf\n")
	p("# HELP e2e_latency_seconds A classic histogram with fixed buckets.\n# TYPE e2e_latency_seconds histogram\n")
	cum := []int64{n, 2 * n, 3*n + n/2, 4 * n, 5 * n}
	for i, le := range []string{"0.005", "0.01", "0.1", "1", "+Inf"} {
		p("e2e_latency_seconds_bucket{le=%q} %d\n", le, cum[i])
	}
	p("e2e_latency_seconds_sum %s\n", fmtFloat(f*0.4321))
	p("e2e_latency_seconds_count %d\n", 5*n)
	// A series that disappears after scrape 8: Prometheus ends it with a
	// stale marker, which the archive must keep and PromQL must honour.
	if n <= ephemeralScrapes {
		p("# HELP e2e_ephemeral A series that goes away.\n# TYPE e2e_ephemeral gauge\n")
		p("e2e_ephemeral %d\n", n)
	}
	return b.String()
}
