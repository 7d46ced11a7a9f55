package forward_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// database/sql's connection opener lives as long as an open *sql.DB.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		// Keep-alive connections of the tests' own http.DefaultClient.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}
