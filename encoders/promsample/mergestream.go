package promsample

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"unsafe"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// A streaming merge: segments whose indexes carry their series tables
// (format 2) are merged series by series, with a row group of each input
// decoded at a time, so that its memory is its output's bytes and a few
// row groups, not every series of its inputs (see mergeInMemory).
//
// Each input's series table lists its series in row order with their row
// counts, so an input is two cursors that move together: one over its
// table (the next series' labels, as ranks among the merged symbols) and
// one over its rows (the next n rows' samples). A merged series is the
// least next series of the inputs; every input whose next series it is
// gives it its rows. The order of series is their ranks' order, which
// is their labels' order (sortSeries), so the output's series are in
// canonical order as they come.

// mergeStream merges segs, which all carry series tables, into one
// segment's bytes and index.
func (e *Encoder) mergeStream(segs []archive.StoredSegment) (data, index []byte, err error) {
	defer recoverCorrupt(&err)
	ins := make([]*mergeInput, len(segs))
	total := 0
	for i := range segs {
		in, err := openMergeInput(&segs[i])
		if err != nil {
			return nil, nil, fmt.Errorf("segment %d: %w", segs[i].Seq, err)
		}
		ins[i], total = in, total+len(segs[i].Bytes)
	}
	symbols, err := unionSymbols(ins)
	if err != nil {
		return nil, nil, err
	}
	nameRank, hasName := slices.BinarySearch(symbols, labels.MetricName)
	if !hasName {
		nameRank = -1
	}
	// Pass 1, over the tables only: the label columns and their
	// dictionary encoding, from every input's series and row counts (a
	// series in several inputs counts its rows in each: duplicates a
	// merge drops are rare, and the choice is an encoding's, not the
	// data's).
	isName := make([]bool, len(symbols))
	var dc dictCounter
	for _, in := range ins {
		t := in.table
		for t.next() {
			for j := 0; j < len(t.key); j += 2 {
				isName[t.key[j]] = true
			}
			dc.add(t.key, int(t.rows), len(symbols))
		}
		if t.r.err != nil {
			return nil, nil, corruptSegment("series table", t.r.err)
		}
		t.rewind()
	}
	var meta []Metadata
	for _, in := range ins {
		meta = append(meta, in.meta...)
	}
	slices.SortFunc(meta, compareMetadata)
	meta = slices.Compact(meta)

	sk, err := e.newSink(symbols, &packArena{}, isName, dc.result(symbols), meta, total)
	if err != nil {
		return nil, nil, err
	}
	defer sk.release()
	out := &SeriesTable{Symbols: symbols, off: []uint32{0}}
	for _, in := range ins {
		in.advance(nameRank, symbols)
	}
	var sb labels.ScratchBuilder
	var prevName uint32 // the last series', for the check of order below
	var prevKey []uint32
	seen := false
	var from []*mergeInput
	maxRows := 4 * e.rowGroupRows()
	for {
		var least *mergeInput
		for _, in := range ins {
			if in.more && (least == nil || in.compare(least) < 0) {
				least = in
			}
		}
		if least == nil {
			break
		}
		at := len(out.pairs)
		out.pairs = append(out.pairs, least.table.key...)
		sd := &seriesData{pairs: out.pairs[at:len(out.pairs):len(out.pairs)], name: least.name}
		// Each input's table is in canonical order, so each series comes
		// after the one before: one that does not is an input's table out
		// of order or listing a series twice.
		if seen && cmp.Or(cmp.Compare(prevName, sd.name), slices.Compare(prevKey, sd.pairs)) >= 0 {
			return nil, nil, corruptSegment("series table out of order", nil)
		}
		prevName, prevKey, seen = sd.name, append(prevKey[:0], sd.pairs...), true
		hash := least.table.hash
		// The inputs that hold the series, and its rows in all of them:
		// its samples are allocated once (up to what a series may hold
		// before splitLongSeries cuts it; the tables' counts are not
		// trusted with an allocation larger than that).
		from = from[:0]
		rows := 0
		for _, in := range ins {
			if in.more && in.name == sd.name && slices.Equal(in.table.key, sd.pairs) {
				from, rows = append(from, in), rows+int(in.table.rows)
			}
		}
		sd.samples = make([]Sample, 0, min(rows, maxRows))
		for _, in := range from {
			if err := in.rows.take(int(in.table.rows), sd); err != nil {
				return nil, nil, err
			}
			if ex := in.exemplars[in.table.hash]; len(ex) > 0 {
				for _, s := range ex {
					if labels.Equal(s.Labels, sd.labels(symbols, &sb)) {
						sd.exemplars = append(sd.exemplars, s.Exemplars...)
						in.exemplarsUsed++
					}
				}
			}
			in.advance(nameRank, symbols)
		}
		for _, in := range ins {
			if in.table.r.err != nil {
				return nil, nil, corruptSegment("series table", in.table.r.err)
			}
		}
		sd.samples = canonicalSamples(sd.samples)
		sd.hists, _, _ = canonicalHistograms(sd.hists, nil, nil)
		sd.exemplars = canonicalExemplars(sd.exemplars)
		if sd.numRows() == 0 && len(sd.exemplars) == 0 {
			// A series sent without samples: in a seal's table, but no
			// data to keep (a merge in memory, which reads the data,
			// never sees it).
			out.pairs = out.pairs[:at]
			continue
		}
		out.off = append(out.off, uint32(len(out.pairs)))
		out.Rows = append(out.Rows, uint32(sd.numRows()))
		out.Hashes = append(out.Hashes, hash)
		sk.idx.Series++
		if sk.idx.Series%256 == 0 {
			e.Opts.yield()
		}
		for _, p := range splitLongSeries([]*seriesData{sd}, maxRows, nil) {
			if err := sk.add(p); err != nil {
				return nil, nil, err
			}
		}
	}
	for i, in := range ins {
		if err := in.finished(); err != nil {
			return nil, nil, fmt.Errorf("segment %d: %w", segs[i].Seq, err)
		}
	}
	return sk.finish(out)
}

// mergeInput is one segment of a streaming merge.
type mergeInput struct {
	table *tableCursor
	rows  rowCursor
	more  bool   // table is at a series
	name  uint32 // that series' name, as seriesData.name
	// The segment's exemplars (its footer's, by SeriesHash) and metadata.
	exemplars     map[uint64][]Series
	exemplarCount int
	exemplarsUsed int
	meta          []Metadata
	series        int64 // the footer's count of series
}

// openMergeInput opens a segment for a streaming merge: its bytes (whose
// data checksum it checks, as every read of a whole segment does) and its
// index's series table.
func openMergeInput(seg *archive.StoredSegment) (*mergeInput, error) {
	sf, err := openSegment(seg.Bytes)
	if err != nil {
		return nil, err
	}
	cols, err := sf.columns()
	if err != nil {
		return nil, err
	}
	t, err := newTableCursor(seg.Index)
	if err != nil {
		return nil, err
	}
	extras, err := sf.extras()
	if err != nil {
		return nil, err
	}
	in := &mergeInput{table: t, rows: rowCursor{sf: sf, cols: cols}, meta: extras.Metadata, series: sf.index.Series}
	for _, s := range extras.Series {
		if in.exemplars == nil {
			in.exemplars = map[uint64][]Series{}
		}
		h := SeriesHash(s.Labels)
		in.exemplars[h] = append(in.exemplars[h], s)
		in.exemplarCount++
	}
	return in, nil
}

// advance moves to the table's next series and works out its name.
func (in *mergeInput) advance(nameRank int, symbols []string) {
	in.more = in.table.next()
	if !in.more {
		return
	}
	in.name = 0
	for j := 0; j+1 < len(in.table.key); j += 2 {
		if int(in.table.key[j]) == nameRank {
			if v := in.table.key[j+1]; symbols[v] != "" {
				in.name = v + 1
			}
			break
		}
	}
}

// compare orders two inputs by their next series, as sortSeries does.
func (in *mergeInput) compare(o *mergeInput) int {
	return cmp.Or(cmp.Compare(in.name, o.name), slices.Compare(in.table.key, o.table.key))
}

// finished checks that the input was read to its end, and that its table,
// rows and footer agree.
func (in *mergeInput) finished() error {
	t := in.table
	switch {
	case t.r.err != nil:
		return corruptSegment("series table", t.r.err)
	case int64(t.count) != in.series:
		return corruptSegment(fmt.Sprintf("series table lists %d series, footer %d", t.count, in.series), nil)
	case in.rows.pos != in.rows.n || in.rows.group != in.rows.sf.r.NumRowGroups():
		return corruptSegment("series table lists fewer rows than the segment holds", nil)
	case in.exemplarsUsed != in.exemplarCount:
		return corruptSegment("exemplars of a series the table does not list", nil)
	}
	return nil
}

// tableCursor reads a format-2 index's series table one series at a
// time, with each series' labels as ranks among a merge's symbols.
type tableCursor struct {
	r       reader
	symAt   reader // at the table's symbols
	seriesR reader // at its first series
	nsym    int
	syms    []string // the table's symbols: strings of the index bytes, not copied
	remap   []uint32 // symbol id -> rank among the merge's symbols
	total   int      // series in the table
	count   int      // series read
	prev    []uint32 // the last series' pairs, as ids
	key     []uint32 // the same as ranks
	rows    uint32
	hash    uint64
}

func newTableCursor(index []byte) (*tableCursor, error) {
	if !IndexHasTable(index) {
		return nil, corruptSegment("index without a series table", nil)
	}
	_, r, err := parseIndexHead(index)
	if err != nil {
		return nil, err
	}
	if r.err != nil {
		return nil, corruptSegment("index", r.err)
	}
	t := &tableCursor{symAt: r}
	t.nsym = r.count(1)
	t.syms = make([]string, 0, t.nsym)
	for i := 0; i < t.nsym && r.err == nil; i++ {
		b := r.bytes(r.count(1))
		// The index's bytes outlive the merge's use of them and are not
		// written to: the symbols refer to them rather than copy ~200 k
		// strings a segment at a million series.
		t.syms = append(t.syms, unsafe.String(unsafe.SliceData(b), len(b)))
		if i > 0 && r.err == nil && t.syms[i-1] >= t.syms[i] {
			r.fail("symbols not sorted")
		}
	}
	t.total = r.count(11)
	t.seriesR = r
	if r.err != nil {
		return nil, corruptSegment("series table", r.err)
	}
	t.r = r
	return t, nil
}

// next reads the next series; false at the end or on an error (in r.err).
func (t *tableCursor) next() bool {
	r := &t.r
	if t.count >= t.total || r.err != nil {
		return false
	}
	shared := r.uvarint()
	if r.err == nil && shared > uint64(len(t.prev)/2) {
		r.fail(fmt.Sprintf("series %d shares %d labels with one of %d", t.count, shared, len(t.prev)/2))
		return false
	}
	t.prev, t.key = t.prev[:2*shared], t.key[:2*shared]
	k := r.count(2)
	for j := 0; j < 2*k && r.err == nil; j++ {
		id := r.uvarint()
		if id >= uint64(t.nsym) {
			r.fail("symbol reference out of range")
			return false
		}
		t.prev = append(t.prev, uint32(id))
		t.key = append(t.key, t.remap[id])
	}
	rows := r.uvarint()
	if r.err == nil && rows > MaxRowGroupRows*1024 {
		r.fail(fmt.Sprintf("series %d claims %d rows", t.count, rows))
	}
	t.rows, t.hash = uint32(rows), r.u64()
	if r.err != nil {
		return false
	}
	t.count++
	return true
}

// rewind goes back to the first series.
func (t *tableCursor) rewind() {
	t.r, t.count, t.prev, t.key = t.seriesR, 0, t.prev[:0], t.key[:0]
}

// unionSymbols returns the sorted union of the inputs' symbols, and sets
// each table's remap to it. The symbols are strings of the inputs' index
// bytes.
func unionSymbols(ins []*mergeInput) ([]string, error) {
	var all []string
	for _, in := range ins {
		all = mergeSorted(all, in.table.syms)
	}
	for _, in := range ins {
		t := in.table
		t.remap = make([]uint32, len(t.syms))
		j := 0
		for i, s := range t.syms {
			for j < len(all) && all[j] < s {
				j++
			}
			if j == len(all) || all[j] != s {
				return nil, fmt.Errorf("promsample: symbol %q missing from the union", s) // cannot happen
			}
			t.remap[i] = uint32(j)
		}
		t.syms = nil
	}
	return all, nil
}

// mergeSorted returns the sorted union of two sorted lists of distinct
// strings.
func mergeSorted(a, b []string) []string {
	out := make([]string, 0, max(len(a), len(b)))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch c := strings.Compare(a[i], b[j]); {
		case c < 0:
			out = append(out, a[i])
			i++
		case c > 0:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i, j = i+1, j+1
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// rowCursor reads a segment's rows in order, a row group at a time.
type rowCursor struct {
	sf     *segmentFile
	cols   *segmentColumns
	rr     rowGroupReader
	group  int // the next row group to read
	pos, n int // the next row of the group read, and its rows
	at     valuePos
}

// take appends the next n rows' samples and histograms to sd.
func (c *rowCursor) take(n int, sd *seriesData) error {
	for n > 0 {
		if c.pos == c.n {
			if c.group >= c.sf.r.NumRowGroups() {
				return corruptSegment("series table lists more rows than the segment holds", nil)
			}
			rg := c.sf.r.RowGroup(c.group)
			rows := rg.NumRows()
			if err := c.rr.readValues(rg, c.cols, rows); err != nil {
				return fmt.Errorf("row group %d: %w", c.group, err)
			}
			c.group, c.pos, c.n, c.at = c.group+1, 0, int(rows), valuePos{}
			continue
		}
		end := min(c.pos+n, c.n)
		for r := c.pos; r < end; r++ {
			t := c.rr.ts[r]
			v, hb, hist, err := c.rr.value(r, &c.at)
			switch {
			case err != nil:
				return err
			case !hist:
				sd.samples = append(sd.samples, Sample{T: t, V: v})
			default:
				h, err := decodeHistogram(hb, t)
				if err != nil {
					return corruptSegment(fmt.Sprintf("histogram at row %d", r), err)
				}
				sd.hists = append(sd.hists, h)
			}
		}
		n -= end - c.pos
		c.pos = end
	}
	return nil
}
