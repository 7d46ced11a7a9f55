package promread

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/teststorage"
)

// loadTSDB writes the expected data into Prometheus's own TSDB.
func loadTSDB(t *testing.T, want expected) storage.Queryable {
	db := teststorage.New(t)
	app := db.Appender(context.Background())
	for _, s := range want {
		fi, hi := 0, 0
		for fi < len(s.floats) || hi < len(s.hists) {
			var err error
			if hi >= len(s.hists) || (fi < len(s.floats) && s.floats[fi].T <= s.hists[hi].T) {
				_, err = app.Append(0, s.lbls, s.floats[fi].T, s.floats[fi].V)
				fi++
			} else {
				h := s.hists[hi]
				_, err = app.AppendHistogram(0, s.lbls, h.T, h.H, h.FH)
				hi++
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	return db
}

var promqlExprs = []string{
	`http_requests_total`,
	`rate(http_requests_total[5m])`,
	`irate(http_requests_total{env=~"prod|dev"}[5m])`,
	`increase(http_requests_total[10m])`,
	`sum by (job) (rate(http_requests_total[5m]))`,
	`avg by (env) (http_requests_total)`,
	`max by (instance) (http_requests_total)`,
	`avg_over_time(temperature[10m])`,
	`max_over_time(temperature[10m])`,
	`min_over_time(temperature[10m])`,
	`count_over_time(temperature[10m])`,
	`last_over_time(temperature[10m])`,
	`temperature`, // ends with a stale marker
	`topk(2, http_requests_total)`,
	`absent(nothing_here)`,
	`absent(temperature{room="a"})`,
	`label_replace(http_requests_total, "x", "$1", "instance", "i(.*)")`,
	`http_requests_total offset 5m`,
	`max_over_time(rate(http_requests_total[5m])[30m:1m])`,
	`{__name__=~"late_.*|temp.*"}`,
	`histogram_quantile(0.9, rate(rpc_duration_seconds[5m]))`,
	`histogram_count(rpc_duration_seconds)`,
	`latency_seconds * on(job) group_left sum by (job) (http_requests_total)`,
	`1 + 1`,
}

func TestPromQLMatchesPrometheusTSDB(t *testing.T) {
	f := newFixture(t)
	want := standardData(f)
	ref := loadTSDB(t, want)
	api, err := NewAPI(f.a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e8, Timeout: time.Minute, LookbackDelta: 5 * time.Minute,
		EnableAtModifier: true, EnableNegativeOffset: true})
	ctx := context.Background()
	nonEmpty := 0
	for _, e := range promqlExprs {
		for _, at := range []int64{600, 1800, 1830, 3605, 3900, 7100} {
			ts := time.Unix(at, 0)
			a, err := engine.NewInstantQuery(ctx, ref, nil, e, ts)
			if err != nil {
				t.Fatal(err)
			}
			b, err := api.engine.NewInstantQuery(ctx, api.q, nil, e, ts)
			if err != nil {
				t.Fatal(err)
			}
			compareResults(t, e+" @"+ts.String(), a.Exec(ctx), b.Exec(ctx))
		}
		a, _ := engine.NewRangeQuery(ctx, ref, nil, e, time.Unix(0, 0), time.Unix(7300, 0), 45*time.Second)
		b, _ := api.engine.NewRangeQuery(ctx, api.q, nil, e, time.Unix(0, 0), time.Unix(7300, 0), 45*time.Second)
		ra := a.Exec(ctx)
		compareResults(t, e+" range", ra, b.Exec(ctx))
		if m := toMatrix(ra.Value); len(m) > 0 {
			nonEmpty++
		}
	}
	if nonEmpty < len(promqlExprs)-1 {
		t.Fatalf("only %d of %d expressions had data: the comparison is vacuous", nonEmpty, len(promqlExprs))
	}
}

func compareResults(t *testing.T, what string, want, got *promql.Result) {
	t.Helper()
	if (want.Err == nil) != (got.Err == nil) {
		t.Fatalf("%s: error %v, Prometheus's TSDB: %v", what, got.Err, want.Err)
	}
	if want.Err != nil {
		return
	}
	wm, gm := toMatrix(want.Value), toMatrix(got.Value)
	if len(wm) != len(gm) {
		t.Fatalf("%s: %d series, want %d\n got %v\nwant %v", what, len(gm), len(wm), got.Value, want.Value)
	}
	for i := range wm {
		if !labels.Equal(wm[i].Metric, gm[i].Metric) {
			t.Fatalf("%s: series %d is %s, want %s", what, i, gm[i].Metric, wm[i].Metric)
		}
		if len(wm[i].Floats) != len(gm[i].Floats) || len(wm[i].Histograms) != len(gm[i].Histograms) {
			t.Fatalf("%s: %s has %d/%d points, want %d/%d", what, wm[i].Metric, len(gm[i].Floats), len(gm[i].Histograms), len(wm[i].Floats), len(wm[i].Histograms))
		}
		for k, p := range wm[i].Floats {
			q := gm[i].Floats[k]
			if p.T != q.T || !closeEnough(p.F, q.F) {
				t.Fatalf("%s: %s point %d is %v, want %v", what, wm[i].Metric, k, q, p)
			}
		}
		for k, p := range wm[i].Histograms {
			q := gm[i].Histograms[k]
			if p.T != q.T || !closeEnough(p.H.Count, q.H.Count) || !closeEnough(p.H.Sum, q.H.Sum) {
				t.Fatalf("%s: %s histogram %d is %v, want %v", what, wm[i].Metric, k, q, p)
			}
		}
	}
}

func closeEnough(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	if a == b {
		return true
	}
	return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))
}

func toMatrix(v parser.Value) promql.Matrix {
	switch r := v.(type) {
	case promql.Matrix:
		return r
	case promql.Vector:
		var m promql.Matrix
		for _, s := range r {
			ps := promql.Series{Metric: s.Metric}
			if s.H != nil {
				ps.Histograms = []promql.HPoint{{T: s.T, H: s.H}}
			} else {
				ps.Floats = []promql.FPoint{{T: s.T, F: s.F}}
			}
			m = append(m, ps)
		}
		// Order is not part of an instant vector's meaning (topk aside).
		m = sortMatrix(m)
		return m
	case promql.Scalar:
		return promql.Matrix{{Floats: []promql.FPoint{{T: r.T, F: r.V}}}}
	}
	return nil
}

func sortMatrix(m promql.Matrix) promql.Matrix {
	for i := 1; i < len(m); i++ {
		for j := i; j > 0 && labels.Compare(m[j-1].Metric, m[j].Metric) > 0; j-- {
			m[j-1], m[j] = m[j], m[j-1]
		}
	}
	return m
}
