package archive

import (
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sync"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// Reading a segment in place.
//
// A segment is one BLOB, and SELECT bytes hands over all of it: SQLite
// walks the whole overflow-page chain and copies every page (measured: a
// 16 MiB segment takes 15-35 ms). A read of a few series needs a few pages
// of it, and SQLite's incremental BLOB I/O (sqlite3_blob_open / _read)
// reads just those: a read at offset X walks the chain up to X once per
// handle (~60 ns a page on an auto-vacuum file, whose pointer map gives
// the next page without reading it) and copies only what is asked.
//
// database/sql has no BLOB handle, and modernc.org/sqlite does not export
// its connection's sqlite3 pointer. The one supported way to reach the
// driver's connection is sql.Conn.Raw; from there the pointer and the
// connection's C thread state are read by reflection, by name and type.
// That ties this file to the driver's field layout (db uintptr, tls
// *libc.TLS, unchanged since the driver began): blobHandle checks both
// fields and, when they are not as expected, OpenSegment falls back to
// reading the whole BLOB, so a driver upgrade can make reads slower, never
// wrong. TestSegmentBlobIsIncremental fails on such an upgrade.
//
// A handle reads the snapshot of the transaction it was opened in, and it
// must be closed before that transaction ends: View closes every handle
// still open before its ROLLBACK.

// SegmentBlob reads one segment's bytes in place. It is valid only inside
// the View that opened it and, like its ReadTx, must not be used from
// another goroutine.
type SegmentBlob struct {
	tx   *ReadTx
	size int64
	// incremental I/O
	h   uintptr  // *sqlite3_blob; 0 once closed
	buf *blobBuf // the C memory it reads through
	// fallback: the whole BLOB
	data []byte
	// raw, when set, reads the segment's pages in place without walking
	// its chain (blobpages.go); h stays open for when that fails.
	raw *rawSegment
}

const (
	blobBufSize = 64 << 10
	// maxIdleBlobBufs bounds the buffers a handle keeps between
	// questions (64 KiB each).
	maxIdleBlobBufs = 16
)

// blobBuf is the C memory one open segment uses: the buffer reads copy
// through, the out-pointer sqlite3_blob_open fills and the names it is
// given.
type blobBuf struct {
	data, pp, schema, table, column, index uintptr
}

func newBlobBuf(tls *libc.TLS) (*blobBuf, error) {
	b := &blobBuf{}
	var err error
	for _, f := range []struct {
		p *uintptr
		s string
	}{{&b.schema, "main"}, {&b.table, "segments"}, {&b.column, "bytes"}, {&b.index, "caller_index"}} {
		if *f.p, err = libc.CString(f.s); err != nil {
			b.free(tls)
			return nil, err
		}
	}
	b.pp, b.data = libc.Xmalloc(tls, 8), libc.Xmalloc(tls, blobBufSize)
	if b.pp == 0 || b.data == 0 {
		b.free(tls)
		return nil, errors.New("archive: out of C memory")
	}
	return b, nil
}

func (b *blobBuf) free(tls *libc.TLS) {
	for _, p := range []uintptr{b.data, b.pp, b.schema, b.table, b.column, b.index} {
		if p != 0 {
			libc.Xfree(tls, p)
		}
	}
	*b = blobBuf{}
}

// blobBufs keeps the C memory segment reads go through, from one question
// to the next. The driver's allocator maps any allocation over 16 KiB on
// its own (mmap) and unmaps it when freed: with a buffer allocated per
// segment opened, every question paid two system calls, and the unmap's
// TLB shootdown, per segment (measured at 1 M series: ~10% of a
// one-series query_range's CPU). The buffers are C memory the Go
// collector does not see; Close frees them.
type blobBufs struct {
	mu     sync.Mutex
	idle   []*blobBuf
	closed bool
}

// get returns an idle buffer or a new one.
func (p *blobBufs) get(tls *libc.TLS) (*blobBuf, error) {
	if p != nil {
		p.mu.Lock()
		if n := len(p.idle); n > 0 {
			b := p.idle[n-1]
			p.idle = p.idle[:n-1]
			p.mu.Unlock()
			return b, nil
		}
		p.mu.Unlock()
	}
	return newBlobBuf(tls)
}

// put takes b back, or frees it when the pool is full or closed (or
// there is no pool: a writer's transaction).
func (p *blobBufs) put(tls *libc.TLS, b *blobBuf) {
	if p != nil {
		p.mu.Lock()
		if !p.closed && len(p.idle) < maxIdleBlobBufs {
			p.idle = append(p.idle, b)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	b.free(tls)
}

// close frees the idle buffers; later puts free theirs at once.
func (p *blobBufs) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	if len(idle) == 0 {
		return
	}
	tls := libc.NewTLS()
	defer tls.Close()
	for _, b := range idle {
		b.free(tls)
	}
}

// OpenSegment opens one segment's bytes for reading in place; ok is false
// when the segment is absent.
func (tx *ReadTx) OpenSegment(source SourceID, stream string, seq int64) (b *SegmentBlob, ok bool, err error) {
	var rowid, size int64
	err = tx.q.QueryRowContext(tx.ctx, `SELECT rowid, length(bytes) FROM segments WHERE source_id = ?1 AND stream = ?2 AND seq = ?3`,
		source, stream, seq).Scan(&rowid, &size)
	if err == sql.ErrNoRows {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, sqlErr("open segment", err)
	}
	b = &SegmentBlob{tx: tx, size: size}
	if err := tx.inDriver(func(db uintptr, tls *libc.TLS) error { return b.open(tls, db, rowid, false) }); err != nil {
		return nil, false, err
	}
	if b.h == 0 { // no in-place reads on this connection: the whole BLOB
		data, ok, err := tx.SegmentBytes(source, stream, seq)
		if err != nil || !ok {
			return nil, ok, err
		}
		b.data = data
	} else {
		tx.blobs = append(tx.blobs, b)
		b.useRaw(rowid)
	}
	return b, true, nil
}

// OpenListedSegment is OpenSegment for a segment m of source as listed
// (SourceSegmentMetas, StreamSegmentMetas) in this snapshot, or in one of
// the same SnapshotVersion or the same SegmentsEpoch, whose segments rows
// are this one's: it opens the row m.RowID names without looking
// the segment up by its key first (a prepared query per segment, ~10% of
// a one-series read at a million series, whose pages were not cached).
// A row that is not a BLOB of m.Size bytes, or an m without a RowID, is
// looked up by its key instead.
func (tx *ReadTx) OpenListedSegment(source SourceID, m StreamSegment) (b *SegmentBlob, ok bool, err error) {
	if m.RowID == 0 {
		return tx.OpenSegment(source, m.Stream, m.Seq)
	}
	b = &SegmentBlob{tx: tx, size: m.Size}
	err = tx.inDriver(func(db uintptr, tls *libc.TLS) error {
		if b.open(tls, db, m.RowID, false) != nil {
			return nil // not that row any more: by key below
		}
		if int64(sqlite3.Xsqlite3_blob_bytes(tls, b.h)) != m.Size {
			b.close(tls)
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	if b.h == 0 {
		return tx.OpenSegment(source, m.Stream, m.Seq)
	}
	tx.blobs = append(tx.blobs, b)
	b.useRaw(m.RowID)
	return b, true, nil
}

// useRaw has the handle read rowid's pages in place when its archive
// can (a read handle's snapshots can; the writer's read through SQLite).
func (b *SegmentBlob) useRaw(rowid int64) {
	if b.tx.jumps != nil {
		b.raw = &rawSegment{rowid: rowid}
	}
}

// SegmentIndexHead returns the first n bytes (at most 64 KiB) of one
// segment's caller index (all of it when it is shorter; nil when it has
// none); ok is false when the segment is absent. It reads them in place,
// as OpenSegment reads a segment: a caller that needs only the head of
// each of many indexes (a reader learning their time spans, for
// instance) does not pay for copying every index whole, which SELECT does
// (an index is megabytes at a million series). The head still costs a
// walk of the row's page chain past the segment's bytes, which come
// first: 0.2-1.4 ms a segment of a million series.
func (tx *ReadTx) SegmentIndexHead(source SourceID, stream string, seq int64, n int) (head []byte, ok bool, err error) {
	if n < 0 || n > blobBufSize {
		return nil, false, fmt.Errorf("archive: index head of %d bytes (at most %d)", n, blobBufSize)
	}
	var rowid int64
	var size sql.NullInt64
	err = tx.q.QueryRowContext(tx.ctx, `SELECT rowid, length(caller_index) FROM segments WHERE source_id = ?1 AND stream = ?2 AND seq = ?3`,
		source, stream, seq).Scan(&rowid, &size)
	if err == sql.ErrNoRows {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, sqlErr("read segment index head", err)
	}
	if !size.Valid {
		return nil, true, nil // no caller index
	}
	head = make([]byte, min(int64(n), size.Int64))
	read := false
	if len(head) > 0 {
		// Opened, read and closed at once: a caller reading the heads
		// of thousands of indexes in one snapshot holds no handle.
		err = tx.inDriver(func(db uintptr, tls *libc.TLS) error {
			b := &SegmentBlob{tx: tx, size: size.Int64}
			if err := b.open(tls, db, rowid, true); err != nil {
				return err
			}
			defer b.close(tls)
			if rc := sqlite3.Xsqlite3_blob_read(tls, b.h, b.buf.data, int32(len(head)), 0); rc != sqlite3.SQLITE_OK {
				return fmt.Errorf("archive: read segment index head: sqlite %d", rc)
			}
			copy(head, libc.GoBytes(b.buf.data, len(head)))
			read = true
			return nil
		})
		if err != nil {
			return nil, false, err
		}
	}
	if !read && len(head) > 0 { // no in-place reads on this connection: the whole index
		index, ok, err := tx.SegmentIndex(source, stream, seq)
		if err != nil || !ok {
			return nil, ok, err
		}
		return index[:min(n, len(index))], true, nil
	}
	return head, true, nil
}

// inDriver runs fn with the sqlite3 pointer and C thread state of the
// snapshot's connection, if it is a *sql.Conn of the expected driver
// (blobHandle); otherwise fn is not called, and callers, which find
// nothing opened, read through SQL instead.
func (tx *ReadTx) inDriver(fn func(db uintptr, tls *libc.TLS) error) error {
	conn, isConn := tx.q.(*sql.Conn)
	if !isConn {
		return nil
	}
	return conn.Raw(func(dc any) error {
		db, tls, ok := blobHandle(dc)
		if !ok {
			return nil
		}
		return fn(db, tls)
	})
}

// blobHandle returns the sqlite3 pointer and C thread state of a
// modernc.org/sqlite connection, if dc is one with the expected fields.
func blobHandle(dc any) (db uintptr, tls *libc.TLS, ok bool) {
	v := reflect.ValueOf(dc)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return 0, nil, false
	}
	v = v.Elem()
	fdb, ftls := v.FieldByName("db"), v.FieldByName("tls")
	if !fdb.IsValid() || fdb.Kind() != reflect.Uintptr || !ftls.IsValid() || ftls.Type() != reflect.TypeFor[*libc.TLS]() {
		return 0, nil, false
	}
	db, tls = uintptr(fdb.Uint()), (*libc.TLS)(ftls.UnsafePointer())
	return db, tls, db != 0 && tls != nil
}

// open opens the handle on the segment's bytes, or on its caller index.
func (b *SegmentBlob) open(tls *libc.TLS, db uintptr, rowid int64, index bool) error {
	buf, err := b.tx.bufs.get(tls)
	if err != nil {
		return err
	}
	column := buf.column
	if index {
		column = buf.index
	}
	if rc := sqlite3.Xsqlite3_blob_open(tls, db, buf.schema, buf.table, column, rowid, 0, buf.pp); rc != sqlite3.SQLITE_OK {
		b.tx.bufs.put(tls, buf)
		return fmt.Errorf("archive: open segment blob: %w", sqliteCodeError(tls, db, rc))
	}
	// The handle sqlite3_blob_open stored at pp, in the machine's order.
	b.h = uintptr(binary.NativeEndian.Uint64(libc.GoBytes(buf.pp, 8)))
	b.buf = buf
	return nil
}

// sqliteCodeError describes a failed SQLite call by its code and message.
func sqliteCodeError(tls *libc.TLS, db uintptr, rc int32) error {
	msg := libc.GoString(sqlite3.Xsqlite3_errmsg(tls, db))
	return fmt.Errorf("sqlite %d: %s", rc, msg)
}

// Size is the segment's length in bytes.
func (b *SegmentBlob) Size() int64 { return b.size }

// Incremental reports whether reads go to SQLite piece by piece (true) or
// come from a copy of the whole BLOB (the fallback).
func (b *SegmentBlob) Incremental() bool { return b.data == nil }

// ReadAt reads len(p) bytes at off (io.ReaderAt).
func (b *SegmentBlob) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("archive: segment read at %d", off)
	}
	if off >= b.size {
		return 0, io.EOF
	}
	want := len(p)
	if int64(want) > b.size-off {
		p = p[:b.size-off]
	}
	if b.data != nil {
		n := copy(p, b.data[off:])
		if n < want {
			return n, io.EOF
		}
		return n, nil
	}
	if b.h == 0 {
		return 0, errors.New("archive: segment blob used after its snapshot ended")
	}
	conn, ok := b.tx.q.(*sql.Conn)
	if !ok {
		return 0, errors.New("archive: segment blob without a connection")
	}
	if b.raw != nil && b.raw.readAt(b.tx, conn, p, off, b.size) {
		if len(p) < want {
			return len(p), io.EOF
		}
		return len(p), nil
	}
	n := 0
	err := conn.Raw(func(dc any) error {
		_, tls, ok := blobHandle(dc)
		if !ok {
			return errors.New("archive: segment blob on another driver")
		}
		for n < len(p) {
			k := min(len(p)-n, blobBufSize)
			if rc := sqlite3.Xsqlite3_blob_read(tls, b.h, b.buf.data, int32(k), int32(off)+int32(n)); rc != sqlite3.SQLITE_OK {
				return fmt.Errorf("archive: read segment blob: sqlite %d", rc)
			}
			n += copy(p[n:], libc.GoBytes(b.buf.data, k))
		}
		return nil
	})
	if err != nil {
		return n, err
	}
	if n < want {
		return n, io.EOF
	}
	return n, nil
}

// close releases the handle (View calls it before ending the snapshot).
func (b *SegmentBlob) close(tls *libc.TLS) {
	if b.h != 0 {
		sqlite3.Xsqlite3_blob_close(tls, b.h)
		b.h = 0
	}
	if b.buf != nil {
		b.tx.bufs.put(tls, b.buf)
		b.buf = nil
	}
}

// closeBlobs closes the handles tx opened.
func (tx *ReadTx) closeBlobs() {
	if len(tx.blobs) == 0 && tx.pages == nil {
		return
	}
	if conn, ok := tx.q.(*sql.Conn); ok {
		conn.Raw(func(dc any) error {
			_, tls, ok := blobHandle(dc)
			if ok {
				for _, b := range tx.blobs {
					if b.raw != nil {
						b.raw.keepChain(tx)
					}
					b.close(tls)
				}
				if tx.pages != nil {
					tx.pages.close(tls)
				}
			}
			return nil
		})
	}
	tx.blobs, tx.pages = nil, nil
}
