package archive

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// A page of an archive is read from disk, so parseCell must refuse any
// bytes that are not a cell it understands, never panic or read past the
// page: a corrupt page sends the read through SQLite, which reports it.
func FuzzParseCell(f *testing.F) {
	r := &pageReader{size: 4096, usable: 4096, bytesCol: 6}
	// A segment row's cell: payload length, rowid, then a record of 8
	// columns (source_id, stream "s", seq, rows, first_ts, last_ts, a
	// 10-byte BLOB, NULL).
	record := append([]byte{9, 1, 15, 1, 1, 1, 1, 32, 0, 1, 's', 0, 1, 1, 1}, make([]byte, 10)...)
	f.Add(append([]byte{byte(len(record)), 8}, record...), uint16(3000))
	f.Add(append([]byte{0xa7, 0x83, 0x25, 8}, record...), uint16(100)) // a payload of 639,397 bytes
	page := make([]byte, r.size)
	copy(page[3000:], append([]byte{byte(len(record)), 8}, record...))
	if got, err := r.parseCell(page, 3000, 5); err != nil || got.bytesStart != 15 || got.bytesLen != 10 || got.first != 0 {
		f.Fatalf("the seed cell: %+v, %v", got, err)
	}
	f.Fuzz(func(t *testing.T, cellBytes []byte, at uint16) {
		c := 8 + int(at)%4000
		page := make([]byte, r.size)
		copy(page[c:], cellBytes)
		got, err := r.parseCell(page, c, 5)
		if err != nil {
			return
		}
		if got.bytesStart < 0 || got.bytesLen < 0 || got.bytesStart+got.bytesLen > got.payload || int64(len(got.local)) > got.payload {
			t.Fatalf("parseCell accepted an impossible cell: %+v", got)
		}
	})
}

// varint reads SQLite's encoding: 7 bits a byte, high bit set on all but
// the last, the ninth byte whole.
func TestVarint(t *testing.T) {
	for _, c := range []struct {
		in   []byte
		want int64
		n    int
		ok   bool
	}{
		{[]byte{0x00}, 0, 1, true},
		{[]byte{0x7f}, 127, 1, true},
		{[]byte{0x81, 0x00}, 128, 2, true},
		{[]byte{0x81, 0x80}, 0, 0, false},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, -1, 9, true},
		{nil, 0, 0, false},
	} {
		got, n, ok := varint(c.in)
		if got != c.want || n != c.n || ok != c.ok {
			t.Errorf("varint(%x) = %d, %d, %v; want %d, %d, %v", c.in, got, n, ok, c.want, c.n, c.ok)
		}
	}
}

// A jump index finds every link it holds and nothing else, whatever the
// links' spread: runs of 64 pages with no link, with a link from every
// page, and pages past the last link.
func TestJumpIndex(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, density := range []float64{0, 0.001, 0.05, 0.5, 1} {
		want := map[uint32]uint32{}
		var links []jump
		for from := uint32(2); from < 5000; from++ {
			if r.Float64() < density {
				to := 2 + r.Uint32N(5000)
				want[from] = to
				links = append(links, jump{from, to})
			}
		}
		x := newJumpIndex(links)
		for from := uint32(0); from < 5200; from++ {
			to, ok := x.get(from)
			wto, wok := want[from]
			if ok != wok || to != wto {
				t.Fatalf("density %v: get(%d) = %d, %v; want %d, %v", density, from, to, ok, wto, wok)
			}
		}
		if _, ok := x.get(math.MaxUint32); ok {
			t.Fatalf("density %v: found a link from the last page number", density)
		}
	}
}

// The kept chains (blobchains.go) are taken only in snapshots of the
// count of page moves and the schema cookie they were walked under; an
// older snapshot neither takes nor keeps any; a longer walk replaces a
// shorter one; and past maxChainLinks the cache starts over.
func TestChainCache(t *testing.T) {
	c := newChainCache()
	k := chainKey{rowid: 7, first: 100, payload: 1 << 20, local: 42}
	other := chainKey{rowid: 8, first: 300, payload: 1 << 20, local: 43}
	c.put(k, 2, 9, []uint32{100, 101, 102})
	if got := c.get(k, 2, 9); !slices.Equal(got, []uint32{100, 101, 102}) {
		t.Fatalf("get = %v", got)
	}
	if got := c.get(k, 4, 9); got != nil {
		t.Fatalf("taken after a reclaim: %v", got)
	}
	if got := c.get(k, 2, 10); got != nil {
		t.Fatalf("taken after a schema change: %v", got)
	}
	c.put(k, 2, 9, []uint32{100, 101})
	if got := c.get(k, 2, 9); len(got) != 3 {
		t.Fatalf("a shorter walk replaced a longer one: %v", got)
	}
	c.put(k, 2, 9, []uint32{100, 101, 102, 103})
	if got := c.get(k, 2, 9); len(got) != 4 || c.links != 4 {
		t.Fatalf("a longer walk: %v, %d links kept", got, c.links)
	}
	c.put(other, 0, 9, []uint32{300}) // an older snapshot's, walked before a reclaim
	if c.get(other, 0, 9) != nil || c.get(other, 2, 9) != nil || c.get(k, 2, 9) == nil {
		t.Fatalf("an older snapshot's chain was kept, or dropped the newer ones")
	}
	c.put(other, 4, 9, []uint32{300, 301}) // after a reclaim: what came before goes
	if c.get(k, 4, 9) != nil || c.get(other, 4, 9) == nil || c.links != 2 {
		t.Fatalf("after a reclaim: %d links kept", c.links)
	}
	big := make([]uint32, maxChainLinks)
	c.put(k, 4, 9, big)
	if c.get(other, 4, 9) != nil || len(c.get(k, 4, 9)) != maxChainLinks || c.links != maxChainLinks {
		t.Fatalf("past the bound: %d links kept", c.links)
	}
}
