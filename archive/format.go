package archive

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Format constants. They are the format's identity: an archive written by
// the first (Rust) implementation opens here and vice versa, so none of them
// may change without a new SchemaVersion.
const (
	// PageSize is fixed at creation. 4096 is the one page size whose cost
	// shows on every tick: each commit writes whole pages to the sidecar, and
	// larger pages multiplied the bytes written per tick (3.14x the payload at
	// 4096, 8.20x at 65536, in the design's measurement).
	PageSize = 4096
	// ApplicationID is SQLite's header field at offset 68: the ASCII bytes
	// "dend". It is how any tool tells a dendro archive from other SQLite files.
	ApplicationID = 0x64656e64
	// SchemaVersion is stored as user_version (header offset 60). This build
	// writes and reads exactly this version.
	SchemaVersion = 4

	// walAutocheckpointBytes bounds the -wal sidecar's size on disk; the
	// time-based checkpoint bounds how stale a copy of the main file can be.
	walAutocheckpointBytes = 4 << 20
	// readerCacheKiB is the exclusive handle's cache (OpenWrite: recovery
	// and maintenance, one connection). A 256 MiB page cache took warm
	// segment reads from 230 to 410 MB/s in the design's measurement; the
	// read handle's caches are bounded by ReadOptions instead. Negative
	// means KiB to SQLite.
	readerCacheKiB = -262144
	// writerCacheKiB: the writer touches the tail of a few B-trees; a small
	// cache keeps its RSS low. It must stay below the reader cache. The
	// reference's 16 MiB (a private constant, not part of the format) cost
	// ~20 MiB of peak RSS more than 4 MiB under rwload, and 4 MiB ~4 MiB
	// more than 2 (the driver's allocator rounds each ~4.2 KB cache line up
	// to 8 KiB), at no CPU cost we could measure: a seal's pages, read and
	// written once, just spill earlier. A source's hot pages (the wal
	// table's last leaf and its streams' index leaves, their parents, the
	// pointer maps) are a few dozen, so 512 pages hold those of ten or
	// more sources; beyond, a miss is a read from the OS page cache.
	writerCacheKiB = -2048
	// exclusiveBusyTimeoutMS is how long OpenWrite waits for the file before
	// reporting ErrInUse.
	exclusiveBusyTimeoutMS = 1000
	// defaultBusyTimeoutMS is what every other connection waits on a lock.
	defaultBusyTimeoutMS = 5000
)

// Compile-time check: the writer's cache is the smaller one.
var _ = [1]struct{}{}[boolToInt(-writerCacheKiB < -readerCacheKiB)-1]

func boolToInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// schemaSQL is the v4 catalog: five tables and two indexes, names and
// columns identical to the first implementation's.
const schemaSQL = `
CREATE TABLE sources (
    id                    INTEGER PRIMARY KEY,
    labels                TEXT NOT NULL,
    metadata              TEXT NOT NULL,
    complete              INTEGER NOT NULL DEFAULT 0,
    clock_anchor_wall_ns  INTEGER NOT NULL,
    uuid                  TEXT,
    heartbeat             INTEGER,
    heartbeat_interval_ns INTEGER
);
CREATE TABLE segments (
    source_id    INTEGER NOT NULL REFERENCES sources(id),
    stream       TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    rows         INTEGER NOT NULL,
    first_ts     INTEGER NOT NULL,
    last_ts      INTEGER NOT NULL,
    bytes        BLOB NOT NULL,
    caller_index BLOB,
    PRIMARY KEY (source_id, stream, seq)
);
CREATE INDEX segments_by_time ON segments(source_id, stream, last_ts);
CREATE TABLE wal (
    source_id   INTEGER NOT NULL REFERENCES sources(id),
    stream      TEXT NOT NULL,
    ts          INTEGER NOT NULL,
    wall_offset INTEGER NOT NULL,
    row         BLOB NOT NULL,
    PRIMARY KEY (source_id, stream, ts)
);
CREATE TABLE clock_offsets (
    source_id INTEGER NOT NULL REFERENCES sources(id),
    ts        INTEGER NOT NULL,
    offset_ns INTEGER NOT NULL,
    PRIMARY KEY (source_id, ts)
);
CREATE TABLE caller_rows (
    source_id INTEGER NOT NULL REFERENCES sources(id),
    stream    TEXT NOT NULL,
    ts        INTEGER NOT NULL,
    blob      BLOB NOT NULL
);
CREATE INDEX caller_rows_by_time ON caller_rows(source_id, stream, ts);
`

// liveStream is the live-WAL predicate for one stream (?1 source, ?2 stream):
// a row is live when it is above the stream's own sealed watermark, or the
// stream has never sealed. The NOT EXISTS arm (rather than a COALESCE
// sentinel) keeps ts=0 and negative rows live in an unsealed stream. Every
// read of the wal applies it; it is what makes the seal seam duplicate-free
// without de-duplication, and what lets the prune after a seal run outside
// the seal transaction.
const liveStream = `source_id = ?1 AND stream = ?2 AND (
    ts > (SELECT MAX(last_ts) FROM segments WHERE source_id = ?1 AND stream = ?2)
    OR NOT EXISTS (SELECT 1 FROM segments WHERE source_id = ?1 AND stream = ?2))`

// liveRow is the same predicate correlated per row of wal, for queries not
// pinned to one stream.
const liveRow = `(wal.ts > (SELECT MAX(s.last_ts) FROM segments s WHERE s.source_id = wal.source_id AND s.stream = wal.stream)
    OR NOT EXISTS (SELECT 1 FROM segments s WHERE s.source_id = wal.source_id AND s.stream = wal.stream))`

// SniffResult classifies a file by its SQLite header alone.
type SniffResult struct {
	// Stamped is true when the header carries dendro's application id.
	Stamped bool
	// Version is the header's user_version (meaningful when Stamped).
	Version int64
}

// SniffBytes classifies a buffer from the first 100 bytes of a SQLite
// header. Fewer than 100 bytes, another magic, or another application id is
// not an archive.
func SniffBytes(b []byte) SniffResult {
	if len(b) < 100 || !bytes.Equal(b[:16], []byte("SQLite format 3\x00")) {
		return SniffResult{}
	}
	if binary.BigEndian.Uint32(b[68:72]) != ApplicationID {
		return SniffResult{}
	}
	return SniffResult{Stamped: true, Version: int64(binary.BigEndian.Uint32(b[60:64]))}
}

// Sniff reads the first 100 bytes of path without opening it as a database.
// A file shorter than that is not an archive (no error); other I/O failures
// are errors.
func Sniff(path string) (SniffResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return SniffResult{}, fmt.Errorf("archive: sniff %s: %w", path, err)
	}
	defer f.Close()
	var hdr [100]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return SniffResult{}, nil
		}
		return SniffResult{}, fmt.Errorf("archive: sniff %s: %w", path, err)
	}
	return SniffBytes(hdr[:]), nil
}

// uriPath percent-encodes a filesystem path for a SQLite URI filename: only
// A-Z a-z 0-9 - . _ ~ / stay literal, so '?', '#', '%' and spaces in a name
// are never read as URI syntax.
func uriPath(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9',
			c == '-', c == '.', c == '_', c == '~', c == '/':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// dsn builds a SQLite URI for path with the given URI parameters
// (mode=ro|rw, immutable=1). The driver opens every connection with
// SQLITE_OPEN_URI, so the mode parameter is what makes an open read-only or
// non-creating.
func dsn(path string, params ...string) string {
	s := "file:" + uriPath(path)
	if len(params) > 0 {
		s += "?" + strings.Join(params, "&")
	}
	return s
}

// connector opens connections to one archive and runs setup on each
// (per-connection pragmas that SQLite does not persist), so every connection
// database/sql opens for a handle is configured the same way.
type connector struct {
	base  driver.Connector
	setup []string // statements run in order on each new connection
}

func newConnector(dsn string, setup ...string) (*connector, error) {
	base, err := sqlite.NewConnector(dsn)
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	return &connector{base: base, setup: setup}, nil
}

func (c *connector) Driver() driver.Driver { return c.base.Driver() }

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ex, ok := conn.(driver.ExecerContext)
	if !ok {
		conn.Close()
		return nil, errors.New("archive: sqlite driver connection cannot execute statements")
	}
	for _, stmt := range c.setup {
		if _, err := ex.ExecContext(ctx, stmt, nil); err != nil {
			conn.Close()
			return nil, sqlErr(stmt, err)
		}
	}
	return conn, nil
}

// gate checks the header stamp through conn before anything writes: a file
// that is not SQLite, not dendro's, or another schema version is refused and
// left exactly as it was. It runs only reads.
func gate(ctx context.Context, conn *sql.Conn, what string) error {
	var appID, version int64
	err := conn.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID)
	if err == nil {
		err = conn.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version)
	}
	if err != nil {
		return classifyOpenError(what, err)
	}
	switch {
	case appID == 0:
		return &NotAnArchiveError{What: what, Reason: "a SQLite database without dendro's header stamp (application_id 0)"}
	case uint32(appID) != ApplicationID:
		return &NotAnArchiveError{What: what, Reason: fmt.Sprintf("a SQLite database of another application (id 0x%08x)", uint32(appID))}
	case version != SchemaVersion:
		return &UnsupportedSchemaError{Found: version, Writes: SchemaVersion, Reads: SchemaVersion}
	}
	return nil
}

// classifyOpenError turns the first error an open meets into the archive's
// vocabulary, by SQLite result code.
func classifyOpenError(what string, err error) error {
	switch SQLiteCode(err) {
	case sqlite3.SQLITE_NOTADB:
		return &NotAnArchiveError{What: what, Reason: "not a SQLite database"}
	case sqlite3.SQLITE_BUSY:
		return fmt.Errorf("%w: %w", &InUseError{What: what}, err)
	}
	return sqlErr("archive: open "+what, err)
}

// pragma reads one integer pragma.
func pragmaInt(ctx context.Context, q queryer, name string) (int64, error) {
	var v int64
	if err := q.QueryRowContext(ctx, "PRAGMA "+name).Scan(&v); err != nil {
		return 0, sqlErr("PRAGMA "+name, err)
	}
	return v, nil
}

// connPragmas are the per-connection settings of every read-write
// connection. synchronous=FULL: a commit is on disk when it returns, which is
// what an acknowledged append promises. wal_autocheckpoint is in pages, so it
// is derived from the file's own page size.
func connPragmas(cacheKiB int, pageSize int) []string {
	return []string{
		"PRAGMA synchronous=FULL",
		"PRAGMA foreign_keys=ON",
		fmt.Sprintf("PRAGMA wal_autocheckpoint=%d", walAutocheckpointBytes/pageSize),
		fmt.Sprintf("PRAGMA cache_size=%d", cacheKiB),
	}
}

// queryer is what read methods need: a *sql.Conn or *sql.Tx.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}
