//go:build !linux

package main

import "errors"

// cpuTicks: the host's CPU use is read from Linux's /proc/stat only;
// elsewhere saturated always says no.
func cpuTicks() (idle, total uint64, err error) {
	return 0, 0, errors.New("the host's CPU use is Linux only")
}
