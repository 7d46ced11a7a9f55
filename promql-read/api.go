package promread

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// API serves remote-read and the Prometheus HTTP query API from an archive.
type API struct {
	opts   Options
	q      *Queryable
	s      *store
	engine *promql.Engine
	parser parser.Parser
	// slots is the concurrency semaphore: a request holds one slot while it
	// reads, so at most MaxConcurrency questions decode at once.
	slots chan struct{}
	// encoders is a bounded free list of SAMPLES answer encoders (their
	// buffers). Not a sync.Pool: a whole-metric answer allocates MBs, so
	// the GC runs between requests and would empty a pool every time.
	encoders chan *runEncoder
}

// NewAPI builds the API over a (a read handle; the caller keeps it and
// closes it after the server stops).
func NewAPI(a *archive.Archive, opts Options) (*API, error) {
	q, err := NewQueryable(a, opts)
	if err != nil {
		return nil, err
	}
	opts = q.s.opts
	p := parser.NewParser(parser.Options{})
	engine := promql.NewEngine(promql.EngineOpts{
		MaxSamples:    opts.MaxSamples,
		Timeout:       opts.Timeout,
		LookbackDelta: opts.LookbackDelta,
		// Grafana and recording rules use @ and negative offsets; both are
		// on by default in Prometheus 3.
		EnableAtModifier:     true,
		EnableNegativeOffset: true,
		Parser:               p,
	})
	api := &API{opts: opts, q: q, s: q.s, engine: engine, parser: p,
		slots: make(chan struct{}, opts.MaxConcurrency)}
	api.encoders = make(chan *runEncoder, maxIdleEncoders)
	return api, nil
}

// WarmEngine evaluates one range query of one series, a rate over the
// last five minutes of its data, through the engine and the answer's
// encoding, and discards the answer. (It asked for the last hour until
// that hour held more segments' directories than the cache: at a million
// series it rebuilt its stream's oldest and evicted the newest of the
// others, which the first questions after the restart then rebuilt.) A
// server calls it after Queryable.Warm, before it reports ready: the
// first PromQL question after a restart otherwise paid for the first run
// of that code (the engine, the parser, the selection and segment reads,
// the JSON answer): an instant query of vector(1) took 4-7 ms the first
// time on a 1 M-series server and 0.3-0.6 ms after. It only saves time,
// so it returns what went wrong and the caller logs it.
func (api *API) WarmEngine(ctx context.Context) error {
	x := api.s.x
	names := x.LabelValues(labels.MetricName, nil, math.MinInt64, math.MaxInt64)
	if len(names) == 0 {
		return nil
	}
	refs := x.Select([]*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, labels.MetricName, names[0])}, math.MinInt64, math.MaxInt64)
	if len(refs) == 0 {
		return nil
	}
	r := refs[len(refs)-1]
	_, maxT, ok := x.Span(r)
	if !ok {
		return nil
	}
	end := time.UnixMilli(maxT)
	qry, err := api.engine.NewRangeQuery(ctx, api.q, nil, "rate("+x.Labels(r).String()+"[5m])", end.Add(-5*time.Minute), end, time.Minute)
	if err != nil {
		return err
	}
	_, err = runQuery(ctx, qry)
	return err
}

// Queryable returns the storage.Queryable the API evaluates PromQL over.
func (api *API) Queryable() *Queryable { return api.q }

// Register mounts the endpoints under /api/v1 on r.
func (api *API) Register(r chi.Router) {
	r.Post("/api/v1/read", api.remoteRead)
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		r.MethodFunc(m, "/api/v1/query", api.wrap(api.query))
		r.MethodFunc(m, "/api/v1/query_range", api.wrap(api.queryRange))
		r.MethodFunc(m, "/api/v1/series", api.wrap(dataOnly(api.series)))
		r.MethodFunc(m, "/api/v1/labels", api.wrap(dataOnly(api.labelNames)))
		r.MethodFunc(m, "/api/v1/label/{name}/values", api.wrap(dataOnly(api.labelValues)))
		r.MethodFunc(m, "/api/v1/query_exemplars", api.wrap(dataOnly(api.queryExemplars)))
	}
	r.Get("/api/v1/metadata", api.wrap(dataOnly(api.metadata)))
	r.Get("/api/v1/status/buildinfo", api.wrap(dataOnly(api.buildInfo)))
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		r.MethodFunc(m, "/api/v1/format_query", api.wrap(dataOnly(api.formatQuery)))
	}
	// dendro-receiver evaluates no recording or alerting rules, so it has
	// none to list; an empty answer, as a Prometheus without rule files
	// gives, rather than a 404 that Grafana's alert list shows as an error
	// of the data source.
	r.Get("/api/v1/rules", api.wrap(dataOnly(constData(`{"groups":[]}`))))
	r.Get("/api/v1/alerts", api.wrap(dataOnly(constData(`{"alerts":[]}`))))
}

// constData answers the same data every time.
func constData(data string) dataFunc {
	return func(context.Context, *http.Request) ([]byte, error) { return []byte(data), nil }
}

// formatQuery is Prometheus's /api/v1/format_query: the expression
// pretty-printed (Grafana's query editor may ask for it).
func (api *API) formatQuery(_ context.Context, r *http.Request) ([]byte, error) {
	expr, err := api.parser.ParseExpr(r.Form.Get("query"))
	if err != nil {
		return nil, badRequest("invalid parameter \"query\": %v", err)
	}
	return appendJSONString(nil, expr.Pretty(0)), nil
}

// Handler returns the endpoints as an http.Handler.
func (api *API) Handler() http.Handler {
	r := chi.NewRouter()
	api.Register(r)
	return r
}

// admit takes a concurrency slot, waiting up to the timeout, and returns
// the request's context bounded by Options.Timeout.
func (api *API) admit(ctx context.Context) (context.Context, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, api.opts.Timeout)
	select {
	case api.slots <- struct{}{}:
		return ctx, func() { <-api.slots; cancel() }, nil
	case <-ctx.Done():
		cancel()
		return nil, nil, fmt.Errorf("%w: waited for a slot: %v", ErrOverloaded, ctx.Err())
	}
}

// response is a success: the "data" JSON and a query's annotations.
type response struct {
	data            []byte
	warnings, infos []string
}

// apiFunc answers one endpoint.
type apiFunc func(ctx context.Context, r *http.Request) (response, error)

// dataFunc answers an endpoint that has no annotations.
type dataFunc func(ctx context.Context, r *http.Request) ([]byte, error)

func dataOnly(f dataFunc) apiFunc {
	return func(ctx context.Context, r *http.Request) (response, error) {
		data, err := f(ctx, r)
		return response{data: data}, err
	}
}

func (api *API) wrap(f apiFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := r.ParseForm(); err != nil {
			writeError(w, badRequest("parse form: %v", err))
			return
		}
		ctx, release, err := api.admit(r.Context())
		if err != nil {
			writeError(w, err)
			return
		}
		defer release()
		qr, err := f(ctx, r)
		if err != nil {
			writeError(w, err)
			return
		}
		b := make([]byte, 0, len(qr.data)+32)
		b = append(b, `{"status":"success","data":`...)
		b = append(b, qr.data...)
		if len(qr.warnings) > 0 {
			b = append(b, `,"warnings":`...)
			b = appendStrings(b, qr.warnings)
		}
		if len(qr.infos) > 0 {
			b = append(b, `,"infos":`...)
			b = appendStrings(b, qr.infos)
		}
		b = append(b, '}')
		// The whole body is at hand: say its length, so the client need
		// not parse chunks (net/http chunks any body over 2 KiB).
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusOK)
		w.Write(b)
	}
}

func writeError(w http.ResponseWriter, err error) {
	typ, status := classify(err)
	b := []byte(`{"status":"error","errorType":"`)
	b = append(b, typ...)
	b = append(b, `","error":`...)
	b = appendJSONString(b, err.Error())
	b = append(b, '}')
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// Times, as Prometheus parses them.
var (
	minTime = time.Unix(math.MinInt64/1000+62135596801, 0).UTC()
	maxTime = time.Unix(math.MaxInt64/1000-62135596801, 999999999).UTC()
)

func parseTime(s string) (time.Time, error) {
	if t, err := strconv.ParseFloat(s, 64); err == nil {
		sec, ns := math.Modf(t)
		ns = math.Round(ns*1000) / 1000
		return time.Unix(int64(sec), int64(ns*float64(time.Second))).UTC(), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("cannot parse %q to a valid timestamp", s)
}

func timeParam(r *http.Request, name string, def time.Time) (time.Time, error) {
	v := r.Form.Get(name)
	if v == "" {
		return def, nil
	}
	t, err := parseTime(v)
	if err != nil {
		return time.Time{}, badRequest("invalid parameter %q: %v", name, err)
	}
	return t, nil
}

func parseDuration(s string) (time.Duration, error) {
	if d, err := strconv.ParseFloat(s, 64); err == nil {
		ts := d * float64(time.Second)
		if ts > float64(math.MaxInt64) || ts < float64(math.MinInt64) {
			return 0, fmt.Errorf("cannot parse %q to a valid duration. It overflows int64", s)
		}
		return time.Duration(ts), nil
	}
	if d, err := model.ParseDuration(s); err == nil {
		return time.Duration(d), nil
	}
	return 0, fmt.Errorf("cannot parse %q to a valid duration", s)
}

func limitParam(r *http.Request) (int, error) {
	v := r.Form.Get("limit")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, badRequest("invalid parameter \"limit\": must be a non-negative integer")
	}
	return n, nil
}

func (api *API) queryOpts(r *http.Request) (promql.QueryOpts, error) {
	lookback := api.opts.LookbackDelta
	if v := r.Form.Get("lookback_delta"); v != "" {
		d, err := parseDuration(v)
		if err != nil {
			return nil, badRequest("invalid parameter \"lookback_delta\": %v", err)
		}
		lookback = d
	}
	return promql.NewPrometheusQueryOpts(r.Form.Get("stats") == "all", lookback, nil), nil
}

func (api *API) timeout(ctx context.Context, r *http.Request) (context.Context, context.CancelFunc, error) {
	if v := r.Form.Get("timeout"); v != "" {
		d, err := parseDuration(v)
		if err != nil {
			return nil, nil, badRequest("invalid parameter \"timeout\": %v", err)
		}
		ctx, cancel := context.WithTimeout(ctx, d)
		return ctx, cancel, nil
	}
	return ctx, func() {}, nil
}

func (api *API) query(ctx context.Context, r *http.Request) (response, error) {
	ts, err := timeParam(r, "time", time.Now())
	if err != nil {
		return response{}, err
	}
	ctx, cancel, err := api.timeout(ctx, r)
	if err != nil {
		return response{}, err
	}
	defer cancel()
	opts, err := api.queryOpts(r)
	if err != nil {
		return response{}, err
	}
	qry, err := api.engine.NewInstantQuery(ctx, api.q, opts, r.Form.Get("query"), ts)
	if err != nil {
		return response{}, badRequest("invalid parameter \"query\": %v", err)
	}
	return runQuery(ctx, qry)
}

// maxPoints is Prometheus's cap on points per series of a range query.
const maxPoints = 11000

func (api *API) queryRange(ctx context.Context, r *http.Request) (response, error) {
	start, err := timeParam(r, "start", time.Time{})
	if err != nil {
		return response{}, err
	}
	end, err := timeParam(r, "end", time.Time{})
	if err != nil {
		return response{}, err
	}
	if r.Form.Get("start") == "" || r.Form.Get("end") == "" {
		return response{}, badRequest("invalid parameter \"start\" or \"end\": both are required")
	}
	if end.Before(start) {
		return response{}, badRequest("invalid parameter \"end\": end timestamp must not be before start time")
	}
	step, err := parseDuration(r.Form.Get("step"))
	if err != nil {
		return response{}, badRequest("invalid parameter \"step\": %v", err)
	}
	if step <= 0 {
		return response{}, badRequest("invalid parameter \"step\": zero or negative query resolution step widths are not accepted. Try a positive integer")
	}
	if end.Sub(start)/step > maxPoints {
		return response{}, badRequest("exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)")
	}
	ctx, cancel, err := api.timeout(ctx, r)
	if err != nil {
		return response{}, err
	}
	defer cancel()
	opts, err := api.queryOpts(r)
	if err != nil {
		return response{}, err
	}
	qry, err := api.engine.NewRangeQuery(ctx, api.q, opts, r.Form.Get("query"), start, end, step)
	if err != nil {
		return response{}, badRequest("invalid parameter \"query\": %v", err)
	}
	return runQuery(ctx, qry)
}

func runQuery(ctx context.Context, qry promql.Query) (response, error) {
	defer qry.Close()
	res := qry.Exec(ctx)
	if res.Err != nil {
		return response{}, res.Err
	}
	// As Prometheus: at most 10 of each, the rest summarized.
	warnings, infos := res.Warnings.AsStrings(qry.String(), 10, 10)
	return response{data: appendResult(nil, res.Value), warnings: warnings, infos: infos}, nil
}

// matcherSets parses match[]; required says an empty list is an error.
func (api *API) matcherSets(r *http.Request, required bool) ([][]*labels.Matcher, error) {
	ms := r.Form["match[]"]
	if len(ms) == 0 {
		if required {
			return nil, badRequest("no match[] parameter provided")
		}
		return nil, nil
	}
	sets, err := api.parser.ParseMetricSelectors(ms)
	if err != nil {
		return nil, badRequest("invalid parameter \"match[]\": %v", err)
	}
	for _, set := range sets {
		if allMatchEmpty(set) {
			return nil, badRequest("match[] must contain at least one non-empty matcher")
		}
	}
	return sets, nil
}

func allMatchEmpty(ms []*labels.Matcher) bool {
	for _, m := range ms {
		if !m.Matches("") {
			return false
		}
	}
	return true
}

// rangeParams reads start and end (default: all time) as Unix ms.
func rangeParams(r *http.Request) (int64, int64, error) {
	start, err := timeParam(r, "start", minTime)
	if err != nil {
		return 0, 0, err
	}
	end, err := timeParam(r, "end", maxTime)
	if err != nil {
		return 0, 0, err
	}
	if end.Before(start) {
		return 0, 0, badRequest("invalid parameter \"end\": end timestamp must not be before start time")
	}
	return start.UnixMilli(), end.UnixMilli(), nil
}

func (api *API) series(ctx context.Context, r *http.Request) ([]byte, error) {
	sets, err := api.matcherSets(r, true)
	if err != nil {
		return nil, err
	}
	mint, maxt, err := rangeParams(r)
	if err != nil {
		return nil, err
	}
	limit, err := limitParam(r)
	if err != nil {
		return nil, err
	}
	seen := map[string]labels.Labels{}
	for _, ms := range sets {
		got, err := api.s.selectSeries(ctx, selectParams{mint: mint, maxt: maxt, matchers: ms, labelsOnly: true})
		if err != nil {
			return nil, err
		}
		for _, sr := range got {
			seen[sr.lbls.String()] = sr.lbls
		}
	}
	list := make([]labels.Labels, 0, len(seen))
	for _, ls := range seen {
		list = append(list, ls)
	}
	slices.SortFunc(list, labels.Compare)
	if limit > 0 && len(list) > limit {
		list = list[:limit]
	}
	b := []byte{'['}
	for i, ls := range list {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendLabels(b, ls)
	}
	return append(b, ']'), nil
}

func appendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

// unionOver runs f per matcher set (once with none when there is none) and
// returns the sorted union, cut at limit.
func unionOver(sets [][]*labels.Matcher, limit int, f func([]*labels.Matcher) ([]string, error)) ([]string, error) {
	if len(sets) == 0 {
		sets = [][]*labels.Matcher{nil}
	}
	set := map[string]struct{}{}
	for _, ms := range sets {
		vals, err := f(ms)
		if err != nil {
			return nil, err
		}
		for _, v := range vals {
			set[v] = struct{}{}
		}
	}
	out := sortedKeys(set)
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// listParams reads what the label listing endpoints share: match[] sets,
// start and end, and limit.
func (api *API) listParams(r *http.Request) (sets [][]*labels.Matcher, mint, maxt int64, limit int, err error) {
	if sets, err = api.matcherSets(r, false); err != nil {
		return
	}
	if mint, maxt, err = rangeParams(r); err != nil {
		return
	}
	limit, err = limitParam(r)
	return
}

func (api *API) labelNames(ctx context.Context, r *http.Request) ([]byte, error) {
	sets, mint, maxt, limit, err := api.listParams(r)
	if err != nil {
		return nil, err
	}
	names, err := unionOver(sets, limit, func(ms []*labels.Matcher) ([]string, error) {
		return api.s.labelNames(ctx, mint, maxt, ms)
	})
	if err != nil {
		return nil, err
	}
	return appendStrings(nil, names), nil
}

func (api *API) labelValues(ctx context.Context, r *http.Request) ([]byte, error) {
	name := chi.URLParam(r, "name")
	if strings.HasPrefix(name, "U__") {
		name = model.UnescapeName(name, model.ValueEncodingEscaping)
	}
	if !model.UTF8Validation.IsValidLabelName(name) {
		return nil, badRequest("invalid label name: %q", name)
	}
	sets, mint, maxt, limit, err := api.listParams(r)
	if err != nil {
		return nil, err
	}
	vals, err := unionOver(sets, limit, func(ms []*labels.Matcher) ([]string, error) {
		return api.s.labelValues(ctx, mint, maxt, name, ms)
	})
	if err != nil {
		return nil, err
	}
	return appendStrings(nil, vals), nil
}

func (api *API) queryExemplars(ctx context.Context, r *http.Request) ([]byte, error) {
	mint, maxt, err := rangeParams(r)
	if err != nil {
		return nil, err
	}
	expr, err := api.parser.ParseExpr(r.Form.Get("query"))
	if err != nil {
		return nil, badRequest("invalid parameter \"query\": %v", err)
	}
	sets := parser.ExtractSelectors(expr)
	if len(sets) == 0 {
		return []byte("[]"), nil
	}
	eq, _ := api.q.ExemplarQuerier(ctx)
	res, err := eq.Select(mint, maxt, sets...)
	if err != nil {
		return nil, err
	}
	b := []byte{'['}
	for i, r := range res {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"seriesLabels":`...)
		b = appendLabels(b, r.SeriesLabels)
		b = append(b, `,"exemplars":[`...)
		for k, e := range r.Exemplars {
			if k > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"labels":`...)
			b = appendLabels(b, e.Labels)
			b = append(b, `,"value":`...)
			b = appendFloat(b, e.Value)
			b = append(b, `,"timestamp":`...)
			b = appendTimestamp(b, e.Ts)
			b = append(b, '}')
		}
		b = append(b, "]}"...)
	}
	return append(b, ']'), nil
}

// metadata answers /api/v1/metadata from the metadata remote-written with
// the samples: every segment's footer and every live tail, in one snapshot.
func (api *API) metadata(ctx context.Context, r *http.Request) ([]byte, error) {
	limit, err := limitParam(r)
	if err != nil {
		return nil, err
	}
	perMetric := 0
	if v := r.Form.Get("limit_per_metric"); v != "" {
		if perMetric, err = strconv.Atoi(v); err != nil || perMetric < 0 {
			return nil, badRequest("invalid parameter \"limit_per_metric\"")
		}
	}
	metric := r.Form.Get("metric")
	all, err := api.s.metadata(ctx, metric)
	if err != nil {
		return nil, err
	}
	byName := map[string][]promsample.Metadata{}
	var names []string
	for _, m := range all {
		if _, ok := byName[m.MetricFamily]; !ok {
			names = append(names, m.MetricFamily)
		}
		if perMetric > 0 && len(byName[m.MetricFamily]) >= perMetric {
			continue
		}
		byName[m.MetricFamily] = append(byName[m.MetricFamily], m)
	}
	slices.Sort(names)
	if limit > 0 && len(names) > limit {
		names = names[:limit]
	}
	b := []byte{'{'}
	for i, n := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, n)
		b = append(b, ":["...)
		for k, m := range byName[n] {
			if k > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"type":`...)
			b = appendJSONString(b, string(m.Type))
			b = append(b, `,"help":`...)
			b = appendJSONString(b, m.Help)
			b = append(b, `,"unit":`...)
			b = appendJSONString(b, m.Unit)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}'), nil
}

func (api *API) buildInfo(context.Context, *http.Request) ([]byte, error) {
	b := []byte(`{"version":`)
	b = appendJSONString(b, api.opts.Version)
	b = append(b, `,"revision":"","branch":"","buildUser":"dendro-receiver","buildDate":"","goVersion":`...)
	b = appendJSONString(b, runtime.Version())
	return append(b, '}'), nil
}

// metadata collects distinct metadata (of metric, or all when "").
func (s *store) metadata(ctx context.Context, metric string) ([]promsample.Metadata, error) {
	var ms []*labels.Matcher
	if metric != "" {
		ms = []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, labels.MetricName, metric)}
	}
	nc := constrainNames(ms)
	set := map[promsample.Metadata]struct{}{}
	err := s.viewStreams(ctx, nc, func(c *catalog, src archive.SourceInfo, st string, metas []archive.StreamSegment) error {
		for _, m := range metas {
			id := s.segID(src.ID, m)
			k := cacheKey{seg: s.names.of(id), kind: kindMetadata}
			var md []promsample.Metadata
			if v, ok := s.cache.get(k); ok {
				md = v.([]promsample.Metadata)
			} else {
				b, err := s.segmentBytes(c.tx, id)
				if err != nil {
					return err
				}
				if md, err = promsample.ReadSegmentMetadata(b); err != nil {
					return err
				}
				var n int64
				for _, x := range md {
					n += int64(len(x.MetricFamily)+len(x.Help)+len(x.Unit)+len(x.Type)) + 64
				}
				s.cache.put(k, md, n)
			}
			for _, x := range md {
				set[x] = struct{}{}
			}
		}
		rows, err := c.tx.LiveWAL(src.ID, st)
		if err != nil {
			return err
		}
		md, err := promsample.ReadRowsMetadata(rows)
		if err != nil {
			return err
		}
		for _, x := range md {
			set[x] = struct{}{}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]promsample.Metadata, 0, len(set))
	for m := range set {
		if metric == "" || m.MetricFamily == metric {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b promsample.Metadata) int {
		return strings.Compare(a.MetricFamily+"\x00"+string(a.Type)+"\x00"+a.Help+"\x00"+a.Unit,
			b.MetricFamily+"\x00"+string(b.Type)+"\x00"+b.Help+"\x00"+b.Unit)
	})
	return out, nil
}
