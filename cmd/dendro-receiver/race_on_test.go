//go:build race

package main

// raceEnabled: the race detector's shadow memory multiplies a process's
// RSS several times over, so a bound on RSS holds only without it.
const raceEnabled = true
