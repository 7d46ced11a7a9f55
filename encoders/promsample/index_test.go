package promsample

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// sameParse checks that ParseIndexHashes(b) and ParseIndexFunc(b) are
// ParseIndex(b) less its labels: the same error class, or the same index
// with the table's labels dropped; and that ParseIndexFunc handed over
// every series of the table, in order, with its hash and labels.
func sameParse(t *testing.T, b []byte) {
	t.Helper()
	full, errFull := ParseIndex(b)
	type seen struct {
		hash uint64
		ls   labels.Labels
	}
	var visited []seen
	var sb labels.ScratchBuilder
	visit := func(symbols []string, i int, hash uint64, pairs []uint32) {
		if i != len(visited) {
			t.Fatalf("ParseIndexFunc visited series %d after %d others", i, len(visited))
		}
		sb.Reset()
		for j := 0; j+1 < len(pairs); j += 2 {
			sb.Add(symbols[pairs[j]], symbols[pairs[j+1]])
		}
		visited = append(visited, seen{hash, sb.Labels()})
	}
	for _, p := range []struct {
		name  string
		parse func([]byte) (Index, error)
	}{
		{"ParseIndexHashes", ParseIndexHashes},
		{"ParseIndexFunc", func(b []byte) (Index, error) { return ParseIndexFunc(b, visit) }},
	} {
		lean, errLean := p.parse(b)
		if (errFull == nil) != (errLean == nil) {
			t.Fatalf("ParseIndex: %v; %s: %v", errFull, p.name, errLean)
		}
		if errFull != nil {
			for _, target := range []error{ErrCorruptSegment, ErrUnsupportedVersion} {
				if errors.Is(errFull, target) != errors.Is(errLean, target) {
					t.Fatalf("ParseIndex: %v; %s: %v", errFull, p.name, errLean)
				}
			}
			continue
		}
		want := full
		if full.Table != nil {
			if lean.Table == nil {
				t.Fatalf("%s lost the series table", p.name)
			}
			if len(lean.Table.Symbols) != 0 || lean.Table.Bytes() != int64(cap(lean.Table.Rows))*4+int64(cap(lean.Table.Hashes))*8+4 {
				t.Fatalf("%s kept labels: %d symbols, %d bytes", p.name, len(lean.Table.Symbols), lean.Table.Bytes())
			}
			tb := *full.Table
			tb.DropLabels()
			want.Table = &tb
		}
		if !reflect.DeepEqual(want, lean) {
			t.Fatalf("%s differs from ParseIndex less its labels:\n%+v\n%+v", p.name, lean, want)
		}
	}
	// Where ParseIndex accepts an index, ParseIndexSpan gives its span
	// from the head alone.
	if errFull == nil {
		minT, maxT, err := ParseIndexSpan(b[:min(len(b), IndexSpanBytes)])
		if err != nil || minT != full.MinT || maxT != full.MaxT {
			t.Fatalf("ParseIndexSpan = %d, %d, %v; ParseIndex's span %d, %d", minT, maxT, err, full.MinT, full.MaxT)
		}
	}
	if errFull != nil || full.Table == nil {
		return
	}
	if len(visited) != full.Table.Len() {
		t.Fatalf("ParseIndexFunc visited %d series of %d", len(visited), full.Table.Len())
	}
	for i, v := range visited {
		if v.hash != full.Table.Hashes[i] || !labels.Equal(v.ls, full.Table.Labels(i, &sb)) {
			t.Fatalf("series %d: ParseIndexFunc gave %v %x, ParseIndex %v %x", i, v.ls, v.hash, full.Table.Labels(i, &sb), full.Table.Hashes[i])
		}
	}
}

// TestParseIndexHashes: on the indexes of real segments, and on every
// truncation and a byte flipped at every position of one, the lean parses
// (and ParseIndexSpan, from the head) agree with the full one.
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
