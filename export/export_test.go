package export

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pq "github.com/parquet-go/parquet-go"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// testDay0 is the first day of the test data: the samples start two hours
// before a UTC midnight, so that every metric spans two date partitions.
var testDay0 = time.Date(2024, 5, 1, 22, 0, 0, 0, time.UTC)

// testSeries is what testArchive writes: three float metrics (one with a
// recording rule's name, one with a label named "date" and one named
// "__tenant__") and one native histogram metric.
func testSeries(requests int) []promsample.Series {
	var out []promsample.Series
	base := testDay0.UnixMilli()
	add := func(ls labels.Labels, sample func(r int) (promsample.Sample, *promsample.Histogram)) {
		s := promsample.Series{Labels: ls}
		for r := 0; r < requests; r++ {
			smp, h := sample(r)
			if h != nil {
				s.Histograms = append(s.Histograms, *h)
			} else {
				s.Samples = append(s.Samples, smp)
			}
		}
		out = append(out, s)
	}
	ts := func(r int) int64 { return base + int64(r)*5*60_000 } // every 5 minutes: 4 hours over 48 requests
	for i := 0; i < 3; i++ {
		add(labels.FromStrings("__name__", "node_cpu_seconds_total", "instance", fmt.Sprintf("h%d:9100", i), "mode", "idle"),
			func(r int) (promsample.Sample, *promsample.Histogram) {
				v := float64(r*100+i) / 100
				if r == 7 && i == 1 {
					v = math.Float64frombits(0x7ff0000000000002) // a stale marker
				}
				return promsample.Sample{T: ts(r), V: v}, nil
			})
	}
	add(labels.FromStrings("__name__", "job:rate5m", "job", "api"), func(r int) (promsample.Sample, *promsample.Histogram) {
		return promsample.Sample{T: ts(r), V: 1.0 / float64(r+3)}, nil
	})
	add(labels.FromStrings("__name__", "build_info", "date", "2024-04-30", "__tenant__", "t1", "instance", "h0:9100"),
		func(r int) (promsample.Sample, *promsample.Histogram) { return promsample.Sample{T: ts(r), V: 1}, nil })
	add(labels.FromStrings("__name__", "http_request_duration_seconds", "instance", "h0:9100"),
		func(r int) (promsample.Sample, *promsample.Histogram) {
			h := &histogram.FloatHistogram{Schema: 0, Count: float64(r + 2), Sum: float64(r) * 0.5, ZeroThreshold: 0.001, ZeroCount: 1,
				PositiveSpans: []histogram.Span{{Offset: 0, Length: 2}}, PositiveBuckets: []float64{float64(r), 1}}
			return promsample.Sample{}, &promsample.Histogram{T: ts(r), FH: h}
		})
	return out
}

// testArchive writes testSeries through the archive's writer and the
// receiver's encoder, a request's worth of each series per row; the first
// two thirds sealed, the rest live. It returns the archive's path.
func testArchive(t *testing.T, requests int) string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "a.db")
	w, err := archive.CreateWriter(path, archive.WriterOptions{Encoder: &promsample.Encoder{}, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	src, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"source": "default"},
		Metadata: map[string]string{"stream_buckets": "8"}, ClockAnchorWallNS: time.Now().UnixNano()}, "")
	if err != nil {
		t.Fatal(err)
	}
	all := testSeries(requests)
	for r := 0; r < requests; r++ {
		var b promsample.Batch
		for _, s := range all {
			piece := promsample.Series{Labels: s.Labels}
			if len(s.Samples) > 0 {
				piece.Samples = s.Samples[r : r+1]
			} else {
				piece.Histograms = s.Histograms[r : r+1]
			}
			b.Series = append(b.Series, piece)
		}
		var rows []archive.Row
		for _, p := range promsample.SplitBatch(&b, 8) {
			data, err := promsample.EncodeBatch(&p.Batch)
			if err != nil {
				t.Fatal(err)
			}
			rows = append(rows, archive.Row{Stream: p.Stream, Data: data})
		}
		if _, err := w.AppendWait(ctx, []archive.SourceRows{{Source: src.ID(), Rows: rows}}, true); err != nil {
			t.Fatal(err)
		}
		if r == requests*2/3 {
			if _, err := w.SealWait(ctx, src.ID(), promsample.StreamsFor(8)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// flatRow is one sample as a dataset row, comparable.
type flatRow struct {
	labels string // every label, __name__ included, from the path and the columns
	date   string
	t      int64
	bits   uint64 // a float's bits, or a histogram's count's
	hist   bool
	sum    float64
}

func (r flatRow) String() string {
	return fmt.Sprintf("%s %s %d %#x hist=%v sum=%v", r.labels, r.date, r.t, r.bits, r.hist, r.sum)
}

func compareRows(a, b flatRow) int {
	return strings.Compare(a.String(), b.String())
}

// wantRows is what the dataset must hold: every sample of series, in its
// UTC day's partition, within [start, end).
func wantRows(series []promsample.Series, start, end int64) []flatRow {
	var out []flatRow
	day := func(t int64) string { return time.UnixMilli(t).UTC().Format("2006-01-02") }
	for _, s := range series {
		for _, smp := range s.Samples {
			if smp.T >= start && smp.T < end {
				out = append(out, flatRow{labels: s.Labels.String(), date: day(smp.T), t: smp.T, bits: math.Float64bits(smp.V)})
			}
		}
		for _, h := range s.Histograms {
			if h.T >= start && h.T < end {
				out = append(out, flatRow{labels: s.Labels.String(), date: day(h.T), t: h.T, bits: math.Float64bits(h.FH.Count), hist: true, sum: h.FH.Sum})
			}
		}
	}
	slices.SortFunc(out, compareRows)
	return out
}

// partitions parses a file's Hive partition from its path under dir.
func partitions(t *testing.T, dir, path string) (name, date string) {
	t.Helper()
	rel, _ := filepath.Rel(dir, path)
	parts := strings.Split(rel, string(filepath.Separator))
	if len(parts) != 3 || !strings.HasPrefix(parts[0], "__name__=") || !strings.HasPrefix(parts[1], "date=") ||
		!strings.HasPrefix(parts[2], "part-") {
		t.Fatalf("not the layout: %s", rel)
	}
	name = strings.TrimPrefix(parts[0], "__name__=")
	for _, esc := range [][2]string{{"%3A", ":"}, {"%2F", "/"}, {"%3D", "="}, {"%25", "%"}} {
		name = strings.ReplaceAll(name, esc[0], esc[1])
	}
	return name, strings.TrimPrefix(parts[1], "date=")
}

// readDataset reads every file of the dataset with parquet-go, an
// implementation independent of the writer's arrow-go.
func readDataset(t *testing.T, dir string) []flatRow {
	t.Helper()
	var files []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return err
	})
	var out []flatRow
	for _, p := range files {
		if !strings.HasSuffix(p, ".parquet") {
			t.Errorf("not a part file: %s", p)
			continue
		}
		name, date := partitions(t, dir, p)
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		pf, err := pq.OpenFile(f, st.Size())
		if err != nil {
			t.Fatalf("%s: parquet-go: %v", p, err)
		}
		cols := pf.Schema().Columns()
		for _, rg := range pf.RowGroups() {
			rows := rg.Rows()
			buf := make([]pq.Row, 128)
			for {
				n, err := rows.ReadRows(buf)
				for _, row := range buf[:n] {
					fr := flatRow{date: date}
					sb := labels.NewScratchBuilder(8)
					sb.Add(labels.MetricName, name)
					for _, v := range row {
						if v.IsNull() {
							continue
						}
						switch col := cols[v.Column()][0]; col {
						case ColTimestamp:
							fr.t = v.Int64()
						case ColValue:
							fr.bits = math.Float64bits(v.Double())
						case ColHistCount:
							fr.bits, fr.hist = math.Float64bits(v.Double()), true
						case ColHistSum:
							fr.sum = v.Double()
						case ColHistogram:
							if !strings.HasPrefix(string(v.ByteArray()), `{"count":`) {
								t.Errorf("histogram JSON %s", v.ByteArray())
							}
						default:
							sb.Add(strings.TrimPrefix(col, LabelColumnEscape), string(v.ByteArray()))
						}
					}
					sb.Sort()
					fr.labels = sb.Labels().String()
					out = append(out, fr)
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("%s: %v", p, err)
				}
			}
			rows.Close()
		}
		f.Close()
	}
	slices.SortFunc(out, compareRows)
	return out
}

func diffRows(t *testing.T, what string, got, want []flatRow) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d rows, want %d", what, len(got), len(want))
	}
	for i := 0; i < min(len(got), len(want)); i++ {
		if got[i] != want[i] {
			t.Fatalf("%s: row %d is\n%s\nwant\n%s", what, i, got[i], want[i])
		}
	}
}

// TestExportReadBackByParquetGo: every sample, sealed and live, comes back
// from the dataset, bit-exact, in its metric's and day's partition; a
// rerun skips every file and writes nothing; a selection exports only
// what it selects, under other file names.
func TestExportReadBackByParquetGo(t *testing.T) {
	const requests = 48
	path := testArchive(t, requests)
	a, err := archive.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "dataset")
	rep, err := Export(ctx, a, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	series := testSeries(requests)
	want := wantRows(series, math.MinInt64, math.MaxInt64)
	if rep.Rows != int64(len(want)) || rep.Files != 8 {
		t.Errorf("report: %+v; want %d rows in 8 files (4 metrics x 2 days)", rep, len(want))
	}
	diffRows(t, "the dataset", readDataset(t, dir), want)
	if _, err := os.Stat(filepath.Join(dir, "__name__=job%3Arate5m", "date=2024-05-02")); err != nil {
		t.Errorf("the recording rule's partition: %v", err)
	}

	var skipped []string
	rep, err = Export(ctx, a, dir, Options{Skipped: func(p string) { skipped = append(skipped, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Files != 0 || rep.Skipped != 8 || len(skipped) != 8 {
		t.Errorf("a rerun: %+v, skipped %v", rep, skipped)
	}

	// A selection and a range: one instance, the second day only.
	sel := filepath.Join(t.TempDir(), "sel")
	day2 := time.Date(2024, 5, 2, 0, 0, 0, 0, time.UTC).UnixMilli()
	ms := []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "instance", "h0:9100")}
	if _, err := Export(ctx, a, sel, Options{Matchers: ms, Start: day2, End: day2 + 86_400_000}); err != nil {
		t.Fatal(err)
	}
	var picked []promsample.Series
	for _, s := range series {
		if s.Labels.Get("instance") == "h0:9100" {
			picked = append(picked, s)
		}
	}
	diffRows(t, "the selection", readDataset(t, sel), wantRows(picked, day2, day2+86_400_000))
}

// TestExportIsDeterministic: two exports of one archive name the same
// files, with the same bytes.
func TestExportIsDeterministic(t *testing.T) {
	path := testArchive(t, 12)
	a, err := archive.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	d1, d2 := t.TempDir(), t.TempDir()
	for _, d := range []string{d1, d2} {
		if _, err := Export(context.Background(), a, d, Options{}); err != nil {
			t.Fatal(err)
		}
	}
	list := func(d string) map[string]string {
		m := map[string]string{}
		filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err == nil && !e.IsDir() {
				b, _ := os.ReadFile(p)
				rel, _ := filepath.Rel(d, p)
				m[rel] = string(b)
			}
			return err
		})
		return m
	}
	m1, m2 := list(d1), list(d2)
	if len(m1) == 0 || len(m1) != len(m2) {
		t.Fatalf("%d and %d files", len(m1), len(m2))
	}
	for k, v := range m1 {
		if m2[k] != v {
			t.Errorf("%s differs between two exports", k)
		}
	}
}

func TestHiveEscape(t *testing.T) {
	for in, want := range map[string]string{
		"node_cpu_seconds_total": "node_cpu_seconds_total",
		"job:rate5m":             "job%3Arate5m",
		"a/b=c%d":                "a%2Fb%3Dc%25d",
		"":                       "__HIVE_DEFAULT_PARTITION__",
		"sp ace\x01":             "sp ace%01",
	} {
		if got := hiveEscape(in); got != want {
			t.Errorf("hiveEscape(%q) = %q, want %q", in, got, want)
		}
	}
}
