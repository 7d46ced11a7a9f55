package archive

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// Reading a segment's pages without walking its chain.
//
// sqlite3_blob_read at offset X follows the BLOB's overflow-page chain
// from its first page to X, once per handle, and a question opens a new
// handle per segment: at a million series a one-series query_range over
// an hour walked ~37 chains to the middle of their ~8 MB, 0.2 ms each when
// the pages are consecutive and ~1 ms when they are not (~100 ns and ~450
// ns a link), which was most of the question (8-33 ms).
//
// A read handle's SegmentBlob reads the pages itself instead. It finds the
// segment's cell by descending the segments table's B-tree (the first
// overflow page is at the end of the cell), then each next page as SQLite
// guesses it, the following usable page, or, where the chain jumps, from
// pageJumps, the archive's map of its scattered links. Nothing it knows
// from before the snapshot is trusted unchecked (but for the chains a
// handle that follows the writer kept from a snapshot that saw the same
// page moves, blobchains.go): every link it uses is checked against the
// snapshot's auto-vacuum pointer map. SQLite keeps
// that map exact in every transaction (integrity_check verifies it) for
// every page of the file: the entry of an overflow page names the page
// whose pointer leads to it, so if the entry of page q says "overflow,
// after p", q is p's next page, and a chain whose every link checks out
// from the cell's first page is the row's chain in this snapshot. Pages
// past the snapshot's end are never believed: a reclaim that shortens the
// file leaves their entries behind. One pointer-map page holds the
// entries of the 819 pages after it, so the check costs a compare a link
// and a few page reads a segment.
//
// Pages are read with the sqlite_dbpage virtual table, which reads through
// the connection's pager, so in the snapshot's own version (the main file
// or the -wal sidecar's frames). The format relied on is SQLite's
// documented file format (https://www.sqlite.org/fileformat2.html):
// B-tree pages, cells, records, overflow pages and pointer-map pages. A
// page that does not parse as expected, or a link neither guess nor map
// finds, ends the in-place path for that segment in that snapshot
// (errRawPages): its reads go through sqlite3_blob_read, so a surprise
// makes a read slower, never wrong. TestRawPagesMatchBlobReads compares
// the two over consecutive and scattered chains, sidecar frames and a
// reclaim.

// errRawPages: a page did not parse as the file format says; the caller
// reads through SQLite instead.
var errRawPages = errors.New("archive: segment pages not as expected")

// jumpScanEvery bounds how often a question that met a link pageJumps
// does not know has the pointer map scanned again (see nextPage).
const jumpScanEvery = 30 * time.Second

// pageJumps is an Archive's map of the links of its overflow chains that
// do not go to the following page. It is a hint, checked at every use
// (see above), built from a scan of the pointer map (scanJumps): when a
// handle warms up (WarmPageJumps), and again in the background, at most
// every jumpScanEvery, when a question meets a link it lacks (a segment
// sealed since into scattered free pages, or pages a reclaim moved). Its
// size follows the scattered links, not the archive: 8 bytes each (179 k
// of them, 1.4 MB, in an hour of a million series, 1.6 GB), and 4 bytes
// for every 64 pages of file (jumpIndex).
type pageJumps struct {
	// links is replaced whole by a scan and never modified: a question
	// reads it without a lock (a look-up a scattered link, ~1,000 in a
	// segment read at its middle).
	links   atomic.Pointer[jumpIndex]
	mu      sync.Mutex
	scanned time.Time // under mu
	// rescan scans the pointer map again off the caller's goroutine.
	rescan func()
}

// jump is one link: page from's next overflow page is to.
type jump struct{ from, to uint32 }

// jumpIndex is the links sorted by from, and where each run of
// 1<<jumpShift pages starts in them: a look-up searches the few links
// of one run (at most 64), not all of them. A binary search of the
// hour's 179 k links, a cache miss a step, was 14% of the CPU of a
// one-series query_range over that hour.
type jumpIndex struct {
	links  []jump
	starts []uint32 // starts[b]: the first link with from >= b<<jumpShift
}

const jumpShift = 6

func newJumpIndex(links []jump) *jumpIndex {
	x := &jumpIndex{links: links}
	if len(links) == 0 {
		return x
	}
	buckets := int(links[len(links)-1].from>>jumpShift) + 2
	x.starts = make([]uint32, buckets)
	i := 0
	for b := range x.starts {
		for i < len(links) && links[i].from>>jumpShift < uint32(b) {
			i++
		}
		x.starts[b] = uint32(i)
	}
	return x
}

func (x *jumpIndex) get(from uint32) (uint32, bool) {
	b := int(from >> jumpShift)
	if b+1 >= len(x.starts) {
		return 0, false
	}
	run := x.links[x.starts[b]:x.starts[b+1]]
	lo, hi := 0, len(run)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if run[m].from < from {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(run) && run[lo].from == from {
		return run[lo].to, true
	}
	return 0, false
}

func (j *pageJumps) get(from uint32) (uint32, bool) {
	x := j.links.Load()
	if x == nil {
		return 0, false
	}
	return x.get(from)
}

// claimScan reports whether the caller may have the map rescanned now,
// and if so marks the scan as done so that others wait for their turn.
func (j *pageJumps) claimScan(now time.Time) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.scanned.IsZero() && now.Sub(j.scanned) < jumpScanEvery {
		return false
	}
	j.scanned = now
	return true
}

// set replaces the links with a scan's, made now.
func (j *pageJumps) set(links []jump, now time.Time) {
	j.links.Store(newJumpIndex(links))
	j.mu.Lock()
	j.scanned = now
	j.mu.Unlock()
}

// ptrmapOverflow2 is the pointer-map type of an overflow page after a
// chain's first; its parent is the page before it (fileformat2, "Pointer
// Map or Ptrmap Pages").
const ptrmapOverflow2 = 4

// B-tree page types.
const (
	pageInteriorTable = 0x05
	pageLeafTable     = 0x0d
)

// maxKeptPtrmaps bounds the pointer-map pages a snapshot keeps (1 MiB at
// 4 KiB pages, the map of 840 MB of file); a question that reads more
// reads some of them again.
const maxKeptPtrmaps = 256

// pageReader reads raw pages in one snapshot: a prepared statement on
// sqlite_dbpage, and the pointer-map and interior pages read so far. It
// belongs to one ReadTx and is finalized before the snapshot ends.
type pageReader struct {
	stmt      uintptr
	size      int    // page size
	usable    int    // page size less the reserved bytes at each page's end
	pages     uint32 // the snapshot's page count
	pending   uint32
	root      uint32   // the segments table's root page
	bytesCol  int      // the bytes column's position in a segments record
	ptrmaps   [][]byte // by ordinal (see ptrmap); kept of them are set
	kept      int
	fromPage1 bool   // the geometry is page 1's and the place's, not asked in SQL
	cookie    uint32 // the snapshot's schema cookie (page 1)
	// lastMap is the pointer-map page last asked for, and its bytes.
	lastMap     uint32
	lastMapPage []byte
	interior    map[uint32][]byte
	buf         []byte
}

// pageGeometry is what a pageReader needs from SQL, asked before the
// driver's connection is taken (Conn.Raw holds it).
type pageGeometry struct {
	root, bytesCol, pageSize, pageCount int64
	cookie                              uint32 // the schema cookie root and bytesCol hold under
}

func (tx *ReadTx) pageGeometry() (pageGeometry, error) {
	var g pageGeometry
	err := tx.q.QueryRowContext(tx.ctx, `SELECT
		(SELECT rootpage FROM sqlite_schema WHERE type = 'table' AND name = 'segments'),
		(SELECT cid FROM pragma_table_info('segments') WHERE name = 'bytes'),
		(SELECT page_size FROM pragma_page_size),
		(SELECT page_count FROM pragma_page_count),
		(SELECT schema_version FROM pragma_schema_version)`).Scan(&g.root, &g.bytesCol, &g.pageSize, &g.pageCount, &g.cookie)
	if err != nil {
		return g, fmt.Errorf("%w: %v", errRawPages, err)
	}
	return g, nil
}

// segmentsPlace is where a handle's snapshots found the segments table's
// root page and the bytes column, and under which schema cookie. Both
// change only with the schema, and SQLite changes the cookie (page 1,
// offset 40) with every change of the schema, VACUUM included, so a
// snapshot whose page 1 shows the same cookie has them where they were,
// and its pageReader needs no SQL: asking pageGeometry, a statement
// parsed anew in every snapshot, was ~5% of a one-series query_range at
// a million series.
type segmentsPlace struct {
	at atomic.Pointer[placeAt]
}

type placeAt struct {
	cookie   uint32
	root     uint32
	bytesCol int
}

// errNoPlace: the snapshot's page 1 is not enough to read in place
// (another schema cookie, or its in-header page count not valid); the
// caller asks pageGeometry and tries again.
var errNoPlace = errors.New("archive: page geometry unknown")

// openPages makes the snapshot's pageReader, on first use: from page 1
// and the handle's segmentsPlace, or, when they are not enough, from
// pageGeometry.
func (tx *ReadTx) openPages(conn *sql.Conn) error {
	if tx.pages != nil {
		return nil
	}
	if tx.pagesFailed {
		return errRawPages
	}
	open := func(g *pageGeometry) error {
		return conn.Raw(func(dc any) error {
			db, tls, ok := blobHandle(dc)
			if !ok {
				return errRawPages
			}
			r, err := newPageReader(tls, db, tx.place, g)
			if err != nil {
				return err
			}
			tx.pages = r
			return nil
		})
	}
	err := open(nil)
	if errors.Is(err, errNoPlace) {
		var g pageGeometry
		if g, err = tx.pageGeometry(); err == nil {
			err = open(&g)
		}
	}
	if err != nil {
		tx.pagesFailed = true
	}
	return err
}

// newPageReader prepares the statement and reads the snapshot's geometry
// from its page 1: the page size, the page count (the in-header database
// size, which SQLite keeps valid, and says so by equal change counter and
// version-valid-for numbers, fileformat2 §1.3.6; when it is valid,
// SQLite's own B-tree layer takes the snapshot's page count from it, so
// it is what PRAGMA page_count answers) and the schema cookie,
// under which place, when set, knows where the segments are. g, when not
// nil, is the snapshot's geometry asked in SQL, and is remembered in
// place. Errors match errNoPlace when g is needed, errRawPages when the
// snapshot cannot be read in place.
func newPageReader(tls *libc.TLS, db uintptr, place *segmentsPlace, g *pageGeometry) (*pageReader, error) {
	z, err := libc.CString("SELECT data FROM sqlite_dbpage WHERE pgno = ?1")
	if err != nil {
		return nil, err
	}
	defer libc.Xfree(tls, z)
	pp := libc.Xmalloc(tls, 8)
	if pp == 0 {
		return nil, errors.New("archive: out of C memory")
	}
	defer libc.Xfree(tls, pp)
	if rc := sqlite3.Xsqlite3_prepare_v2(tls, db, z, -1, pp, 0); rc != sqlite3.SQLITE_OK {
		return nil, fmt.Errorf("%w: prepare: %v", errRawPages, sqliteCodeError(tls, db, rc))
	}
	r := &pageReader{
		stmt:     uintptr(binary.NativeEndian.Uint64(libc.GoBytes(pp, 8))),
		pages:    1, // enough to read page 1
		interior: map[uint32][]byte{},
	}
	if err := r.geometry(tls, place, g); err != nil {
		r.close(tls)
		return nil, err
	}
	return r, nil
}

// geometry reads page 1 and sets the reader's geometry (see
// newPageReader).
func (r *pageReader) geometry(tls *libc.TLS, place *segmentsPlace, g *pageGeometry) error {
	p1, err := r.page(tls, 1)
	if err != nil {
		return err
	}
	r.size = len(p1)
	if r.size < 512 || r.size > 65536 || r.size&(r.size-1) != 0 {
		return errRawPages
	}
	// The header's page size: 1 means 65,536.
	if hs := int(binary.BigEndian.Uint16(p1[16:])); hs != r.size && !(hs == 1 && r.size == 65536) {
		return errRawPages
	}
	// The reserved bytes at the end of every page: byte 20 of the header.
	r.usable = r.size - int(p1[20])
	r.pending = uint32(0x40000000/r.size) + 1 // the page holding the lock byte, never used
	if r.usable < 480 || binary.BigEndian.Uint32(p1[52:]) == 0 {
		// No auto-vacuum (largest root page 0): no pointer map to check against.
		return errRawPages
	}
	cookie := binary.BigEndian.Uint32(p1[40:])
	r.cookie = cookie
	if g != nil {
		if g.pageSize != int64(r.size) || g.pageCount < 1 || g.pageCount > math.MaxInt32 ||
			g.root < 2 || g.root > math.MaxInt32 || g.bytesCol < 0 || g.bytesCol > math.MaxInt32 || g.cookie != cookie {
			return errRawPages
		}
		r.pages, r.root, r.bytesCol = uint32(g.pageCount), uint32(g.root), int(g.bytesCol)
		if place != nil {
			place.at.Store(&placeAt{cookie: cookie, root: r.root, bytesCol: r.bytesCol})
		}
	} else {
		at := (*placeAt)(nil)
		if place != nil {
			at = place.at.Load()
		}
		size := binary.BigEndian.Uint32(p1[28:])
		if at == nil || at.cookie != cookie || size == 0 || binary.BigEndian.Uint32(p1[92:]) != binary.BigEndian.Uint32(p1[24:]) {
			return errNoPlace
		}
		r.pages, r.root, r.bytesCol = size, at.root, at.bytesCol
		r.fromPage1 = true
	}
	if r.root > r.pages || r.pages > math.MaxInt32 {
		return errRawPages
	}
	return nil
}

func (r *pageReader) close(tls *libc.TLS) {
	if r.stmt != 0 {
		sqlite3.Xsqlite3_finalize(tls, r.stmt)
		r.stmt = 0
	}
}

// page reads page pgno of the snapshot into the reader's buffer (valid
// until the next call).
func (r *pageReader) page(tls *libc.TLS, pgno uint32) ([]byte, error) {
	if pgno == 0 || pgno > r.pages {
		return nil, errRawPages
	}
	sqlite3.Xsqlite3_bind_int(tls, r.stmt, 1, int32(pgno))
	defer sqlite3.Xsqlite3_reset(tls, r.stmt)
	if rc := sqlite3.Xsqlite3_step(tls, r.stmt); rc != sqlite3.SQLITE_ROW {
		return nil, fmt.Errorf("%w: page %d: sqlite %d", errRawPages, pgno, rc)
	}
	n := int(sqlite3.Xsqlite3_column_bytes(tls, r.stmt, 0))
	p := sqlite3.Xsqlite3_column_blob(tls, r.stmt, 0)
	if p == 0 || n != r.size && r.size != 0 || n == 0 {
		return nil, fmt.Errorf("%w: page %d is %d bytes", errRawPages, pgno, n)
	}
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	r.buf = r.buf[:n]
	copy(r.buf, libc.GoBytes(p, n))
	return r.buf, nil
}

// keep returns a copy of page pgno from cache, reading it once.
func (r *pageReader) keep(tls *libc.TLS, cache map[uint32][]byte, pgno uint32) ([]byte, error) {
	if p, ok := cache[pgno]; ok {
		return p, nil
	}
	p, err := r.page(tls, pgno)
	if err != nil {
		return nil, err
	}
	p = append([]byte(nil), p...)
	cache[pgno] = p
	return p, nil
}

// isPtrmap reports whether pgno is a pointer-map page.
func (r *pageReader) isPtrmap(pgno uint32) bool {
	return pgno >= 2 && r.ptrmapOf(pgno) == pgno
}

// ptrmapOf is the pointer-map page holding pgno's entry (SQLite's
// ptrmapPageno).
func (r *pageReader) ptrmapOf(pgno uint32) uint32 {
	per := uint32(r.usable/5) + 1
	m := (pgno-2)/per*per + 2
	if m == r.pending {
		m++
	}
	return m
}

// ptrmap returns pointer-map page m, kept for the snapshot (at most
// maxKeptPtrmaps of them).
func (r *pageReader) ptrmap(tls *libc.TLS, m uint32) ([]byte, error) {
	if m == r.lastMap && r.lastMapPage != nil {
		return r.lastMapPage, nil // a chain's links are mostly under one map page
	}
	// By the map page's ordinal, not in a map: a scattered chain asks
	// for a different one at most links.
	ord := int((m - 2) / (uint32(r.usable/5) + 1))
	if ord < len(r.ptrmaps) && r.ptrmaps[ord] != nil {
		r.lastMap, r.lastMapPage = m, r.ptrmaps[ord]
		return r.ptrmaps[ord], nil
	}
	if r.kept >= maxKeptPtrmaps {
		clear(r.ptrmaps)
		r.kept = 0
	}
	p, err := r.page(tls, m)
	if err != nil {
		return nil, err
	}
	p = append([]byte(nil), p...)
	if ord >= len(r.ptrmaps) {
		r.ptrmaps = append(r.ptrmaps, make([][]byte, ord+1-len(r.ptrmaps))...)
	}
	r.ptrmaps[ord] = p
	r.kept++
	r.lastMap, r.lastMapPage = m, p
	return p, nil
}

// parentIs reports whether pgno's pointer-map entry is (typ, parent).
// Only the entries of the snapshot's pages count: a reclaim that shortens
// the file leaves the entries of the pages it cut off as they were.
func (r *pageReader) parentIs(tls *libc.TLS, pgno uint32, typ byte, parent uint32) (bool, error) {
	if pgno < 3 || pgno > r.pages || r.isPtrmap(pgno) || pgno == r.pending {
		return false, nil
	}
	m := r.ptrmapOf(pgno)
	p, err := r.ptrmap(tls, m)
	if err != nil {
		return false, err
	}
	off := 5 * int(pgno-m-1)
	if off+5 > r.usable {
		return false, nil
	}
	return p[off] == typ && binary.BigEndian.Uint32(p[off+1:]) == parent, nil
}

// cell is a segment row's record as its leaf holds it.
type cell struct {
	leaf       uint32
	local      []byte // the record's bytes in the leaf (a copy)
	payload    int64  // the record's length
	bytesStart int64  // where the bytes column starts in the record
	bytesLen   int64
	first      uint32 // first overflow page; 0 when all of it is local
}

// findCell descends the segments table to rowid's cell.
func (r *pageReader) findCell(tls *libc.TLS, rowid int64) (cell, error) {
	pgno := r.root
	for depth := 0; depth < 32; depth++ {
		var p []byte
		var err error
		if pgno == r.root || r.interior[pgno] != nil {
			p, err = r.keep(tls, r.interior, pgno)
		} else {
			p, err = r.page(tls, pgno)
		}
		if err != nil {
			return cell{}, err
		}
		hdr := 0
		if pgno == 1 {
			hdr = 100
		}
		if len(p) < hdr+12 {
			return cell{}, errRawPages
		}
		n := int(binary.BigEndian.Uint16(p[hdr+3:]))
		switch p[hdr] {
		case pageInteriorTable:
			if _, kept := r.interior[pgno]; !kept {
				r.interior[pgno] = append([]byte(nil), p...)
				p = r.interior[pgno]
			}
			next := binary.BigEndian.Uint32(p[hdr+8:])
			// The first cell whose key is >= rowid leads to it; else the
			// rightmost child.
			lo, hi := 0, n
			for lo < hi {
				mid := (lo + hi) / 2
				c, ok := cellAt(p, hdr+12, mid, r.usable)
				if !ok || c+4 > r.usable {
					return cell{}, errRawPages
				}
				key, _, ok := varint(p[c+4 : r.usable])
				if !ok {
					return cell{}, errRawPages
				}
				if key >= rowid {
					hi = mid
				} else {
					lo = mid + 1
				}
			}
			if lo < n {
				c, _ := cellAt(p, hdr+12, lo, r.usable)
				next = binary.BigEndian.Uint32(p[c:])
			}
			pgno = next
		case pageLeafTable:
			lo, hi := 0, n
			for lo < hi {
				mid := (lo + hi) / 2
				c, ok := cellAt(p, hdr+8, mid, r.usable)
				if !ok {
					return cell{}, errRawPages
				}
				_, k, ok := varint(p[c:r.usable])
				if !ok {
					return cell{}, errRawPages
				}
				key, _, ok := varint(p[c+k : r.usable])
				if !ok {
					return cell{}, errRawPages
				}
				switch {
				case key == rowid:
					return r.parseCell(p, c, pgno)
				case key < rowid:
					lo = mid + 1
				default:
					hi = mid
				}
			}
			return cell{}, fmt.Errorf("%w: no row %d", errRawPages, rowid)
		default:
			return cell{}, fmt.Errorf("%w: page %d is of type %#x", errRawPages, pgno, p[hdr])
		}
	}
	return cell{}, errRawPages
}

// cellAt is the offset of cell i of a page whose pointer array starts at
// ptrs.
func cellAt(p []byte, ptrs, i, usable int) (int, bool) {
	o := ptrs + 2*i
	if o+2 > usable {
		return 0, false
	}
	c := int(binary.BigEndian.Uint16(p[o:]))
	return c, c > ptrs && c < usable
}

// parseCell reads a table leaf cell at c of leaf page p.
func (r *pageReader) parseCell(p []byte, c int, leaf uint32) (cell, error) {
	u := r.usable
	n, k1, ok := varint(p[c:u])
	if !ok || n < 0 {
		return cell{}, errRawPages
	}
	_, k2, ok := varint(p[c+k1 : u])
	if !ok {
		return cell{}, errRawPages
	}
	start := c + k1 + k2
	// How much of the record the leaf holds (fileformat2, "Cell Payload
	// Overflow Pages", table leaf).
	maxLocal, minLocal := int64(u-35), int64((u-12)*32/255-23)
	local := n
	if n > maxLocal {
		local = minLocal + (n-minLocal)%int64(u-4)
		if local > maxLocal {
			local = minLocal
		}
	}
	end := start + int(local)
	if end > u || (local < n && end+4 > u) {
		return cell{}, errRawPages
	}
	out := cell{leaf: leaf, local: append([]byte(nil), p[start:end]...), payload: n}
	if local < n {
		out.first = binary.BigEndian.Uint32(p[end:])
	}
	// The record header: its length, then a serial type per column.
	hlen, k, ok := varint(out.local)
	if !ok || hlen > int64(len(out.local)) || hlen < int64(k) {
		return cell{}, errRawPages
	}
	off, pos := hlen, int64(k)
	for col := 0; ; col++ {
		if pos >= hlen {
			return cell{}, errRawPages // no bytes column
		}
		t, k, ok := varint(out.local[pos:hlen])
		if !ok {
			return cell{}, errRawPages
		}
		pos += int64(k)
		size := serialSize(t)
		if size < 0 || size > n || off > n {
			return cell{}, errRawPages
		}
		if col == r.bytesCol {
			if t < 12 || t%2 != 0 {
				return cell{}, errRawPages // not a BLOB
			}
			out.bytesStart, out.bytesLen = off, size
			break
		}
		off += size
	}
	if out.bytesStart+out.bytesLen > n {
		return cell{}, errRawPages
	}
	return out, nil
}

// serialSize is the content length of a record serial type, -1 for the
// reserved ones.
func serialSize(t int64) int64 {
	switch {
	case t < 0:
		return -1
	case t >= 12:
		return (t - 12) / 2
	case t <= 4:
		return [...]int64{0, 1, 2, 3, 4}[t]
	case t == 5:
		return 6
	case t == 6, t == 7:
		return 8
	case t == 8, t == 9:
		return 0
	}
	return -1
}

// varint decodes an SQLite varint (big-endian, 7 bits a byte, the ninth
// byte whole) and its length.
func varint(b []byte) (int64, int, bool) {
	var v uint64
	for i := 0; i < 9 && i < len(b); i++ {
		if i == 8 {
			return int64(v<<8 | uint64(b[i])), 9, true
		}
		v = v<<7 | uint64(b[i]&0x7f)
		if b[i] < 0x80 {
			return int64(v), i + 1, true
		}
	}
	return 0, 0, false
}

// rawSegment is a SegmentBlob's in-place state in one snapshot.
type rawSegment struct {
	rowid   int64
	located bool // cell is read, in this snapshot
	cell    cell
	chain   []uint32 // chain[i]: the i-th overflow page, checked in this snapshot
	failed  bool     // the in-place path gave up: read through SQLite
	// shared is the start of the chain as a snapshot of the same page
	// moves found it (blobchains.go), read only; chain, when longer,
	// begins with it. keep says the snapshot may take and keep chains,
	// under key.
	shared []uint32
	keep   bool
	key    chainKey
}

// link returns the i-th overflow page of the segment's record, checked
// in this snapshot.
func (s *rawSegment) link(tls *libc.TLS, r *pageReader, jumps *pageJumps, i int) (uint32, error) {
	if s.cell.first == 0 || i < 0 {
		return 0, errRawPages
	}
	maxLinks := int((s.cell.payload - int64(len(s.cell.local)) + int64(r.usable-5)) / int64(r.usable-4))
	if i >= maxLinks {
		return 0, errRawPages
	}
	if i < len(s.shared) {
		return s.shared[i], nil // walked in a snapshot of the same page moves
	}
	if len(s.chain) == 0 {
		// The walk starts from the kept chain, whose first page is the
		// cell's (chainKey), or from the cell, read in this snapshot.
		s.chain = make([]uint32, 0, min(maxLinks+1, max(4096, len(s.shared)+64)))
		if s.chain = append(s.chain, s.shared...); len(s.chain) == 0 {
			s.chain = append(s.chain, s.cell.first)
		}
	}
	for len(s.chain) <= i {
		prev := s.chain[len(s.chain)-1]
		n, err := r.followRun(tls, prev, i+1-len(s.chain), &s.chain)
		if err != nil {
			return 0, err
		}
		if n > 0 {
			continue
		}
		next, err := r.nextPage(tls, jumps, prev)
		if err != nil {
			return 0, err
		}
		s.chain = append(s.chain, next)
	}
	return s.chain[i], nil
}

// followRun appends to chain up to limit links after prev that go to the
// following usable page, as nextPage's guess would, and returns how many
// it appended. It checks them as parentIs does, but against one
// pointer-map page read once for the run, so a chain written in one run
// costs a compare a link, not a map lookup (reading at the middle of an
// 8 MB segment checks ~1,000 links). It stops at the first link that page
// does not confirm: a jump, or the end of what the page maps, which
// nextPage then resolves.
func (r *pageReader) followRun(tls *libc.TLS, prev uint32, limit int, chain *[]uint32) (int, error) {
	g := r.following(prev)
	if g < 3 || g > r.pages {
		return 0, nil
	}
	m := r.ptrmapOf(g)
	pm, err := r.ptrmap(tls, m)
	if err != nil {
		return 0, err
	}
	n := 0
	// following never returns a pointer-map page or the lock byte's, and
	// every g here is one m maps: the conditions parentIs checks.
	for n < limit && g <= r.pages && r.ptrmapOf(g) == m {
		off := 5 * int(g-m-1)
		if off+5 > r.usable || pm[off] != ptrmapOverflow2 || binary.BigEndian.Uint32(pm[off+1:]) != prev {
			break
		}
		*chain = append(*chain, g)
		n++
		prev, g = g, r.following(g)
	}
	return n, nil
}

// nextPage finds the overflow page after prev and checks it in the
// snapshot's pointer map: first the page jumps names, then the following
// usable page (SQLite's own guess, right for a chain written in one run).
// A link neither finds makes the caller read through SQLite, whose walk
// reads the pages themselves, and has the map rescanned for the questions
// after it.
func (r *pageReader) nextPage(tls *libc.TLS, jumps *pageJumps, prev uint32) (uint32, error) {
	// The jump first: nextPage is asked where followRun stopped, at a
	// jump far more often than at the end of a pointer-map page's pages,
	// and in a scattered chain at every link.
	if q, known := jumps.get(prev); known {
		ok, err := r.parentIs(tls, q, ptrmapOverflow2, prev)
		if err != nil || ok {
			return q, err
		}
	}
	guess := r.following(prev)
	ok, err := r.parentIs(tls, guess, ptrmapOverflow2, prev)
	if err != nil || ok {
		return guess, err
	}
	if jumps.rescan != nil && jumps.claimScan(time.Now()) {
		jumps.rescan()
	}
	return 0, fmt.Errorf("%w: no known link after page %d", errRawPages, prev)
}

// scanJumps reads every pointer-map page of the snapshot and returns the
// overflow links that do not go to the following usable page.
func (r *pageReader) scanJumps(tls *libc.TLS) ([]jump, error) {
	var links []jump
	span := uint32(r.usable/5) + 1 // a map page and the pages it maps
	for base := uint32(2); base <= r.pages && base >= 2; base += span {
		pm := r.ptrmapOf(base) // base, or the page after it when base holds the lock byte
		p, err := r.page(tls, pm)
		if err != nil {
			return nil, err
		}
		for q := pm + 1; q < base+span && q <= r.pages; q++ {
			e := p[5*(q-pm-1):]
			if e[0] != ptrmapOverflow2 {
				continue
			}
			prev := binary.BigEndian.Uint32(e[1:])
			if q != r.following(prev) {
				links = append(links, jump{prev, q})
			}
		}
	}
	slices.SortFunc(links, func(a, b jump) int { return cmp.Compare(a.from, b.from) })
	return slices.Clip(links), nil
}

// following is the first page after p that is neither a pointer-map page
// nor the lock byte's: where SQLite guesses an overflow chain goes on.
func (r *pageReader) following(p uint32) uint32 {
	g := p + 1
	for r.isPtrmap(g) || g == r.pending {
		g++
	}
	return g
}

// readAt reads len(p) bytes at off in place (off+len(p) within the
// segment) and reports whether it did; when it did not, the segment's
// reads go through SQLite from now on.
func (s *rawSegment) readAt(tx *ReadTx, conn *sql.Conn, p []byte, off, size int64) bool {
	if s.failed || tx.pagesFailed {
		return false
	}
	if err := tx.openPages(conn); err != nil {
		return false
	}
	err := conn.Raw(func(dc any) error {
		_, tls, ok := blobHandle(dc)
		if !ok {
			return errRawPages
		}
		if !s.located {
			c, err := tx.pages.findCell(tls, s.rowid)
			if err != nil {
				return err
			}
			if c.bytesLen != size {
				return fmt.Errorf("%w: row %d holds %d bytes, not %d", errRawPages, s.rowid, c.bytesLen, size)
			}
			s.cell, s.located = c, true
			if tx.chains != nil && tx.moves.ok && c.first != 0 {
				s.keep, s.key = true, tx.chains.key(s.rowid, &s.cell)
				s.shared = tx.chains.get(s.key, tx.moves.count, tx.pages.cookie)
			}
		}
		return s.copyAt(tls, tx.pages, tx.jumps, p, off)
	})
	if err != nil {
		s.failed = true
		return false
	}
	return true
}

// keepChain gives the chain this snapshot walked past what it was given
// to the handle's chainCache, when the snapshot may (readAt). The chain
// is the cache's from then on: the segment walks no further in it.
func (s *rawSegment) keepChain(tx *ReadTx) {
	if !s.keep || s.failed || tx.pages == nil || len(s.chain) <= len(s.shared) {
		return
	}
	tx.chains.put(s.key, tx.moves.count, tx.pages.cookie, s.chain)
	s.shared, s.chain = s.chain, nil
}

// copyAt copies the segment's bytes at off into p (len(p) within the
// segment).
func (s *rawSegment) copyAt(tls *libc.TLS, r *pageReader, jumps *pageJumps, p []byte, off int64) error {
	c := &s.cell
	if off < 0 || off+int64(len(p)) > c.bytesLen {
		return errRawPages
	}
	pos := c.bytesStart + off // in the record
	per := int64(r.usable - 4)
	for n := 0; n < len(p); {
		if pos < int64(len(c.local)) {
			k := copy(p[n:], c.local[pos:])
			n += k
			pos += int64(k)
			continue
		}
		rel := pos - int64(len(c.local))
		pg, err := s.link(tls, r, jumps, int(rel/per))
		if err != nil {
			return err
		}
		data, err := r.page(tls, pg)
		if err != nil {
			return err
		}
		k := copy(p[n:], data[4+rel%per:r.usable])
		n += k
		pos += int64(k)
	}
	return nil
}

// WarmPageJumps scans the pointer map, so that the first questions after
// an open read scattered segments in place too (pageJumps). A reader
// calls it before it reports ready; on an archive it cannot read that way
// it does nothing. It reads one pointer-map page for every 3.3 MB of file:
// 23-94 ms for 1.6 GB.
func (a *Archive) WarmPageJumps(ctx context.Context) error {
	if a.jumps == nil {
		return nil
	}
	return a.View(ctx, func(tx *ReadTx) error {
		conn, ok := tx.q.(*sql.Conn)
		if !ok {
			return nil
		}
		if err := tx.openPages(conn); err != nil {
			return nil // not readable in place: questions read through SQLite
		}
		return conn.Raw(func(dc any) error {
			_, tls, ok := blobHandle(dc)
			if !ok {
				return nil
			}
			r := tx.pages // closed with the snapshot
			links, err := r.scanJumps(tls)
			if err != nil {
				return nil
			}
			a.jumps.set(links, time.Now())
			return nil
		})
	})
}
