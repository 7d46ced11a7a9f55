package promsample

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// anchorer turns batches into anchored rows the way a writer must
// (rowv2.go's rules): a series is anchored by the first row of its epoch
// that holds it and referred to by local id afterwards; closeEvery > 0
// closes the epoch with a marker every closeEvery data rows.
type anchorer struct {
	enc        RowEncoder
	epoch      uint64
	locals     map[string]uint32
	rows       int
	closeEvery int
	ts         int64
	nextLocal  uint32 // the epoch's next local id
	// reanchorEvery > 0 anchors every reanchorEvery-th reference to a
	// series already anchored again, under a new local id, as a writer
	// does when a request races the commit of the row anchoring it
	// (rowv2.go's rule 2): the epoch then holds twins.
	reanchorEvery int
	refs          int
	// syms, when not nil, interns the anchors' strings and the rows carry
	// them as InternedAnchors, as the receiver writes them.
	syms *testSymbols
}

// testSymbols is an interning string table, as the receiver's series
// index is one.
type testSymbols struct {
	ids  map[string]uint32
	strs []string
}

func (s *testSymbols) id(str string) uint32 {
	id, ok := s.ids[str]
	if !ok {
		id = uint32(len(s.strs))
		s.ids[str] = id
		s.strs = append(s.strs, str)
	}
	return id
}

func (s *testSymbols) symbol(id uint32) string { return s.strs[id] }

func newAnchorer(closeEvery int) *anchorer {
	return &anchorer{epoch: 1, locals: map[string]uint32{}, closeEvery: closeEvery, ts: 1_700_000_000_000_000_000}
}

func (a *anchorer) next() int64 { a.ts++; return a.ts }

// row encodes b as one data row of the current epoch.
func (a *anchorer) row(t testing.TB, b Batch) archive.Row {
	t.Helper()
	r := AnchoredRow{Epoch: a.epoch, FirstLocal: a.nextLocal, Metadata: b.Metadata}
	for _, s := range b.Series {
		k := s.Labels.String()
		id, ok := a.locals[k]
		if ok && a.reanchorEvery > 0 {
			a.refs++
			ok = a.refs%a.reanchorEvery != 0
		}
		if !ok {
			id = a.nextLocal
			a.nextLocal++
			a.locals[k] = id
			if a.syms == nil {
				r.Anchors = append(r.Anchors, s.Labels)
			} else {
				if r.Interned == nil {
					r.Interned = &InternedAnchors{Symbol: a.syms.symbol}
				}
				var pairs []uint32
				s.Labels.Range(func(l labels.Label) { pairs = append(pairs, a.syms.id(l.Name), a.syms.id(l.Value)) })
				r.Interned.Add(pairs)
			}
		}
		r.Series = append(r.Series, RowSeries{Local: id, Samples: s.Samples, Histograms: s.Histograms, Exemplars: s.Exemplars})
	}
	data, err := a.enc.Append(nil, &r)
	if err != nil {
		t.Fatal(err)
	}
	a.rows++
	return archive.Row{Stream: "s", TS: a.next(), Data: data}
}

// close appends a close marker and starts the next epoch.
func (a *anchorer) close() archive.Row {
	row := archive.Row{Stream: "s", TS: a.next(), Data: AppendEpochClose(nil, a.epoch)}
	a.epoch = a.epoch*6364136223846793005 + 1442695040888963407
	clear(a.locals)
	a.rows, a.nextLocal = 0, 0
	return row
}

func (a *anchorer) rowsOf(t testing.TB, batches []Batch) []archive.Row {
	var out []archive.Row
	for _, b := range batches {
		out = append(out, a.row(t, b))
		if a.closeEvery > 0 && a.rows == a.closeEvery {
			out = append(out, a.close())
		}
	}
	return out
}

func TestAnchoredRowsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	batches := randBatches(r, 60)
	a := newAnchorer(7)
	rows := a.rowsOf(t, batches)
	// Resolve every row through its epoch's anchors, as a tail reader does.
	var d RowDecoder
	var dr DecodedRow
	tables := map[uint64][]labels.Labels{}
	var got []Batch
	for _, row := range rows {
		if err := d.Decode(row.Data, &dr); err != nil {
			t.Fatal(err)
		}
		if dr.Header.Close {
			continue
		}
		tab := tables[dr.Header.Epoch]
		for i, ls := range dr.Anchors {
			if id := int(dr.Header.FirstLocal) + i; id != len(tab) {
				t.Fatalf("anchor %d has local id %d, want %d", i, id, len(tab))
			}
			tab = append(tab, ls)
		}
		tables[dr.Header.Epoch] = tab
		var b Batch
		for _, s := range dr.Series {
			if int(s.Local) >= len(tab) {
				t.Fatalf("local id %d not anchored", s.Local)
			}
			b.Series = append(b.Series, Series{Labels: tab[s.Local], Samples: append([]Sample(nil), s.Samples...), Histograms: s.Histograms, Exemplars: s.Exemplars})
		}
		b.Metadata = append([]Metadata(nil), dr.Metadata...)
		got = append(got, b)
	}
	if len(got) != len(batches) {
		t.Fatalf("%d data rows, want %d", len(got), len(batches))
	}
	for i := range got {
		if diff := diffBatch(got[i], batches[i]); diff != "" {
			t.Fatalf("row %d: %s", i, diff)
		}
	}
}

// Anchors given interned decode to what the same anchors given as labels
// do, and seal to the same segment bytes; exemplar labels and metadata
// that share strings with the anchors still resolve.
func TestInternedAnchorsEncodeWhatLabelsDo(t *testing.T) {
	for _, closeEvery := range []int{0, 1, 7} {
		r := rand.New(rand.NewPCG(21, uint64(closeEvery)))
		batches := randBatches(r, 60)
		plain, interned := newAnchorer(closeEvery), newAnchorer(closeEvery)
		interned.syms = &testSymbols{ids: map[string]uint32{}}
		rows, irows := plain.rowsOf(t, batches), interned.rowsOf(t, batches)
		rows, irows = append(rows, plain.close()), append(irows, interned.close())
		if len(rows) != len(irows) {
			t.Fatalf("close every %d: %d rows, %d interned", closeEvery, len(rows), len(irows))
		}
		var d RowDecoder
		for i := range rows {
			var want, got DecodedRow
			if err := d.Decode(rows[i].Data, &want); err != nil {
				t.Fatal(err)
			}
			if err := d.Decode(irows[i].Data, &got); err != nil {
				t.Fatalf("close every %d, row %d: %v", closeEvery, i, err)
			}
			if len(got.Anchors) != len(want.Anchors) {
				t.Fatalf("close every %d, row %d: %d anchors, want %d", closeEvery, i, len(got.Anchors), len(want.Anchors))
			}
			for k := range want.Anchors {
				if !labels.Equal(got.Anchors[k], want.Anchors[k]) {
					t.Fatalf("close every %d, row %d, anchor %d: %s, want %s", closeEvery, i, k, got.Anchors[k], want.Anchors[k])
				}
			}
			if got.Header != want.Header {
				t.Fatalf("close every %d, row %d: header %+v, want %+v", closeEvery, i, got.Header, want.Header)
			}
		}
		var enc Encoder
		want, err := enc.Encode("s", rows)
		if err != nil {
			t.Fatal(err)
		}
		got, err := enc.Encode("s", irows)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes, want.Bytes) {
			t.Fatalf("close every %d: the segment of interned anchors differs", closeEvery)
		}
		all := AllTime()
		back, err := ReadRows(irows, all)
		if err != nil {
			t.Fatal(err)
		}
		if d := diffSeries(back, expected(batches, all)); d != "" {
			t.Fatalf("close every %d: ReadRows: %s", closeEvery, d)
		}
	}
}

func TestAnchorsBothWaysAreRefused(t *testing.T) {
	var e RowEncoder
	r := AnchoredRow{Epoch: 1, Anchors: []labels.Labels{labels.FromStrings("__name__", "up")},
		Interned: &InternedAnchors{Symbol: func(uint32) string { return "up" }}}
	r.Interned.Add([]uint32{0, 0})
	if _, err := e.Append(nil, &r); !errors.Is(err, ErrInvalidBatch) {
		t.Fatalf("Append = %v, want ErrInvalidBatch", err)
	}
}

// An anchored segment reads back exactly like one made from self-contained
// rows of the same batches, and like the independent expectation.
func TestEncodeAnchoredMatchesSelfContained(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	batches := randBatches(r, 80)
	a := newAnchorer(0)
	rows := a.rowsOf(t, batches)
	rows = append(rows, a.close())
	var enc Encoder
	seg, err := enc.Encode("s", rows)
	if err != nil {
		t.Fatal(err)
	}
	if seg == nil || seg.Rows != int64(len(rows)) || seg.LastTS != rows[len(rows)-1].TS {
		t.Fatalf("segment %+v, want all %d rows", seg, len(rows))
	}
	checkSegmentAndRows(t, seg.Bytes, rows, expected(batches, AllTime()))
	if n := enc.Unresolved(); n != 0 {
		t.Fatalf("Unresolved = %d", n)
	}
}

// TestTwinAnchorsSealAsOneSeries: an epoch may anchor a series twice
// (rule 2's race), and a seal's first epoch is collected without looking
// its anchors up (collector.addFresh), so the twins meet only once sorted
// and must come out as one series, their samples merged in canonical
// order. Later epochs' anchors are looked up, against the first's series
// too. The segment and a read of the rows must match what the batches
// hold, whatever the twins and epochs.
func TestTwinAnchorsSealAsOneSeries(t *testing.T) {
	cases := []struct {
		name          string
		batches       int // 120 make ~200 series, 1,200 past radixSortMin
		closeEvery    int
		reanchorEvery int
		interned      bool
	}{
		{"one epoch, no twins", 120, 0, 0, false},
		{"one epoch, every reference a twin", 120, 0, 1, false},
		{"one epoch, every third", 120, 0, 3, true},
		{"one epoch, every seventh, radix sort", 1200, 0, 7, false},
		{"epochs of 5 rows, every other", 120, 5, 2, false},
		{"epochs of 9 rows, every third", 120, 9, 3, true},
		{"epochs of 300 rows, every fifth, radix sort", 1200, 300, 5, true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(31, uint64(i)))
			batches := randBatches(r, tc.batches)
			a := newAnchorer(tc.closeEvery)
			a.reanchorEvery = tc.reanchorEvery
			if tc.interned {
				a.syms = &testSymbols{ids: map[string]uint32{}}
			}
			rows := a.rowsOf(t, batches)
			rows = append(rows, a.close())
			var enc Encoder
			seg, err := enc.Encode("s", rows)
			if err != nil {
				t.Fatal(err)
			}
			checkSegmentAndRows(t, seg.Bytes, rows, expected(batches, AllTime()))
			// The segment is the one the batches make without twins, byte
			// for byte: one series per label set, whatever its anchors.
			plain := newAnchorer(tc.closeEvery)
			plainRows := append(plain.rowsOf(t, batches), plain.close())
			want1, err := new(Encoder).Encode("s", plainRows)
			if err != nil {
				t.Fatal(err)
			}
			if x, err := ParseIndex(want1.Index); err != nil || tc.batches > 1000 && x.Series < radixSortMin {
				t.Fatalf("the twin-free segment has %d series (%v): the case does not reach the radix sort", x.Series, err)
			}
			if !bytes.Equal(seg.Bytes, want1.Bytes) || !bytes.Equal(seg.Index, want1.Index) {
				t.Fatalf("segment (%d bytes, index %d) differs from the twin-free one's (%d, %d)", len(seg.Bytes), len(seg.Index), len(want1.Bytes), len(want1.Index))
			}
		})
	}
}

// checkSegmentAndRows checks that a segment and a read of the rows it was
// sealed from both hold want, over all time.
func checkSegmentAndRows(t *testing.T, segment []byte, rows []archive.Row, want []Series) {
	t.Helper()
	got, err := ReadSegment(segment, AllTime())
	if err != nil {
		t.Fatal(err)
	}
	if d := diffSeries(got, want); d != "" {
		t.Fatal(d)
	}
	live, err := ReadRows(rows, AllTime())
	if err != nil {
		t.Fatal(err)
	}
	if d := diffSeries(live, want); d != "" {
		t.Fatalf("ReadRows: %s", d)
	}
}

func TestClosedPrefix(t *testing.T) {
	v1 := func() []byte { b, _ := EncodeBatch(&Batch{}); return b }
	data := func(epoch uint64) []byte {
		var e RowEncoder
		b, err := e.Append(nil, &AnchoredRow{Epoch: epoch})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	closeOf := func(epoch uint64) []byte { return AppendEpochClose(nil, epoch) }
	cases := []struct {
		name string
		rows [][]byte
		want int
	}{
		{"empty", nil, 0},
		{"format 1 rows are closed", [][]byte{v1(), v1()}, 2},
		{"one open epoch", [][]byte{data(1), data(1)}, 0},
		{"closed by its marker", [][]byte{data(1), data(1), closeOf(1)}, 3},
		{"closed by the next epoch", [][]byte{data(1), data(1), data(2)}, 2},
		{"next epoch closed too", [][]byte{data(1), data(2), closeOf(2)}, 3},
		{"format 1 then open epoch", [][]byte{v1(), data(1)}, 1},
		{"format 1 after an epoch closes it", [][]byte{data(1), v1()}, 2},
		{"marker of a fresh epoch closes an open one", [][]byte{data(1), closeOf(9)}, 2},
		{"open epoch after closed ones", [][]byte{data(1), closeOf(1), data(2), data(2)}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var rows []archive.Row
			for i, d := range tc.rows {
				rows = append(rows, archive.Row{TS: int64(i), Data: d})
			}
			got, err := closedPrefix(rows)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("closedPrefix = %d, want %d", got, tc.want)
			}
		})
	}
}

// A seal takes closed epochs only: the open epoch's rows stay for the next
// seal, which then finds them closed, and the two segments hold everything.
func TestEncodeLeavesTheOpenEpochLive(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	batches := randBatches(r, 40)
	a := newAnchorer(0)
	first := a.rowsOf(t, batches[:20])
	first = append(first, a.close())
	open := a.rowsOf(t, batches[20:30]) // the epoch being written when the seal reads
	var enc Encoder
	seg1, err := enc.Encode("s", append(append([]archive.Row(nil), first...), open...))
	if err != nil {
		t.Fatal(err)
	}
	if seg1.LastTS != first[len(first)-1].TS || seg1.Rows != int64(len(first)) {
		t.Fatalf("first seal took %d rows up to %d, want %d up to %d", seg1.Rows, seg1.LastTS, len(first), first[len(first)-1].TS)
	}
	rest := append(open, a.rowsOf(t, batches[30:])...)
	rest = append(rest, a.close())
	seg2, err := enc.Encode("s", rest)
	if err != nil {
		t.Fatal(err)
	}
	if seg2.Rows != int64(len(rest)) {
		t.Fatalf("second seal took %d rows, want %d", seg2.Rows, len(rest))
	}
	all := AllTime()
	var got []Series
	for _, s := range []*archive.Segment{seg1, seg2} {
		ss, err := ReadSegment(s.Bytes, all)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ss...)
	}
	c := newCollector()
	for _, s := range got {
		c.addSeries(s)
	}
	merged, _ := c.finish()
	out := c.output(merged)
	if d := diffSeries(out, expected(batches, all)); d != "" {
		t.Fatal(d)
	}
}

// Rows cut mid-epoch (a retention that evicted live rows) lose only the
// samples whose anchor is gone, counted, and never fail the seal.
func TestEncodeCountsUnresolvedReferences(t *testing.T) {
	mk := func(id string, v float64) Series {
		return Series{Labels: labels.FromStrings("__name__", "m", "id", id), Samples: []Sample{{T: int64(v), V: v}}}
	}
	a := newAnchorer(0)
	rows := a.rowsOf(t, []Batch{
		{Series: []Series{mk("a", 1), mk("b", 2)}},
		{Series: []Series{mk("a", 3), mk("b", 4), mk("c", 5)}},
	})
	rows = append(rows, a.close())
	var enc Encoder
	seg, err := enc.Encode("s", rows[1:]) // the anchoring row is gone
	if err != nil {
		t.Fatal(err)
	}
	if got := enc.Unresolved(); got != 2 {
		t.Fatalf("Unresolved = %d, want 2 (a and b in the second row)", got)
	}
	got, err := ReadSegment(seg.Bytes, AllTime())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Labels.Get("id") != "c" || len(got[0].Samples) != 1 {
		t.Fatalf("got %v, want only series c", got)
	}
}

func TestDecodeRowErrors(t *testing.T) {
	var e RowEncoder
	good, err := e.Append(nil, &AnchoredRow{Epoch: 3, FirstLocal: 2, Anchors: []labels.Labels{labels.FromStrings("a", "b")},
		Series: []RowSeries{{Local: 2, Samples: []Sample{{T: 1, V: math.Pi}}}}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		row  []byte
		want error
	}{
		{"empty", nil, ErrCorruptRow},
		{"format 3", []byte{3, 0}, ErrUnsupportedVersion},
		{"truncated header", []byte{rowFormatV2}, ErrCorruptRow},
		{"unknown kind", []byte{rowFormatV2, 7, 1}, ErrCorruptRow},
		{"marker with a body", append(AppendEpochClose(nil, 1), 0), ErrCorruptRow},
		{"first local id too large", []byte{rowFormatV2, 0, 1, 0x80, 0x80, 0x80, 0x08}, ErrCorruptRow},
		{"truncated body", good[:len(good)-1], ErrCorruptRow},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var d RowDecoder
			var dr DecodedRow
			if err := d.Decode(tc.row, &dr); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := e.Append(nil, &AnchoredRow{Series: []RowSeries{{Local: MaxEpochSeries}}}); !errors.Is(err, ErrInvalidBatch) {
		t.Fatalf("local id at the bound: err = %v", err)
	}
}

func FuzzDecodeRow(f *testing.F) {
	r := rand.New(rand.NewPCG(17, 18))
	a := newAnchorer(3)
	for _, row := range a.rowsOf(f, randBatches(r, 12)) {
		f.Add(row.Data)
	}
	for _, b := range randBatches(r, 4) {
		row, err := EncodeBatch(&b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(row)
	}
	f.Fuzz(func(t *testing.T, row []byte) {
		var d RowDecoder
		var dr DecodedRow
		if err := d.Decode(row, &dr); err != nil {
			return
		}
		if dr.Header.Format != 2 || dr.Header.Close {
			return
		}
		// A seal reads the row its own way (rowCollector, anchorIDs): any
		// outcome but a panic.
		var seal Encoder
		_, _ = seal.Encode("s", []archive.Row{{Stream: "s", TS: 1, Data: row}, {Stream: "s", TS: 2, Data: AppendEpochClose(nil, dr.Header.Epoch)}})
		// Whatever decodes re-encodes to a row that decodes the same.
		ar := AnchoredRow{Epoch: dr.Header.Epoch, FirstLocal: dr.Header.FirstLocal, Anchors: dr.Anchors, Series: dr.Series, Metadata: dr.Metadata}
		var e RowEncoder
		row2, err := e.Append(nil, &ar)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		var d2 RowDecoder
		var dr2 DecodedRow
		if err := d2.Decode(row2, &dr2); err != nil {
			t.Fatalf("decode of re-encoded: %v", err)
		}
		if len(dr2.Series) != len(dr.Series) || len(dr2.Anchors) != len(dr.Anchors) {
			t.Fatalf("re-encoded row has %d series and %d anchors, want %d and %d", len(dr2.Series), len(dr2.Anchors), len(dr.Series), len(dr.Anchors))
		}
		for i := range dr.Series {
			if dr.Series[i].Local != dr2.Series[i].Local {
				t.Fatalf("series %d: local id %d, want %d", i, dr2.Series[i].Local, dr.Series[i].Local)
			}
			if d := diffSamples(dr2.Series[i].Samples, dr.Series[i].Samples); d != "" {
				t.Fatalf("series %d: %s", i, d)
			}
		}
		// And the encoder takes it without panicking.
		var enc Encoder
		_, _ = enc.Encode("s", []archive.Row{{TS: 1, Data: row}, {TS: 2, Data: AppendEpochClose(nil, dr.Header.Epoch)}})
	})
}

// Anchors whose labels a row lists out of order are put in label order by
// the seal (anchorIDs, which sorts symbol ids) as by the tail readers
// (labels.ScratchBuilder): a segment of such rows holds the series the
// rows decode to, and those are the batches' series.
func TestAnchorsOutOfOrderSealAsTheyDecode(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	batches := randBatches(r, 40)
	syms := &testSymbols{ids: map[string]uint32{}}
	var enc RowEncoder
	var rows []archive.Row
	locals := map[string]uint32{}
	ts := int64(1_700_000_000_000_000_000)
	for _, b := range batches {
		row := AnchoredRow{Epoch: 1, FirstLocal: uint32(len(locals)), Metadata: b.Metadata}
		for _, s := range b.Series {
			k := s.Labels.String()
			id, ok := locals[k]
			if !ok {
				id = uint32(len(locals))
				locals[k] = id
				if row.Interned == nil {
					row.Interned = &InternedAnchors{Symbol: syms.symbol}
				}
				var ls []labels.Label
				s.Labels.Range(func(l labels.Label) { ls = append(ls, l) })
				r.Shuffle(len(ls), func(i, j int) { ls[i], ls[j] = ls[j], ls[i] })
				var pairs []uint32
				for _, l := range ls {
					pairs = append(pairs, syms.id(l.Name), syms.id(l.Value))
				}
				row.Interned.Add(pairs)
			}
			row.Series = append(row.Series, RowSeries{Local: id, Samples: s.Samples, Histograms: s.Histograms, Exemplars: s.Exemplars})
		}
		data, err := enc.Append(nil, &row)
		if err != nil {
			t.Fatal(err)
		}
		ts++
		rows = append(rows, archive.Row{Stream: "s", TS: ts, Data: data})
	}
	ts++
	rows = append(rows, archive.Row{Stream: "s", TS: ts, Data: AppendEpochClose(nil, 1)})
	all := AllTime()
	want := expected(batches, all)
	live, err := ReadRows(rows, all)
	if err != nil {
		t.Fatal(err)
	}
	if d := diffSeries(live, want); d != "" {
		t.Fatalf("ReadRows: %s", d)
	}
	var e Encoder
	seg, err := e.Encode("s", rows)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadSegment(seg.Bytes, all)
	if err != nil {
		t.Fatal(err)
	}
	if d := diffSeries(got, want); d != "" {
		t.Fatalf("sealed: %s", d)
	}
}
