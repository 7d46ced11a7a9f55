//go:build !cgo

package export

import (
	"os"
	"testing"
)

// Without cgo the DuckDB tests (duckdb_test.go) cannot build; in CI that
// must not pass unnoticed.
func TestDuckDBNeedsCgo(t *testing.T) {
	if os.Getenv("CI") == "true" {
		t.Fatal("the DuckDB tests need cgo (a C compiler and CGO_ENABLED=1)")
	}
	t.Skip("built without cgo: the DuckDB tests do not run")
}
