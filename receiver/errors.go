package receiver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// Errors of the receiver, each saying who returns it. Every error that
// reaches a response is classified by classify, the one place that maps an
// error to an HTTP status (see Status).

var (
	// ErrMethodNotAllowed is returned by the Handler for any method but POST.
	ErrMethodNotAllowed = errors.New("receiver: method not allowed")

	// ErrUnsupportedMediaType is returned (wrapped, with the offending
	// header) by the Handler for a Content-Type or Content-Encoding it does
	// not speak. Senders may retry with another protocol after it.
	ErrUnsupportedMediaType = errors.New("receiver: unsupported media type")

	// ErrTooLarge is returned (wrapped) by the Handler and the Decoder when
	// the compressed body or the decoded length snappy declares exceeds its
	// limit.
	ErrTooLarge = errors.New("receiver: request too large")

	// ErrEmptyBody is returned by the Handler and the Decoder for a body of
	// zero bytes.
	ErrEmptyBody = errors.New("receiver: empty body")

	// ErrMalformed is returned (wrapped, with the cause) by the Decoder when
	// the body is not a snappy block holding the negotiated protobuf message.
	ErrMalformed = errors.New("receiver: malformed request")

	// ErrInvalid matches every *InvalidError (errors.Is): the request decoded
	// but holds a series, sample or metadata entry the spec forbids.
	ErrInvalid = errors.New("receiver: invalid request")

	// ErrBadSource is returned (wrapped) by the Handler when the source
	// header is present but unusable.
	ErrBadSource = errors.New("receiver: invalid source")

	// The errors below are for a Sink to return (wrapped with %w is fine).

	// ErrRejected is returned by a Sink that refuses the data for good (a
	// retry of the same request can never succeed): answered 400, so the
	// sender drops the batch instead of retrying it forever.
	ErrRejected = errors.New("receiver: rejected by sink")

	// ErrUnavailable is returned by a Sink that cannot commit now but may
	// later (writer busy past a deadline, shutting down): answered 503 with
	// Retry-After.
	ErrUnavailable = errors.New("receiver: sink unavailable")

	// ErrDiskFull is returned by a Sink that cannot commit for lack of space:
	// answered 507 with Retry-After (retention may free space).
	ErrDiskFull = errors.New("receiver: disk full")

	// ErrIncompleteWrite is returned by the Handler when a Sink returned nil
	// but reported fewer elements written than the request held: the spec
	// forbids a 2xx for a partial write, so it is answered 500.
	ErrIncompleteWrite = errors.New("receiver: sink wrote less than the request held")
)

// InvalidError reports why a decoded request is invalid. It matches
// ErrInvalid with errors.Is; read it with errors.As for the details.
type InvalidError struct {
	// Series is the index of the offending series in the request, in wire
	// order (TimeSeries for 1.0 and 2.0, MetricMetadata for 1.0 metadata
	// entries with Metadata set), or -1 when the fault is request-wide.
	Series int
	// Metadata is true when Series indexes WriteRequest.metadata (1.0).
	Metadata bool
	// Reason is one line, safe to send to the client.
	Reason string
}

func (e *InvalidError) Error() string {
	switch {
	case e.Series < 0:
		return "invalid request: " + e.Reason
	case e.Metadata:
		return fmt.Sprintf("invalid metadata %d: %s", e.Series, e.Reason)
	default:
		return fmt.Sprintf("invalid series %d: %s", e.Series, e.Reason)
	}
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(series int, format string, args ...any) error {
	return &InvalidError{Series: series, Reason: fmt.Sprintf(format, args...)}
}

// Reasons: the values of the "reason" label of the rejection metrics, one per
// class of classify.
const (
	reasonMethod      = "method_not_allowed"
	reasonMediaType   = "unsupported_media_type"
	reasonTooLarge    = "too_large"
	reasonEmpty       = "empty_body"
	reasonMalformed   = "malformed"
	reasonInvalid     = "invalid"
	reasonBadSource   = "bad_source"
	reasonRejected    = "sink_rejected"
	reasonUnavailable = "unavailable"
	reasonDiskFull    = "disk_full"
	reasonCanceled    = "canceled"
	reasonIncomplete  = "incomplete_write"
	reasonInternal    = "internal"
)

// classification is what classify decides for one error.
type classification struct {
	code      int    // HTTP status
	retryable bool   // answer carries Retry-After; only ever true for 5xx
	reason    string // metrics label
}

// classify is the one place errors become HTTP statuses. It follows the
// sender's retry contract (remote-write 1.0 spec, Prometheus
// storage/remote/client.go): a 4xx other than 429 makes Prometheus drop the
// batch, a 5xx makes it retry forever with backoff, honouring Retry-After.
// So: everything the client got wrong and that a retry cannot fix is 4xx;
// everything on our side is 5xx; Retry-After only where waiting helps.
func classify(err error) classification {
	switch {
	case err == nil:
		return classification{code: http.StatusNoContent}
	case errors.Is(err, ErrMethodNotAllowed):
		return classification{code: http.StatusMethodNotAllowed, reason: reasonMethod}
	case errors.Is(err, ErrUnsupportedMediaType):
		return classification{code: http.StatusUnsupportedMediaType, reason: reasonMediaType}
	case errors.Is(err, ErrTooLarge):
		return classification{code: http.StatusRequestEntityTooLarge, reason: reasonTooLarge}
	case errors.Is(err, ErrEmptyBody):
		return classification{code: http.StatusBadRequest, reason: reasonEmpty}
	case errors.Is(err, ErrMalformed):
		return classification{code: http.StatusBadRequest, reason: reasonMalformed}
	case errors.Is(err, ErrInvalid):
		return classification{code: http.StatusBadRequest, reason: reasonInvalid}
	case errors.Is(err, ErrBadSource):
		return classification{code: http.StatusBadRequest, reason: reasonBadSource}
	case errors.Is(err, ErrRejected):
		return classification{code: http.StatusBadRequest, reason: reasonRejected}
	case errors.Is(err, ErrDiskFull):
		return classification{code: http.StatusInsufficientStorage, retryable: true, reason: reasonDiskFull}
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		// A sink that gave up waiting for the writer past its deadline.
		return classification{code: http.StatusServiceUnavailable, retryable: true, reason: reasonUnavailable}
	case errors.Is(err, context.Canceled):
		// The client left or the server is shutting down; if anyone still
		// reads the answer, trying again later is right.
		return classification{code: http.StatusServiceUnavailable, retryable: true, reason: reasonCanceled}
	case errors.Is(err, ErrIncompleteWrite):
		return classification{code: http.StatusInternalServerError, reason: reasonIncomplete}
	default:
		// Unknown: a bug or an unclassified sink failure. 500 keeps the data
		// at the sender (it retries) without promising that waiting helps.
		return classification{code: http.StatusInternalServerError, reason: reasonInternal}
	}
}

// Status returns the HTTP status the Handler answers for err (204 for nil)
// and whether the answer carries Retry-After.
func Status(err error) (code int, retryable bool) {
	c := classify(err)
	return c.code, c.retryable
}
