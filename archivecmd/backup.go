package archivecmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// BackupOptions configures Backup.
type BackupOptions struct {
	// Progress, when set, is called with the bytes written so far of the
	// expected size (the archive's pages in use), every PollEvery.
	Progress func(done, total int64)
	// PollEvery is how often the copy's size is looked at for Progress;
	// 0 means 200 ms.
	PollEvery time.Duration
}

// BackupResult describes a finished backup.
type BackupResult struct {
	Bytes int64 // the copy's size
	Took  time.Duration
}

// Backup writes an exact copy of the archive a reads to dest with SQLite's
// VACUUM INTO, which reads through the -wal sidecar in one snapshot: the
// copy holds every commit up to the moment it started, while a server goes
// on writing (it never waits for the copy; the copy pins the sidecar while
// it runs, so checkpoints wait for it). The copy is compact (free pages
// are not copied) and is one file.
//
// dest must not exist (ErrDestExists). The copy is written beside it
// under a temporary name, flushed, and linked to dest only when complete,
// so an interrupted backup leaves no dest, and a dest that appeared
// meanwhile is never overwritten. The finished copy is opened once to
// check that it is an archive.
func Backup(ctx context.Context, a *archive.Archive, dest string, opts BackupOptions) (BackupResult, error) {
	start := time.Now()
	if _, err := os.Lstat(dest); err == nil {
		return BackupResult{}, fmt.Errorf("%s: %w", dest, ErrDestExists)
	}
	dir := filepath.Dir(dest)
	if fi, err := os.Stat(dir); err != nil {
		return BackupResult{}, err
	} else if !fi.IsDir() {
		return BackupResult{}, fmt.Errorf("%s is not a directory", dir)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(dest)+".partial-*")
	if err != nil {
		return BackupResult{}, err
	}
	tmp := f.Name()
	f.Close()
	os.Remove(tmp) // VACUUM INTO wants a name that does not exist; the unique one is ours
	defer removeSQLiteFiles(tmp)

	var total int64
	if err := a.View(ctx, func(tx *archive.ReadTx) error {
		ps, err := tx.PageStats()
		total = (ps.Pages - ps.Free) * ps.PageSize
		return err
	}); err != nil {
		return BackupResult{}, err
	}
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		if opts.Progress == nil {
			return
		}
		every := opts.PollEvery
		if every <= 0 {
			every = 200 * time.Millisecond
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if fi, err := os.Stat(tmp); err == nil {
					opts.Progress(fi.Size(), max(total, fi.Size()))
				}
			}
		}
	}()
	err = a.VacuumInto(ctx, tmp)
	close(stop)
	<-polled
	if err != nil {
		return BackupResult{}, err
	}
	if err := syncFile(tmp); err != nil {
		return BackupResult{}, err
	}
	// Link, not rename: rename would replace a dest created meanwhile.
	if err := os.Link(tmp, dest); err != nil {
		if errors.Is(err, os.ErrExist) {
			return BackupResult{}, fmt.Errorf("%s: %w", dest, ErrDestExists)
		}
		return BackupResult{}, err
	}
	if err := syncFile(dir); err != nil {
		return BackupResult{}, err
	}
	fi, err := os.Stat(dest)
	if err != nil {
		return BackupResult{}, err
	}
	if opts.Progress != nil {
		opts.Progress(fi.Size(), fi.Size())
	}
	c, err := archive.Open(dest)
	if err != nil {
		return BackupResult{}, fmt.Errorf("the copy does not open: %w", err)
	}
	if err := c.Close(); err != nil {
		return BackupResult{}, err
	}
	return BackupResult{Bytes: fi.Size(), Took: time.Since(start)}, nil
}

// syncFile flushes a file or a directory to disk.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// removeSQLiteFiles removes a database file SQLite wrote and any sidecar
// it may have left.
func removeSQLiteFiles(path string) {
	for _, p := range []string{path, path + "-journal", path + "-wal", path + "-shm"} {
		os.Remove(p)
	}
}
