// Package e2e holds black-box tests of the built dendro-receiver binary, run
// the way a user runs it: beside a real Prometheus 2.42 (Debian package
// prometheus) that scrapes itself and a deterministic exporter served by the
// test and remote-writes to dendro-receiver.
//
// TestMain builds ./cmd/dendro-receiver once into a temporary directory.
// Every process listens on a free loopback port and keeps its data under
// t.TempDir. What dendro-receiver stored is read straight from its archive
// file with the archive and promsample packages, and compared bit-exact
// (math.Float64bits) with the raw samples Prometheus's query API returns
// for range selectors, which involve no PromQL evaluation.
//
// External tools: prometheus and promtool (apt-get install -y prometheus),
// sqlite3 (apt-get install -y sqlite3), systemd-analyze where present. With
// CI=true a missing tool fails the test; otherwise the test is skipped with
// a message naming the package to install. -short skips the tests that
// start processes.
package e2e
