package main

import (
	"context"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/prompb"
)

// victim is the one sample the faults below hit: series 37, sample 5.
func isVictim(d Dataset) func(map[string]string, prompb.Sample) bool {
	want := labelMap(d.Labels(37))
	return func(m map[string]string, s prompb.Sample) bool {
		return labelString(m) == labelString(want) && s.Timestamp == d.Timestamp(5)
	}
}

// runAgainst sends testDataset to f through the harness's own sender and
// measure, as a real run does, and returns the result.
func runAgainst(t *testing.T, f *fakeServer, export bool, tol float64) RunResult {
	t.Helper()
	d := testDataset()
	ld, err := Encode(d, Layout{Batch: 100, PerSeries: 4, Senders: 4})
	if err != nil {
		t.Fatal(err)
	}
	res := measure(context.Background(), fakeTarget{f: f, export: export, tol: tol}, ld, 0, testOptions(), false)
	res.Server = "dendro"
	return res
}

// The acceptance test of the issue: a server that drops one sample and one
// that changes one value's bits are both refused, and the table prints no
// figure for them; an honest one passes.
func TestVerifierRefusesLostAndChangedSamples(t *testing.T) {
	d := testDataset()
	for _, tc := range []struct {
		name  string
		fault func(map[string]string, prompb.Sample) (prompb.Sample, bool)
		check func(t *testing.T, v Verdict)
	}{
		{
			name: "honest",
			check: func(t *testing.T, v Verdict) {
				if !v.OK() || v.Exact != d.TotalSamples() {
					t.Errorf("honest server refused: %s %v", v.Summary(), v.Problems)
				}
			},
		},
		{
			name: "drops one sample",
			fault: func(m map[string]string, s prompb.Sample) (prompb.Sample, bool) {
				return s, !isVictim(d)(m, s)
			},
			check: func(t *testing.T, v Verdict) {
				if v.OK() || v.Missing != 1 || v.Exact != d.TotalSamples()-1 {
					t.Errorf("verdict %s, want exactly one missing", v.Summary())
				}
			},
		},
		{
			name: "changes one value's bits",
			fault: func(m map[string]string, s prompb.Sample) (prompb.Sample, bool) {
				if isVictim(d)(m, s) {
					s.Value = math.Float64frombits(math.Float64bits(s.Value) ^ 1) // the last mantissa bit
				}
				return s, true
			},
			check: func(t *testing.T, v Verdict) {
				if v.OK() || v.Mismatched != 1 || v.Missing != 0 {
					t.Errorf("verdict %s, want exactly one mismatched", v.Summary())
				}
				if len(v.Problems) == 0 || !strings.Contains(v.Problems[0], "series 37") {
					t.Errorf("problems %q do not name series 37", v.Problems)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeServer(t)
			f.fault = tc.fault
			res := runAgainst(t, f, false, 0)
			tc.check(t, res.Verdict)
			if res.Send.Samples != d.TotalSamples() || res.Send.Rejected+res.Send.Failed != 0 {
				t.Fatalf("send: %+v", res.Send)
			}
			honest := tc.fault == nil
			if res.OK() != honest {
				t.Fatalf("run OK() = %v, want %v: %s", res.OK(), honest, res.Why())
			}
			// What the table makes of it: no figure, a line saying why, and
			// a failure for the exit status.
			servers := []ServerInfo{{Key: "dendro", Name: "dendro-receiver"}}
			rep := &Report{Servers: servers, Runs: []RunResult{res}}
			rep.Blocks = buildBlocks(rep.Runs, servers)
			rep.Failures = failures(rep.Runs, servers)
			var b strings.Builder
			if err := rep.WriteTable(&b); err != nil {
				t.Fatal(err)
			}
			table := b.String()
			if honest {
				if len(rep.Failures) != 0 || len(rep.Blocks[0].Rows) == 0 || !strings.Contains(table, "ingest, k samples/s") {
					t.Fatalf("honest run not reported:\n%s", table)
				}
				return
			}
			if len(rep.Failures) != 1 || len(rep.Blocks[0].Rows) != 0 {
				t.Fatalf("refused run has %d rows, %d failures", len(rep.Blocks[0].Rows), len(rep.Failures))
			}
			if strings.Contains(table, "ingest, k samples/s") || !strings.Contains(table, "no figures") || !strings.Contains(table, "FAILED") {
				t.Fatalf("table of a refused run:\n%s", table)
			}
		})
	}
}

func TestVerifierCountsDuplicatesAndExtras(t *testing.T) {
	d := testDataset()
	for _, tc := range []struct {
		name  string
		fault func(map[string]string, prompb.Sample) (prompb.Sample, bool)
		want  func(v Verdict) bool
	}{
		{"moves one timestamp", func(m map[string]string, s prompb.Sample) (prompb.Sample, bool) {
			if isVictim(d)(m, s) {
				s.Timestamp++
			}
			return s, true
		}, func(v Verdict) bool { return v.Missing == 1 && v.Extra == 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeServer(t)
			f.fault = tc.fault
			res := runAgainst(t, f, false, 0)
			if res.OK() || !tc.want(res.Verdict) {
				t.Fatalf("verdict %s", res.Verdict.Summary())
			}
		})
	}
	t.Run("a series stored twice", func(t *testing.T) {
		f := newFakeServer(t)
		res := runAgainst(t, f, false, 0)
		if !res.OK() {
			t.Fatal(res.Why())
		}
		// Store series 3's samples a second time, and add a series the
		// data set does not have.
		f.mu.Lock()
		s := f.series[labelString(labelMap(d.Labels(3)))]
		s.samples = append(s.samples, s.samples...)
		alien := labelMap(d.Labels(4))
		alien["env"] = "prod"
		f.series[labelString(alien)] = &fakeSeries{labels: alien, samples: []prompb.Sample{{Timestamp: d.StartMs, Value: 1}}}
		f.mu.Unlock()
		v := Verify(context.Background(), remoteRead{client: http.DefaultClient, url: f.srv.URL + "/api/v1/read"}, "remote-read", d, 0)
		if v.OK() || v.Duplicates != int64(d.Samples) || v.Extra != 1 {
			t.Fatalf("verdict %s", v.Summary())
		}
	})
	t.Run("a server that fails to read", func(t *testing.T) {
		v := Verify(context.Background(), remoteRead{client: http.DefaultClient, url: "http://127.0.0.1:1/api/v1/read"}, "remote-read", d, 0)
		if v.OK() || v.Error == "" {
			t.Fatalf("verdict %s", v.Summary())
		}
	})
}

// VictoriaMetrics's export prints ~12 significant digits: within the
// tolerance a value counts as inexact and passes; a value off by more, or
// any value at tolerance 0, is refused.
func TestVerifierExportTolerance(t *testing.T) {
	d := testDataset()
	f := newFakeServer(t)
	f.exportDigits = 12
	res := runAgainst(t, f, true, vmTolerance)
	v := res.Verdict
	if !res.OK() || v.Inexact == 0 || v.Exact == 0 || v.Exact+v.Inexact != d.TotalSamples() {
		t.Fatalf("rounded export: %s %v", v.Summary(), v.Problems)
	}
	strict := Verify(context.Background(), vmExport{client: http.DefaultClient, url: f.srv.URL + "/api/v1/export"}, "export", d, 0)
	if strict.OK() || strict.Mismatched != v.Inexact {
		t.Fatalf("rounded export at tolerance 0: %s", strict.Summary())
	}

	f2 := newFakeServer(t)
	f2.exportDigits = 12
	f2.fault = func(m map[string]string, s prompb.Sample) (prompb.Sample, bool) {
		if isVictim(d)(m, s) {
			s.Value *= 1 + 1e-9
		}
		return s, true
	}
	if res := runAgainst(t, f2, true, vmTolerance); res.OK() || res.Verdict.Mismatched != 1 {
		t.Fatalf("a value off by 1e-9: %s", res.Verdict.Summary())
	}
}

func TestParseExportLine(t *testing.T) {
	s, err := parseExportLine([]byte(`{"metric":{"__name__":"up","job":"a"},"values":[1,NaN,+Inf,-Inf,2.5e-3],"timestamps":[1,2,3,4,5]}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.labels["job"] != "a" || len(s.ts) != 5 || !math.IsNaN(s.vs[1]) || !math.IsInf(s.vs[2], 1) || !math.IsInf(s.vs[3], -1) || s.vs[4] != 0.0025 {
		t.Fatalf("parsed %+v", s)
	}
	for _, bad := range []string{`{"metric":{}}`, `{"metric":{},"values":[1,2],"timestamps":[1]}`, `{"metric":{},"values":[x],"timestamps":[1]}`} {
		if _, err := parseExportLine([]byte(bad)); err == nil {
			t.Errorf("%s: parsed", bad)
		}
	}
}
