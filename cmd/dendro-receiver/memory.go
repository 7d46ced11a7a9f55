package main

import (
	"bufio"
	"bytes"
	"fmt"
	"path"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/alecthomas/units"
)

// The process's memory has one budget, --memory.limit, shared as
// memoryPlan says. What is fixed is reserved at start; what grows with the
// questions asked (the decoded segments promql-read keeps, the answers it
// builds) reserves from the one membudget.Budget as it goes, and waits or
// is refused when it does not fit. The shares, measured on the 2-core
// machine with rwload (10,000 series):
//
//   - fixed, 48 MiB: the process before any question. The binary's pages
//     (~30 MiB), the runtime, stacks, the writer's 2 MiB page cache (4 MiB
//     of RSS: the driver's allocator doubles SQLite's pages) and the
//     driver's heap. Measured: 43 MiB RSS idle.
//   - ingest, 64 MiB: what ingesting adds at its peak, requests in flight,
//     label caches and the seal being encoded with their GC headroom.
//     Measured: 82-86 MiB RSS peak while ingesting, with the fixed part.
//   - sqlite, a sixteenth of the limit, 16 to 256 MiB: the read handle's
//     connections, their page caches and fixed cost (archive.ReadOptions).
//     Off the Go heap, so outside the Go runtime's limit.
//   - the rest, halved: reads, what the read path may reserve (a live heap
//     of that much), and its GC headroom (the Go heap grows past its live
//     size before a collection).
//
// The Go runtime's soft limit (GOMEMLIMIT) is the limit less the SQLite
// share and what the runtime does not count (the binary's pages, the
// driver's C heap): minGoSlack. A GOMEMLIMIT in the environment stands.
const (
	memFixed       = 48 << 20
	memIngest      = 64 << 20
	memSQLiteMin   = 16 << 20
	memSQLiteMax   = 256 << 20
	minGoSlack     = 32 << 20
	minMemoryLimit = 256 << 20
	// readerConnMemory is what one reader connection is given at least
	// (archive's fixed 2 MiB and a small cache): the SQLite share buys at
	// most that many connections.
	readerConnMemory = 4 << 20
)

// memoryPlan is how --memory.limit is shared.
type memoryPlan struct {
	limit, fixed, ingest, sqlite, reads, gcSlack int64
	// goLimit is the Go runtime's soft limit (debug.SetMemoryLimit).
	goLimit int64
}

func planMemory(limit int64) (memoryPlan, error) {
	if limit < minMemoryLimit {
		return memoryPlan{}, fmt.Errorf("--memory.limit %s is below the %s the receiver needs",
			units.Base2Bytes(limit), units.Base2Bytes(minMemoryLimit))
	}
	p := memoryPlan{limit: limit, fixed: memFixed, ingest: memIngest,
		sqlite: min(max(limit/16, memSQLiteMin), memSQLiteMax)}
	rest := limit - p.fixed - p.ingest - p.sqlite
	p.reads = rest / 2
	p.gcSlack = rest - p.reads
	p.goLimit = limit - p.sqlite - minGoSlack
	return p, nil
}

// minQueryCache is the least --query.cache-bytes=0 gives the decoded-
// segment cache.
const minQueryCache = 64 << 20

// queryCache resolves --query.cache-bytes (flag) against the plan: 0 is an
// eighth of the reads' share, at least minQueryCache; and no cache may take
// more than half of that share, which every question's answer draws on too.
//
// The cache holds each segment's directory (18 bytes a series of it) and
// layout (8 bytes a series), what a read needs before it decodes a sample,
// and in an eighth of it the pages of series read one at a time.
// A fixed 64 MiB held three minutes of a 1 M-series stream's segments; an
// hour of them is ~20 segments a stream, ~90 MB, and a one-series query
// over it took 180-520 ms every time with 64 MiB, 3-19 ms warm with 512.
func (p memoryPlan) queryCache(flag int64) int64 {
	if flag == 0 {
		flag = max(p.reads/8, minQueryCache)
	}
	return min(flag, p.reads/2)
}

// readerConns is how many connections the read handle may open: one per
// query that may run at once and a few for background work (retention,
// compaction, metrics), as far as the SQLite share pays for them.
func (p memoryPlan) readerConns(queries int) int {
	return max(min(queries+4, int(p.sqlite/readerConnMemory)), 2)
}

// applyGoMemoryLimit sets the Go runtime's soft limit unless GOMEMLIMIT is
// in the environment (the operator's value stands), and returns how to
// restore the previous one.
func applyGoMemoryLimit(limit int64, getenv func(string) string) (restore func()) {
	if getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	prev := debug.SetMemoryLimit(limit)
	return func() { debug.SetMemoryLimit(prev) }
}

// defaultMemoryLimit is --memory.limit's default and what it was taken
// from: 90% of the tightest memory limit on the process's cgroup path
// (cgroup v2 memory.max, v1 memory.limit_in_bytes), so the kernel's OOM
// killer is never what bounds the receiver; else a quarter of MemTotal, as
// a receiver shares its host with the Prometheus that sends to it; else
// 1 GiB. readFile is os.ReadFile (a fake in tests).
func defaultMemoryLimit(readFile func(string) ([]byte, error)) (int64, string) {
	if n, where := cgroupMemoryLimit(readFile); n > 0 {
		return n / 10 * 9, "90% of " + where
	}
	if b, err := readFile("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil && kb > 0 {
					return max(kb<<10/4, minMemoryLimit), "a quarter of MemTotal"
				}
			}
		}
	}
	return 1 << 30, "no limit found"
}

// cgroupLimitUnset: v1 reports "no limit" as a huge page-rounded number.
const cgroupLimitUnset = 1 << 60

// cgroupMemoryLimit returns the tightest memory limit along the process's
// cgroup path, and the file it came from; 0 when there is none.
func cgroupMemoryLimit(readFile func(string) ([]byte, error)) (int64, string) {
	b, err := readFile("/proc/self/cgroup")
	if err != nil {
		return 0, ""
	}
	var best int64
	var where string
	consider := func(file string) {
		v, err := readFile(file)
		if err != nil {
			return
		}
		s := strings.TrimSpace(string(v))
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n >= cgroupLimitUnset { // "max" (v2) or unset (v1)
			return
		}
		if best == 0 || n < best {
			best, where = n, file
		}
	}
	// Every directory from the process's own cgroup up to the root: a
	// parent's limit binds its children.
	walk := func(root, dir, file string) {
		for d := path.Clean("/" + dir); ; d = path.Dir(d) {
			consider(path.Join(root, d, file))
			if d == "/" {
				return
			}
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "":
			walk("/sys/fs/cgroup", f[2], "memory.max")
		case hasController(f[1], "memory"):
			walk("/sys/fs/cgroup/memory", f[2], "memory.limit_in_bytes")
		}
	}
	return best, where
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}
