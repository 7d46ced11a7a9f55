package archive

import (
	"math"
	"math/rand/v2"
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
