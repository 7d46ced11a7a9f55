package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// threadNice is the calling thread's nice value (getpriority's raw
// syscall answers 20 - nice), or -100 if it cannot be read.
func threadNice() int {
	p, err := syscall.Getpriority(syscall.PRIO_PROCESS, syscall.Gettid())
	if err != nil {
		return -100
	}
	return 20 - p
}

// nicedThreads counts the process's threads at encoderNice, from
// /proc/self/task/*/stat (field 19 is the nice value), but for the main
// thread: Go cannot end it, so a locked goroutine that exits there leaves it
// parked for good, running nothing.
func nicedThreads(t *testing.T) int {
	t.Helper()
	stats, err := filepath.Glob("/proc/self/task/*/stat")
	if err != nil {
		t.Fatal(err)
	}
	main := fmt.Sprintf("/proc/self/task/%d/stat", os.Getpid())
	n := 0
	for _, f := range stats {
		if f == main {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended meanwhile
		}
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if v, err := strconv.Atoi(fields[16]); err == nil && v == encoderNice {
			n++
		}
	}
	return n
}

// An encode the writer is not behind on runs on a thread at encoderNice
// unless seals are urgent; one it is behind on, or one that starts while
// seals are urgent, runs at the process's priority; and no thread stays at
// encoderNice after its encode, so no other goroutine ever runs there.
func TestEncodesRunAtIdlePriorityUnlessBehindOrUrgent(t *testing.T) {
	base, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0)
	if err != nil {
		t.Fatal(err)
	}
	if 20-base == encoderNice {
		t.Skipf("the test process already runs at nice %d", encoderNice)
	}
	if n := nicedThreads(t); n != 0 {
		t.Fatalf("%d threads at nice %d before any encode", n, encoderNice)
	}
	var urgent atomic.Bool
	on := encodeAtIdlePriority(slog.New(slog.DiscardHandler), urgent.Load)
	for _, c := range []struct {
		behind, urgent bool
		want           int
	}{
		{false, false, encoderNice},
		{true, false, 20 - base},
		{false, true, 20 - base},
		{true, true, 20 - base},
		{false, false, encoderNice},
	} {
		urgent.Store(c.urgent)
		got := make(chan int, 1)
		on(c.behind, func() { got <- threadNice() })
		if n := <-got; n != c.want {
			t.Errorf("behind=%v urgent=%v: the encode ran at nice %d, want %d", c.behind, c.urgent, n, c.want)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for nicedThreads(t) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d threads still at nice %d after their encodes ended", nicedThreads(t), encoderNice)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
