package receiver

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// Room for seals, when the archive's size is capped (RetentionBytes).
//
// Live rows cannot be evicted: only segments can (an epoch's later rows
// refer to labels its first rows carry, see evictBefore), so the live tail
// leaves the disk only by a seal, and a seal needs room of its own before
// its rows can go: its segment is written to the -wal sidecar, then copied
// into the file at the checkpoint, where the file grows unless it has free
// pages. If appends take that room, nothing can free any: the writer finds
// the disk full, the seal fails, there is no segment to evict, and every
// write after is refused, whatever the load does next. Seals starved of CPU
// get there (the encoder runs at nice 19: two busy loops at normal priority
// on a two-core host left it a few percent of a CPU, and a 40 MiB disk
// filled with unsealed rows), and so does a disk too small for a seal
// policy's worth of rows.
//
// So keepRoom (retention.go) keeps, beyond the reserve, room for sealing the
// whole live tail (sealRoomFactor times its bytes), and when it cannot:
//
//   - seals become urgent (SealUrgency) once that room is under twice the
//     reserve: an encode that starts then does not wait for idle CPU, since
//     only seals, then evictions, make room;
//   - once the room left after such a seal would be under a quarter of the
//     reserve, appends are held (refused 507 with Retry-After, as a full
//     disk is) and every stream with live rows is sealed, due or not, the
//     ballast going if it holds room the seal may need. Appends resume once
//     that room is back above half the reserve.
//
// Ingest alone then stops before the disk is full of rows no seal could
// take, while a seal still has room: the state no eviction can leave is
// not reached by appends (checks run every diskCheckEvery and after each
// tenth of the reserve written). A disk that something else fills is what
// the ballast is for.

// sealRoomFactor is how many bytes of room a seal of the live tail may
// take for each byte of its live rows: its segment (at most about the rows'
// size: incompressible samples) in the sidecar, and again in the file.
const sealRoomFactor = 2

// SealUrgency is how the ingester tells the seal encoder
// (archive.WriterOptions.EncodeOn) that seals must not wait for idle CPU:
// the disk is short of room and only seals, then evictions, can make more.
// The zero value is never urgent; a nil one too.
type SealUrgency struct{ urgent atomic.Bool }

// Urgent reports whether an encode starting now should run at normal
// priority.
func (u *SealUrgency) Urgent() bool { return u != nil && u.urgent.Load() }

func (u *SealUrgency) set(v bool) {
	if u != nil {
		u.urgent.Store(v)
	}
}

// errHeldForSeals is what a write is refused with while appends are held:
// a 507, as for a full disk, which the sender retries.
var errHeldForSeals = fmt.Errorf("%w: the room left is kept for sealing the live rows", ErrDiskFull)

// liveBytes is the row bytes committed and not yet sealed: every stream's
// account, and the streams a seal round has taken from theirs and not yet
// sealed (sealingBytes). Rows a restart inherited are not counted until a
// seal takes them (their bytes are unknown: inherit).
func (in *Ingester) liveBytes() int64 {
	in.mu.Lock()
	n := in.sealingBytes.Load() // added under in.mu with the rotation
	for _, a := range in.accounts {
		n += a.Bytes()
	}
	in.mu.Unlock()
	return max(n, 0)
}

// ErrWritesHeld is what Health reports while writes are held for seals.
var ErrWritesHeld = errors.New("receiver: writes are held: the disk has no room for more live rows until seals and evictions make it")

// Health reports ErrWritesHeld while writes are held for seals (each is
// refused 507 meanwhile), else nil: a server is not ready then, as while
// its writer cannot commit.
func (in *Ingester) Health() error {
	if in.held.Load() {
		return ErrWritesHeld
	}
	return nil
}

// holdAppends sets whether appends are held, logging a change.
func (in *Ingester) holdAppends(hold bool, left, live int64) {
	if in.held.Swap(hold) == hold {
		return
	}
	if hold {
		in.stats.holds.Add(1)
		in.log.Warn("the disk has no room for more live rows: writes are refused until seals and evictions make it",
			"room_after_seal", left, "live_bytes", live, "reserve", in.opts.DiskReserve)
		return
	}
	in.log.Info("the disk has room again: writes resume", "room_after_seal", left, "reserve", in.opts.DiskReserve)
}
