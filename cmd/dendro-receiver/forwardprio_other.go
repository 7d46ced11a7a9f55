//go:build !linux

package main

import "errors"

// setThreadNice: per-thread priorities are Linux's (threadPriorities is
// false elsewhere, so this is never called).
func setThreadNice(int) error { return errors.New("per-thread CPU priority is Linux only") }
