package promread

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/prometheus/promql"
)

// Sentinel errors. Each says who returns it.
var (
	// ErrTooManySamples is returned by a Select (and so by remote-read and the
	// query API) whose answer would hold more than Options.MaxSamples samples.
	ErrTooManySamples = errors.New("promread: query would load too many samples")
	// ErrBadRequest wraps malformed requests: bad matchers, bad times, a body
	// that does not decode.
	ErrBadRequest = errors.New("promread: bad request")
	// ErrOverloaded is returned when Options.MaxConcurrency requests are
	// already running and the request's wait for a slot timed out.
	ErrOverloaded = errors.New("promread: too many concurrent queries")
	// ErrTooMuchMemory is returned by a question whose answer would hold
	// more memory than Options.MemoryPerQuery allows.
	ErrTooMuchMemory = errors.New("promread: query would hold too much memory")
)

// MemoryLimitError reports a question over its memory share: Need bytes
// (an estimate of what its answer holds) against Limit.
type MemoryLimitError struct{ Need, Limit int64 }

func (e *MemoryLimitError) Error() string {
	return fmt.Sprintf("the answer would hold about %d MiB, more than the %d MiB a query may under --memory.limit: narrow the matchers or the time range",
		(e.Need+1<<20-1)>>20, e.Limit>>20) // rounded up, so that the two never read the same
}

// Is makes MemoryLimitError match ErrTooMuchMemory.
func (e *MemoryLimitError) Is(target error) bool { return target == ErrTooMuchMemory }

// SampleLimitError reports a sample budget overrun with the limit.
type SampleLimitError struct{ Limit int }

func (e *SampleLimitError) Error() string {
	return fmt.Sprintf("exceeded sample limit (%d): narrow the matchers or the time range", e.Limit)
}

// Is makes SampleLimitError match ErrTooManySamples.
func (e *SampleLimitError) Is(target error) bool { return target == ErrTooManySamples }

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}

// errorType names Prometheus's API errorType values.
type errorType string

const (
	errorBadData     errorType = "bad_data"
	errorExec        errorType = "execution"
	errorTimeout     errorType = "timeout"
	errorCanceled    errorType = "canceled"
	errorInternal    errorType = "internal"
	errorUnavailable errorType = "unavailable"
)

// classify maps an error to the API's errorType and HTTP status: the one
// place that does. Bad input is 400 (a client must not retry it); a query
// that is too big is 422 like Prometheus's execution errors (retrying the
// same query cannot help); overload and timeouts are 503 (retry later).
func classify(err error) (errorType, int) {
	var (
		tooMany promql.ErrTooManySamples
		timeout promql.ErrQueryTimeout
		cancel  promql.ErrQueryCanceled
		storErr promql.ErrStorage
	)
	switch {
	case errors.Is(err, ErrBadRequest):
		return errorBadData, http.StatusBadRequest
	case errors.Is(err, ErrTooManySamples), errors.As(err, &tooMany), errors.Is(err, ErrTooMuchMemory):
		return errorExec, http.StatusUnprocessableEntity
	case errors.Is(err, ErrOverloaded):
		return errorUnavailable, http.StatusServiceUnavailable
	case errors.As(err, &timeout), errors.Is(err, context.DeadlineExceeded):
		return errorTimeout, http.StatusServiceUnavailable
	case errors.As(err, &cancel), errors.Is(err, context.Canceled):
		return errorCanceled, 499 // what Prometheus answers a client that left
	case errors.As(err, &storErr):
		return errorInternal, http.StatusInternalServerError
	}
	return errorExec, http.StatusUnprocessableEntity
}
