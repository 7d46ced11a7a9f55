package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v2"
	"golang.org/x/crypto/bcrypt"
)

// deployDir is the module's deploy/ directory.
const deployDir = "../deploy"

// The placeholder credentials deploy/web-config.yml documents.
const (
	sampleUser     = "prometheus"
	samplePassword = "change-me"
)

// TestDeployFilesAreValid checks deploy/ with the tools that consume each
// file: promtool for the Prometheus config, exporter-toolkit's validator
// (what --web.config.file runs) for the web config, a YAML parse for the
// Grafana provisioning file, and systemd-analyze verify for the unit, where
// systemd-analyze exists.
func TestDeployFilesAreValid(t *testing.T) {
	t.Run("prometheus.yml", func(t *testing.T) {
		promtool := requireTool(t, "promtool", "prometheus")
		out, err := exec.Command(promtool, "check", "config", filepath.Join(deployDir, "prometheus.yml")).CombinedOutput()
		if err != nil {
			t.Fatalf("promtool check config: %v\n%s", err, out)
		}
		t.Logf("%s", strings.TrimSpace(string(out)))
	})
	t.Run("web-config.yml", func(t *testing.T) {
		path := filepath.Join(deployDir, "web-config.yml")
		if err := web.Validate(path); err != nil {
			t.Fatal(err)
		}
		// The comment says the hash is of the placeholder password.
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			Users map[string]string `yaml:"basic_auth_users"`
		}
		if err := yaml.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
		if err := bcrypt.CompareHashAndPassword([]byte(cfg.Users[sampleUser]), []byte(samplePassword)); err != nil {
			t.Errorf("basic_auth_users[%q] is not the bcrypt hash of %q: %v", sampleUser, samplePassword, err)
		}
	})
	t.Run("grafana-datasource.yml", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(deployDir, "grafana-datasource.yml"))
		if err != nil {
			t.Fatal(err)
		}
		var prov struct {
			APIVersion  int `yaml:"apiVersion"`
			Datasources []struct {
				Name, Type, URL, Access string
			} `yaml:"datasources"`
		}
		// Not strict: the keys this struct omits (jsonData...) are Grafana's.
		if err := yaml.Unmarshal(b, &prov); err != nil {
			t.Fatal(err)
		}
		if prov.APIVersion != 1 || len(prov.Datasources) != 1 {
			t.Fatalf("apiVersion %d with %d data sources, want 1 and 1", prov.APIVersion, len(prov.Datasources))
		}
		ds := prov.Datasources[0]
		if ds.Type != "prometheus" || ds.URL != "http://127.0.0.1:9201" || ds.Access != "proxy" {
			t.Errorf("data source %+v: want type prometheus, url http://127.0.0.1:9201, access proxy", ds)
		}
	})
	t.Run("dendro-receiver.service", func(t *testing.T) {
		sa, err := exec.LookPath("systemd-analyze")
		if err != nil {
			t.Skip("systemd-analyze not found (not a systemd host); the unit is not verified here")
		}
		bin := needBinary(t)
		b, err := os.ReadFile(filepath.Join(deployDir, "dendro-receiver.service"))
		if err != nil {
			t.Fatal(err)
		}
		// verify checks that ExecStart's binary exists: point it at the one
		// under test, with the unit otherwise unchanged.
		unit := strings.ReplaceAll(string(b), "/usr/local/bin/dendro-receiver", bin)
		if unit == string(b) {
			t.Fatal("the unit does not run /usr/local/bin/dendro-receiver")
		}
		path := filepath.Join(t.TempDir(), "dendro-receiver.service")
		if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(sa, "verify", path).CombinedOutput()
		if err != nil {
			t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
		}
		if len(out) > 0 {
			t.Logf("systemd-analyze verify: %s", out)
		}
	})
}

// TestWebConfigSampleEnforcesBasicAuth runs the binary with the sample
// --web.config.file: without credentials it answers 401, with the
// placeholder ones 200.
func TestWebConfigSampleEnforcesBasicAuth(t *testing.T) {
	t.Parallel()
	bin := needBinary(t)
	addr := freeAddr(t)
	p := startProc(t, "dendro-receiver", t.TempDir(), 15*time.Second, bin,
		"--web.listen-address="+addr,
		"--archive.path="+filepath.Join(t.TempDir(), "dendro.db"),
		"--web.config.file="+filepath.Join(deployDir, "web-config.yml"))
	url := "http://" + addr + "/-/ready"
	get := func(auth bool) (int, error) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return 0, err
		}
		if auth {
			req.SetBasicAuth(sampleUser, samplePassword)
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	poll(t, 30*time.Second, 50*time.Millisecond, "ready with the sample credentials", func() (bool, string) {
		if p.exited() {
			t.Fatalf("dendro-receiver exited (%v); log:\n%s", p.waitErr, tail(p.logPath, 40))
		}
		code, err := get(true)
		if err != nil {
			return false, err.Error()
		}
		return code == http.StatusOK, fmt.Sprint(code)
	})
	if code, err := get(false); err != nil || code != http.StatusUnauthorized {
		t.Errorf("GET %s without credentials: %d %v, want 401", url, code, err)
	}
}
