package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
)

// Machine describes where a run ran: figures from two machines are not
// comparable, and on a shared machine the load at the start says how
// quiet it was.
type Machine struct {
	CPUs      int        `json:"cpus"`
	CPUModel  string     `json:"cpu_model"`
	MemBytes  int64      `json:"mem_bytes"`
	Kernel    string     `json:"kernel"`
	Disk      Disk       `json:"disk"`
	LoadStart [3]float64 `json:"load_avg_start"` // 1, 5, 15 minutes
	LoadEnd   [3]float64 `json:"load_avg_end"`
	GoVersion string     `json:"go_version"` // the benchmark's own
}

// Disk is the filesystem holding the servers' data directories.
type Disk struct {
	Device     string `json:"device"`
	FSType     string `json:"fs_type"`
	SizeBytes  int64  `json:"size_bytes"`
	FreeBytes  int64  `json:"free_bytes"`
	Rotational string `json:"rotational"` // as /sys/block says; virtual disks often say 1
}

// describeMachine reads /proc and /sys; a figure it cannot read stays
// zero rather than failing the run.
func describeMachine(dataDir string) Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), LoadStart: loadAvg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if kb, ok := field(b, "MemTotal:"); ok {
			m.MemBytes = kb * 1024
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.Disk = describeDisk(dataDir)
	return m
}

// loadAvg is /proc/loadavg's three averages.
func loadAvg() [3]float64 {
	var l [3]float64
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Sscan(string(b), &l[0], &l[1], &l[2])
	}
	return l
}

func describeDisk(dir string) Disk {
	var d Disk
	abs, err := filepath.Abs(dir)
	if err != nil {
		return d
	}
	var st syscall.Statfs_t
	if syscall.Statfs(abs, &st) == nil {
		d.SizeBytes = int64(st.Blocks) * st.Bsize
		d.FreeBytes = int64(st.Bavail) * st.Bsize
	}
	// The mount with the longest mount point that contains dir.
	b, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return d
	}
	best := -1
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		mp := f[1]
		if (abs == mp || strings.HasPrefix(abs, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > best {
			best, d.Device, d.FSType = len(mp), f[0], f[2]
		}
	}
	name := filepath.Base(d.Device)
	for _, c := range []string{name, strings.TrimRight(name, "0123456789")} {
		if r, err := os.ReadFile("/sys/block/" + c + "/queue/rotational"); err == nil {
			d.Rotational = string(bytes.TrimSpace(r))
			break
		}
	}
	return d
}

// String is the one-line description the table's header carries.
func (m Machine) String() string {
	s := fmt.Sprintf("%d CPUs (%s), %.1f GiB memory, %s %s %.0f GiB (%.0f free, rotational=%s), Linux %s, load average at start %.2f %.2f %.2f",
		m.CPUs, m.CPUModel, float64(m.MemBytes)/(1<<30), m.Disk.Device, m.Disk.FSType, float64(m.Disk.SizeBytes)/(1<<30), float64(m.Disk.FreeBytes)/(1<<30),
		m.Disk.Rotational, m.Kernel, m.LoadStart[0], m.LoadStart[1], m.LoadStart[2])
	if m.LoadEnd != [3]float64{} {
		s += fmt.Sprintf(", at end %.2f %.2f %.2f", m.LoadEnd[0], m.LoadEnd[1], m.LoadEnd[2])
	}
	return s
}
