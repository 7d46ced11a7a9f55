package promsample

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// sameParse checks that ParseIndexHashes(b) is ParseIndex(b) less its
// labels: the same error class, or the same index with the table's labels
// dropped.
func sameParse(t *testing.T, b []byte) {
	t.Helper()
	full, errFull := ParseIndex(b)
	lean, errLean := ParseIndexHashes(b)
	if (errFull == nil) != (errLean == nil) {
		t.Fatalf("ParseIndex: %v; ParseIndexHashes: %v", errFull, errLean)
	}
	if errFull != nil {
		for _, target := range []error{ErrCorruptSegment, ErrUnsupportedVersion} {
			if errors.Is(errFull, target) != errors.Is(errLean, target) {
				t.Fatalf("ParseIndex: %v; ParseIndexHashes: %v", errFull, errLean)
			}
		}
		return
	}
	if full.Table != nil {
		if lean.Table == nil {
			t.Fatal("ParseIndexHashes lost the series table")
		}
		if len(lean.Table.Symbols) != 0 || lean.Table.Bytes() != int64(cap(lean.Table.Rows))*4+int64(cap(lean.Table.Hashes))*8+4 {
			t.Fatalf("ParseIndexHashes kept labels: %d symbols, %d bytes", len(lean.Table.Symbols), lean.Table.Bytes())
		}
		full.Table.DropLabels()
	}
	if !reflect.DeepEqual(full, lean) {
		t.Fatalf("ParseIndexHashes differs from ParseIndex less its labels:\n%+v\n%+v", lean, full)
	}
}

// TestParseIndexHashes: on the indexes of real segments, and on every
// truncation and a byte flipped at every position of one, the lean parse
// agrees with the full one.
func TestParseIndexHashes(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 14))
	var idx []byte
	for i := range 6 {
		seg, err := archive.Materialize(&Encoder{Opts: Options{RowGroupRows: 1 + i*7}}, "s", rowsOf(t, randBatches(r, 4)))
		if err != nil {
			t.Fatal(err)
		}
		if !IndexHasTable(seg.Index) {
			t.Fatal("the encoder wrote an index without a series table")
		}
		x, err := ParseIndexHashes(seg.Index)
		if err != nil {
			t.Fatal(err)
		}
		if x.Table.Len() == 0 || int64(x.Table.Len()) != x.Series {
			t.Fatalf("table of %d series, index says %d", x.Table.Len(), x.Series)
		}
		sameParse(t, seg.Index)
		idx = seg.Index
	}
	for n := range idx {
		sameParse(t, idx[:n])
	}
	for i := range idx {
		b := append([]byte(nil), idx...)
		b[i] ^= 0x5a
		sameParse(t, b)
	}
}

func FuzzParseIndex(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 5))
	for i := range 3 {
		seg, err := archive.Materialize(&Encoder{Opts: Options{RowGroupRows: i + 1}}, "s", rowsOf(f, randBatches(r, 3)))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(seg.Index)
		f.Add(seg.Index[:len(seg.Index)/2])
	}
	f.Add([]byte{indexFormatV2})
	f.Fuzz(func(t *testing.T, b []byte) {
		// Never a panic, and the two parses agree.
		sameParse(t, b)
	})
}
