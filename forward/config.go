package forward

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v2"
)

// The file form of the upstreams (--forward.config.file), in the shape of
// Prometheus's remote_write section, which most operators already have:
//
//	upstreams:
//	  - url: https://mimir.example/api/v1/push
//	    name: central                 # the cursor's key; default: the URL
//	    protocol: rw2                 # rw1 (default) or rw2; or
//	    # protobuf_message: io.prometheus.write.v2.Request
//	    headers: {X-Scope-OrgID: team-a}
//	    remote_timeout: 30s
//	    basic_auth: {username: u, password_file: /etc/dendro/pw}
//	    # authorization: {type: Bearer, credentials_file: ...}, oauth2,
//	    # tls_config: {ca_file: ..., cert_file: ..., key_file: ...},
//	    # proxy_url, follow_redirects, enable_http2: as in Prometheus
//	    queue_config:
//	      shards: 4
//	      capacity: 10000
//	      max_samples_per_send: 2000
//	      batch_send_deadline: 5s
//	      min_backoff: 30ms
//	      max_backoff: 5s
//	    max_samples_per_second: 0     # 0: the --forward flag's value
//	    max_age: 0s                   # 0: the --forward flag's value
//
// Relative file names (password_file, ca_file, ...) are relative to the
// file's directory. Unknown keys are an error.

type fileConfig struct {
	Upstreams []fileUpstream `yaml:"upstreams"`
}

type fileUpstream struct {
	URL                 string            `yaml:"url"`
	Name                string            `yaml:"name,omitempty"`
	Protocol            string            `yaml:"protocol,omitempty"`
	ProtobufMessage     string            `yaml:"protobuf_message,omitempty"`
	Headers             map[string]string `yaml:"headers,omitempty"`
	RemoteTimeout       model.Duration    `yaml:"remote_timeout,omitempty"`
	Queue               fileQueue         `yaml:"queue_config,omitempty"`
	MaxSamplesPerSecond float64           `yaml:"max_samples_per_second,omitempty"`
	MaxAge              model.Duration    `yaml:"max_age,omitempty"`

	HTTPClientConfig config.HTTPClientConfig `yaml:",inline"`
}

type fileQueue struct {
	Shards            int            `yaml:"shards,omitempty"`
	Capacity          int            `yaml:"capacity,omitempty"`
	MaxSamplesPerSend int            `yaml:"max_samples_per_send,omitempty"`
	BatchSendDeadline model.Duration `yaml:"batch_send_deadline,omitempty"`
	MinBackoff        model.Duration `yaml:"min_backoff,omitempty"`
	MaxBackoff        model.Duration `yaml:"max_backoff,omitempty"`
}

// LoadFile reads the upstreams of a configuration file. defaults supplies
// the rate and age limits for upstreams that do not set their own.
func LoadFile(path string, defaults Upstream) ([]Upstream, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	ups, err := ParseConfig(b, defaults)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	dir := filepath.Dir(path)
	for i := range ups {
		ups[i].HTTP.SetDirectory(dir)
	}
	return ups, nil
}

// ParseConfig is LoadFile for a configuration in memory.
func ParseConfig(b []byte, defaults Upstream) ([]Upstream, error) {
	var fc fileConfig
	if err := yaml.UnmarshalStrict(b, &fc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if len(fc.Upstreams) == 0 {
		return nil, fmt.Errorf("%w: no upstreams", ErrConfig)
	}
	out := make([]Upstream, 0, len(fc.Upstreams))
	for i, fu := range fc.Upstreams {
		proto := fu.Protocol
		if proto == "" {
			proto = fu.ProtobufMessage
		}
		p, err := ParseProtocol(proto)
		if err != nil {
			return nil, fmt.Errorf("upstream %d: %w", i, err)
		}
		if fu.URL == "" {
			return nil, fmt.Errorf("%w: upstream %d has no url", ErrConfig, i)
		}
		u := Upstream{Name: fu.Name, URL: fu.URL, Protocol: p, Headers: fu.Headers, HTTP: fu.HTTPClientConfig,
			Timeout: time.Duration(fu.RemoteTimeout),
			Queue: QueueConfig{Shards: fu.Queue.Shards, Capacity: fu.Queue.Capacity, MaxSamplesPerSend: fu.Queue.MaxSamplesPerSend,
				BatchSendDeadline: time.Duration(fu.Queue.BatchSendDeadline), MinBackoff: time.Duration(fu.Queue.MinBackoff),
				MaxBackoff: time.Duration(fu.Queue.MaxBackoff)},
			MaxSamplesPerSecond: fu.MaxSamplesPerSecond, MaxAge: time.Duration(fu.MaxAge)}
		if u.MaxSamplesPerSecond == 0 {
			u.MaxSamplesPerSecond = defaults.MaxSamplesPerSecond
		}
		if u.MaxAge == 0 {
			u.MaxAge = defaults.MaxAge
		}
		out = append(out, u)
	}
	return out, nil
}
