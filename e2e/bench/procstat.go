package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// procSample is what /proc says of one process at one moment.
type procSample struct {
	CPUSeconds float64 // utime + stime, every thread
	WriteBytes int64   // /proc/PID/io write_bytes: bytes the process caused to be written to storage
	PeakRSS    int64   // VmHWM, bytes
}

// userHZ is the unit of /proc/PID/stat's utime and stime. Linux reports
// them in USER_HZ, which is 100 on every architecture Go runs on, whatever
// the kernel's own HZ; reading sysconf(_SC_CLK_TCK) would need cgo.
const userHZ = 100

// readProc reads pid's CPU time, write_bytes and peak RSS.
func readProc(pid int) (procSample, error) {
	var s procSample
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, fmt.Errorf("bench: proc: %w", err)
	}
	if s.CPUSeconds, err = parseStatCPU(stat); err != nil {
		return s, fmt.Errorf("bench: proc %d: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, fmt.Errorf("bench: proc: %w", err)
	}
	if kb, ok := field(status, "VmHWM:"); ok {
		s.PeakRSS = kb * 1024
	}
	io, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return s, fmt.Errorf("bench: proc: %w", err)
	}
	if wb, ok := field(io, "write_bytes:"); ok {
		s.WriteBytes = wb
	}
	return s, nil
}

// parseStatCPU returns utime+stime from the contents of /proc/PID/stat.
// The command name (field 2) is in parentheses and may hold spaces, so
// fields are counted from the last ')': state is field 3, utime 14, stime 15.
func parseStatCPU(stat []byte) (float64, error) {
	k := bytes.LastIndexByte(stat, ')')
	if k < 0 {
		return 0, fmt.Errorf("stat without a command name: %.80q", stat)
	}
	f := strings.Fields(string(stat[k+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("stat with %d fields after the name", len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("stat: utime %q stime %q", f[11], f[12])
	}
	return float64(utime+stime) / userHZ, nil
}

// field returns the first integer after the line starting with key in a
// "key: value [unit]" file.
func field(b []byte, key string) (int64, bool) {
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		if rest, ok := bytes.CutPrefix(line, []byte(key)); ok {
			f := strings.Fields(string(rest))
			if len(f) == 0 {
				return 0, false
			}
			n, err := strconv.ParseInt(f[0], 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
