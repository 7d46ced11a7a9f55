package e2e

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// dendroBin is the binary under test, built once by TestMain; buildErr says
// why it is missing. Written only by TestMain, before any test runs.
var (
	dendroBin string
	buildErr  error
)

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "dendro-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	if !testing.Short() {
		dendroBin, buildErr = buildBinary(dir)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildBinary builds ./cmd/dendro-receiver into dir with the go command
// that runs the tests (go test puts its GOROOT/bin first in PATH). Default
// build flags, so the build cache that go vet and the other packages' tests
// filled is reused; the Dockerfile's static, trimmed build is CI's to run.
func buildBinary(dir string) (string, error) {
	out := filepath.Join(dir, "dendro-receiver")
	start := time.Now()
	cmd := exec.Command("go", "build", "-o", out, "./cmd/dendro-receiver")
	cmd.Dir = ".." // the module root: this package is <root>/e2e
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/dendro-receiver: %v\n%s", err, b)
	}
	fmt.Fprintf(os.Stderr, "e2e: built dendro-receiver in %v\n", time.Since(start).Round(time.Millisecond))
	return out, nil
}

// needBinary returns the built binary or ends the test: skipped under
// -short, failed when the build failed.
func needBinary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	if buildErr != nil {
		t.Fatalf("dendro-receiver did not build: %v", buildErr)
	}
	return dendroBin
}

// requireTool returns the path of an external command, or ends the test:
// with CI=true a missing tool is a failure (CI must install it), elsewhere
// a skip; both name the Debian package to install.
func requireTool(t testing.TB, name, debPackage string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := fmt.Sprintf("%s not found in PATH; install it: apt-get install -y %s", name, debPackage)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}
