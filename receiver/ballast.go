package receiver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// A ballast: room on the archive's filesystem held by a file of zeros
// beside it (the archive's path with ballastSuffix), kept while size
// retention runs.
//
// Why: once the disk is full, nothing that would free room can commit.
// Every transaction, an eviction as much as an append, first writes the
// -wal sidecar, which then cannot grow; a seal, which turns live rows
// into a segment a fraction of their size, needs room for that segment
// before its rows can go. The disk reserve is kept by evicting before the
// disk fills, but a load can outrun it: a host whose CPU is taken by
// others starves the seals at nice 19 while writes go on, until the live
// tail alone fills the disk and there is no segment left to evict. Then
// the ballast goes, the writer's next attempt finds room for a seal and
// an eviction, and the ballast is written again once the room is back.
// (CockroachDB keeps an emergency ballast for the same reason.)
//
// The ballast is half the reserve and counts as room: the archive may
// grow to the same size as without it. It exists only while the ingester
// runs with RetentionBytes set; a clean stop removes it, and a start after
// a kill -9 finds it and keeps it.
type ballast struct {
	path    string
	size    int64
	present bool
}

const ballastSuffix = "-ballast"

func newBallast(archivePath string, size int64) *ballast {
	b := &ballast{path: archivePath + ballastSuffix, size: size}
	if fi, err := os.Stat(b.path); err == nil && fi.Mode().IsRegular() && fi.Size() == size {
		b.present = true
	}
	return b
}

// room is what the ballast holds now.
func (b *ballast) room() int64 {
	if b.present {
		return b.size
	}
	return 0
}

// fill writes the ballast: zeros to a temporary name, synced, then
// renamed into place, so that a half-written one is never taken for
// whole. Zeros, not a sparse file: a hole holds no room.
func (b *ballast) fill() error {
	tmp := b.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("ballast: %w", err)
	}
	zeros := make([]byte, 1<<20)
	for left := b.size; left > 0 && err == nil; {
		n := min(left, int64(len(zeros)))
		_, err = f.Write(zeros[:n])
		left -= n
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, b.path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("ballast: %w", err)
	}
	b.present = true
	return nil
}

// release removes the ballast (and a temporary one a crash left).
func (b *ballast) release() error {
	os.Remove(b.path + ".tmp")
	err := os.Remove(b.path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ballast: %w", err)
	}
	b.present = false
	return nil
}
