package promread

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func getJSON(t *testing.T, method, u string, form url.Values) (int, map[string]any, string) {
	t.Helper()
	var resp *http.Response
	var err error
	if method == http.MethodPost {
		resp, err = http.PostForm(u, form)
	} else {
		resp, err = http.Get(u + "?" + form.Encode())
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: content type %q", u, ct)
	}
	if resp.StatusCode == http.StatusOK && resp.ContentLength != int64(len(body)) {
		t.Fatalf("%s: Content-Length %d for %d bytes", u, resp.ContentLength, len(body))
	}
	var out map[string]any
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("%s: not JSON: %v: %s", u, err, body)
	}
	return resp.StatusCode, out, string(body)
}

func TestHTTPAPIShapes(t *testing.T) {
	f := newFixture(t)
	standardData(f)
	_, srv := newServer(t, f, Options{})
	api := srv.URL + "/api/v1"
	cases := []struct {
		name, path string
		form       url.Values
		status     int
		body       string // exact body, or "" to skip
		contains   []string
	}{
		{"grafana save&test", "/query", url.Values{"query": {"1+1"}, "time": {"4"}}, 200,
			`{"status":"success","data":{"resultType":"scalar","result":[4,"2"]}}`, nil},
		{"instant vector", "/query", url.Values{"query": {`temperature{room="a"}`}, "time": {"1800.5"}}, 200,
			`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":"temperature","room":"a"},"value":[1800.500,"22"]}]}}`, nil},
		{"stale marker ends series", "/query", url.Values{"query": {`temperature{room="a"}`}, "time": {"1820"}}, 200,
			`{"status":"success","data":{"resultType":"vector","result":[]}}`, nil},
		{"special floats", "/query", url.Values{"query": {`vector(1/0) or label_replace(vector(-1/0),"a","b","","") or label_replace(vector(0/0),"a","c","","")`}, "time": {"0"}}, 200, "",
			[]string{`"value":[0,"+Inf"]`, `"value":[0,"-Inf"]`, `"value":[0,"NaN"]`}},
		{"range matrix", "/query_range", url.Values{"query": {`latency_seconds`}, "start": {"0"}, "end": {"120"}, "step": {"60"}}, 200,
			`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"latency_seconds","job":"api"},"values":[[0,"0.25"],[60,"0.25"],[120,"0.25"]]}]}}`, nil},
		{"range step as duration", "/query_range", url.Values{"query": {`latency_seconds`}, "start": {"1970-01-01T00:00:00Z"}, "end": {"1970-01-01T00:01:00Z"}, "step": {"1m"}}, 200, "",
			[]string{`"values":[[0,"0.25"],[60,"0.25"]]`}},
		{"native histogram", "/query", url.Values{"query": {`rpc_duration_seconds`}, "time": {"15"}}, 200, "",
			[]string{`"histogram":[15,{"count":"12","sum":"1.5","buckets":[[`}},
		{"series", "/series", url.Values{"match[]": {`temperature`}, "start": {"0"}, "end": {"8000"}}, 200,
			`{"status":"success","data":[{"__name__":"temperature","room":"a"},{"__name__":"temperature","room":"b"}]}`, nil},
		{"series needs match", "/series", url.Values{}, 400,
			`{"status":"error","errorType":"bad_data","error":"promread: bad request: no match[] parameter provided"}`, nil},
		{"labels", "/labels", url.Values{"match[]": {`{job="api"}`}}, 200,
			`{"status":"success","data":["__name__","env","instance","job"]}`, nil},
		{"label values name", "/label/__name__/values", url.Values{}, 200,
			`{"status":"success","data":["http_requests_total","late_metric","latency_seconds","rpc_duration_seconds","temperature"]}`, nil},
		{"label values name in range", "/label/__name__/values", url.Values{"start": {"3700"}, "end": {"8000"}}, 200,
			`{"status":"success","data":["http_requests_total","temperature"]}`, nil},
		{"label values with match", "/label/env/values", url.Values{"match[]": {`{__name__=~".+",instance=~"i[01]"}`}}, 200,
			`{"status":"success","data":["dev","prod"]}`, nil},
		{"label values limit", "/label/instance/values", url.Values{"limit": {"2"}}, 200,
			`{"status":"success","data":["i0","i1"]}`, nil},
		{"exemplars", "/query_exemplars", url.Values{"query": {`latency_seconds`}, "start": {"0"}, "end": {"3600"}}, 200,
			`{"status":"success","data":[{"seriesLabels":{"__name__":"latency_seconds","job":"api"},"exemplars":[{"labels":{"trace_id":"abc"},"value":"0.3","timestamp":60}]}]}`, nil},
		{"info annotation", "/query", url.Values{"query": {`rate(temperature[5m])`}, "time": {"600"}}, 200, "",
			[]string{`"infos":["PromQL info: metric might not be a counter, name does not end in _total/_sum/_count/_bucket: \"temperature\"`}},
		{"bad query", "/query", url.Values{"query": {`rate(`}}, 400, "", []string{`"errorType":"bad_data"`}},
		{"bad step", "/query_range", url.Values{"query": {`1`}, "start": {"0"}, "end": {"10"}, "step": {"0"}}, 400, "", []string{`"errorType":"bad_data"`}},
		{"bad time", "/query", url.Values{"query": {`1`}, "time": {"yesterday"}}, 400, "", []string{`"errorType":"bad_data"`}},
		{"format query", "/format_query", url.Values{"query": {`sum   by(job)(rate(http_requests_total{job="api"}[5m]))`}}, 200,
			`{"status":"success","data":"sum by (job) (rate(http_requests_total{job=\"api\"}[5m]))"}`, nil},
		{"format bad query", "/format_query", url.Values{"query": {`sum(`}}, 400, "",
			[]string{`"errorType":"bad_data"`, `invalid parameter \"query\"`}},
	}
	for _, c := range cases {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			status, _, body := getJSON(t, method, api+c.path, c.form)
			if status != c.status {
				t.Fatalf("%s %s: status %d, want %d: %s", method, c.name, status, c.status, body)
			}
			if c.body != "" && body != c.body {
				t.Fatalf("%s %s:\n got  %s\n want %s", method, c.name, body, c.body)
			}
			for _, s := range c.contains {
				if !strings.Contains(body, s) {
					t.Fatalf("%s %s: %s lacks %s", method, c.name, body, s)
				}
			}
		}
	}
	status, _, body := getJSON(t, http.MethodGet, api+"/metadata", nil)
	if want := `{"status":"success","data":{"http_requests_total":[{"type":"counter","help":"Requests.","unit":""}]}}`; status != 200 || body != want {
		t.Fatalf("metadata: %d %s", status, body)
	}
	status, m, _ := getJSON(t, http.MethodGet, api+"/status/buildinfo", nil)
	if d, _ := m["data"].(map[string]any); status != 200 || d["version"] != DefaultVersion {
		t.Fatalf("buildinfo: %d %v", status, m)
	}
	// No rules are evaluated: empty lists, as from a Prometheus without
	// rule files.
	for path, want := range map[string]string{
		"/rules":  `{"status":"success","data":{"groups":[]}}`,
		"/alerts": `{"status":"success","data":{"alerts":[]}}`,
	} {
		if status, _, body := getJSON(t, http.MethodGet, api+path, nil); status != 200 || body != want {
			t.Fatalf("%s: %d %s, want %s", path, status, body, want)
		}
	}
}

func TestQueryAPISampleLimit(t *testing.T) {
	f := newFixture(t)
	standardData(f)
	_, srv := newServer(t, f, Options{MaxSamples: 50})
	status, m, body := getJSON(t, http.MethodGet, srv.URL+"/api/v1/query", url.Values{"query": {`count_over_time(http_requests_total[1h])`}, "time": {"3600"}})
	if status != http.StatusUnprocessableEntity || m["errorType"] != "execution" || !strings.Contains(body, "sample") {
		t.Fatalf("status %d: %s", status, body)
	}
}

func TestJSONNumbers(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{{0, `"0"`}, {1.5, `"1.5"`}, {1e-7, `"1e-07"`}, {1e21, `"1e+21"`}, {123456789012, `"123456789012"`},
		{math.NaN(), `"NaN"`}, {math.Inf(1), `"+Inf"`}, {math.Inf(-1), `"-Inf"`}, {-0.25, `"-0.25"`}} {
		if got := string(appendFloat(nil, c.v)); got != c.want {
			t.Errorf("appendFloat(%v) = %s, want %s", c.v, got, c.want)
		}
	}
	for _, c := range []struct {
		t    int64
		want string
	}{{0, "0"}, {1500, "1.500"}, {1005, "1.005"}, {1050, "1.050"}, {-1500, "-1.500"}, {1435781451781, "1435781451.781"}} {
		if got := string(appendTimestamp(nil, c.t)); got != c.want {
			t.Errorf("appendTimestamp(%d) = %s, want %s", c.t, got, c.want)
		}
	}
}

// TestQueryAPIContentLength: an answer over net/http's 2 KiB chunking
// threshold still comes with its length (getJSON checks it).
func TestQueryAPIContentLength(t *testing.T) {
	f := newFixture(t)
	standardData(f)
	_, srv := newServer(t, f, Options{})
	status, _, body := getJSON(t, http.MethodPost, srv.URL+"/api/v1/query_range",
		url.Values{"query": {"http_requests_total"}, "start": {"0"}, "end": {"7200"}, "step": {"15"}})
	if status != http.StatusOK || len(body) < 4096 {
		t.Fatalf("status %d, %d bytes: want a large answer", status, len(body))
	}
}
