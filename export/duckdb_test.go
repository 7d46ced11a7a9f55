//go:build cgo

package export

import (
	"context"
	"database/sql"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/duckdb/duckdb-go/v2" // DuckDB, in tests only: the product binary is built without cgo
	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

func duckDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestDuckDBReadsTheExportAsOneDataset: DuckDB reads the export directory
// as one table, the partition columns __name__ and date (typed DATE) added
// from the paths, every row and value as written.
func TestDuckDBReadsTheExportAsOneDataset(t *testing.T) {
	const requests = 48
	a, err := archive.Open(testArchive(t, requests))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	dir := filepath.Join(t.TempDir(), "dataset")
	if _, err := Export(context.Background(), a, dir, Options{}); err != nil {
		t.Fatal(err)
	}
	db := duckDB(t)
	dataset := "read_parquet('" + dir + "/**/*.parquet', hive_partitioning = true, union_by_name = true)"
	var dateType string
	if err := db.QueryRow("SELECT DISTINCT typeof(date) FROM " + dataset).Scan(&dateType); err != nil {
		t.Fatal(err)
	}
	if dateType != "DATE" {
		t.Errorf("the date partition column is %s, want DATE", dateType)
	}
	rows, err := db.Query("SELECT * FROM " + dataset)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	for _, want := range []string{"__name__", "date", ColTimestamp, ColValue, "instance", "mode", "job", LabelColumnEscape + "date", LabelColumnEscape + "__tenant__"} {
		if !slices.Contains(cols, want) {
			t.Errorf("DuckDB's columns %v lack %s", cols, want)
		}
	}
	var got []flatRow
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		var fr flatRow
		sb := labels.NewScratchBuilder(8)
		for i, c := range cols {
			v := vals[i]
			if v == nil {
				continue
			}
			switch c {
			case "__name__":
				sb.Add(labels.MetricName, v.(string))
			case "date":
				fr.date = v.(time.Time).Format("2006-01-02")
			case ColTimestamp:
				fr.t = v.(time.Time).UnixMilli()
			case ColValue:
				fr.bits = math.Float64bits(v.(float64))
			case ColHistCount:
				fr.bits, fr.hist = math.Float64bits(v.(float64)), true
			case ColHistSum:
				fr.sum = v.(float64)
			case ColHistogram:
			default:
				sb.Add(strings.TrimPrefix(c, LabelColumnEscape), v.(string))
			}
		}
		sb.Sort()
		fr.labels = sb.Labels().String()
		got = append(got, fr)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, compareRows)
	diffRows(t, "DuckDB's dataset", got, wantRows(testSeries(requests), math.MinInt64, math.MaxInt64))

	// The questions the layout is for prune on the partitions.
	var n int
	if err := db.QueryRow("SELECT count(*) FROM " + dataset + " WHERE __name__ = 'job:rate5m' AND date = DATE '2024-05-02'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != requests-24 { // 2 of the 4 hours are on the second day, a sample every 5 minutes
		t.Errorf("job:rate5m on 2024-05-02: %d rows, want %d", n, requests-24)
	}
}

// TestREADMEDuckDBSQL runs the README's SQL (and the promsample package
// doc's) over a sealed segment written out as a file, as the README's
// sqlite3 writefile line does, and checks DuckDB's values bit for bit
// against promsample's reader.
func TestREADMEDuckDBSQL(t *testing.T) {
	a, err := archive.Open(testArchive(t, 48))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	stream := promsample.StreamFor("node_cpu_seconds_total", 8)
	var seg []byte
	if err := a.View(context.Background(), func(tx *archive.ReadTx) error {
		var ok bool
		seg, ok, err = tx.SegmentBytes(1, stream, 0)
		if !ok && err == nil {
			t.Fatalf("no segment 0 in %s", stream)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "seg.parquet")
	if err := os.WriteFile(file, seg, 0o644); err != nil {
		t.Fatal(err)
	}
	series, err := promsample.ReadSegment(seg, promsample.AllTime())
	if err != nil {
		t.Fatal(err)
	}
	type sample struct {
		name, instance string
		t              int64
		bits           uint64
	}
	var want []sample
	for _, s := range series {
		for _, smp := range s.Samples {
			want = append(want, sample{s.Labels.Get("__name__"), s.Labels.Get("instance"), smp.T, math.Float64bits(smp.V)})
		}
	}
	less := func(a, b sample) int {
		return strings.Compare(a.name+"\x00"+a.instance, b.name+"\x00"+b.instance)*4 + cmpInt(a.t, b.t)
	}
	slices.SortFunc(want, less)
	db := duckDB(t)
	for _, c := range []struct{ what, sql, metric string }{
		// The README, verbatim but for the file's path.
		{"README", `SELECT __name__, instance, __ts__,
       coalesce(__value__, __int__ / coalesce(__div__, 1)) AS value
FROM 'seg.parquet'
WHERE __hist__ IS NULL;`, ""},
		// encoders/promsample/doc.go, with a metric this segment has.
		{"promsample doc", `SELECT __name__, instance, __ts__,
       coalesce(__value__, __int__ / coalesce(__div__, 1)) AS value
FROM 'segment.parquet'
WHERE __name__ = 'node_cpu_seconds_total' AND __hist__ IS NULL;`, "node_cpu_seconds_total"},
	} {
		q := strings.NewReplacer("'seg.parquet'", "'"+file+"'", "'segment.parquet'", "'"+file+"'").Replace(c.sql)
		rows, err := db.Query(q)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		var got []sample
		for rows.Next() {
			var s sample
			var inst sql.NullString
			var ts time.Time
			var v float64
			if err := rows.Scan(&s.name, &inst, &ts, &v); err != nil {
				t.Fatalf("%s: %v", c.what, err)
			}
			s.instance, s.t, s.bits = inst.String, ts.UnixMilli(), math.Float64bits(v)
			got = append(got, s)
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		rows.Close()
		slices.SortFunc(got, less)
		exp := want
		if c.metric != "" {
			exp = slices.DeleteFunc(slices.Clone(want), func(s sample) bool { return s.name != c.metric })
		}
		if len(got) != len(exp) || len(got) == 0 {
			t.Fatalf("%s: DuckDB returned %d rows, promsample reads %d", c.what, len(got), len(exp))
		}
		for i := range got {
			if got[i] != exp[i] {
				t.Fatalf("%s: row %d: DuckDB %+v, promsample %+v", c.what, i, got[i], exp[i])
			}
		}
		t.Logf("%s: %d rows, bit for bit as promsample reads them", c.what, len(got))
	}
}

// TestREADMEDuckDBSQLNeedsTheLabelColumn: a segment has a column for a
// label only when one of its series has that label, so the README's query
// naming instance fails on a segment of series without one (the README
// says so); and __ts__ reads as TIMESTAMP WITH TIME ZONE.
func TestREADMEDuckDBSQLNeedsTheLabelColumn(t *testing.T) {
	b := promsample.Batch{Series: []promsample.Series{{Labels: labels.FromStrings("__name__", "job:rate5m", "job", "api"),
		Samples: []promsample.Sample{{T: 1000, V: 0.5}}}}}
	data, err := promsample.EncodeBatch(&b)
	if err != nil {
		t.Fatal(err)
	}
	seg, err := (&promsample.Encoder{}).Encode("samples/00", []archive.Row{{TS: 1, Data: data}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "seg.parquet")
	if err := os.WriteFile(file, seg.Bytes, 0o644); err != nil {
		t.Fatal(err)
	}
	db := duckDB(t)
	var ty string
	if err := db.QueryRow("SELECT typeof(__ts__) FROM '" + file + "'").Scan(&ty); err != nil || ty != "TIMESTAMP WITH TIME ZONE" {
		t.Errorf("__ts__ is %q (%v)", ty, err)
	}
	_, err = db.Exec("SELECT __name__, instance FROM '" + file + "'")
	if err == nil || !strings.Contains(err.Error(), "instance") {
		t.Errorf("a segment without instance: %v", err)
	}
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
