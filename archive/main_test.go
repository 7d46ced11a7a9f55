package archive_test

import (
	"database/sql"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
	_ "modernc.org/sqlite" // registers the driver for execSQL
)

// childEnv names the role a re-executed test binary plays (see
// process_test.go); the value's fields are separated by '|'.
const childEnv = "DENDRO_ARCHIVE_TEST_CHILD"

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		if err := runChild(role); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m,
		// database/sql's connection opener lives as long as an open *sql.DB.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))
}

// execSQL runs statements on path through a plain SQLite connection.
func execSQL(t testing.TB, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}
