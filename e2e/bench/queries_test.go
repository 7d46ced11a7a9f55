package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// The answer checks refuse an answer of the wrong shape: a fast wrong
// answer must not become a figure.
func TestAnswerChecks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		check func([]byte, []rawSeries) error
		body  string
		ok    bool
	}{
		{"label values", wantStrings(2), `{"status":"success","data":["a","b"]}`, true},
		{"label values short", wantStrings(2), `{"status":"success","data":["a"]}`, false},
		{"error status", wantStrings(0), `{"status":"error","error":"boom","data":[]}`, false},
		{"series", wantObjects(1), `{"status":"success","data":[{"__name__":"x"}]}`, true},
		{"matrix", wantMatrix(1), `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"2"]]}]}}`, true},
		{"matrix without points", wantMatrix(1), `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[]}]}}`, false},
		{"vector for matrix", wantMatrix(1), `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"2"]}]}}`, false},
		{"count", wantScalarVector(25), `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"25"]}]}}`, true},
		{"wrong count", wantScalarVector(25), `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"24"]}]}}`, false},
	} {
		if err := tc.check([]byte(tc.body), nil); (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok %v", tc.name, err, tc.ok)
		}
	}
	raw := []rawSeries{{ts: []int64{1, 2}}, {ts: []int64{1, 2}}}
	if err := wantRaw(2, 2)(nil, raw); err != nil {
		t.Error(err)
	}
	if err := wantRaw(2, 3)(nil, raw); err == nil {
		t.Error("2 samples a series accepted for 3")
	}
}

// measureReads asks every query once, then warm; nocache=1 goes only to
// the PromQL endpoints; an answer the data set cannot give is an error.
func TestMeasureReads(t *testing.T) {
	d := testDataset()
	var mu sync.Mutex
	asked := map[string][]string{} // path -> nocache values
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked[r.URL.Path] = append(asked[r.URL.Path], r.URL.Query().Get("nocache"))
		mu.Unlock()
		w.Write([]byte(`{"status":"success","data":[]}`)) // wrong for every query
	}))
	defer srv.Close()
	f := newFakeServer(t)
	rd := remoteRead{client: http.DefaultClient, url: f.srv.URL + "/api/v1/read"}
	qs := latencyQueries(d)
	res := measureReads(context.Background(), http.DefaultClient, srv.URL, rd, qs, true, WarmPolicy{Min: 2, Max: 4, Budget: time.Millisecond, Cap: time.Second})
	if len(res) != len(qs) {
		t.Fatalf("%d results for %d queries", len(res), len(qs))
	}
	for _, r := range res {
		if r.Error == "" {
			t.Errorf("%s: a wrong answer passed", r.Name)
		}
	}
	for path, nc := range asked {
		want := ""
		if path == "/api/v1/query" || path == "/api/v1/query_range" {
			want = "1"
		}
		for _, v := range nc {
			if v != want {
				t.Errorf("%s asked with nocache=%q, want %q", path, v, want)
			}
		}
	}
	if len(asked["/api/v1/query_range"]) != 3 {
		t.Errorf("query_range asked %d times, want once for each of 3 queries (a failed first ask is not repeated)", len(asked["/api/v1/query_range"]))
	}

	// Against the honest fake with the data written, the raw reads pass
	// and are repeated warm.
	ld, err := Encode(d, Layout{Batch: 100, PerSeries: 1, Senders: 2})
	if err != nil {
		t.Fatal(err)
	}
	if s := Send(context.Background(), http.DefaultClient, f.srv.URL+"/api/v1/write", ld); s.Samples != d.TotalSamples() {
		t.Fatalf("send %+v", s)
	}
	var rawQs []latencyQuery
	for _, q := range qs {
		if q.raw != nil {
			rawQs = append(rawQs, q)
		}
	}
	for _, r := range measureReads(context.Background(), http.DefaultClient, srv.URL, rd, rawQs, false, WarmPolicy{Min: 2, Max: 4, Budget: time.Hour, Cap: time.Hour}) {
		if r.Error != "" || r.Warm != 4 || r.P50Ms <= 0 || r.P99Ms < r.P50Ms || !strings.HasPrefix(r.Name, "raw read") {
			t.Errorf("%+v", r)
		}
	}
}
