package receiver

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

// Defaults applied by Options for zero fields.
const (
	DefaultMaxCompressedBytes = 32 << 20  // 32 MiB on the wire
	DefaultMaxDecodedBytes    = 256 << 20 // 256 MiB after snappy
	DefaultSourceHeader       = "X-Scope-OrgID"
	DefaultSource             = "default" // source of requests without the header
	DefaultMaxSourceBytes     = 128
	DefaultRetryAfter         = 5 * time.Second
)

// maxSnappyBlock is the largest decoded length the snappy block format can
// declare (a uint32); MaxDecodedBytes above it is meaningless.
const maxSnappyBlock = 1<<32 - 1

// Options configure a Handler or a Decoder. The zero value means the
// defaults; fields are validated once, by NewHandler or NewDecoder.
type Options struct {
	// MaxCompressedBytes bounds the request body as sent (snappy). A larger
	// body is answered 413 after reading at most MaxCompressedBytes+1 bytes.
	MaxCompressedBytes int64
	// MaxDecodedBytes bounds the length snappy declares for the decoded
	// message; it is checked before anything is allocated (413).
	MaxDecodedBytes int64

	// SourceHeader names the request header carrying the source (tenant)
	// name; requests without it belong to DefaultSource.
	SourceHeader string
	// MaxSourceBytes bounds the length of a source name.
	MaxSourceBytes int

	// AllowUTF8NamesV1 accepts any UTF-8 metric and label names in
	// remote-write 1.0 requests, as Prometheus 3 does. Off, 1.0 names must
	// match the 1.0 spec's regular expressions (2.0 always allows UTF-8).
	AllowUTF8NamesV1 bool

	// RetryAfter is sent with retryable 5xx answers.
	RetryAfter time.Duration

	// Logger receives what was refused and why; nil discards.
	Logger *slog.Logger
	// Registerer receives the Handler's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Pending, if set, counts the requests on their way to the writer
	// (see Pending).
	Pending *Pending
	// Parallelism is how many remote-write 1.0 requests are decoded at
	// once; 0 means GOMAXPROCS.
	Parallelism int
	// Series is the series index requests' labels are resolved with (the
	// one the Sink writes through); nil makes the Decoder one of its own.
	Series *seriesindex.Index
}

// withDefaults returns o with zero fields replaced by defaults, or an error
// for a field no default can fix.
func (o Options) withDefaults() (Options, error) {
	var errs []error
	if o.MaxCompressedBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxCompressedBytes %d < 0", o.MaxCompressedBytes))
	}
	if o.MaxDecodedBytes < 0 || o.MaxDecodedBytes > maxSnappyBlock {
		errs = append(errs, fmt.Errorf("MaxDecodedBytes %d outside [0, %d]", o.MaxDecodedBytes, int64(maxSnappyBlock)))
	}
	if o.MaxSourceBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxSourceBytes %d < 0", o.MaxSourceBytes))
	}
	if o.Parallelism < 0 {
		errs = append(errs, fmt.Errorf("Parallelism %d < 0", o.Parallelism))
	}
	if o.RetryAfter < 0 {
		errs = append(errs, fmt.Errorf("RetryAfter %v < 0", o.RetryAfter))
	}
	if o.SourceHeader != "" && !isToken(o.SourceHeader) {
		errs = append(errs, fmt.Errorf("SourceHeader %q is not a header name", o.SourceHeader))
	}
	if err := errors.Join(errs...); err != nil {
		return o, fmt.Errorf("receiver: options: %w", err)
	}
	if o.MaxCompressedBytes == 0 {
		o.MaxCompressedBytes = DefaultMaxCompressedBytes
	}
	if o.MaxDecodedBytes == 0 {
		o.MaxDecodedBytes = DefaultMaxDecodedBytes
	}
	if o.SourceHeader == "" {
		o.SourceHeader = DefaultSourceHeader
	}
	o.SourceHeader = http.CanonicalHeaderKey(o.SourceHeader)
	if o.MaxSourceBytes == 0 {
		o.MaxSourceBytes = DefaultMaxSourceBytes
	}
	if o.RetryAfter == 0 {
		o.RetryAfter = DefaultRetryAfter
	}
	if o.Parallelism == 0 {
		o.Parallelism = runtime.GOMAXPROCS(0)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// isToken reports whether s is an HTTP token (RFC 9110 5.6.2), as a header
// name must be.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return s != ""
}
