package archive

import (
	"bytes"
	"context"
	"database/sql"
	"path/filepath"
	"testing"
)

// driverBytes keeps the slice the driver hands to Scan. That is only safe
// while modernc's driver allocates a fresh slice for every BLOB it returns
// and never writes to it again: this checks it, over more rows than any
// buffer a driver might recycle, after the statement is done and the rows
// were overwritten, for BLOBs from empty to overflow-page sized.
func TestDriverBlobsAreOwnedByTheCaller(t *testing.T) {
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (i INTEGER PRIMARY KEY, b BLOB)`); err != nil {
		t.Fatal(err)
	}
	want := make([][]byte, 300)
	for i := range want {
		want[i] = bytes.Repeat([]byte{byte(i + 1)}, i*37%5000)
		if _, err := db.ExecContext(ctx, `INSERT INTO t VALUES (?, ?)`, i, want[i]); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := db.QueryContext(ctx, `SELECT b FROM t ORDER BY i`)
	if err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	for rs.Next() {
		var b []byte
		if err := rs.Scan((*driverBytes)(&b)); err != nil {
			t.Fatal(err)
		}
		got = append(got, b)
	}
	if err := rs.Close(); err != nil {
		t.Fatal(err)
	}
	// Read again, into other slices, after zeroing every row.
	if _, err := db.ExecContext(ctx, `UPDATE t SET b = zeroblob(length(b))`); err != nil {
		t.Fatal(err)
	}
	var zeros int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM t WHERE b = zeroblob(length(b))`).Scan(&zeros); err != nil || zeros != len(want) {
		t.Fatalf("zeroed %d rows (%v)", zeros, err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("row %d changed after the later rows, the statement's end and an update: %d bytes %v..., want %d", i, len(got[i]), got[i][:min(4, len(got[i]))], len(want[i]))
		}
	}
}

func TestDriverBytesScansBlobTextAndNull(t *testing.T) {
	var b driverBytes
	for _, c := range []struct {
		src  any
		want []byte
	}{{[]byte("x"), []byte("x")}, {"y", []byte("y")}, {nil, nil}} {
		if err := b.Scan(c.src); err != nil || !bytes.Equal(b, c.want) || (b == nil) != (c.want == nil) {
			t.Errorf("Scan(%#v) = %q, %v", c.src, b, err)
		}
	}
	if err := b.Scan(int64(1)); err == nil {
		t.Error("Scan(int64) succeeded")
	}
}
