package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// cpuTicks reads /proc/stat's first line, the CPU time of every CPU since
// boot (in USER_HZ ticks): idle (idle and iowait) and the total.
func cpuTicks() (idle, total uint64, err error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, 0, fmt.Errorf("/proc/stat: empty: %w", sc.Err())
	}
	fields := bytes.Fields(sc.Bytes())
	if len(fields) < 6 || string(fields[0]) != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected first line %q", sc.Bytes())
	}
	for i, fv := range fields[1:] {
		v, err := strconv.ParseUint(string(fv), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
		switch i {
		case 3, 4: // idle, iowait
			idle += v
		}
		if i < 8 { // guest and guest_nice are already in user and nice
			total += v
		}
	}
	return idle, total, nil
}
