package promread

import (
	"context"
	"time"

	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
)

// EvalResult is one evaluated PromQL expression.
type EvalResult struct {
	Value parser.Value // promql.Vector, Matrix, Scalar or String
	// JSON is the "data" member of the HTTP API's answer, byte for byte
	// what /api/v1/query or /api/v1/query_range would send.
	JSON            []byte
	Warnings, Infos []string
}

// Eval evaluates expr for a caller in this process (dendro-receiver
// query) exactly as the HTTP API does, with the same engine, limits,
// checks and lookback: an instant query at start when step is 0 (end is
// then ignored), else a range query over [start, end] by step.
// Errors are the API's: a bad expression or range matches ErrBadRequest.
func (api *API) Eval(ctx context.Context, expr string, start, end time.Time, step time.Duration) (EvalResult, error) {
	ctx, done, err := api.admit(ctx)
	if err != nil {
		return EvalResult{}, err
	}
	defer done()
	opts := promql.NewPrometheusQueryOpts(false, api.opts.LookbackDelta, nil)
	var qry promql.Query
	if step == 0 {
		qry, err = api.engine.NewInstantQuery(ctx, api.q, opts, expr, start)
	} else {
		switch {
		case end.Before(start):
			return EvalResult{}, badRequest("end timestamp must not be before start time")
		case step < 0:
			return EvalResult{}, badRequest("zero or negative query resolution step widths are not accepted")
		case end.Sub(start)/step > maxPoints:
			return EvalResult{}, badRequest("exceeded maximum resolution of 11,000 points per timeseries; use a larger step")
		}
		qry, err = api.engine.NewRangeQuery(ctx, api.q, opts, expr, start, end, step)
	}
	if err != nil {
		return EvalResult{}, badRequest("%v", err)
	}
	defer qry.Close()
	res := qry.Exec(ctx)
	if res.Err != nil {
		return EvalResult{}, res.Err
	}
	warnings, infos := res.Warnings.AsStrings(qry.String(), 10, 10)
	return EvalResult{Value: detach(res.Value), JSON: appendResult(nil, res.Value), Warnings: warnings, Infos: infos}, nil
}

// detach copies a matrix's points out of the engine's pools, which
// qry.Close returns them to.
func detach(v parser.Value) parser.Value {
	m, ok := v.(promql.Matrix)
	if !ok {
		return v
	}
	out := make(promql.Matrix, len(m))
	for i, s := range m {
		out[i] = promql.Series{Metric: s.Metric, Floats: append([]promql.FPoint(nil), s.Floats...),
			Histograms: append([]promql.HPoint(nil), s.Histograms...), DropName: s.DropName}
	}
	return out
}
