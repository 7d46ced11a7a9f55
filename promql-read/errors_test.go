package promread

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/prometheus/prometheus/promql"
)

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		err    error
		typ    errorType
		status int
	}{
		{badRequest("x"), errorBadData, http.StatusBadRequest},
		{fmt.Errorf("wrapped: %w", &SampleLimitError{Limit: 5}), errorExec, http.StatusUnprocessableEntity},
		{promql.ErrTooManySamples("query execution"), errorExec, http.StatusUnprocessableEntity},
		{fmt.Errorf("%w: waited", ErrOverloaded), errorUnavailable, http.StatusServiceUnavailable},
		{promql.ErrQueryTimeout("query execution"), errorTimeout, http.StatusServiceUnavailable},
		{context.DeadlineExceeded, errorTimeout, http.StatusServiceUnavailable},
		{promql.ErrQueryCanceled("x"), errorCanceled, 499},
		{promql.ErrStorage{Err: errors.New("disk")}, errorInternal, http.StatusInternalServerError},
		{errors.New("anything else"), errorExec, http.StatusUnprocessableEntity},
	} {
		typ, status := classify(c.err)
		if typ != c.typ || status != c.status {
			t.Errorf("classify(%v) = %s %d, want %s %d", c.err, typ, status, c.typ, c.status)
		}
	}
	if !errors.Is(&SampleLimitError{Limit: 1}, ErrTooManySamples) {
		t.Error("SampleLimitError does not match ErrTooManySamples")
	}
}
