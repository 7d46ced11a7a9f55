package archive

import "context"

// PragmaForTest reads a pragma on the connection a's questions run on.
func PragmaForTest(a *Archive, name string) (string, error) {
	conn, release, err := a.acquire(context.Background())
	if err != nil {
		return "", err
	}
	defer release()
	var v string
	err = conn.QueryRowContext(context.Background(), "PRAGMA "+name).Scan(&v)
	return v, err
}

// CreateWithPageSizeForTest creates an archive at another page size.
func CreateWithPageSizeForTest(path string, pageSize int) (*WriteHandle, error) {
	return create(path, pageSize, writerCacheKiB)
}

// SetFaultForTest installs the writer's one fault seam (WriterOptions.fault):
// fault is called in each of the writer's write transactions just before
// its commit, and an error it returns fails that transaction as if SQLite
// had.
func SetFaultForTest(opts *WriterOptions, fault func(tx *WriteTx) error) { opts.fault = fault }

// ExecForTest runs one statement in tx (a fault that sets a pragma on the
// writer's connection, say).
func ExecForTest(tx *WriteTx, stmt string) error {
	_, err := tx.exec("test", stmt)
	return err
}

// WALFramesForTest runs a PASSIVE checkpoint on h's connection and returns
// the frames the sidecar holds.
func WALFramesForTest(h *WriteHandle) (int64, error) {
	var busy, log, done int64
	err := h.conn.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &log, &done)
	return log, err
}

// IdleBlobBufsForTest reports the C buffers a's pool keeps between
// questions, and whether the pool is closed.
func IdleBlobBufsForTest(a *Archive) (idle int, closed bool) {
	a.blobBufs.mu.Lock()
	defer a.blobBufs.mu.Unlock()
	return len(a.blobBufs.idle), a.blobBufs.closed
}

// MapSizeForTest reads the memory map size of the connection tx runs on.
func MapSizeForTest(tx *ReadTx) (int64, error) {
	return pragmaInt(tx.ctx, tx.q, "mmap_size")
}

// StreamsPlanForTest returns SQLite's query plan for Streams, one line a
// step.
func StreamsPlanForTest(h *WriteHandle) (string, error) {
	rows, err := h.conn.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+streamsSQL, 1)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var b []byte
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			return "", err
		}
		b = append(b, detail...)
		b = append(b, '\n')
	}
	return string(b), rows.Err()
}

// ReadsInPlaceForTest reports whether b's reads so far went to its pages
// in place (blobpages.go), not through sqlite3_blob_read.
func ReadsInPlaceForTest(b *SegmentBlob) bool {
	return b.raw != nil && b.raw.located && !b.raw.failed
}

// KeptLinksForTest reports how many links of b's page chain its snapshot
// took from the handle's kept chains (blobchains.go), not walked itself.
func KeptLinksForTest(b *SegmentBlob) int {
	if b.raw == nil {
		return 0
	}
	return len(b.raw.shared)
}

// PageJumpsForTest reports how many scattered links a knows.
func PageJumpsForTest(a *Archive) int {
	if x := a.jumps.links.Load(); x != nil {
		return len(x.links)
	}
	return 0
}

// PageGeometryForTest returns the page count, segments root page and bytes
// column the snapshot's in-place reader uses, whether it took them from
// page 1 (not SQL), and what SQL says of the same snapshot; ok is false
// when the snapshot has no in-place reader.
func PageGeometryForTest(tx *ReadTx) (used, asked [3]int64, fromPage1, ok bool, err error) {
	if tx.pages == nil {
		return used, asked, false, false, nil
	}
	used = [3]int64{int64(tx.pages.pages), int64(tx.pages.root), int64(tx.pages.bytesCol)}
	g, err := tx.pageGeometry()
	asked = [3]int64{g.pageCount, g.root, g.bytesCol}
	return used, asked, tx.pages.fromPage1, true, err
}
