package main

import "syscall"

// threadPriorities says lowerThreadPriority works here: Linux keeps a nice
// value per thread.
const threadPriorities = true

// encoderNice is the seal encoder thread's nice value: the lowest priority.
const encoderNice = 19

// lowerThreadPriority sets the calling thread's nice value to encoderNice.
// Raising one's own nice value needs no privilege.
func lowerThreadPriority() error {
	return syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), encoderNice)
}
