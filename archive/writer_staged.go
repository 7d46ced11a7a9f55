package archive

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// Staged metadata: patches that ride on the writer's next commit.
//
// A caller that updates a source's metadata often (the forwarder's
// cursors, a few times a second) would pay a transaction, and an fsync on
// the writer's one connection, for each update. Staged instead, a patch is
// written by whatever transaction the writer commits next (a group of
// appends, a seal, a prune), inside it: it costs a row update in a commit
// that was happening anyway. The caller learns that its patch is on disk
// from StagedCommitted, and asks for a commit of its own with FlushStaged
// when the archive is quiet (nothing else commits).
//
// What a failed transaction does to a patch it carried: the patch goes back
// to the stage (keys staged again since are newer and win), so it is
// written by a later commit. A patch the archive cannot apply to its source
// (the source is gone, or its metadata is not a JSON object someone else
// wrote) is dropped and logged: it must never fail the appends it rides
// with. A SQLite error while applying fails the transaction, as it would
// have failed anyway.

// stagedMetadata is the stage: the writer's handle owns it (callers stage
// from any goroutine), the loop takes from it in each transaction.
type stagedMetadata struct {
	mu      sync.Mutex
	patches map[SourceID]map[string]string
	gen     uint64 // stages so far
	// committed: every stage numbered at or below it is in a committed
	// transaction (or was dropped as unappliable).
	committed atomic.Uint64
}

// stagedTake is what one transaction took from the stage.
type stagedTake struct {
	patches map[SourceID]map[string]string
	gen     uint64
}

// StageMetadata merges patch into the metadata of source, to be written by
// the next transaction the writer commits, and returns the stage's number:
// once StagedCommitted returns at least that number the patch is on disk.
// Keys staged again before that commit replace the earlier value. It never
// blocks on the writer.
func (w *Writer) StageMetadata(source SourceID, patch map[string]string) uint64 {
	s := &w.staged
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.patches == nil {
		s.patches = map[SourceID]map[string]string{}
	}
	m := s.patches[source]
	if m == nil {
		m = make(map[string]string, len(patch))
		s.patches[source] = m
	}
	for k, v := range patch {
		m[k] = v
	}
	s.gen++
	return s.gen
}

// StagedCommitted returns the number of the newest stage known to be
// committed: every StageMetadata that returned a number at or below it is
// on disk.
func (w *Writer) StagedCommitted() uint64 { return w.staged.committed.Load() }

// FlushStaged asks the writer to commit what is staged now, in a
// transaction of its own unless another commit takes it first. Fire and
// forget: watch StagedCommitted.
func (w *Writer) FlushStaged(ctx context.Context) error {
	return w.send(ctx, msgFlushStaged{})
}

type msgFlushStaged struct{}

func (msgFlushStaged) isMessage() {}

// take empties the stage into a take.
func (s *stagedMetadata) take() stagedTake {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := stagedTake{patches: s.patches, gen: s.gen}
	s.patches = nil
	return t
}

// finish records the outcome of the transaction that carried t: committed,
// or failed, and then t's patches go back under what was staged since.
func (s *stagedMetadata) finish(t stagedTake, err error) {
	if err == nil {
		for {
			c := s.committed.Load()
			if t.gen <= c || s.committed.CompareAndSwap(c, t.gen) {
				return
			}
		}
	}
	if len(t.patches) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.patches == nil {
		s.patches = map[SourceID]map[string]string{}
	}
	for src, patch := range t.patches {
		m := s.patches[src]
		if m == nil {
			s.patches[src] = patch
			continue
		}
		for k, v := range patch {
			if _, newer := m[k]; !newer {
				m[k] = v
			}
		}
	}
}

// applyStaged writes t's patches inside tx.
func (l *loop) applyStaged(tx *WriteTx, t stagedTake) error {
	for src, patch := range t.patches {
		err := tx.PatchMetadata(src, patch)
		if err == nil {
			continue
		}
		if SQLiteCode(err) != 0 && !errors.Is(err, ErrNoSource) {
			return err
		}
		l.log.Warn("dropping a staged metadata patch the source cannot take", "source", src, "err", err)
	}
	return nil
}

// flushStaged commits what is staged, in a transaction of its own.
func (l *loop) flushStaged() {
	s := &l.w.staged
	s.mu.Lock()
	empty := len(s.patches) == 0
	s.mu.Unlock()
	if empty {
		return
	}
	err := l.withRetries(func() error {
		return l.update(func(*WriteTx) error { return nil })
	})
	if err != nil {
		l.log.Warn("committing staged metadata failed; it stays staged", "err", err)
	}
}
