package archive

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
	sqlite3 "modernc.org/sqlite/lib"
)

// Archive is the read handle. It has no mutators; every method is safe for
// concurrent use, and each question runs on a pooled read-only connection in
// one snapshot (see View). It never writes, never checkpoints and never
// recovers: a crashed archive's sidecar is read, not folded in.
type Archive struct {
	path string
	db   *sql.DB
	// immutable is true when the archive was opened with immutable=1 on
	// read-only media (no sidecars, no locks).
	immutable bool
	// pinned, when set, is the one connection every question runs on: a
	// write handle's, which holds the lock (its pool has one slot).
	pinned *sql.Conn
	// uuidColumn caches whether sources has the uuid column (see ReadTx).
	uuidColumn columnCache
	// blobBufs are the C buffers segment reads go through (blob.go).
	blobBufs blobBufs
	// maps turns each connection's memory map off while the file is
	// being written and on while it is quiet (readmap.go).
	maps *mapSwitch
	// jumps are the scattered links of the segments' page chains
	// (blobpages.go); nil reads every segment through sqlite3_blob_read.
	jumps *pageJumps
	// place is where the segments table was found (blobpages.go).
	place *segmentsPlace
	// segs is the followed writer's segments epoch (segments_epoch.go);
	// nil: the handle claims none.
	segs *segmentsEpoch
	// moves is the followed writer's count of reclaims, and chains the
	// page chains its snapshots keep (blobchains.go); nil with segs.
	moves  *segmentsEpoch
	chains *chainCache
	// scans are the rescans of jumps in flight, which Close waits for;
	// once closed, none starts.
	scanMu sync.Mutex
	closed bool
	scans  sync.WaitGroup
}

// ReadOptions configures a read handle (OpenWithOptions). The zero value
// of every field means its default.
type ReadOptions struct {
	// MemoryBytes bounds the memory the handle's connections hold, all of
	// them together, as the process's RSS counts it: their SQLite page
	// caches and their fixed cost (readerConnBytes each). Each connection's
	// cache_size is its share, less that fixed cost, divided by
	// cacheAllocFactor: SQLite counts a cached page as ~4.2 KB, and the
	// driver's allocator hands it an 8 KiB slot (measured: RSS grew 1.90x
	// what SQLite reported at 256 MiB, 1.93x at 64 MiB). 0 means
	// DefaultReadMemoryBytes.
	MemoryBytes int64
	// MaxConns bounds the connections open at once, and so the snapshots:
	// a View waits for a free one as long as its context allows. A View
	// must therefore not open another View on the same handle. 0 means
	// DefaultReadConns.
	MaxConns int
	// MapBytes is how much of the file each connection reads through a
	// memory map (SQLite's mmap_size) instead of read calls; SQLite caps it
	// at 2 GiB. 0 means DefaultReadMapBytes, a negative value turns the
	// map off. See DefaultReadMapBytes for why and what it costs.
	MapBytes int64
	// Writer, when set, is this process's writer of the same archive:
	// the handle's snapshots then know from it whether the segments
	// table changed between them (ReadTx.SegmentsEpoch). It must be the
	// archive's writer (the same file) and outlive the handle's use.
	Writer *Writer
}

// Read handle defaults. A reader's page cache mostly holds the wal rows of
// a live tail and the catalog; segment BLOBs are read past it (SQLite reads
// overflow pages that are not in the sidecar straight into the caller's
// buffer), so a small cache costs little (see readerCacheKiB).
const (
	DefaultReadMemoryBytes = 128 << 20
	DefaultReadConns       = 8
	// readerConnBytes is a reader connection's memory beyond its page
	// cache (schema, lookaside, statements): measured ~2 MiB.
	readerConnBytes = 2 << 20
	// cacheAllocFactor: RSS per byte of page cache SQLite reports (see
	// ReadOptions.MemoryBytes).
	cacheAllocFactor = 2
	// minReaderCacheKiB is the smallest cache a reader gets whatever its
	// share: a B-tree's path from root to leaf, many times over.
	minReaderCacheKiB = 256
	// DefaultReadMapBytes: readers see the file through a memory map, all
	// of it up to SQLite's cap (SQLITE_MAX_MMAP_SIZE, 2 GiB in this build).
	//
	// Why: a reader's page cache does not outlive a commit. In WAL mode a
	// read transaction that finds the database changed since the last one
	// drops its whole cache (SQLite's pager_reset), and under ingest the
	// writer commits many times a second, so every question starts cold. Through the map a page
	// of the file costs a pointer instead of a read call and a 4 KiB copy.
	// That matters most for a segment's page chain: a read at offset X
	// walks it up to X, and where the pages are not consecutive (a reclaim
	// moved them) each link is a page to fetch. Measured on a 1 M-series
	// archive after a restart (server, 400 one-series query_range, p50):
	// 7.7-8.1 ms without the map, 1.8-3.2 ms with it.
	//
	// What it costs: the pages a read touched count in the process's RSS
	// (as file-backed memory the kernel may drop, not heap), and an I/O
	// error under the map is a SIGBUS, not an error return. Writes never go
	// through it: the writer's connection has no map. A map lasts only
	// while nobody commits, so a connection whose last snapshot found new
	// commits reads without it (readmap.go).
	DefaultReadMapBytes = 2 << 30
)

// withDefaults fills the zero fields.
func (o ReadOptions) withDefaults() ReadOptions {
	if o.MemoryBytes <= 0 {
		o.MemoryBytes = DefaultReadMemoryBytes
	}
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultReadConns
	}
	if o.MapBytes == 0 {
		o.MapBytes = DefaultReadMapBytes
	}
	return o
}

// cacheKiB is each connection's cache_size (negative: KiB, as SQLite takes
// it).
func (o ReadOptions) cacheKiB() int {
	share := o.MemoryBytes/int64(o.MaxConns) - readerConnBytes
	return -max(int(share/cacheAllocFactor>>10), minReaderCacheKiB)
}

// Open opens path for reading with the default ReadOptions. The file must
// carry dendro's header stamp.
//
// On read-only media, where SQLite cannot create the -shm it needs for WAL
// mode, Open reopens with immutable=1 when no -wal sidecar exists. When a
// -wal exists it refuses instead, because immutable=1 would ignore the
// commits in it and read the archive short.
func Open(path string) (*Archive, error) { return OpenWithOptions(path, ReadOptions{}) }

// OpenWithOptions is Open with the handle's memory and connections bounded
// by opts.
func OpenWithOptions(path string, opts ReadOptions) (*Archive, error) {
	opts = opts.withDefaults()
	a, err := openRead(path, false, opts)
	if err == nil {
		return a, nil
	}
	code := SQLiteCode(err)
	if code != sqlite3.SQLITE_READONLY && code != sqlite3.SQLITE_CANTOPEN {
		return nil, err
	}
	if _, statErr := os.Lstat(path + "-wal"); statErr == nil {
		return nil, err // a sidecar holds commits immutable=1 would not see
	}
	if _, statErr := os.Stat(path); statErr != nil {
		return nil, err
	}
	return openRead(path, true, opts)
}

func openRead(path string, immutable bool, opts ReadOptions) (*Archive, error) {
	params := []string{"mode=ro"}
	if immutable {
		params = append(params, "immutable=1")
	}
	c, err := newConnector(dsn(path, params...),
		fmt.Sprintf("PRAGMA busy_timeout=%d", defaultBusyTimeoutMS),
		fmt.Sprintf("PRAGMA cache_size=%d", opts.cacheKiB()),
		fmt.Sprintf("PRAGMA mmap_size=%d", max(opts.MapBytes, 0)),
		"PRAGMA query_only=1")
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(c)
	// Every open connection may hold its whole cache, idle or not: the
	// bound is on the connections open, and all of them may stay idle.
	db.SetMaxOpenConns(opts.MaxConns)
	db.SetMaxIdleConns(opts.MaxConns)
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, classifyOpenError(path, err)
	}
	err = gate(ctx, conn, path)
	conn.Close()
	if err != nil {
		db.Close()
		return nil, err
	}
	a := &Archive{path: path, db: db, immutable: immutable, jumps: &pageJumps{}, place: &segmentsPlace{}}
	if opts.Writer != nil {
		if !sameFile(path, opts.Writer.path) {
			db.Close()
			return nil, fmt.Errorf("archive: open %s: ReadOptions.Writer writes %s, another file", path, opts.Writer.path)
		}
		a.segs, a.moves, a.chains = &opts.Writer.segs, &opts.Writer.moves, newChainCache()
	}
	a.jumps.rescan = func() {
		a.scanMu.Lock()
		defer a.scanMu.Unlock()
		if a.closed {
			return
		}
		a.scans.Add(1)
		go func() {
			defer a.scans.Done()
			a.WarmPageJumps(context.Background())
		}()
	}
	if !immutable && opts.MapBytes > 0 {
		// Immutable files never change: their maps never drop.
		a.maps = &mapSwitch{bytes: opts.MapBytes}
	}
	return a, nil
}

// Path is the archive's file name.
func (a *Archive) Path() string { return a.path }

// Close releases the handle's connections, after a rescan of its page
// links in flight (blobpages.go). It never checkpoints.
func (a *Archive) Close() error {
	a.scanMu.Lock()
	a.closed = true
	a.scanMu.Unlock()
	a.scans.Wait()
	err := a.db.Close()
	a.blobBufs.close()
	return err
}

// WriteHandle is the exclusive read-write handle: recovery, offline
// maintenance and tests. It holds SQLite's exclusive lock for its whole
// life, so nothing else (no Writer, no reader) can open the file meanwhile,
// and its close checkpoints a crashed archive's sidecar into the file and
// removes it: that is the recovery open. Its methods must not be called
// concurrently.
type WriteHandle struct {
	Archive
	conn      *sql.Conn // the one connection; it holds the lock (also Archive.pinned)
	exclusive bool      // opened by OpenWrite with locking_mode=EXCLUSIVE
}

// Create makes a new archive at path, which must not exist (exclusive
// create), and returns a write handle on it. The header stamp is
// checkpointed into the main file before Create returns, so the file alone
// always opens. On failure nothing is left behind.
func Create(path string) (*WriteHandle, error) {
	return create(path, PageSize, writerCacheKiB)
}

func create(path string, pageSize int, cacheKiB int) (_ *WriteHandle, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("archive: create %s: %w: %w", path, ErrExists, err)
		}
		return nil, fmt.Errorf("archive: create %s: %w", path, err)
	}
	f.Close()
	defer func() {
		if err != nil {
			removeArchiveFiles(path)
		}
	}()
	c, err := newConnector(dsn(path, "mode=rw"), fmt.Sprintf("PRAGMA busy_timeout=%d", defaultBusyTimeoutMS))
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, sqlErr("archive: create "+path, err)
	}
	h := &WriteHandle{Archive: Archive{path: path, db: db, pinned: conn}, conn: conn}
	defer func() {
		if err != nil {
			h.Close()
		}
	}()
	// Order matters: page_size and auto_vacuum take effect only before the
	// first table exists, and auto_vacuum cannot be switched on later
	// without a full VACUUM.
	for _, stmt := range []string{
		fmt.Sprintf("PRAGMA page_size=%d", pageSize),
		"PRAGMA auto_vacuum=INCREMENTAL",
	} {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return nil, sqlErr(stmt, err)
		}
	}
	// journal_mode answers with the mode in force; SQLite refuses WAL
	// silently on some filesystems, so read it back.
	var mode string
	if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode); err != nil {
		return nil, sqlErr("PRAGMA journal_mode=WAL", err)
	}
	if mode != "wal" {
		return nil, fmt.Errorf("archive: create %s: journal_mode is %q, want wal (is this a local filesystem?)", path, mode)
	}
	for _, stmt := range connPragmas(cacheKiB, pageSize) {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return nil, sqlErr(stmt, err)
		}
	}
	if _, err := conn.ExecContext(ctx, schemaSQL); err != nil {
		return nil, sqlErr("archive: create schema", err)
	}
	for _, stmt := range []string{
		fmt.Sprintf("PRAGMA application_id=%d", ApplicationID),
		fmt.Sprintf("PRAGMA user_version=%d", SchemaVersion),
	} {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return nil, sqlErr(stmt, err)
		}
	}
	// Fold the catalog and the stamp into the main file now: a copy of the
	// file alone, taken at any later moment, opens as an archive.
	if _, err := conn.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)"); err != nil {
		return nil, sqlErr("archive: create checkpoint", err)
	}
	return h, nil
}

// removeArchiveFiles removes an archive and its sidecars (cleanup of a
// failed create).
func removeArchiveFiles(path string) {
	for _, p := range []string{path, path + "-wal", path + "-shm", path + "-journal"} {
		os.Remove(p)
	}
}

// OpenWrite opens an existing archive exclusively for writing. It is refused
// with ErrInUse while anything else holds the file (a Writer, a reader,
// another write handle), with ErrReadOnlyMedia when the file or its
// directory cannot be written, and with ErrNotAnArchive or
// ErrUnsupportedSchema by the header stamp. Its Close folds a crashed
// archive's sidecar back into the file.
func OpenWrite(path string) (*WriteHandle, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("archive: open %s: %w", path, err)
	}
	if !writable(path) {
		return nil, fmt.Errorf("%s: %w", path, ErrReadOnlyMedia)
	}
	c, err := newConnector(dsn(path, "mode=rw"),
		// EXCLUSIVE before the first read: the gate's read takes the lock
		// and the connection keeps it until it closes.
		"PRAGMA locking_mode=EXCLUSIVE",
		fmt.Sprintf("PRAGMA busy_timeout=%d", exclusiveBusyTimeoutMS))
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, openWriteError(path, err)
	}
	h := &WriteHandle{Archive: Archive{path: path, db: db, pinned: conn}, conn: conn, exclusive: true}
	if ro, err := connReadOnly(conn); err != nil || ro {
		h.Close()
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%s: %w", path, ErrReadOnlyMedia)
	}
	var mode string
	if err := conn.QueryRowContext(ctx, "PRAGMA locking_mode").Scan(&mode); err != nil || mode != "exclusive" {
		h.Close()
		return nil, fmt.Errorf("archive: open %s: locking_mode is %q, want exclusive (%v)", path, mode, err)
	}
	if err := gate(ctx, conn, path); err != nil {
		h.Close()
		return nil, openWriteError(path, err)
	}
	pageSize, err := pragmaInt(ctx, conn, "page_size")
	if err != nil {
		h.Close()
		return nil, err
	}
	for _, stmt := range connPragmas(readerCacheKiB, int(pageSize)) {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			h.Close()
			return nil, openWriteError(path, sqlErr(stmt, err))
		}
	}
	return h, nil
}

func openWriteError(path string, err error) error {
	switch SQLiteCode(err) {
	case sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN:
		if !writable(path) {
			return fmt.Errorf("%s: %w: %w", path, ErrReadOnlyMedia, err)
		}
	case sqlite3.SQLITE_BUSY:
		if !errors.Is(err, ErrInUse) {
			return fmt.Errorf("%w: %w", &InUseError{What: path}, err)
		}
	}
	return err
}

// writable reports whether this process may write both the file and its
// directory (where SQLite creates the -wal and -shm sidecars).
func writable(path string) bool {
	return unix.Access(path, unix.W_OK) == nil && unix.Access(filepath.Dir(path), unix.W_OK) == nil
}

// connReadOnly asks SQLite whether the main database came up read-only.
func connReadOnly(conn *sql.Conn) (ro bool, err error) {
	err = conn.Raw(func(dc any) error {
		r, ok := dc.(interface{ IsReadOnly(string) (bool, error) })
		if !ok {
			return nil
		}
		ro, err = r.IsReadOnly("main")
		return err
	})
	return ro, err
}

// Close releases the handle. If it is the last connection to the file,
// SQLite checkpoints the sidecar into it and removes -wal and -shm: after
// the recovery open of a crashed archive, one file remains.
func (h *WriteHandle) Close() error {
	err := h.conn.Close()
	if cerr := h.db.Close(); err == nil {
		err = cerr
	}
	h.blobBufs.close()
	if err == nil && h.exclusive {
		err = h.tidySidecars()
	}
	return err
}

// tidySidecars removes a -shm an exclusive connection leaves behind. In
// EXCLUSIVE locking mode SQLite keeps the WAL index in heap memory and never
// touches the -shm file, so it does not unlink a crashed writer's -shm on
// close (the -wal it does fold in and remove). One ordinary connection,
// opened and closed, lets SQLite itself remove both: it deletes sidecars
// only when it is the last connection, so this is safe if another process
// opened the file meanwhile.
func (h *WriteHandle) tidySidecars() error {
	if _, err := os.Lstat(h.path + "-shm"); err != nil {
		return nil
	}
	c, err := newConnector(dsn(h.path, "mode=rw"), fmt.Sprintf("PRAGMA busy_timeout=%d", defaultBusyTimeoutMS))
	if err != nil {
		return err
	}
	db := sql.OpenDB(c)
	defer db.Close()
	var v int64
	if err := db.QueryRow("PRAGMA application_id").Scan(&v); err != nil {
		return sqlErr("archive: close "+h.path, err)
	}
	return nil
}

// sameFile reports whether paths a and b name the same file.
func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}
