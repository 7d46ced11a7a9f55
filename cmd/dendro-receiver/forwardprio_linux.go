package main

import "syscall"

// setThreadNice sets the calling thread's nice value (raising one's own
// needs no privilege).
func setThreadNice(nice int) error {
	return syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), nice)
}
