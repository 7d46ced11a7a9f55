package main

import (
	"io/fs"
	"runtime/debug"
	"strings"
	"testing"
)

func TestTheDefaultMemoryLimitComesFromTheCgroupOrTheMachine(t *testing.T) {
	const gib = int64(1) << 30
	meminfo := "MemTotal:       25165824 kB\nMemFree:        1000 kB\n" // 24 GiB
	cases := []struct {
		name  string
		files map[string]string
		want  int64
		where string
	}{
		{"cgroup v2 with a limit", map[string]string{
			"/proc/self/cgroup": "0::/system.slice/dendro.service\n",
			"/sys/fs/cgroup/system.slice/dendro.service/memory.max": "2147483648\n",
			"/sys/fs/cgroup/system.slice/memory.max":                "max\n",
			"/proc/meminfo":                                         meminfo,
		}, 2 * gib / 10 * 9, "90% of /sys/fs/cgroup/system.slice/dendro.service/memory.max"},
		{"cgroup v2, the parent's limit is tighter", map[string]string{
			"/proc/self/cgroup":             "0::/a/b\n",
			"/sys/fs/cgroup/a/b/memory.max": "max\n",
			"/sys/fs/cgroup/a/memory.max":   "1073741824\n",
			"/proc/meminfo":                 meminfo,
		}, gib / 10 * 9, "90% of /sys/fs/cgroup/a/memory.max"},
		{"cgroup v2 in a container (namespace root)", map[string]string{
			"/proc/self/cgroup":         "0::/\n",
			"/sys/fs/cgroup/memory.max": "536870912\n",
		}, 512 << 20 / 10 * 9, "90% of /sys/fs/cgroup/memory.max"},
		{"cgroup v2 without a limit", map[string]string{
			"/proc/self/cgroup":                    "0::/user.slice\n",
			"/sys/fs/cgroup/user.slice/memory.max": "max\n",
			"/proc/meminfo":                        meminfo,
		}, 6 * gib, "a quarter of MemTotal"},
		{"cgroup v1 with a limit", map[string]string{
			"/proc/self/cgroup":                           "12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n",
			"/sys/fs/cgroup/memory/memory.limit_in_bytes": "3221225472\n", // the container's root, as mounted inside it
			"/proc/meminfo":                               meminfo,
		}, 3 * gib / 10 * 9, "90% of /sys/fs/cgroup/memory/memory.limit_in_bytes"},
		{"cgroup v1 without a limit", map[string]string{
			"/proc/self/cgroup":                           "4:memory:/\n",
			"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
			"/proc/meminfo":                               meminfo,
		}, 6 * gib, "a quarter of MemTotal"},
		{"nothing readable", map[string]string{}, gib, "no limit found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			read := func(name string) ([]byte, error) {
				if s, ok := c.files[name]; ok {
					return []byte(s), nil
				}
				return nil, fs.ErrNotExist
			}
			got, where := defaultMemoryLimit(read)
			if got != c.want || where != c.where {
				t.Errorf("got %d from %q, want %d from %q", got, where, c.want, c.where)
			}
		})
	}
}

func TestTheMemoryPlanAddsUp(t *testing.T) {
	for _, limit := range []int64{256 << 20, 1 << 30, 6 << 30, 64 << 30} {
		p, err := planMemory(limit)
		if err != nil {
			t.Fatal(err)
		}
		if sum := p.fixed + p.ingest + p.sqlite + p.reads + p.gcSlack; sum != limit {
			t.Errorf("%d: the shares add up to %d", limit, sum)
		}
		if p.sqlite < memSQLiteMin || p.sqlite > memSQLiteMax || p.reads <= 0 || p.goLimit+p.sqlite > limit {
			t.Errorf("%d: plan %+v", limit, p)
		}
		if n := p.readerConns(20); n < 2 || int64(n)*readerConnMemory > max(p.sqlite, 2*readerConnMemory) {
			t.Errorf("%d: %d reader connections for a SQLite share of %d", limit, n, p.sqlite)
		}
	}
	if _, err := planMemory(100 << 20); err == nil || !strings.Contains(err.Error(), "below") {
		t.Errorf("a 100 MiB limit: %v", err)
	}
}

// --query.cache-bytes=0 follows the memory limit, within its bounds; a
// size given stands up to half of what reads may hold.
func TestTheQueryCacheFollowsTheMemoryLimit(t *testing.T) {
	for _, c := range []struct {
		limit, flag, want int64
	}{
		{limit: 256 << 20, flag: 0, want: 32 << 20},      // reads 64 MiB: half of it, under the floor
		{limit: 512 << 20, flag: 0, want: minQueryCache}, // reads 184 MiB: the floor, over an eighth
		{limit: 6 << 30, flag: 0, want: (6<<30 - memFixed - memIngest - memSQLiteMax) / 2 / 8},
		{limit: 64 << 30, flag: 0, want: (64<<30 - memFixed - memIngest - memSQLiteMax) / 2 / 8},
		{limit: 6 << 30, flag: 1 << 30, want: 1 << 30}, // given, and under half of reads
		{limit: 6 << 30, flag: 4 << 30, want: (6<<30 - memFixed - memIngest - memSQLiteMax) / 2 / 2},
		{limit: 512 << 20, flag: 16 << 20, want: 16 << 20}, // given, under the floor: stands
	} {
		p, err := planMemory(c.limit)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.queryCache(c.flag); got != c.want {
			t.Errorf("limit %d MiB, --query.cache-bytes %d: cache %d, want %d (reads %d)", c.limit>>20, c.flag, got, c.want, p.reads)
		}
	}
}

func TestGOMEMLIMITInTheEnvironmentStands(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	restore := applyGoMemoryLimit(1<<30, func(k string) string { return map[string]string{"GOMEMLIMIT": "2GiB"}[k] })
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("with GOMEMLIMIT set the limit changed to %d", got)
	}
	restore()
	restore = applyGoMemoryLimit(1<<30, func(string) string { return "" })
	if got := debug.SetMemoryLimit(-1); got != 1<<30 {
		t.Errorf("the limit is %d, want 1 GiB", got)
	}
	restore()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("restored to %d, want %d", got, before)
	}
}
