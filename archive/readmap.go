package archive

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
)

// When a reader's connection maps the file.
//
// A read handle's connections see the file through a memory map
// (ReadOptions.MapBytes), and a map pays off only while it lasts: a page
// read through it once costs a pointer from then on. But SQLite drops a
// connection's whole map whenever the snapshot it begins finds commits it
// has not seen (pagerBeginReadTransaction: "changed" resets the cache and
// unmaps the file). The next snapshot maps it again, and every page it
// touches is then a page fault, which on a virtual machine costs more
// than the read call it replaces (measured on this project's 2-core
// hosts: ~13 µs a scattered first touch, the kernel mapping 16 pages
// around it, against ~2.3 µs for a 4 KiB pread). Under ingest the writer
// commits many times a second, so every question began with an empty map:
// a one-series query_range repeated under a light ingest into 1 M series
// took 67 page faults more a question with the map than without.
//
// So each connection decides from its last snapshot: one that found new
// commits (its PRAGMA data_version changed) predicts that the next will
// too and reads through its page cache (mmap_size 0); one that found none
// maps the file again. The switch is a pragma between snapshots, taken only
// when the prediction flips; a wrong prediction costs one question what
// the map, or its absence, costs.
//
// Measured at 1 M series under that light ingest (p50 of a repeated
// one-series query_range, then of 200 series asked once each): over 7.5
// minutes of data, 2.6-2.8 ms became 1.8-2.2, and 2.8-3.9 ms became
// 2.5-3.2; over an hour of data, 5.5-5.6 ms became 2.9-3.1, and 8.8-9.4
// ms became 6.8-8.3. What it gives up is the map's help with a scattered
// page chain (doc.go): a link costs a read call instead of a fault that
// mapped its neighbours, and the p90 of the hour's series asked once went
// from 17-18 ms to 20-26 ms. With nobody writing, nothing changes: the map
// stays on.

// mapSwitch turns the maps of a read handle's connections off and on.
type mapSwitch struct {
	bytes int64 // mmap_size when the file is quiet; 0: never map
	mu    sync.Mutex
	conns map[any]*connMap // by driver connection
}

// connMap is what a connection's last snapshot saw.
type connMap struct {
	version  int64 // its PRAGMA data_version
	known    bool  // version is set
	unmapped bool  // mmap_size is 0 now
	busy     bool  // its last snapshot found new commits
}

// maxMapConns bounds mapSwitch.conns: database/sql replaces a connection
// only after an error, and a state forgotten costs one wrong prediction.
const maxMapConns = 256

// state returns conn's state, creating it.
func (m *mapSwitch) state(dc any) *connMap {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.conns[dc]
	if st == nil {
		if m.conns == nil || len(m.conns) >= maxMapConns {
			m.conns = map[any]*connMap{}
		}
		st = &connMap{}
		m.conns[dc] = st
	}
	return st
}

// before sets conn's map for the snapshot about to begin, from what its
// last one saw, and returns the connection's state (nil when the handle
// never maps). A View runs on one connection at a time, so the state is
// its own until it ends.
func (m *mapSwitch) before(ctx context.Context, conn *sql.Conn) (*connMap, error) {
	if m == nil || m.bytes <= 0 {
		return nil, nil
	}
	var dc any
	if err := conn.Raw(func(c any) error { dc = c; return nil }); err != nil {
		return nil, err
	}
	st := m.state(dc)
	if st.busy != st.unmapped {
		size := m.bytes
		if st.busy {
			size = 0
		}
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA mmap_size=%d", size)); err != nil {
			return nil, sqlErr("mmap_size", err)
		}
		st.unmapped = st.busy
	}
	return st, nil
}

// saw records the data_version a snapshot began with.
func (st *connMap) saw(version int64) {
	if st == nil {
		return
	}
	st.busy = st.known && version != st.version
	st.version, st.known = version, true
}
