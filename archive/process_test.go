package archive_test

// Tests with real processes: a child (this test binary, re-executed with
// childEnv set) is killed with SIGKILL, reads beside the writer, or runs with
// dropped credentials against read-only media.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
	at "github.com/dendro-receiver/dendro-receiver/archive/archivetest"
)

func runChild(role string) error {
	f := strings.Split(role, "|")
	switch f[0] {
	case "append-until-killed":
		return appendUntilKilled(f[1], atoi(f[2]), atoi(f[3]), time.Duration(atoi(f[4]))*time.Millisecond)
	case "read-prefix":
		return readPrefixLoop(f[1], int64(atoi(f[2])))
	case "read-only":
		return readOnlyChild(f[1], f[2])
	}
	return fmt.Errorf("unknown child role %q", f[0])
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}

// appendUntilKilled creates an archive with one source and appends ts
// 1..rows to stream "s", one commit each, sealing after sealAfter rows (0:
// never); then prints "ready" and waits to be killed, its handles leaked on
// purpose.
func appendUntilKilled(path string, rows, sealAfter int, checkpoint time.Duration) error {
	ctx := context.Background()
	if checkpoint == 0 {
		checkpoint = -1
	}
	w, err := archive.CreateWriter(path, archive.WriterOptions{Encoder: at.Tags{}, CheckpointInterval: checkpoint})
	if err != nil {
		return err
	}
	src, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"source": "killed"}, ClockAnchorWallNS: 1000}, "")
	if err != nil {
		return err
	}
	for ts := 1; ts <= rows; ts++ {
		if _, err := w.AppendWait(ctx, []archive.SourceRows{{Source: src.ID(), Rows: at.Rows("s", int64(ts))}}, false); err != nil {
			return err
		}
		if ts == sealAfter {
			if _, err := w.SealWait(ctx, src.ID(), []string{"s"}); err != nil {
				return err
			}
		}
	}
	if err := w.Sync(ctx); err != nil {
		return err
	}
	fmt.Println("ready")
	select {} // wait for SIGKILL
}

// startChild runs this test binary as a child playing role and returns it
// with its stdout.
func startChild(t *testing.T, role string, cred *syscall.Credential) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	bin := os.Args[0]
	if cred != nil {
		bin = worldRunnableCopy(t, bin)
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+role)
	cmd.Stderr = os.Stderr
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, bufio.NewReader(out)
}

// killedArchive runs appendUntilKilled in a child and SIGKILLs it once it
// has reported ready (plus linger, letting an idle checkpoint run).
func killedArchive(t *testing.T, path string, rows, sealAfter int, checkpoint, linger time.Duration) {
	t.Helper()
	cmd, out := startChild(t, fmt.Sprintf("append-until-killed|%s|%d|%d|%d", path, rows, sealAfter, checkpoint.Milliseconds()), nil)
	line, err := out.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("child did not report ready: %q, %v", line, err)
	}
	time.Sleep(linger)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
}

// liveAndSealedRows counts the rows an archive answers with (segments plus
// live tail), reading with a fresh read handle.
func countRows(t *testing.T, path string) (rows int, sources int) {
	t.Helper()
	for _, stream := range at.ReadStrings(t, path, at.Tags{}) {
		for _, seg := range stream {
			rows += len(strings.Split(seg, ","))
		}
	}
	a, err := archive.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	cat, err := a.Catalog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rows, len(cat)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestUncleanKillKeepsEveryCommittedAppend(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "killed.dendro")
	killedArchive(t, path, 400, 0, 0, 0)

	// Copy the main file alone before anything opens the set.
	alone := filepath.Join(t.TempDir(), "alone.dendro")
	copyFile(t, path, alone)
	if _, err := os.Stat(path + "-wal"); err != nil {
		t.Fatalf("a killed writer leaves its -wal: %v", err)
	}

	// The set (archive + sidecars) holds every committed append.
	if rows, srcs := countRows(t, path); rows != 400 || srcs != 1 {
		t.Fatalf("archive with its sidecar reads %d rows, %d sources; want 400, 1", rows, srcs)
	}
	// The recovery open folds the sidecar in on close: one file remains.
	h, err := archive.OpenWrite(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	for _, side := range []string{"-wal", "-shm"} {
		if _, err := os.Stat(path + side); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after the recovery open %s still exists (%v)", side, err)
		}
	}
	if rows, _ := countRows(t, path); rows != 400 {
		t.Fatalf("after recovery the file alone reads %d rows, want 400", rows)
	}

	// The main file copied alone is stale, not broken: it opens, with none
	// of the appends (no checkpoint ran after creation).
	if rows, _ := countRows(t, alone); rows != 0 {
		t.Fatalf("the file alone read %d rows, want 0 (no checkpoint ran)", rows)
	}
}

func TestCheckpointsBoundWhatTheFileAloneMisses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "killed.dendro")
	// Checkpoints every 200 ms; the child lingers 600 ms after its last
	// append so the idle timer runs.
	killedArchive(t, path, 400, 0, 200*time.Millisecond, 600*time.Millisecond)
	alone := filepath.Join(t.TempDir(), "alone.dendro")
	copyFile(t, path, alone)
	rows, _ := countRows(t, alone)
	if rows < 390 {
		t.Fatalf("the file alone recovered %d of 400 rows with 200 ms checkpoints, want >= 390", rows)
	}
	t.Logf("file alone: %d of 400 rows", rows)
}

func TestTruncatedSidecarRecoversToItsLastIntactFrame(t *testing.T) {
	path := filepath.Join(t.TempDir(), "killed.dendro")
	killedArchive(t, path, 400, 3, 0, 0)
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path+"-wal", fi.Size()-max(fi.Size()/4, 1)); err != nil {
		t.Fatal(err)
	}
	rows, srcs := countRows(t, path)
	if rows > 400 || rows == 0 || srcs != 1 {
		t.Fatalf("truncated sidecar: %d rows, %d sources; want 1..400 rows and 1 source", rows, srcs)
	}
	t.Logf("a -wal truncated by a quarter recovered %d of 400 rows", rows)
	// What it recovered is a prefix: ts 1..rows, no gap.
	var all []string
	for _, st := range at.ReadStrings(t, path, at.Tags{}) {
		for _, seg := range st {
			all = append(all, strings.Split(seg, ",")...)
		}
	}
	for i, s := range all {
		if s != strconv.Itoa(i+1) {
			t.Fatalf("recovered rows are not a prefix: position %d holds %s", i, s)
		}
	}
}

// readPrefixLoop reads the archive at path in a loop until it has seen
// want rows, checking that every read is the gap-free, duplicate-free
// prefix 1..k. It prints "reads N" at the end.
func readPrefixLoop(path string, want int64) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(path); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("archive never appeared")
		}
		time.Sleep(5 * time.Millisecond)
	}
	var a *archive.Archive
	for {
		var err error
		if a, err = archive.Open(path); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(5 * time.Millisecond) // the creator has not stamped it yet
	}
	defer a.Close()
	reads, prev := 0, int64(0)
	for time.Now().Before(deadline) {
		srcs, err := a.ReadArchive(context.Background(), at.Tags{})
		if err != nil {
			return fmt.Errorf("read %d: %w", reads, err)
		}
		next := int64(1)
		for _, s := range srcs {
			for _, st := range s.Streams {
				for _, seg := range st.Segments {
					for _, f := range strings.Split(string(seg), ",") {
						ts, err := strconv.ParseInt(f, 10, 64)
						if err != nil {
							return err
						}
						if ts != next {
							return fmt.Errorf("read %d: expected ts %d, found %d (a gap or a duplicate)", reads, next, ts)
						}
						next++
					}
				}
			}
		}
		if next-1 < prev {
			return fmt.Errorf("read %d saw %d rows after an earlier read saw %d", reads, next-1, prev)
		}
		prev = next - 1
		reads++
		if prev == want {
			fmt.Printf("reads %d\n", reads)
			return nil
		}
	}
	return fmt.Errorf("after %d reads saw %d of %d rows", reads, prev, want)
}

func TestAReaderInAnotherProcessSeesAGapFreePrefix(t *testing.T) {
	const total, perTick, sealEvery = 10000, 10, 700
	path := filepath.Join(t.TempDir(), "shared.dendro")
	cmd, out := startChild(t, fmt.Sprintf("read-prefix|%s|%d", path, total), nil)

	ctx := at.Ctx(t)
	w, err := archive.CreateWriter(path, archive.WriterOptions{Encoder: at.Tags{}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	src, err := w.AddSource(ctx, archive.SourceSpec{Labels: map[string]string{"source": "shared"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	for ts := int64(1); ts <= total; ts += perTick {
		var rows []archive.Row
		for i := ts; i < ts+perTick; i++ {
			rows = append(rows, at.Rows("s", i)...)
		}
		r, err := w.AppendWait(ctx, []archive.SourceRows{{Source: src.ID(), Rows: rows}}, false)
		if err != nil || r.Dropped() != 0 {
			t.Fatalf("append at %d: %v, dropped %d", ts, err, r.Dropped())
		}
		if (ts+perTick-1)%sealEvery < perTick {
			if _, err := w.SealWait(ctx, src.ID(), []string{"s"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	line, err := out.ReadString('\n')
	if werr := cmd.Wait(); werr != nil {
		t.Fatalf("reader process failed: %v (stdout %q)", werr, line)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	var reads int
	if _, err := fmt.Sscanf(line, "reads %d", &reads); err != nil || reads < 2 {
		t.Fatalf("reader reported %q; want several reads", line)
	}
	t.Logf("the reader process read %d times, every read a gap-free prefix", reads)
	if w.Stats().Seals < total/sealEvery {
		t.Fatalf("only %d seals ran", w.Stats().Seals)
	}
}
