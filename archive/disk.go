package archive

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// DiskFree returns the bytes an unprivileged process may still write on
// the filesystem holding the archive at path (statfs's f_bavail), the room
// its file and its -wal sidecar can grow into.
func DiskFree(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(path), &st); err != nil {
		return 0, fmt.Errorf("archive: statfs %s: %w", filepath.Dir(path), err)
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
