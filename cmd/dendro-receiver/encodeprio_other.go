//go:build !linux

package main

import "errors"

// threadPriorities says lowerThreadPriority works here. Elsewhere than
// Linux a nice value is the whole process's, so the encoder keeps the
// default: a goroutine that yields between steps (promsample.Options).
const threadPriorities = false

func lowerThreadPriority() error { return errors.ErrUnsupported }
