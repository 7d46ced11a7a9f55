package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"
)

// matcher is an equality label matcher: every raw read here selects by
// equality.
type matcher struct{ name, value string }

// rawQuery selects series by equality over [StartMs, EndMs], inclusive
// milliseconds since the epoch.
type rawQuery struct {
	matchers       []matcher
	startMs, endMs int64
}

// rawSeries is one series a raw read returned.
type rawSeries struct {
	labels map[string]string
	ts     []int64 // ms since the epoch
	vs     []float64
}

// rawReader reads samples exactly as stored: Prometheus remote-read
// (dendro-receiver, Prometheus) or VictoriaMetrics's /api/v1/export.
type rawReader interface {
	// read runs q in one round trip and returns the series found and the
	// size of the answer on the wire.
	read(ctx context.Context, q rawQuery) ([]rawSeries, int, error)
}

// remoteRead is a Prometheus remote-read client asking for the SAMPLES
// response type (one protobuf message, snappy), which carries each
// sample's float bits unchanged.
type remoteRead struct {
	client *http.Client
	url    string // .../api/v1/read
}

var _ rawReader = remoteRead{}

func (r remoteRead) read(ctx context.Context, q rawQuery) ([]rawSeries, int, error) {
	pq := &prompb.Query{StartTimestampMs: q.startMs, EndTimestampMs: q.endMs}
	for _, m := range q.matchers {
		pq.Matchers = append(pq.Matchers, &prompb.LabelMatcher{Type: prompb.LabelMatcher_EQ, Name: m.name, Value: m.value})
	}
	rr := prompb.ReadRequest{Queries: []*prompb.Query{pq}, AcceptedResponseTypes: []prompb.ReadRequest_ResponseType{prompb.ReadRequest_SAMPLES}}
	raw, err := rr.Marshal()
	if err != nil {
		return nil, 0, fmt.Errorf("bench: remote-read request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(snappy.Encode(nil, raw)))
	if err != nil {
		return nil, 0, fmt.Errorf("bench: remote-read request: %w", err)
	}
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("X-Prometheus-Remote-Read-Version", "0.1.0")
	body, err := do(r.client, req)
	if err != nil {
		return nil, 0, fmt.Errorf("bench: remote-read: %w", err)
	}
	dec, err := snappy.Decode(nil, body)
	if err != nil {
		return nil, len(body), fmt.Errorf("bench: remote-read answer: snappy: %w", err)
	}
	var resp prompb.ReadResponse
	if err := resp.Unmarshal(dec); err != nil {
		return nil, len(body), fmt.Errorf("bench: remote-read answer: %w", err)
	}
	if len(resp.Results) != 1 {
		return nil, len(body), fmt.Errorf("bench: remote-read answer: %d results for 1 query", len(resp.Results))
	}
	out := make([]rawSeries, 0, len(resp.Results[0].Timeseries))
	for _, ts := range resp.Results[0].Timeseries {
		s := rawSeries{labels: make(map[string]string, len(ts.Labels)), ts: make([]int64, len(ts.Samples)), vs: make([]float64, len(ts.Samples))}
		for _, l := range ts.Labels {
			s.labels[l.Name] = l.Value
		}
		for k, smp := range ts.Samples {
			s.ts[k], s.vs[k] = smp.Timestamp, smp.Value
		}
		if len(ts.Histograms) > 0 {
			return nil, len(body), fmt.Errorf("bench: remote-read answer: %d histogram samples in a float-only data set", len(ts.Histograms))
		}
		out = append(out, s)
	}
	return out, len(body), nil
}

// vmExport reads raw samples from VictoriaMetrics's /api/v1/export, which
// answers one JSON object per series per line. VictoriaMetrics has no
// remote-read; its floats are decimal and rounded to ~12 significant
// digits, so a value read back may differ in its last bits.
type vmExport struct {
	client *http.Client
	url    string // .../api/v1/export
}

var _ rawReader = vmExport{}

func (r vmExport) read(ctx context.Context, q rawQuery) ([]rawSeries, int, error) {
	form := url.Values{
		"match[]": {selector(q.matchers)},
		"start":   {msToSeconds(q.startMs)},
		"end":     {msToSeconds(q.endMs)},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, 0, fmt.Errorf("bench: export request: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	body, err := do(r.client, req)
	if err != nil {
		return nil, 0, fmt.Errorf("bench: export: %w", err)
	}
	var out []rawSeries
	for line := range bytes.SplitSeq(body, []byte{'\n'}) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		s, err := parseExportLine(line)
		if err != nil {
			return nil, len(body), err
		}
		out = append(out, s)
	}
	return out, len(body), nil
}

// parseExportLine parses one line of /api/v1/export. The values are cut
// out and parsed by hand: VictoriaMetrics writes NaN and ±Inf as bare
// words, which encoding/json refuses.
func parseExportLine(line []byte) (rawSeries, error) {
	const key = `"values":[`
	a := bytes.Index(line, []byte(key))
	if a < 0 {
		return rawSeries{}, fmt.Errorf("bench: export line without values: %.200q", line)
	}
	a += len(key)
	b := bytes.IndexByte(line[a:], ']')
	if b < 0 {
		return rawSeries{}, fmt.Errorf("bench: export line with unterminated values: %.200q", line)
	}
	values := line[a : a+b]
	rest := make([]byte, 0, len(line)-b)
	rest = append(append(rest, line[:a]...), line[a+b:]...)
	var row struct {
		Metric     map[string]string `json:"metric"`
		Timestamps []int64           `json:"timestamps"`
	}
	if err := json.Unmarshal(rest, &row); err != nil {
		return rawSeries{}, fmt.Errorf("bench: export line: %w", err)
	}
	s := rawSeries{labels: row.Metric, ts: row.Timestamps}
	if len(bytes.TrimSpace(values)) > 0 {
		for tok := range bytes.SplitSeq(values, []byte{','}) {
			v, err := strconv.ParseFloat(strings.Trim(string(bytes.TrimSpace(tok)), `"`), 64)
			if err != nil {
				return rawSeries{}, fmt.Errorf("bench: export value: %w", err)
			}
			s.vs = append(s.vs, v)
		}
	}
	if len(s.vs) != len(s.ts) {
		return rawSeries{}, fmt.Errorf("bench: export line with %d values and %d timestamps", len(s.vs), len(s.ts))
	}
	return s, nil
}

// selector is the PromQL series selector of ms, e.g. {__name__="up",job="a"}.
func selector(ms []matcher) string {
	var b strings.Builder
	b.WriteByte('{')
	for k, m := range ms {
		if k > 0 {
			b.WriteByte(',')
		}
		b.WriteString(m.name + "=" + strconv.Quote(m.value))
	}
	b.WriteByte('}')
	return b.String()
}

// msToSeconds formats a millisecond timestamp as the seconds the HTTP APIs
// take.
func msToSeconds(ms int64) string { return strconv.FormatFloat(float64(ms)/1000, 'f', 3, 64) }

// do sends req and returns the body of a 200 answer; any other status is
// an error carrying the start of the body.
func do(client *http.Client, req *http.Request) ([]byte, error) {
	req.Header.Set("User-Agent", "dendro-bench")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, bytes.TrimSpace(body))
	}
	return body, nil
}
