package forward

import "errors"

// Sentinel errors; each is returned wrapped (test with errors.Is).
var (
	// ErrConfig is returned by New and by the configuration parsers for a
	// configuration that cannot work: no upstream, a bad URL, two
	// upstreams with one name, a protocol header set by hand.
	ErrConfig = errors.New("forward: bad configuration")

	// ErrCursor is returned by Start when an upstream's cursor in the
	// archive cannot be read (its metadata value is not one this build
	// wrote). The upstream is not started over silently: move the key
	// aside (or rename the upstream) to start it over.
	ErrCursor = errors.New("forward: unreadable cursor")

	// ErrStarted is returned by a second Start.
	ErrStarted = errors.New("forward: already started")
)
