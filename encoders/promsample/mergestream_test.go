package promsample

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// storedSegments encodes each cut of rows as one segment.
func storedSegments(t testing.TB, enc *Encoder, rows []archive.Row, cuts []int) []archive.StoredSegment {
	t.Helper()
	var out []archive.StoredSegment
	from := 0
	for i, to := range append(cuts, len(rows)) {
		seg, err := archive.Materialize(enc, "samples/00", rows[from:to])
		if err != nil {
			t.Fatal(err)
		}
		from = to
		if seg == nil {
			continue
		}
		out = append(out, archive.StoredSegment{Seq: int64(i + 1), Bytes: seg.Bytes, Index: seg.Index,
			SegmentMeta: archive.SegmentMeta{Rows: seg.Rows, FirstTS: seg.FirstTS, LastTS: seg.LastTS, Size: int64(len(seg.Bytes))}})
	}
	return out
}

// A streaming merge writes what a merge in memory writes: the same series,
// samples, histograms, exemplars, metadata and index, and with the label
// columns' encoding fixed (the one choice the two make from different
// counts: a stream counts a duplicate sample's rows in each input) the
// same bytes. Inputs: random batches with retries (duplicates across
// segments), histograms, exemplars, series without a name, out-of-order
// and extreme timestamps; row groups of the default size and of a few
// rows, so that series are cut into pieces (splitLongSeries) and inputs'
// row groups end mid-series.
func TestMergeStreamAgreesWithMergeInMemory(t *testing.T) {
	def := labelDictionary
	t.Cleanup(func() { labelDictionary = def })
	for _, tc := range []struct {
		name  string
		seed  uint64
		opts  Options
		cuts  []int
		fixed bool // fix the label columns' encoding
	}{
		{"default", 1, Options{}, []int{10, 20, 30}, false},
		{"default, fixed", 1, Options{}, []int{10, 20, 30}, true},
		{"groups of 3", 2, Options{RowGroupRows: 3}, []int{5, 6, 25}, true},
		{"groups of 5, two inputs", 3, Options{RowGroupRows: 5}, []int{17}, true},
		{"groups of 2, many inputs", 4, Options{RowGroupRows: 2}, []int{2, 4, 8, 9, 15, 22, 30, 31}, true},
		{"groups of 4, three inputs", 5, Options{RowGroupRows: 4}, []int{12, 24}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			labelDictionary = def
			if tc.fixed {
				labelDictionary = func(int, int) bool { return false }
			}
			r := rand.New(rand.NewPCG(tc.seed, 42))
			batches := randBatches(r, 40)
			enc := &Encoder{Opts: tc.opts}
			segs := storedSegments(t, enc, rowsOf(t, batches), tc.cuts)
			if len(segs) < 2 {
				t.Fatalf("%d segments", len(segs))
			}
			var total int64
			for _, s := range segs {
				total += int64(len(s.Bytes))
			}
			mem, memIdx, err := enc.mergeInMemory(segs, total)
			if err != nil {
				t.Fatal(err)
			}
			merged, n, err := enc.Merge("s", segs)
			if err != nil || n != len(segs) {
				t.Fatalf("merged %d of %d: %v", n, len(segs), err)
			}
			want := expected(batches, AllTime())
			for which, b := range map[string][]byte{"in memory": mem, "stream": merged.Bytes} {
				got, err := ReadSegment(b, AllTime())
				if err != nil {
					t.Fatal(which, err)
				}
				if d := diffSeries(got, want); d != "" {
					t.Fatalf("%s: %s", which, d)
				}
				meta, err := ReadSegmentMetadata(b)
				if err != nil || !slices.Equal(meta, wantMetadata(batches)) {
					t.Fatalf("%s: metadata %v, %v", which, meta, err)
				}
			}
			checkIndex(t, merged, want)
			checkWithParquetGo(t, merged.Bytes, want)
			a, err := ParseIndex(memIdx)
			if err != nil {
				t.Fatal(err)
			}
			b, err := ParseIndex(merged.Index)
			if err != nil {
				t.Fatal(err)
			}
			if d := diffTables(a.Table, b.Table); d != "" {
				t.Fatal(d)
			}
			if a.Series != b.Series || a.Samples != b.Samples || a.Histograms != b.Histograms || a.Exemplars != b.Exemplars ||
				a.MinT != b.MinT || a.MaxT != b.MaxT || !slices.Equal(a.Metrics, b.Metrics) || !slices.Equal(a.RowGroups, b.RowGroups) {
				t.Fatalf("index in memory %+v\nstream %+v", a, b)
			}
			if tc.fixed && (!bytes.Equal(mem, merged.Bytes) || !bytes.Equal(memIdx, merged.Index)) {
				t.Fatal("the two merges wrote different bytes")
			}
		})
	}
}

// diffTables describes how two series tables differ, "" if they do not.
func diffTables(a, b *SeriesTable) string {
	if a == nil || b == nil {
		return fmt.Sprintf("tables %v, %v", a != nil, b != nil)
	}
	if !slices.Equal(a.Symbols, b.Symbols) {
		return fmt.Sprintf("symbols %q, %q", a.Symbols, b.Symbols)
	}
	if a.Len() != b.Len() {
		return fmt.Sprintf("%d series, %d", a.Len(), b.Len())
	}
	var sb labels.ScratchBuilder
	for i := range a.Len() {
		if !slices.Equal(a.Pairs(i), b.Pairs(i)) || a.Rows[i] != b.Rows[i] || a.Hashes[i] != b.Hashes[i] {
			return fmt.Sprintf("series %d: %s %d rows, %s %d rows", i, a.Labels(i, &sb), a.Rows[i], b.Labels(i, &sb), b.Rows[i])
		}
	}
	return ""
}

// A streaming merge of inputs whose tables do not describe their rows
// fails with ErrCorruptSegment and writes nothing: a table that lists
// fewer or more rows, a series out of order, an index of another segment.
func TestMergeStreamRefusesInconsistentInputs(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 11))
	enc := &Encoder{Opts: Options{RowGroupRows: 4}}
	segs := storedSegments(t, enc, rowsOf(t, randBatches(r, 30)), []int{10, 20})
	other := storedSegments(t, enc, rowsOf(t, randBatches(r, 30)), nil)[0]
	for _, tc := range []struct {
		name   string
		change func(s []archive.StoredSegment)
	}{
		{"another segment's index", func(s []archive.StoredSegment) { s[1].Index = other.Index }},
		{"another segment's bytes", func(s []archive.StoredSegment) { s[0].Bytes = other.Bytes }},
		{"a series' rows changed", func(s []archive.StoredSegment) { s[1].Index = bumpRows(t, s[1].Index, 1) }},
		{"a series' rows lost", func(s []archive.StoredSegment) { s[1].Index = bumpRows(t, s[1].Index, -1) }},
		{"a truncated index", func(s []archive.StoredSegment) { s[2].Index = s[2].Index[:len(s[2].Index)-9] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(segs)
			tc.change(in)
			seg, _, err := enc.Merge("s", in)
			if !errors.Is(err, ErrCorruptSegment) || seg != nil {
				t.Fatalf("got %v, %v; want ErrCorruptSegment", seg != nil, err)
			}
		})
	}
}

// bumpRows returns a copy of a format-2 index whose first series with
// rows has d more.
func bumpRows(t testing.TB, index []byte, d int) []byte {
	t.Helper()
	x, err := ParseIndex(index)
	if err != nil {
		t.Fatal(err)
	}
	tab := x.Table
	tab.Rows = slices.Clone(tab.Rows)
	for i, n := range tab.Rows {
		if n > 1 {
			tab.Rows[i] = uint32(int(n) + d)
			break
		}
	}
	out, err := x.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzMergeStreamIndex: a streaming merge trusts an input's index for its
// series and their rows, and the index comes from the catalog, not the
// segment's checksummed bytes. Whatever the index, the merge returns an
// error or a segment that reads back, and never panics or allocates
// without bound.
func FuzzMergeStreamIndex(f *testing.F) {
	r := rand.New(rand.NewPCG(13, 13))
	enc := &Encoder{Opts: Options{RowGroupRows: 4}}
	segs := storedSegments(f, enc, rowsOf(f, randBatches(r, 16)), []int{8})
	f.Add(segs[1].Index)
	f.Add(bumpRows(f, segs[1].Index, 1))
	f.Add(segs[0].Index)
	f.Fuzz(func(t *testing.T, index []byte) {
		in := slices.Clone(segs)
		in[1].Index = index
		seg, n, err := enc.Merge("s", in)
		if err != nil || seg == nil {
			return
		}
		if n != 2 {
			t.Fatalf("consumed %d", n)
		}
		if _, err := ReadSegment(seg.Bytes, AllTime()); err != nil {
			t.Fatalf("a merged segment does not read back: %v", err)
		}
		if _, err := ParseIndex(seg.Index); err != nil {
			t.Fatalf("a merged segment's index does not parse: %v", err)
		}
	})
}
