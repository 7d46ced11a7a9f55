package promsample

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/cespare/xxhash/v2"
	pq "github.com/parquet-go/parquet-go"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// rowsOf encodes batches as wal rows with strictly increasing receipt ts.
func rowsOf(t testing.TB, batches []Batch) []archive.Row {
	t.Helper()
	rows := make([]archive.Row, len(batches))
	for i := range batches {
		data, err := EncodeBatch(&batches[i])
		if err != nil {
			t.Fatal(err)
		}
		rows[i] = archive.Row{Stream: "samples/00", TS: int64(1_000_000 + i*7), Data: data}
	}
	return rows
}

func wantMetadata(batches []Batch) []Metadata {
	var out []Metadata
	for _, b := range batches {
		for _, m := range b.Metadata {
			if !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	slices.SortFunc(out, compareMetadata)
	return out
}

// randQuery draws matchers of every type and a time range.
func randQuery(t testing.TB, r *rand.Rand) Query {
	q := AllTime()
	if r.IntN(2) == 0 {
		q.MinT, q.MaxT = int64(r.IntN(500))*1000, int64(500+r.IntN(600))*1000
	}
	types := []labels.MatchType{labels.MatchEqual, labels.MatchNotEqual, labels.MatchRegexp, labels.MatchNotRegexp}
	names := []string{"__name__", "job", "instance", "__meta", "absent"}
	vals := []string{"up", "a", "x", "y|host-.*", "", ".+"}
	for range r.IntN(3) {
		m, err := labels.NewMatcher(types[r.IntN(4)], names[r.IntN(len(names))], vals[r.IntN(len(vals))])
		if err != nil {
			t.Fatal(err)
		}
		q.Matchers = append(q.Matchers, m)
	}
	return q
}

// TestSegmentRoundTrip is the property test: random batches -> rows ->
// segment (through archive.Materialize) -> read back equals the input minus
// exact duplicates, bit for bit; the live-tail reader gives the same answer;
// an independent Parquet implementation reads the same values.
func TestSegmentRoundTrip(t *testing.T) {
	for seed := uint64(0); seed < 80; seed++ {
		r := rand.New(rand.NewPCG(seed, 99))
		batches := randBatches(r, 1+r.IntN(30))
		rows := rowsOf(t, batches)
		// Small row groups exercise pruning, multi-group reads and series
		// split across groups.
		enc := &Encoder{Opts: Options{RowGroupRows: []int{0, 1, 3, 17}[seed%4]}}
		// Label columns: each the encoder's choice (with so few rows per
		// value, mostly DELTA_BYTE_ARRAY), all dictionaries, or all
		// DELTA_BYTE_ARRAY as segments sealed before dictionaries.
		mode := (seed / 4) % 3
		def := labelDictionary
		switch mode {
		case 1:
			labelDictionary = func(int, int) bool { return true }
		case 2:
			labelDictionary = func(int, int) bool { return false }
		}
		seg, err := archive.Materialize(enc, "samples/00", rows)
		labelDictionary = def
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if mode > 0 {
			checkLabelEncoding(t, seg.Bytes, func(string) bool { return mode == 1 })
		}
		if seg.Rows != int64(len(rows)) || seg.FirstTS != rows[0].TS || seg.LastTS != rows[len(rows)-1].TS {
			t.Fatalf("seed %d: segment claims %d rows [%d, %d]", seed, seg.Rows, seg.FirstTS, seg.LastTS)
		}
		all := AllTime()
		want := expected(batches, all)
		got, err := ReadSegment(seg.Bytes, all)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if d := diffSeries(got, want); d != "" {
			t.Fatalf("seed %d: segment: %s", seed, d)
		}
		tail, err := ReadRows(rows, all)
		if err != nil {
			t.Fatal(err)
		}
		if d := diffSeries(tail, want); d != "" {
			t.Fatalf("seed %d: rows: %s", seed, d)
		}
		for range 10 {
			q := randQuery(t, r)
			want := expected(batches, q)
			got, err := ReadSegment(seg.Bytes, q)
			if err != nil {
				t.Fatal(err)
			}
			if d := diffSeries(got, want); d != "" {
				t.Fatalf("seed %d query %v [%d,%d]: segment: %s", seed, q.Matchers, q.MinT, q.MaxT, d)
			}
			tail, err := ReadRows(rows, q)
			if err != nil {
				t.Fatal(err)
			}
			if d := diffSeries(tail, want); d != "" {
				t.Fatalf("seed %d query %v: rows: %s", seed, q.Matchers, d)
			}
		}
		meta, err := ReadSegmentMetadata(seg.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(meta, wantMetadata(batches)) {
			t.Fatalf("seed %d: metadata %v, want %v", seed, meta, wantMetadata(batches))
		}
		rmeta, err := ReadRowsMetadata(rows)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(rmeta, meta) {
			t.Fatalf("seed %d: rows metadata %v, want %v", seed, rmeta, meta)
		}
		checkIndex(t, seg, want)
		checkWithParquetGo(t, seg.Bytes, want)
		if seed%10 == 0 {
			checkWithParquetGoFile(t, seg.Bytes)
		}
	}
}

// checkLabelEncoding checks that __name__ and every label column are
// dictionary-encoded if dict(column name), else DELTA_BYTE_ARRAY.
func checkLabelEncoding(t *testing.T, seg []byte, dict func(col string) bool) {
	t.Helper()
	r, err := file.NewParquetReader(bytes.NewReader(seg))
	if err != nil {
		t.Fatal(err)
	}
	md := r.MetaData()
	for g := 0; g < md.NumRowGroups(); g++ {
		for c := 0; c < md.RowGroup(g).NumColumns(); c++ {
			name := md.Schema.Column(c).Name()
			if _, ok := columnLabel(name); !ok && name != ColMetric {
				continue
			}
			cc, err := md.RowGroup(g).ColumnChunk(c)
			if err != nil {
				t.Fatal(err)
			}
			d := dict(name)
			want := parquet.Encodings.DeltaByteArray
			if d {
				want = parquet.Encodings.RLEDict
			}
			if cc.HasDictionaryPage() != d || !slices.Contains(cc.Encodings(), want) {
				t.Fatalf("row group %d column %s: dictionary page %v, encodings %v; want dictionary %v",
					g, name, cc.HasDictionaryPage(), cc.Encodings(), d)
			}
		}
	}
}

func checkIndex(t *testing.T, seg *archive.Segment, want []Series) {
	t.Helper()
	idx, err := ParseIndex(seg.Index)
	if err != nil {
		t.Fatal(err)
	}
	footer, err := ReadSegmentIndex(seg.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := idx.Summary()
	b1, _ := sum.AppendBinary(nil)
	b2, _ := footer.AppendBinary(nil)
	if !bytes.Equal(b1, b2) {
		t.Fatal("Segment.Index's summary differs from the footer's index")
	}
	checkSeriesTable(t, seg, &idx, want)
	var n, h, e int64
	mint, maxt := int64(math.MaxInt64), int64(math.MinInt64)
	var metrics []string
	for _, s := range want {
		n += int64(len(s.Samples))
		h += int64(len(s.Histograms))
		e += int64(len(s.Exemplars))
		for _, x := range s.Samples {
			mint, maxt = min(mint, x.T), max(maxt, x.T)
		}
		for _, x := range s.Histograms {
			mint, maxt = min(mint, x.T), max(maxt, x.T)
		}
		for _, x := range s.Exemplars {
			mint, maxt = min(mint, x.T), max(maxt, x.T)
		}
		if name := s.Labels.Get("__name__"); len(s.Samples)+len(s.Histograms) > 0 && !slices.Contains(metrics, name) {
			metrics = append(metrics, name)
		}
	}
	if idx.Samples != n || idx.Histograms != h || idx.Exemplars != e || idx.MinT != mint || idx.MaxT != maxt {
		t.Fatalf("index %+v; want %d samples, %d histograms, %d exemplars over [%d, %d]", idx, n, h, e, mint, maxt)
	}
	for _, m := range metrics {
		if !slices.Contains(idx.Metrics, m) {
			t.Fatalf("index metrics %q lack %q", idx.Metrics, m)
		}
	}
}

// checkSeriesTable checks the catalog index's series table against the
// series the segment must hold (those with samples or histograms, in
// order; exemplar-only series have no rows) and the page index checksum.
func checkSeriesTable(t *testing.T, seg *archive.Segment, idx *Index, want []Series) {
	t.Helper()
	tab := idx.Table
	if tab == nil {
		t.Fatal("the catalog index has no series table")
	}
	var sb labels.ScratchBuilder
	k := 0
	for _, s := range want {
		rows := len(s.Samples) + len(s.Histograms)
		for k < tab.Len() && tab.Rows[k] == 0 { // exemplars only
			k++
		}
		if rows == 0 {
			continue
		}
		if k >= tab.Len() {
			t.Fatalf("series table ends before %v", s.Labels)
		}
		if got := tab.Labels(k, &sb); !labels.Equal(got, s.Labels) {
			t.Fatalf("series table entry %d is %v, want %v", k, got, s.Labels)
		}
		if int(tab.Rows[k]) != rows || tab.Hashes[k] != SeriesHash(s.Labels) {
			t.Fatalf("series table entry %d: %d rows hash %x, want %d rows hash %x", k, tab.Rows[k], tab.Hashes[k], rows, SeriesHash(s.Labels))
		}
		k++
	}
	for ; k < tab.Len(); k++ {
		if tab.Rows[k] != 0 {
			t.Fatalf("series table has an extra series %v", tab.Labels(k, &sb))
		}
	}
	starts := tab.RowStarts()
	var total int64
	for _, g := range idx.RowGroups {
		total += g.Rows
	}
	if starts[len(starts)-1] != total {
		t.Fatalf("series table holds %d rows, row groups %d", starts[len(starts)-1], total)
	}
	footerStart := len(seg.Bytes) - 8 - int(binary.LittleEndian.Uint32(seg.Bytes[len(seg.Bytes)-8:]))
	f, err := file.NewParquetReader(bytes.NewReader(seg.Bytes))
	if err != nil {
		t.Fatal(err)
	}
	md := f.MetaData()
	last := md.RowGroup(md.NumRowGroups() - 1)
	cc, _ := last.ColumnChunk(last.NumColumns() - 1)
	chunksEnd := cc.DataPageOffset() + cc.TotalCompressedSize()
	if cc.HasDictionaryPage() && cc.DictionaryPageOffset() < cc.DataPageOffset() {
		chunksEnd = cc.DictionaryPageOffset() + cc.TotalCompressedSize()
	}
	if got := xxhash.Sum64(seg.Bytes[chunksEnd:footerStart]); got != idx.PageIndexSum {
		t.Fatalf("page index checksum %x, index says %x", got, idx.PageIndexSum)
	}
}

// checkWithParquetGo reads every row with github.com/parquet-go/parquet-go
// and compares metric name, labels, timestamp and value with want.
func checkWithParquetGo(t *testing.T, seg []byte, want []Series) {
	t.Helper()
	f, err := pq.OpenFile(bytes.NewReader(seg), int64(len(seg)))
	if err != nil {
		t.Fatalf("parquet-go: %v", err)
	}
	cols := f.Schema().Columns()
	type flat struct {
		lbls string
		t    int64
		bits uint64
		hist bool
	}
	var got []flat
	for _, rg := range f.RowGroups() {
		rows := rg.Rows()
		buf := make([]pq.Row, 64)
		for {
			n, err := rows.ReadRows(buf)
			for _, row := range buf[:n] {
				var fl flat
				sb := labels.NewScratchBuilder(8)
				var v *float64
				var ival *int64
				div := 1.0
				for _, val := range row {
					name := cols[val.Column()][0]
					if val.IsNull() {
						continue
					}
					switch name {
					case ColMetric:
						if n := string(val.ByteArray()); n != "" {
							sb.Add("__name__", n)
						}
					case ColTimestamp:
						fl.t = val.Int64()
					case ColValue:
						x := val.Double()
						v = &x
					case ColInt:
						x := val.Int64()
						ival = &x
					case ColDiv:
						div = val.Double()
					case ColHist:
						fl.hist = true
					case ColHistCount, ColHistSum:
					default:
						ln, _ := columnLabel(name)
						sb.Add(ln, string(val.ByteArray()))
					}
				}
				if ival != nil {
					x := float64(*ival) / div
					v = &x
				}
				sb.Sort()
				fl.lbls = sb.Labels().String()
				if v != nil {
					fl.bits = math.Float64bits(*v)
				}
				got = append(got, fl)
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("parquet-go rows: %v", err)
			}
		}
		rows.Close()
	}
	var exp []flat
	for _, s := range want {
		i, j := 0, 0
		for i < len(s.Samples) || j < len(s.Histograms) {
			if j >= len(s.Histograms) || (i < len(s.Samples) && s.Samples[i].T <= s.Histograms[j].T) {
				exp = append(exp, flat{lbls: s.Labels.String(), t: s.Samples[i].T, bits: math.Float64bits(s.Samples[i].V)})
				i++
			} else {
				exp = append(exp, flat{lbls: s.Labels.String(), t: s.Histograms[j].T, hist: true})
				j++
			}
		}
	}
	if len(got) != len(exp) {
		t.Fatalf("parquet-go read %d rows, want %d", len(got), len(exp))
	}
	for i := range got {
		if got[i] != exp[i] {
			t.Fatalf("parquet-go row %d = %+v, want %+v", i, got[i], exp[i])
		}
	}
	// The timestamp column carries the TIMESTAMP(MILLIS) logical type.
	leaf, ok := f.Schema().Lookup(ColTimestamp)
	if !ok {
		t.Fatal("no timestamp column")
	}
	if lt := leaf.Node.Type().LogicalType(); lt == nil || !strings.Contains(lt.String(), "TIMESTAMP(isAdjustedToUTC=true,unit=MILLIS") {
		t.Fatalf("timestamp logical type = %v", lt)
	}
}

// checkWithParquetGoFile also opens the segment as a file written to disk.
func checkWithParquetGoFile(t *testing.T, seg []byte) {
	t.Helper()
	path := t.TempDir() + "/segment.parquet"
	if err := writeFile(path, seg); err != nil {
		t.Fatal(err)
	}
	f, err := openFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	pf, err := pq.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, rg := range pf.RowGroups() {
		n += rg.NumRows()
	}
	if n != pf.NumRows() {
		t.Fatalf("row groups hold %d rows, file says %d", n, pf.NumRows())
	}
}

func TestEncoderContract(t *testing.T) {
	enc := &Encoder{}
	if enc.Version() != EncoderVersion {
		t.Fatal("version")
	}
	if seg, err := archive.Materialize(enc, "samples/00", nil); seg != nil || err != nil {
		t.Fatalf("empty input: %v, %v", seg, err)
	}
	// Metadata-only rows still make a segment that holds them.
	rows := rowsOf(t, []Batch{{Metadata: []Metadata{{MetricFamily: "up", Type: "gauge"}}}})
	seg, err := archive.Materialize(enc, "samples/00", rows)
	if err != nil || seg == nil || seg.Rows != 1 {
		t.Fatalf("metadata only: %v, %v", seg, err)
	}
	if meta, err := ReadSegmentMetadata(seg.Bytes); err != nil || len(meta) != 1 {
		t.Fatalf("metadata only: %v, %v", meta, err)
	}
	if got, err := ReadSegment(seg.Bytes, AllTime()); err != nil || len(got) != 0 {
		t.Fatalf("metadata only read: %v, %v", got, err)
	}
	// A corrupt row fails the encode, wrapped by the archive.
	rows = append(rows, archive.Row{TS: rows[0].TS + 1, Data: []byte{rowFormatV1, 1, 2}})
	_, err = archive.Materialize(enc, "samples/00", rows)
	if !errors.Is(err, archive.ErrEncoder) || !errors.Is(err, ErrCorruptRow) {
		t.Fatalf("corrupt row: %v", err)
	}
	// Equal rows give equal segments (the writer and a reader agree).
	r := rand.New(rand.NewPCG(5, 5))
	rows = rowsOf(t, randBatches(r, 20))
	a, err := archive.Materialize(enc, "samples/00", rows)
	if err != nil {
		t.Fatal(err)
	}
	b, err := archive.Materialize(enc, "samples/00", rows)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes, b.Bytes) || !bytes.Equal(a.Index, b.Index) {
		t.Fatal("encoding is not deterministic")
	}
}

func TestMerge(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	batches := randBatches(r, 40)
	rows := rowsOf(t, batches)
	enc := &Encoder{Opts: Options{RowGroupRows: 5}}
	var stored []archive.StoredSegment
	for i, cut := range [][2]int{{0, 10}, {10, 11}, {11, 30}, {30, 40}} {
		seg, err := archive.Materialize(enc, "samples/00", rows[cut[0]:cut[1]])
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, archive.StoredSegment{Seq: int64(i + 1), Bytes: seg.Bytes, Index: seg.Index,
			SegmentMeta: archive.SegmentMeta{Rows: seg.Rows, FirstTS: seg.FirstTS, LastTS: seg.LastTS, Size: int64(len(seg.Bytes))}})
	}
	merged, consumed, err := enc.Merge("samples/00", stored)
	if err != nil {
		t.Fatal(err)
	}
	if consumed != 4 || merged.Rows != 40 || merged.FirstTS != rows[0].TS || merged.LastTS != rows[39].TS {
		t.Fatalf("merged %d segments: %d rows over [%d, %d]", consumed, merged.Rows, merged.FirstTS, merged.LastTS)
	}
	want := expected(batches, AllTime())
	got, err := ReadSegment(merged.Bytes, AllTime())
	if err != nil {
		t.Fatal(err)
	}
	if d := diffSeries(got, want); d != "" {
		t.Fatal(d)
	}
	meta, err := ReadSegmentMetadata(merged.Bytes)
	if err != nil || !slices.Equal(meta, wantMetadata(batches)) {
		t.Fatalf("merged metadata %v, %v", meta, err)
	}
	checkIndex(t, merged, want)
	checkWithParquetGo(t, merged.Bytes, want)

	// A size limit stops the run; fewer than two fitting means no merge.
	small := &Encoder{Opts: Options{MaxMergeBytes: int64(len(stored[0].Bytes) + len(stored[1].Bytes))}}
	if _, consumed, err := small.Merge("samples/00", stored); err != nil || consumed != 2 {
		t.Fatalf("limited merge consumed %d, %v", consumed, err)
	}
	tiny := &Encoder{Opts: Options{MaxMergeBytes: 1}}
	if seg, consumed, err := tiny.Merge("samples/00", stored); err != nil || consumed >= 2 || seg != nil {
		t.Fatalf("tiny merge: %v, %d, %v", seg, consumed, err)
	}
}

// TestReadSegmentSeriesOwnTheirSamples: the series ReadSegment returns
// share their row group's sample array (reader.go), cut so that each owns
// its part: appending to one series' samples, as a caller merging pieces
// does, never changes another's.
func TestReadSegmentSeriesOwnTheirSamples(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	batches := randBatches(r, 20)
	seg, err := archive.Materialize(&Encoder{}, "samples/00", rowsOf(t, batches))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadSegment(seg.Bytes, AllTime())
	if err != nil {
		t.Fatal(err)
	}
	want := expected(batches, AllTime())
	if d := diffSeries(got, want); d != "" {
		t.Fatal(d)
	}
	n := 0
	for i := range got {
		if len(got[i].Samples) == 0 {
			continue
		}
		n++
		got[i].Samples = append(got[i].Samples, Sample{T: math.MaxInt64, V: -1})
	}
	if n < 2 {
		t.Fatalf("%d series with float samples, want several", n)
	}
	for i := range got {
		if k := len(got[i].Samples); k > 0 {
			got[i].Samples = got[i].Samples[:k-1]
		}
	}
	if d := diffSeries(got, want); d != "" {
		t.Fatalf("after appending to each series: %s", d)
	}
}

// TestReadSegmentSizesItsResult: a query without matchers gets a result
// sized for every series at once, and one with matchers a result sized
// for what matched, not for the metric's every series (a one-series read
// of a segment written before format 2 goes through ReadSegment).
func TestReadSegmentSizesItsResult(t *testing.T) {
	var b Batch
	for i := range 2000 {
		b.Series = append(b.Series, Series{Labels: labels.FromStrings("__name__", "m", "id", strconv.Itoa(i)),
			Samples: []Sample{{T: 1000, V: float64(i)}}})
	}
	seg, err := archive.Materialize(&Encoder{}, "samples/00", rowsOf(t, []Batch{b}))
	if err != nil {
		t.Fatal(err)
	}
	all, err := ReadSegment(seg.Bytes, AllTime())
	if err != nil || len(all) != 2000 || cap(all) != 2000 {
		t.Fatalf("every series: %d, cap %d, %v", len(all), cap(all), err)
	}
	one, err := ReadSegment(seg.Bytes, AllTime(labels.MustNewMatcher(labels.MatchEqual, "id", "1234")))
	if err != nil || len(one) != 1 || cap(one) > 8 {
		t.Fatalf("one series: %d, cap %d, %v", len(one), cap(one), err)
	}
}

func TestStreamFor(t *testing.T) {
	if got := StreamFor("up", 1); got != "samples/00" {
		t.Fatalf("one bucket: %s", got)
	}
	seen := map[string]bool{}
	for _, m := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"} {
		s := StreamFor(m, DefaultStreamBuckets)
		if s != StreamFor(m, DefaultStreamBuckets) || !slices.Contains(StreamsFor(DefaultStreamBuckets), s) {
			t.Fatalf("StreamFor(%q) = %q", m, s)
		}
		seen[s] = true
	}
	if len(seen) < 3 {
		t.Fatalf("12 metrics in only %d streams", len(seen))
	}
	if StreamFor("x", 0) != StreamFor("x", DefaultStreamBuckets) || len(StreamsFor(300)) != DefaultStreamBuckets {
		t.Fatal("bad bucket counts are not the default")
	}
	if got := StreamsFor(256)[255]; got != "samples/ff" {
		t.Fatalf("last of 256 = %s", got)
	}
	b := Batch{Series: []Series{{Labels: labels.FromStrings("__name__", "a")}, {Labels: labels.FromStrings("__name__", "b")}, {Labels: labels.FromStrings("__name__", "a", "x", "y")}},
		Metadata: []Metadata{{MetricFamily: "a"}}}
	n := 0
	for _, sb := range SplitBatch(&b, 4) {
		for _, s := range sb.Batch.Series {
			if StreamFor(s.Labels.Get("__name__"), 4) != sb.Stream {
				t.Fatalf("%s routed to %s", s.Labels, sb.Stream)
			}
			n++
		}
		for _, m := range sb.Batch.Metadata {
			if StreamFor(m.MetricFamily, 4) != sb.Stream {
				t.Fatal("metadata misrouted")
			}
		}
	}
	if n != 3 {
		t.Fatalf("split kept %d series", n)
	}
}

func TestReadSegmentErrors(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	seg, err := archive.Materialize(&Encoder{}, "s", rowsOf(t, randBatches(r, 5)))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{nil, []byte("PAR1"), seg.Bytes[:len(seg.Bytes)/2], append(slices.Clone(seg.Bytes[:len(seg.Bytes)-1]), 'X')} {
		if _, err := ReadSegment(b, AllTime()); !errors.Is(err, ErrCorruptSegment) {
			t.Fatalf("err = %v, want ErrCorruptSegment", err)
		}
	}
	if _, err := ParseIndex([]byte{7}); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("index version: %v", err)
	}
}

func FuzzReadSegment(f *testing.F) {
	r := rand.New(rand.NewPCG(9, 9))
	for i := range 4 {
		seg, err := archive.Materialize(&Encoder{Opts: Options{RowGroupRows: i + 1}}, "s", rowsOf(f, randBatches(r, 3)))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(seg.Bytes)
		f.Add(seg.Bytes[len(seg.Bytes)/3:])
	}
	f.Add([]byte("PAR1\x00\x00\x00\x00PAR1"))
	f.Fuzz(func(t *testing.T, seg []byte) {
		// Any error is fine; a panic or a hang is not.
		_, _ = ReadSegment(seg, AllTime())
		_, _ = ReadSegmentMetadata(seg)
	})
}

// TestLabelDictionaryChoice: a segment mixing dictionary-encoded label
// columns (few values, many rows each) with a DELTA_BYTE_ARRAY one (a
// unique id per series, fewer than dictRowsPerValue rows each) reads back
// exactly, with this package's reader and with parquet-go.
func TestLabelDictionaryChoice(t *testing.T) {
	const series, samples = 40, dictRowsPerValue / 2
	var b Batch
	for i := range series {
		ls := []string{"__name__", "m_total", "job", []string{"api", "db"}[i%2], "uid", fmt.Sprintf("%08x-4c1e-%012d", i*2654435761, i)}
		if i%3 != 0 { // a column with nulls
			ls = append(ls, "zone", []string{"a", "b"}[i%3-1])
		}
		s := Series{Labels: labels.FromStrings(ls...)}
		for j := range samples {
			s.Samples = append(s.Samples, Sample{T: int64(1000 + j*15000 + i), V: float64(i*j) + 0.25})
		}
		b.Series = append(b.Series, s)
	}
	batches := []Batch{b}
	seg, err := archive.Materialize(&Encoder{}, "samples/00", rowsOf(t, batches))
	if err != nil {
		t.Fatal(err)
	}
	checkLabelEncoding(t, seg.Bytes, func(col string) bool { return col != "uid" })
	want := expected(batches, AllTime())
	got, err := ReadSegment(seg.Bytes, AllTime())
	if err != nil {
		t.Fatal(err)
	}
	if d := diffSeries(got, want); d != "" {
		t.Fatal(d)
	}
	for _, ms := range [][]*labels.Matcher{
		{labels.MustNewMatcher(labels.MatchEqual, "job", "db")},
		{labels.MustNewMatcher(labels.MatchEqual, "zone", "")},
		{labels.MustNewMatcher(labels.MatchRegexp, "uid", ".*-0+7")},
	} {
		q := AllTime(ms...)
		got, err := ReadSegment(seg.Bytes, q)
		if err != nil {
			t.Fatal(err)
		}
		if d := diffSeries(got, expected(batches, q)); d != "" || len(got) == 0 {
			t.Fatalf("%v: %d series %s", ms, len(got), d)
		}
	}
	checkWithParquetGo(t, seg.Bytes, want)
	checkWithParquetGoFile(t, seg.Bytes)
}
