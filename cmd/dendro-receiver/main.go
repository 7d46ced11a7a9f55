// Command dendro-receiver is a Prometheus remote-write receiver that keeps
// what it is sent in a dendro archive: one SQLite file any local process can
// read while it is written, whose sealed history is Parquet.
//
// main parses nothing itself: it calls run with the process's arguments and
// streams, which wires flags to the packages, serves, and shuts down in
// order on SIGINT/SIGTERM.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go tuneGC(ctx, os.Getenv) // the process's runtime settings, so here and not in run
	procs := reserveEncoderProc(os.Getenv)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, procs)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dendro-receiver:", oneLine(err))
		var u *usageError
		if errors.As(err, &u) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError is a bad flag or an unusable archive path: exit status 2,
// nothing created.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usage(format string, args ...any) error { return &usageError{fmt.Errorf(format, args...)} }

func oneLine(err error) string {
	s := err.Error()
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}
