package forward

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestTheConfigFileReadsLikeRemoteWrite(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "pw"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "forward.yml")
	os.WriteFile(path, []byte(`upstreams:
  - url: https://mimir.example/api/v1/push
    name: central
    protobuf_message: io.prometheus.write.v2.Request
    headers: {X-Scope-OrgID: team-a}
    remote_timeout: 10s
    basic_auth: {username: u, password_file: pw}
    queue_config: {shards: 8, capacity: 5000, max_samples_per_send: 1000, min_backoff: 50ms}
    max_age: 1h
  - url: http://vm:8428/api/v1/write
`), 0o644)
	ups, err := LoadFile(path, Upstream{MaxSamplesPerSecond: 5000, MaxAge: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	a, b := ups[0], ups[1]
	if a.Name != "central" || a.Protocol != RW2 || a.Headers["X-Scope-OrgID"] != "team-a" || a.Timeout != 10*time.Second ||
		a.Queue.Shards != 8 || a.Queue.Capacity != 5000 || a.Queue.MaxSamplesPerSend != 1000 || a.Queue.MinBackoff != 50*time.Millisecond ||
		a.MaxAge != time.Hour || a.MaxSamplesPerSecond != 5000 {
		t.Errorf("first upstream %+v", a)
	}
	if a.HTTP.BasicAuth == nil || a.HTTP.BasicAuth.PasswordFile != filepath.Join(dir, "pw") {
		t.Errorf("basic auth %+v: a relative password_file is relative to the file", a.HTTP.BasicAuth)
	}
	if b.Protocol != RW1 || b.MaxAge != 2*time.Hour {
		t.Errorf("second upstream %+v", b)
	}
	opts := Options{Upstreams: ups}
	if err := opts.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if opts.Upstreams[1].Name != "http://vm:8428/api/v1/write" || opts.Upstreams[1].Queue.MaxSamplesPerSend != DefaultMaxSamplesPerSend {
		t.Errorf("defaults %+v", opts.Upstreams[1])
	}
}

func TestBadConfigurationsAreRefused(t *testing.T) {
	for name, cfg := range map[string]string{
		"unknown key":  "upstreams: [{url: 'http://a/w', shardz: 3}]",
		"no url":       "upstreams: [{name: a}]",
		"bad protocol": "upstreams: [{url: 'http://a/w', protocol: rw3}]",
		"none":         "upstreams: []",
	} {
		if _, err := ParseConfig([]byte(cfg), Upstream{}); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	for name, u := range map[string][]Upstream{
		"not http":       {{URL: "ftp://a/b"}},
		"same name":      {{URL: "http://a/w"}, {URL: "http://a/w"}},
		"protocol owned": {{URL: "http://a/w", Headers: map[string]string{"Content-Encoding": "gzip"}}},
	} {
		o := Options{Upstreams: u}
		if err := o.setDefaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}
