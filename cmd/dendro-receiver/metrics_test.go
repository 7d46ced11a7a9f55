package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"testing"
	"time"
)

// The read caches show on /metrics: each one's share of
// --query.cache-bytes, what it holds, and a one-series question asked
// twice finds its pages the second time.
func TestQueryCacheMetrics(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.db")
	base := time.Now().Add(-2 * time.Hour).UnixMilli()
	srv := serve(t, path, "--seal.max-rows=4", "--query.cache-bytes=8MiB")
	const n = 40
	sendN(t, srv.addr, "ops", 0, n, base)
	waitSealed(t, path)
	sec := func(ms int64) string { return fmt.Sprintf("%.3f", float64(ms)/1000) }
	ask := func() {
		t.Helper()
		q := url.Values{"query": {`ops_2{instance="host-3:9100"}`}, "start": {sec(base)}, "end": {sec(base + opsStep*n)}, "step": {"15s"}}
		resp, err := http.Get("http://" + srv.addr + "/api/v1/query_range?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("query_range: %d %s", resp.StatusCode, body)
		}
	}
	m := func(name, cache string) float64 {
		return scrape(t, srv.addr, fmt.Sprintf("dendro_query_cache_%s{cache=%q}", name, cache))
	}
	ask()
	hits := m("hits_total", "pages")
	ask()
	for _, c := range []struct {
		name, cache string
		want        func(float64) bool
		what        string
	}{
		{"limit_bytes", "segments", func(v float64) bool { return v == 7<<20 }, "7 MiB"},
		{"limit_bytes", "pages", func(v float64) bool { return v == 1<<20 }, "1 MiB"},
		{"entries", "segments", func(v float64) bool { return v > 0 }, "some"},
		{"bytes", "pages", func(v float64) bool { return v > 0 && v <= 1<<20 }, "some, at most 1 MiB"},
		{"hits_total", "pages", func(v float64) bool { return v > hits }, fmt.Sprintf("more than %v after the second ask", hits)},
		{"misses_total", "segments", func(v float64) bool { return v >= 0 }, "present"},
	} {
		if v := m(c.name, c.cache); !c.want(v) {
			t.Errorf("dendro_query_cache_%s{cache=%q} = %v, want %s", c.name, c.cache, v, c.what)
		}
	}
}
