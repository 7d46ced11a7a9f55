package main

import (
	"log/slog"
	"runtime"
	"sync"
)

// Encoding a seal is most of the receiver's CPU, and none of it is on a
// sender's path: a request waits for its commit, never for a seal. On a
// small host the two compete, and while every request in flight waits for
// the writer's fsync the CPU sits idle. So the encoding runs on a thread of
// its own at the lowest CPU priority (nice 19), on a processor of its own:
// main raises GOMAXPROCS by one for it. The kernel then gives requests the
// CPU first and the encoder what they leave, which under load is the time
// they spend waiting for the disk. Measured on two cores with rwload
// (10,000 series, 4 senders) in alternating pairs, that made ingest 4-26%
// faster at the same CPU per sample; the idle CPU went from 17-19% of the
// run to 12-13%.
//
// Seals that fall behind cannot pile up in memory: the writer takes at most
// twice a policy's bytes per seal (archive.WriterOptions.MaxSealBytes). But
// a host with no idle CPU to give starves them, and the live rows they leave
// can fill a disk: nothing but a seal makes their room free again. So an
// encode that starts while the ingester says the disk is short of room
// (receiver.SealUrgency) runs at normal priority, competing for the CPU as
// every seal did before; so does one the writer says is behind (a row bound,
// archive.WriterOptions.MaxSealRows, which the receiver does not set). An
// encode already running stays at nice 19: a thread cannot lower its nice
// value again without CAP_SYS_NICE. Seals are one stream each, so the next
// one comes soon.

// encodeAtIdlePriority is an archive.WriterOptions.EncodeOn that runs an
// encode at the lowest CPU priority unless the writer says it is behind or
// urgent says seals are urgent. If the priority cannot be lowered, it says
// so once in log and the encodes run at normal priority.
func encodeAtIdlePriority(log *slog.Logger, urgent func() bool) func(behind bool, encode func()) {
	var once sync.Once
	return func(behind bool, encode func()) {
		go func() {
			if !behind && !urgent() {
				// Never unlocked: the thread ends with this goroutine, so
				// its priority never reaches another goroutine.
				runtime.LockOSThread()
				if err := lowerThreadPriority(); err != nil {
					once.Do(func() {
						log.Warn("cannot lower the seal encoder's CPU priority; it runs at normal priority", "err", err)
					})
				}
			}
			encode()
		}()
	}
}

// reserveEncoderProc raises GOMAXPROCS by one for the seal encoder's
// thread where it runs at idle priority: the kernel may leave that thread
// waiting while it holds a processor, and the requests must still have one
// per CPU. A GOMAXPROCS in the environment stands: the operator's value.
// It returns the processors left for requests, which is how many decode
// at once (receiver.Options.Parallelism): each decoder holds a label cache
// of every series, and one more than can run only costs memory (5 MiB of
// peak RSS measured at 10,000 series).
func reserveEncoderProc(getenv func(string) string) (procs int) {
	procs = runtime.GOMAXPROCS(0)
	if threadPriorities && getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(procs + 1)
	}
	return procs
}
