package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"

	_ "modernc.org/sqlite" // the driver, for walRootPage
)

// checkCounts asserts what inspect says against what was acknowledged.
func checkCounts(t *testing.T, what string, r inspectReport, requests int) {
	t.Helper()
	series := opsMetrics * opsSeries
	if r.ApplicationID != "dend" || r.SchemaVersion != archive.SchemaVersion {
		t.Errorf("%s: stamp %q v%d", what, r.ApplicationID, r.SchemaVersion)
	}
	if len(r.Sources) != 1 || r.Sources[0].Labels["source"] != "default" {
		t.Fatalf("%s: sources %+v", what, r.Sources)
	}
	if r.Series != int64(series) || r.Samples != int64(series*requests) {
		t.Errorf("%s: %d series, %d samples; want %d and %d", what, r.Series, r.Samples, series, series*requests)
	}
	var segs, sealed, live, samples int64
	for _, st := range r.Sources[0].Streams {
		segs += st.Segments
		sealed += st.SealedRows
		live += st.LiveRows
		samples += st.Samples
	}
	if segs != r.Segments || sealed != r.SealedRows || live != r.LiveRows || samples != r.Samples {
		t.Errorf("%s: streams add up to %d segments, %d sealed, %d live, %d samples; totals say %d, %d, %d, %d",
			what, segs, sealed, live, samples, r.Segments, r.SealedRows, r.LiveRows, r.Samples)
	}
	if r.Segments == 0 || r.LiveRows == 0 {
		t.Errorf("%s: want both sealed segments and live rows, got %d and %d", what, r.Segments, r.LiveRows)
	}
	if r.PageSize != archive.PageSize || r.Pages == 0 || r.FileBytes == 0 {
		t.Errorf("%s: pages %d of %d, file %d", what, r.Pages, r.PageSize, r.FileBytes)
	}
}

// TestInspectCountsWhatWasWritten: inspect --format=json counts exactly
// the acknowledged samples on an archive a server is writing, one it was
// killed writing (without folding the sidecar in), one it closed cleanly,
// and both on read-only media.
func TestInspectCountsWhatWasWritten(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.db")
	base := time.Now().Add(-2 * time.Hour).UnixMilli()
	srv := serve(t, path, "--seal.max-rows=7")
	const n = 30
	sendN(t, srv.addr, "ops", 0, n-2, base)
	waitSealed(t, path)
	sendN(t, srv.addr, "ops", n-2, n, base) // and live rows

	checkCounts(t, "live", inspectJSONOf(t, path), n)
	table := mustOp(t, "inspect", "--archive.path="+path)
	for _, want := range []string{"STREAM", "samples/", fmt.Sprintf(`samples\s+%d `, n*opsMetrics*opsSeries), "-wal"} {
		if !regexp.MustCompile(want).MatchString(table) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}

	srv.stop(t, syscall.SIGKILL)
	walBefore, err := os.ReadFile(path + "-wal")
	if err != nil {
		t.Fatalf("a killed server leaves its -wal: %v", err)
	}
	mainBefore, _ := os.ReadFile(path)
	r := inspectJSONOf(t, path)
	checkCounts(t, "killed", r, n)
	if _, ok := r.Sidecars["-wal"]; !ok {
		t.Errorf("killed: sidecars %v lack -wal", r.Sidecars)
	}
	walAfter, _ := os.ReadFile(path + "-wal")
	mainAfter, _ := os.ReadFile(path)
	if !bytes.Equal(walBefore, walAfter) || !bytes.Equal(mainBefore, mainAfter) {
		t.Errorf("inspect changed a crashed archive (folded its sidecar in?)")
	}
	t.Run("killed, read-only media", func(t *testing.T) {
		ro := readOnlyView(t, dir)
		checkCounts(t, "killed on read-only media", inspectJSONOf(t, filepath.Join(ro, "a.db")), n)
	})

	srv = serve(t, path, "--seal.max-rows=7")
	sendN(t, srv.addr, "ops", n, n+5, base)
	srv.stop(t, syscall.SIGTERM)
	r = inspectJSONOf(t, path)
	checkCounts(t, "clean", r, n+5)
	if len(r.Sidecars) != 0 {
		t.Errorf("clean: sidecars %v", r.Sidecars)
	}
	t.Run("clean, read-only media", func(t *testing.T) {
		ro := readOnlyView(t, dir)
		checkCounts(t, "clean on read-only media", inspectJSONOf(t, filepath.Join(ro, "a.db")), n+5)
	})
}

// closedArchive is an archive a server wrote n requests to and stopped
// cleanly, with segments and live rows.
func closedArchive(t *testing.T, n int, flags ...string) (path string, base int64) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "a.db")
	base = time.Now().Add(-2 * time.Hour).UnixMilli()
	srv := serve(t, path, append([]string{"--seal.max-rows=5"}, flags...)...)
	sendN(t, srv.addr, "ops", 0, n-2, base)
	waitSealed(t, path)
	sendN(t, srv.addr, "ops", n-2, n, base)
	srv.stop(t, syscall.SIGTERM)
	return path, base
}

// TestVerifyFindsDamage: a sound archive verifies (with and without
// --full); a segment whose bytes were changed and a damaged b-tree page
// are each reported on their own line, with exit status 1.
func TestVerifyFindsDamage(t *testing.T) {
	path, _ := closedArchive(t, 24)
	for _, args := range [][]string{{}, {"--full"}} {
		out := mustOp(t, append([]string{"verify", "--archive.path=" + path}, args...)...)
		if !strings.HasPrefix(out, "sound: 1 sources") || !strings.Contains(out, fmt.Sprintf("%d samples", 24*opsMetrics*opsSeries)) {
			t.Errorf("verify %v: %s", args, out)
		}
	}

	t.Run("a broken segment", func(t *testing.T) {
		broken := filepath.Join(t.TempDir(), "broken.db")
		copyFile(t, path, broken)
		h, err := archive.OpenWrite(broken)
		if err != nil {
			t.Fatal(err)
		}
		var stream string
		var seq int64
		err = h.Update(context.Background(), func(tx *archive.WriteTx) error {
			streams, err := tx.Streams(1)
			if err != nil {
				return err
			}
			for _, st := range streams {
				segs, err := tx.Segments(1, st)
				if err != nil || len(segs) == 0 {
					continue
				}
				s := segs[0]
				stream, seq = st, s.Seq
				b := append([]byte(nil), s.Bytes...)
				b[len(b)/3] ^= 0x55 // one byte, inside the pages
				if err := tx.DeleteSegment(1, st, s.Seq); err != nil {
					return err
				}
				return tx.InsertSegment(1, st, s.Seq, &archive.Segment{Bytes: b, Rows: s.Rows, FirstTS: s.FirstTS, LastTS: s.LastTS, Index: s.Index})
			}
			return errors.New("no segment to break")
		})
		if err != nil {
			t.Fatal(err)
		}
		h.Close()
		out, err := op(t, "verify", "--archive.path="+broken)
		want := fmt.Sprintf("source 1, stream %s, segment %d: promsample: corrupt segment", stream, seq)
		if err == nil || !strings.Contains(out, want) {
			t.Fatalf("verify of a broken segment: err %v, output:\n%s\nwant a line with %q", err, out, want)
		}
		if strings.Count(out, "\n") != 1 {
			t.Errorf("one problem, one line; got:\n%s", out)
		}
	})

	t.Run("a damaged page", func(t *testing.T) {
		damaged := filepath.Join(t.TempDir(), "damaged.db")
		copyFile(t, path, damaged)
		// The wal table's root page: its header's page type becomes one
		// no b-tree page has.
		a, err := archive.Open(damaged)
		if err != nil {
			t.Fatal(err)
		}
		root := walRootPage(t, damaged)
		a.Close()
		f, err := os.OpenFile(damaged, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte{0x07, 0xff, 0xff, 0xff}, (root-1)*archive.PageSize); err != nil {
			t.Fatal(err)
		}
		f.Close()
		out, err := op(t, "verify", "--archive.path="+damaged)
		if err == nil || !strings.Contains(out, "corrupt") {
			t.Fatalf("verify of a damaged page: err %v, output:\n%s", err, out)
		}
		if !strings.Contains(err.Error(), "problem(s)") {
			t.Errorf("the error line: %v", err)
		}
	})
}

// walRootPage reads the wal table's root page number from sqlite_schema,
// through the driver the archive uses.
func walRootPage(t *testing.T, path string) int64 {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var root int64
	if err := db.QueryRow(`SELECT rootpage FROM sqlite_schema WHERE name = 'wal'`).Scan(&root); err != nil {
		t.Fatal(err)
	}
	return root
}

// readSeries reads every series of the archive at path with the
// reference reader.
func readSeries(t *testing.T, path string) []promsample.Series {
	t.Helper()
	a, err := archive.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ss, err := promsample.ReadArchive(context.Background(), a, promsample.AllTime())
	if err != nil {
		t.Fatal(err)
	}
	return ss
}

// TestBackupDuringWritesHoldsAPrefix: a backup taken while a sender keeps
// writing opens, verifies, and holds exactly the first k requests of every
// series, for a k between what was acknowledged before it started and
// after it ended. An existing destination is refused.
func TestBackupDuringWritesHoldsAPrefix(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.db")
	base := time.Now().Add(-2 * time.Hour).UnixMilli()
	srv := serve(t, path, "--seal.max-rows=5")
	sendN(t, srv.addr, "ops", 0, 20, base)
	var acked atomic.Int64
	acked.Store(20)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for r := 20; r < 100000; r++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := send(srv.addr, opsRequest("ops", r, base)); err != nil {
				t.Errorf("request %d: %v", r, err)
				return
			}
			acked.Store(int64(r + 1))
		}
	}()
	for acked.Load() < 40 {
		time.Sleep(time.Millisecond)
	}
	dest := filepath.Join(dir, "backup.db")
	before := acked.Load()
	out := mustOp(t, "backup", "--archive.path="+path, dest)
	after := acked.Load()
	close(stop)
	wg.Wait()
	if !strings.HasPrefix(out, "backed up ") {
		t.Errorf("backup said %q", out)
	}
	if out := mustOp(t, "verify", "--archive.path="+dest); !strings.HasPrefix(out, "sound") {
		t.Errorf("the backup does not verify: %s", out)
	}
	ss := readSeries(t, dest)
	if len(ss) != opsMetrics*opsSeries {
		t.Fatalf("the backup holds %d series", len(ss))
	}
	k := len(ss[0].Samples)
	if int64(k) < before || int64(k) > after {
		t.Errorf("the backup holds %d requests; %d were acknowledged before it started, %d after it ended", k, before, after)
	}
	for _, s := range ss {
		if len(s.Samples) != k {
			t.Fatalf("%s: %d samples, another series %d: not a prefix", s.Labels, len(s.Samples), k)
		}
		for r, smp := range s.Samples {
			if smp.T != base+int64(r)*opsStep {
				t.Fatalf("%s: sample %d at %d: not a prefix", s.Labels, r, smp.T)
			}
		}
	}
	t.Logf("backup during writes holds the first %d requests (%d acknowledged before, %d after)", k, before, after)
	if _, err := op(t, "backup", "--archive.path="+path, dest); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("a backup onto an existing file: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), "partial") {
			t.Errorf("a backup left %s", e.Name())
		}
	}
}

// TestCompactAndEvictAreRefusedWhileServing, then compact reduces the
// segment count and keeps every sample, and evict removes what it says.
func TestCompactAndEvictWaitForTheServer(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.db")
	base := time.Now().Add(-2 * time.Hour).UnixMilli()
	srv := serve(t, path, "--seal.max-rows=3", "--compact.target-rows=-1")
	const n = 40
	for r := 0; r < n; r += 8 { // in bursts, so that the seals find a few rows each
		sendN(t, srv.addr, "ops", r, r+8, base)
		time.Sleep(300 * time.Millisecond)
	}
	waitSealed(t, path)
	for _, args := range [][]string{{"compact"}, {"evict", "--before=now"}} {
		_, err := op(t, append(args, "--archive.path="+path)...)
		if err == nil || !strings.Contains(err.Error(), "in use") || !strings.Contains(err.Error(), "stop the server") {
			t.Errorf("%v while a server runs: %v", args, err)
		}
	}
	srv.stop(t, syscall.SIGTERM)
	before := inspectJSONOf(t, path)
	out := mustOp(t, "compact", "--archive.path="+path)
	after := inspectJSONOf(t, path)
	if after.Segments >= before.Segments {
		t.Errorf("compact: %d segments before, %d after (%s)", before.Segments, after.Segments, out)
	}
	if after.Samples != before.Samples || after.Series != before.Series || after.Samples != int64(n*opsMetrics*opsSeries) {
		t.Errorf("compact changed the data: %d/%d samples, %d/%d series", before.Samples, after.Samples, before.Series, after.Series)
	}
	if out := mustOp(t, "verify", "--full", "--archive.path="+path); !strings.HasPrefix(out, "sound") {
		t.Errorf("after compact: %s", out)
	}
	t.Logf("compact: %d segments -> %d", before.Segments, after.Segments)

	// Evict one metric's series from every segment (all received before
	// now): its samples go, the others' stay; the live rows are left.
	out = mustOp(t, "evict", "--archive.path="+path, "--before=now", `--match={__name__="ops_1", instance="host-2:9100"}`)
	if !strings.Contains(out, "evicted ") {
		t.Errorf("evict --match said %q", out)
	}
	got := map[string]int{}
	for _, s := range readSeries(t, path) {
		got[s.Labels.String()] = len(s.Samples)
	}
	victim := labels.FromStrings("__name__", "ops_1", "instance", "host-2:9100", "job", "node").String()
	live := after.LiveRows // rows per stream hold one request's share each
	if got[victim] >= n || got[victim] > int(live) {
		t.Errorf("after evict --match the victim keeps %d samples (live rows %d)", got[victim], live)
	}
	for k, v := range got {
		if k != victim && v != n {
			t.Errorf("evict --match took samples of %s: %d left", k, v)
		}
	}
	if out := mustOp(t, "verify", "--full", "--archive.path="+path); !strings.HasPrefix(out, "sound") {
		t.Errorf("after evict --match: %s", out)
	}

	out = mustOp(t, "evict", "--archive.path="+path, "--before=now")
	r := inspectJSONOf(t, path)
	if r.Segments != 0 || r.LiveRows != 0 || r.Samples != 0 {
		t.Errorf("evict of everything left %d segments, %d live rows, %d samples (%s)", r.Segments, r.LiveRows, r.Samples, out)
	}
}

// TestEvictKeepsLiveRows: after a kill -9 the archive holds live rows in
// open epochs; evict --before=now takes the sealed segments and keeps
// every live row (a stream's live rows go together, and only a server
// seals them), says so, and the archive stays sound with the live samples
// all there.
func TestEvictKeepsLiveRows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.db")
	base := time.Now().Add(-2 * time.Hour).UnixMilli()
	srv := serve(t, path, "--seal.max-rows=3", "--compact.target-rows=-1")
	sendN(t, srv.addr, "ops", 0, 8, base)
	waitSealed(t, path)
	srv.stop(t, syscall.SIGKILL)
	before := inspectJSONOf(t, path)
	if before.Segments == 0 {
		t.Fatal("no segment sealed before the kill")
	}
	// Rows the server never sealed: sent to a new server with a policy
	// that does not seal, then killed.
	srv = serve(t, path, "--seal.max-rows=1000000", "--seal.max-age=1h", "--compact.target-rows=-1")
	sendN(t, srv.addr, "ops", 8, 12, base)
	srv.stop(t, syscall.SIGKILL)
	mid := inspectJSONOf(t, path)
	if mid.LiveRows == 0 {
		t.Fatal("no live rows after the kill")
	}
	out := mustOp(t, "evict", "--archive.path="+path, "--before=now")
	if !strings.Contains(out, "kept ") || !strings.Contains(out, "live wal rows") {
		t.Errorf("evict said %q, want it to say it kept the live rows", out)
	}
	after := inspectJSONOf(t, path)
	if after.Segments != 0 || after.LiveRows == 0 {
		t.Errorf("after evict: %d segments, %d live rows (before %d, %d)", after.Segments, after.LiveRows, mid.Segments, mid.LiveRows)
	}
	if out := mustOp(t, "verify", "--full", "--archive.path="+path); !strings.HasPrefix(out, "sound") {
		t.Errorf("after evict: %s", out)
	}
	for _, sr := range readSeries(t, path) {
		if len(sr.Samples) < 4 {
			t.Errorf("%s keeps %d samples, want the 4 live ones", sr.Labels, len(sr.Samples))
		}
	}
}

// TestQueryAnswersWhatTheServerAnswers: on an archive a server is writing
// (another metric keeps arriving meanwhile), query --format=json gives
// byte for byte the "data" of the server's /api/v1/query_range and
// /api/v1/query.
func TestQueryAnswersWhatTheServerAnswers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.db")
	base := time.Now().Add(-2 * time.Hour).UnixMilli()
	srv := serve(t, path, "--seal.max-rows=4")
	const n = 60
	sendN(t, srv.addr, "ops", 0, n, base)
	waitSealed(t, path)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for r := 0; ; r++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := send(srv.addr, opsRequest("other", r, base)); err != nil {
				t.Errorf("other %d: %v", r, err)
				return
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	start, end := base+opsStep*5, base+opsStep*(n-3)
	sec := func(ms int64) string { return fmt.Sprintf("%.3f", float64(ms)/1000) }
	cases := []struct {
		expr string
		api  url.Values
		args []string
	}{
		{"sum by (instance) (rate(ops_1[2m]))", url.Values{"start": {sec(start)}, "end": {sec(end)}, "step": {"30s"}},
			[]string{"--start=" + sec(start), "--end=" + sec(end), "--step=30s"}},
		{`ops_2{instance="host-3:9100"}`, url.Values{"start": {sec(start)}, "end": {sec(end)}, "step": {"15s"}},
			[]string{"--start=" + sec(start), "--end=" + sec(end), "--step=15s"}},
		{"count(ops_0) by (job)", url.Values{"time": {sec(end)}}, []string{"--time=" + sec(end)}},
	}
	for _, c := range cases {
		endpoint := "query_range"
		if c.api.Has("time") {
			endpoint = "query"
		}
		c.api.Set("query", c.expr)
		resp, err := http.Get("http://" + srv.addr + "/api/v1/" + endpoint + "?" + c.api.Encode())
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var answer struct {
			Status string
			Data   json.RawMessage
		}
		if err := json.Unmarshal(body, &answer); err != nil || answer.Status != "success" {
			t.Fatalf("%s: %v %s", c.expr, err, body)
		}
		data := answer.Data
		out := mustOp(t, append([]string{"query", "--archive.path=" + path, c.expr, "--format=json"}, c.args...)...)
		if strings.TrimSpace(out) != string(data) {
			t.Errorf("%s: the command answers\n%s\nthe server\n%s", c.expr, out, data)
		}
		if bytes.Contains(data, []byte(`"result":[]`)) {
			t.Errorf("%s: an empty answer proves little: %s", c.expr, data)
		}
		for _, f := range []string{"table", "csv"} {
			out := mustOp(t, append([]string{"query", "--archive.path=" + path, c.expr, "--format=" + f}, c.args...)...)
			if !strings.Contains(out, "host-") && !strings.Contains(out, "node") {
				t.Errorf("%s --format=%s:\n%s", c.expr, f, out)
			}
		}
	}
}
