package promsample

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"hash/maphash"
	"math"
	"math/bits"
	"slices"
	"strings"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/prometheus/model/labels"
)

// collector gathers batches into canonical series: one entry per label set,
// series ordered by (metric name, labels), samples by (timestamp, value
// bits), exact duplicates removed. Encode, Merge and ReadRows all go through
// it, so a segment and the rows it was made from read back identically.
//
// A series' labels are held as ids into the collector's string table
// (syms), which a seal's rowCollector shares: each distinct string of the
// rows is copied out of them once, and a series costs 4 bytes per label
// name and value instead of a labels.Labels of its own (~200 bytes for a
// Kubernetes target's eight labels, the largest part of a seal's live heap
// at high cardinality).
type collector struct {
	// slabs hold the series in order of arrival, seriesSlab a slab: one
	// allocation for many. Series i is slabs[i/seriesSlab][i%seriesSlab];
	// there are count.
	slabs [][]seriesData
	count int
	index seriesIndex // finds a series by its label ids
	// indexed is how many of the series (in order of arrival) index holds.
	// addFresh adds a series without indexing it; the next lookup indexes
	// those first (catchUp). Series added unlooked-up may repeat a label
	// set, and finish merges such twins.
	indexed int
	// reserveFor is the series count to size index for when it is first
	// built (Encoder.sizeHint): a seal whose series are all fresh never
	// builds it.
	reserveFor int
	pairs      []uint32 // where the next series' pairs are cut from
	meta       map[Metadata]struct{}
	syms       symtab
	nameID     uint32   // the id of labels.MetricName in syms
	ids        []uint32 // scratch: one label set's ids
	// recent holds the strings of the label set seriesOf interned last,
	// by position, with their ids: neighbouring series mostly share the
	// label names and many values, and an equal string skips the map.
	recent   []string
	recentID []uint32
	// hot caches interned strings by their hash (one entry a slot): the
	// values many series share (a job, a namespace, a metric name) are
	// found without syms' map, whose lookups mostly miss the processor's
	// caches (a seal's table holds a string or two per series).
	hot  *[hotSlots]hotString
	seed maphash.Seed
	// symbols, once finish ran: every label name and value of the series,
	// sorted; each series' pairs index it. isName marks the label names.
	symbols []string
	isName  []bool
	// pack: float samples are held packed (packedSamples), for the encoder,
	// which holds a whole segment's samples; readers, which hand the
	// samples out, collect them as []Sample.
	pack  bool
	arena packArena // the packed samples' chunks
}

const hotSlots = 1024

// hotString is a slot of collector.hot: id is the string's id plus one, 0
// for an empty slot.
type hotString struct {
	s  string
	id uint32
}

// symtab numbers strings in order of arrival, each distinct one once. A
// rowCollector embeds its collector's: the names strID and strs are the
// ones the row decoders (rowcodec.go, rowv2.go) intern a row's strings by.
type symtab struct {
	strID map[string]uint32 // string -> id
	strs  []string          // id -> string
}

// id returns s's id, adding it if it is new. s is copied when added: the
// caller's may be part of a larger string (a labels.Labels' bytes) that
// the table must not keep alive.
func (t *symtab) id(s string) uint32 {
	if id, ok := t.strID[s]; ok {
		return id
	}
	id := uint32(len(t.strs)) // a seal holds far fewer than 2^32 strings: each is a row's bytes
	s = strings.Clone(s)
	t.strs = append(t.strs, s)
	t.strID[s] = id
	return id
}

// seriesData is one series in canonical form.
type seriesData struct {
	// pairs are the series' labels as (name, value) ids, in label order:
	// into the collector's syms while collecting, and once finish ran into
	// its sorted symbols (the segment's series table).
	pairs []uint32
	// name is 1 + the id of __name__'s value (like pairs: into syms, then
	// symbols), 0 when the series has no __name__ or an empty one.
	name      uint32
	samples   []Sample
	packed    packedSamples // float samples in a packing collector (samples is then empty until finish)
	hists     []Histogram
	exemplars []Exemplar
}

func newCollector() *collector {
	c := &collector{meta: make(map[Metadata]struct{}),
		syms: symtab{strID: make(map[string]uint32)}}
	c.nameID = c.syms.id(labels.MetricName)
	return c
}

// seriesSlab is how many series a collector allocates at once: 512 of 144
// bytes are 72 KiB, whole pages, which a large allocation is rounded up
// to (256 took 40 KiB for 36).
const seriesSlab = 512

// pairSlab is how many label ids a collector allocates at once (a series
// of eight labels takes 16).
const pairSlab = 4096

// seriesOf returns the series of ls, adding it if it is new.
func (c *collector) seriesOf(ls labels.Labels) *seriesData {
	ids, pos := c.ids[:0], 0
	ls.Range(func(l labels.Label) {
		ids = append(ids, c.intern(pos, l.Name), c.intern(pos+1, l.Value))
		pos += 2
	})
	c.ids = ids
	return c.seriesOfIDs(ids)
}

// intern returns the id of s, the string at position pos of a label set.
func (c *collector) intern(pos int, s string) uint32 {
	if pos < len(c.recent) && c.recent[pos] == s {
		return c.recentID[pos]
	}
	if c.hot == nil {
		c.hot, c.seed = new([hotSlots]hotString), maphash.MakeSeed()
	}
	var id uint32
	if h := &c.hot[maphash.String(c.seed, s)%hotSlots]; h.id != 0 && h.s == s {
		id = h.id - 1
	} else {
		id = c.syms.id(s)
		h.s, h.id = c.syms.strs[id], id+1 // the table's copy, as below
	}
	for len(c.recent) <= pos {
		c.recent, c.recentID = append(c.recent, ""), append(c.recentID, 0)
	}
	// The table's copy: s may be part of a labels.Labels not to be kept.
	c.recent[pos], c.recentID[pos] = c.syms.strs[id], id
	return id
}

// seriesOfIDs returns the series whose labels are ids (pairs of syms ids,
// in label order), adding it if it is new. Interning is one to one, so two
// label sets are equal exactly when their ids are.
func (c *collector) seriesOfIDs(ids []uint32) *seriesData {
	return c.seriesOfHashed(ids, xxhash.Sum64(idBytes(ids)))
}

// addFresh adds a series of ids (as seriesOfIDs takes them) without
// looking for it: for a label set its caller has reason to think new (an
// anchor of the first epoch a seal reads, which a writer anchors once but
// for a race, rowv2.go's rule 2). If it was not new, finish merges the
// two. At a million series, a seal's lookups were a cache miss a series
// in a table of a few MiB, paid for series that were nearly all new.
func (c *collector) addFresh(ids []uint32) *seriesData { return c.newSeries(ids) }

// seriesOfHashed is seriesOfIDs with the ids' hash h given (tests give
// colliding ones).
func (c *collector) seriesOfHashed(ids []uint32, h uint64) *seriesData {
	if c.indexed < c.count || c.index.slots == nil {
		c.catchUp()
	}
	x := &c.index
	if 4*(x.n+1) > 3*len(x.slots) {
		x.grow()
	}
	tag := uint32(h >> 32)
	mask := uint32(len(x.slots) - 1) // a power of two
	for i := tag & mask; ; i = (i + 1) & mask {
		slot := x.slots[i]
		if slot == 0 {
			// Not there: the probe ends at an empty slot, which a table
			// at most 3/4 full always has.
			sd := c.newSeries(ids) // series number count-1
			x.slots[i] = uint64(tag)<<32 | uint64(c.count)
			x.n++
			c.indexed = c.count
			return sd
		}
		if uint32(slot>>32) == tag {
			n := int(uint32(slot)) - 1
			if sd := &c.slabs[n/seriesSlab][n%seriesSlab]; slices.Equal(sd.pairs, ids) {
				return sd
			}
		}
	}
}

// catchUp makes the index (at its first use, sized by reserveFor) and
// indexes the series added fresh since the last lookup. Of twins
// among them the first is indexed (lookups find it); the others stay for
// finish to merge.
func (c *collector) catchUp() {
	x := &c.index
	x.reserve(max(c.reserveFor, c.count))
	mask := uint32(len(x.slots) - 1)
	for n := c.indexed; n < c.count; n++ {
		if 4*(x.n+1) > 3*len(x.slots) {
			x.grow()
			mask = uint32(len(x.slots) - 1)
		}
		sd := &c.slabs[n/seriesSlab][n%seriesSlab]
		tag := uint32(xxhash.Sum64(idBytes(sd.pairs)) >> 32)
		for i := tag & mask; ; i = (i + 1) & mask {
			slot := x.slots[i]
			if slot == 0 {
				x.slots[i] = uint64(tag)<<32 | uint64(n+1)
				x.n++
				break
			}
			if uint32(slot>>32) == tag {
				m := int(uint32(slot)) - 1
				if slices.Equal(c.slabs[m/seriesSlab][m%seriesSlab].pairs, sd.pairs) {
					break
				}
			}
		}
	}
	c.indexed = c.count
}

// seriesIndex finds a collector's series by the hash of their label ids,
// by open addressing with linear probing. A slot holds the top 32 bits of
// the hash (the tag) and the series' number plus one (0: an empty slot);
// a series' probe starts at its tag modulo the table's size, so growing
// the table needs no series' hash again. 8 bytes a slot, at most 3/4 full:
// 11-21 bytes a series, where a map[uint64]*seriesData took ~37. A
// collector holds far fewer than 2^32 series (each is its seriesData and
// labels, ~200 bytes).
type seriesIndex struct {
	slots []uint64
	n     int
}

// grow doubles the table (or makes its first one).
func (x *seriesIndex) grow() { x.resize(max(1024, 2*len(x.slots))) }

// reserve makes an empty table's first one large enough for n series
// without growing: a table grown by doubling moves every series about
// once more, each move a cache miss at a seal's sizes.
func (x *seriesIndex) reserve(n int) {
	if x.n == 0 && n > 0 {
		size := 1024
		for 3*size < 4*n { // at most 3/4 full
			size *= 2
		}
		if size > len(x.slots) {
			x.resize(size)
		}
	}
}

// resize rehashes the table into size slots (a power of two).
func (x *seriesIndex) resize(size int) {
	old := x.slots
	x.slots = make([]uint64, size)
	mask := uint32(len(x.slots) - 1)
	for _, slot := range old {
		if slot == 0 {
			continue
		}
		i := uint32(slot>>32) & mask
		for x.slots[i] != 0 {
			i = (i + 1) & mask
		}
		x.slots[i] = slot
	}
}

// idBytes is ids' memory as bytes (native byte order: a key within the
// process, never stored).
func idBytes(ids []uint32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(ids))), 4*len(ids))
}

func (c *collector) newSeries(ids []uint32) *seriesData {
	if c.count%seriesSlab == 0 {
		c.slabs = append(c.slabs, make([]seriesData, seriesSlab))
	}
	sd := &c.slabs[c.count/seriesSlab][c.count%seriesSlab]
	c.count++
	if cap(c.pairs)-len(c.pairs) < len(ids) {
		c.pairs = make([]uint32, 0, max(pairSlab, len(ids)))
	}
	at := len(c.pairs)
	c.pairs = append(c.pairs, ids...)
	sd.pairs = c.pairs[at:len(c.pairs):len(c.pairs)] // full: an append to it cannot reach the next series'
	for i := 0; i+1 < len(ids); i += 2 {
		if ids[i] == c.nameID {
			if c.syms.strs[ids[i+1]] != "" {
				sd.name = ids[i+1] + 1
			}
			break // the first __name__, as labels.Labels.Get finds it
		}
	}
	return sd
}

// labels returns sd's labels, built with b; its ids index symbols (set by
// finish).
func (sd *seriesData) labels(symbols []string, b *labels.ScratchBuilder) labels.Labels {
	b.Reset()
	for i := 0; i+1 < len(sd.pairs); i += 2 {
		b.Add(symbols[sd.pairs[i]], symbols[sd.pairs[i+1]])
	}
	return b.Labels()
}

// metricName returns sd's __name__, "" without one; its ids index symbols.
func metricName(sd *seriesData, symbols []string) string {
	if sd.name == 0 {
		return ""
	}
	return symbols[sd.name-1]
}

// output returns the series (from finish) as Series sharing their samples.
func (c *collector) output(series []*seriesData) []Series {
	out := make([]Series, 0, len(series))
	var b labels.ScratchBuilder
	for _, s := range series {
		out = append(out, Series{Labels: s.labels(c.symbols, &b), Samples: s.samples, Histograms: s.hists, Exemplars: s.exemplars})
	}
	return out
}

// newPackingCollector returns a collector that holds float samples packed.
func newPackingCollector() *collector {
	c := newCollector()
	c.pack = true
	return c
}

// numSamples is sd's float sample count, packed or not.
func (sd *seriesData) numSamples() int { return len(sd.samples) + int(sd.packed.n) }

// numRows is sd's Parquet row count: a row per float sample or histogram.
func (sd *seriesData) numRows() int { return sd.numSamples() + len(sd.hists) }

// sampleSpan returns the least and greatest float sample timestamps (ok
// false without samples).
func (sd *seriesData) sampleSpan(a *packArena) (minT, maxT int64, ok bool) {
	minT, maxT = math.MaxInt64, math.MinInt64
	if sd.packed.n > 0 {
		minT, maxT = sd.packed.span(a)
		ok = true
	}
	for _, s := range sd.samples {
		minT, maxT, ok = min(minT, s.T), max(maxT, s.T), true
	}
	return minT, maxT, ok
}

// unpack moves sd's packed samples (in a) into samples.
func (sd *seriesData) unpack(a *packArena) {
	if sd.packed.n == 0 {
		return
	}
	sd.samples = sd.packed.unpack(a, sd.samples)
	sd.packed = packedSamples{}
}

// samplesInto returns sd's float samples in canonical order, decoding
// packed ones into scratch (which it may grow and returns too).
func (sd *seriesData) samplesInto(a *packArena, scratch []Sample) (samples, grown []Sample) {
	if sd.packed.n == 0 {
		return sd.samples, scratch
	}
	scratch = sd.packed.unpack(a, scratch[:0])
	return scratch, scratch
}

func (c *collector) add(b *Batch) {
	for i := range b.Series {
		s := &b.Series[i]
		sd := c.seriesOf(s.Labels)
		if c.pack {
			for _, smp := range s.Samples {
				sd.packed.add(&c.arena, smp.T, smp.V)
			}
		} else {
			sd.samples = append(sd.samples, s.Samples...)
		}
		sd.hists = append(sd.hists, s.Histograms...)
		sd.exemplars = append(sd.exemplars, s.Exemplars...)
	}
	for _, m := range b.Metadata {
		c.meta[m] = struct{}{}
	}
}

// addSeries adds one already-decoded series (the segment reader's output).
func (c *collector) addSeries(s Series) {
	b := Batch{Series: []Series{s}}
	c.add(&b)
}

// finish returns the canonical series and metadata, and sets symbols.
func (c *collector) finish() ([]*seriesData, []Metadata) {
	out := make([]*seriesData, 0, c.count)
	for i := range c.count {
		out = append(out, &c.slabs[i/seriesSlab][i%seriesSlab])
	}
	// The index is done with: what it takes goes before the segment is
	// written (the slabs stay, referred to by out).
	c.slabs, c.index, c.pairs = nil, seriesIndex{}, nil
	var scratchA, scratchB []byte
	for _, sd := range out {
		// Packed samples that arrived in strictly increasing time are
		// canonical already and stay packed; others (late or retried
		// samples: rare) are unpacked and sorted here.
		if !sd.packed.ordered {
			sd.unpack(&c.arena)
		}
		sd.samples = canonicalSamples(sd.samples)
		sd.hists, scratchA, scratchB = canonicalHistograms(sd.hists, scratchA, scratchB)
		sd.exemplars = canonicalExemplars(sd.exemplars)
	}
	var twins bool
	c.symbols, c.isName, twins = sortSeries(out, c.syms.strs)
	if twins {
		out = c.mergeTwins(out)
	}
	// The string table goes too: symbols holds the strings the series use
	// (not those of exemplars or metadata only).
	c.syms, c.recent, c.recentID, c.hot = symtab{}, nil, nil, nil
	meta := make([]Metadata, 0, len(c.meta))
	for m := range c.meta {
		meta = append(meta, m)
	}
	slices.SortFunc(meta, compareMetadata)
	return out, meta
}

// mergeTwins merges the series of out (sorted) that share their labels,
// which only series added fresh can (twins sort side by side), and
// returns out without the merged ones. A merged series' samples are made
// canonical again. It compares every neighbour's labels, a cache miss a
// series: finish calls it only when sortSeries met twins.
func (c *collector) mergeTwins(out []*seriesData) []*seriesData {
	var scratchA, scratchB []byte
	keep := out[:0]
	for i, sd := range out {
		if i == 0 || compareRanked(keep[len(keep)-1], sd) != 0 {
			keep = append(keep, sd)
			continue
		}
		into := keep[len(keep)-1]
		into.unpack(&c.arena)
		sd.unpack(&c.arena)
		into.samples = canonicalSamples(append(into.samples, sd.samples...))
		into.hists, scratchA, scratchB = canonicalHistograms(append(into.hists, sd.hists...), scratchA, scratchB)
		into.exemplars = canonicalExemplars(append(into.exemplars, sd.exemplars...))
		*sd = seriesData{}
	}
	clear(out[len(keep):])
	return keep
}

// sortSeries orders series by (metric name, labels): name first, then
// labels.Compare. Their pairs and names are ids into strs; it returns the
// sorted distinct strings the series use and turns every id into its
// string's rank among them (the segment's series table). It compares
// ranks, not strings: comparing two series' pairs id by id, then by
// length, is comparing their labels, and the name's rank compares the
// names ("" first: no series' name is "", see seriesData.name). At a
// million series a seal sorts ~170 k series a stream, and comparing their
// labels as strings (three labels deep before two bench-shaped series
// differ) was 13% of the receiver's CPU (profile of the 1 M benchmark).
// isName marks the ranks that are label names, for the segment's label
// columns: marked here, while the series are read in the order they were
// collected (slab by slab), rather than in a pass of its own over the
// sorted series, which the sort scatters over memory. twins reports
// whether two series have the same labels (see collector.addFresh).
func sortSeries(out []*seriesData, strs []string) (symbols []string, isName []bool, twins bool) {
	// rank[id] is 1 + the id's rank once the used ids are sorted, 0 for a
	// string no series uses.
	rank := make([]uint32, len(strs))
	used := 0
	for _, sd := range out {
		for _, id := range sd.pairs {
			if rank[id] == 0 {
				rank[id] = 1
				used++
			}
		}
	}
	order := make([]uint32, 0, used)
	for id, r := range rank {
		if r != 0 {
			order = append(order, uint32(id))
		}
	}
	sortStrings(order, strs)
	sorted := make([]string, len(order))
	for r, id := range order {
		rank[id] = uint32(r) + 1
		sorted[r] = strs[id]
	}
	isName = make([]bool, len(sorted))
	for _, sd := range out {
		for i, id := range sd.pairs {
			r := rank[id] - 1
			sd.pairs[i] = r
			if i%2 == 0 {
				isName[r] = true
			}
		}
		if sd.name > 0 {
			// A name is one of the pairs' values, so its id was ranked.
			sd.name = rank[sd.name-1]
		}
	}
	return sorted, isName, sortByKeys(out, len(sorted))
}

// sortStrings sorts ids by their strings, as strings.Compare does, eight
// bytes at a time: by each string's first eight (a big-endian number,
// then how many there were), then each run of ids whose eight were equal
// by the next eight, and so on. Those numbers sit side by side in one
// array, where comparing the strings themselves went through a string
// header and its bytes, both cache misses, ~18 times a string (a seal
// sorts every distinct label value of its stream: 200 k of them at a
// million series).
func sortStrings(ids []uint32, strs []string) {
	type chunk struct {
		k  uint64
		n  uint32 // bytes of the string in k: under 8 at its end
		id uint32
	}
	cs := make([]chunk, len(ids))
	for i, id := range ids {
		cs[i].id = id
	}
	var sortFrom func(cs []chunk, off int)
	sortFrom = func(cs []chunk, off int) {
		for i := range cs {
			s := strs[cs[i].id]
			var b [8]byte
			n := 0
			if off < len(s) {
				n = copy(b[:], s[off:])
			}
			cs[i].k, cs[i].n = binary.BigEndian.Uint64(b[:]), uint32(n)
		}
		// Equal k and n: the same bytes, and for n under 8 the same
		// (distinct strings cannot end together); a shorter end of equal
		// bytes sorts first, as a prefix does.
		slices.SortFunc(cs, func(a, b chunk) int {
			if a.k != b.k {
				return cmp.Compare(a.k, b.k)
			}
			return cmp.Compare(a.n, b.n)
		})
		for lo := 0; lo < len(cs); {
			hi := lo + 1
			for hi < len(cs) && cs[hi].k == cs[lo].k && cs[hi].n == cs[lo].n {
				hi++
			}
			if hi-lo > 1 && cs[lo].n == 8 {
				sortFrom(cs[lo:hi], off+8)
			}
			lo = hi
		}
	}
	sortFrom(cs, 0)
	for i, c := range cs {
		ids[i] = c.id
	}
}

// compareRanked is the order of sortSeries once ids are ranks.
func compareRanked(a, b *seriesData) int {
	if a.name != b.name {
		return cmp.Compare(a.name, b.name)
	}
	return slices.Compare(a.pairs, b.pairs)
}

// sortByKeys sorts out (ids ranked, below ranks) by compareRanked.
//
// Comparing through each series' pointer and then its pairs' missed the
// CPU cache at every step: 0.9 us a series at 200 k series, 8% of the
// receiver's CPU loading a million. So each series gets a key packed from
// the values its comparison mostly turns on, and the sort compares keys
// side by side in one array, going to the series only on a tie. Position
// j of a series is pairs[j]+1, or 0 past its end (so a series that is a
// prefix of another sorts first, as slices.Compare has it); positions
// where every series holds the same value decide no comparison and are
// skipped. A key is the name, then the first positions that vary, as many
// as fit in 64 bits: keys that differ order their series as
// compareRanked does, and equal keys leave it to compareRanked.
//
// twins reports whether two series compare equal. Twins have equal keys
// and end side by side, so only neighbours of equal keys are compared,
// which a seal without twins (nearly all) has few or none of.
func sortByKeys(out []*seriesData, ranks int) (twins bool) {
	width := bits.Len(uint(ranks + 1))
	if len(out) < 2 || width > 32 {
		slices.SortFunc(out, compareRanked)
		for i := 1; i < len(out) && !twins; i++ {
			twins = compareRanked(out[i-1], out[i]) == 0
		}
		return twins
	}
	fields := 64 / width
	longest := 0
	for _, sd := range out {
		longest = max(longest, len(sd.pairs))
	}
	at := func(sd *seriesData, j int) uint64 {
		if j < len(sd.pairs) {
			return uint64(sd.pairs[j]) + 1
		}
		return 0
	}
	// One pass finds the positions that vary and whether every series'
	// name is its value at position 1 (__name__ is its first label, as it
	// is unless a label name sorts before it), in which case the name
	// field already holds position 1. A pass per position, stopping at
	// the first series that differed, read every series again for each
	// position that never varies (every label name, a constant label):
	// in the 1 M benchmark's server profile those passes were 40% of the
	// sort. Positions past the fields-1 first that vary are not looked at
	// (cut).
	first := make([]uint64, longest)
	for j := range first {
		first[j] = at(out[0], j)
	}
	varies := make([]bool, longest)
	named := true
	cut := longest
	for _, sd := range out {
		if named && (sd.name == 0 || at(sd, 1) != uint64(sd.name)) {
			named = false
			cut = varyingPrefix(varies, fields-1, named)
		}
		for j := 0; j < cut; j++ {
			if !varies[j] && at(sd, j) != first[j] {
				varies[j] = true
				cut = varyingPrefix(varies, fields-1, named)
			}
		}
	}
	var vary []int // positions that vary, in order, up to fields-1
	for j := 0; j < cut && len(vary) < fields-1; j++ {
		if varies[j] && !(j == 1 && named) {
			vary = append(vary, j)
		}
	}
	used := width * (1 + len(vary))
	ks := make([]keyedSeries, len(out))
	for i, sd := range out {
		k := uint64(sd.name)
		for _, j := range vary {
			k = k<<width | at(sd, j)
		}
		// Left-aligned, so that fewer fields compare as more would.
		ks[i] = keyedSeries{k << (64 - used), sd}
	}
	if len(ks) < radixSortMin {
		slices.SortFunc(ks, func(a, b keyedSeries) int {
			if a.key != b.key {
				return cmp.Compare(a.key, b.key)
			}
			return compareRanked(a.sd, b.sd)
		})
	} else {
		ks = radixSortKeys(ks, make([]keyedSeries, len(ks)), used)
		// Equal keys leave the order to compareRanked.
		for lo := 0; lo < len(ks); {
			hi := lo + 1
			for hi < len(ks) && ks[hi].key == ks[lo].key {
				hi++
			}
			if hi-lo > 1 {
				slices.SortFunc(ks[lo:hi], func(a, b keyedSeries) int { return compareRanked(a.sd, b.sd) })
			}
			lo = hi
		}
	}
	for i, k := range ks {
		out[i] = k.sd
		twins = twins || i > 0 && k.key == ks[i-1].key && compareRanked(ks[i-1].sd, k.sd) == 0
	}
	return twins
}

// varyingPrefix returns the length of the shortest prefix of positions
// holding n that vary (position 1 not counted when named: the name field
// holds it), or len(varies) if there are fewer. Positions past it cannot
// be in a key. named only turns false as series are read, which counts
// position 1 and shortens the prefix: a prefix computed while it was true
// is never shorter than the last one.
func varyingPrefix(varies []bool, n int, named bool) int {
	for j, v := range varies {
		if v && !(j == 1 && named) {
			if n--; n == 0 {
				return j + 1
			}
		}
	}
	return len(varies)
}

// keyedSeries is a series and its sort key (sortByKeys).
type keyedSeries struct {
	key uint64
	sd  *seriesData
}

// radixSortMin is the fewest series sortByKeys sorts by radix: below it a
// comparison sort is as fast.
const radixSortMin = 512

// radixDigit is the bits a radix pass sorts by: 2,048 counters, 16 KiB.
const radixDigit = 11

// radixSortKeys sorts ks by key, whose bits below its top used are zero,
// and returns the sorted slice: ks or tmp (as long as ks). A least
// significant digit radix sort, stable, one pass a digit, skipping the
// digits every key shares (the name's, when a seal holds one metric).
// A comparison sort of a seal's keys (pdqsort, 17 comparisons a key at
// 150,000 series) was 3% of the receiver's CPU at a million series.
func radixSortKeys(ks, tmp []keyedSeries, used int) []keyedSeries {
	low := 64 - used
	for shift := low; shift < 64; shift += radixDigit {
		var count [1 << radixDigit]int
		for _, k := range ks {
			count[(k.key>>shift)&(1<<radixDigit-1)]++
		}
		if count[(ks[0].key>>shift)&(1<<radixDigit-1)] == len(ks) {
			continue // one digit for all: this pass would not move a key
		}
		at := 0
		for d, c := range count {
			count[d] = at
			at += c
		}
		for _, k := range ks {
			d := (k.key >> shift) & (1<<radixDigit - 1)
			tmp[count[d]] = k
			count[d]++
		}
		ks, tmp = tmp, ks
	}
	return ks
}

func compareMetadata(a, b Metadata) int {
	return cmp.Or(strings.Compare(a.MetricFamily, b.MetricFamily), strings.Compare(string(a.Type), string(b.Type)),
		strings.Compare(a.Help, b.Help), strings.Compare(a.Unit, b.Unit))
}

// canonicalSamples sorts by (T, value bits) and drops exact duplicates (a
// sender's retry). Samples with one timestamp and different bits are kept.
func canonicalSamples(s []Sample) []Sample {
	sorted := slices.IsSortedFunc(s, compareSample)
	if !sorted {
		slices.SortFunc(s, compareSample)
	}
	return slices.CompactFunc(s, func(a, b Sample) bool {
		return a.T == b.T && math.Float64bits(a.V) == math.Float64bits(b.V)
	})
}

func compareSample(a, b Sample) int {
	return cmp.Or(cmp.Compare(a.T, b.T), cmp.Compare(math.Float64bits(a.V), math.Float64bits(b.V)))
}

// canonicalHistograms sorts by T, orders histograms sharing a timestamp by
// their encoding and drops exact duplicates (equal encodings).
func canonicalHistograms(hs []Histogram, a, b []byte) ([]Histogram, []byte, []byte) {
	if len(hs) < 2 {
		return hs, a, b
	}
	slices.SortStableFunc(hs, func(x, y Histogram) int { return cmp.Compare(x.T, y.T) })
	out := hs[:0]
	for i := 0; i < len(hs); {
		j := i + 1
		for j < len(hs) && hs[j].T == hs[i].T {
			j++
		}
		run := hs[i:j]
		if len(run) > 1 {
			slices.SortStableFunc(run, func(x, y Histogram) int {
				a, _ = appendHistogram(a[:0], x)
				b, _ = appendHistogram(b[:0], y)
				return bytes.Compare(a, b)
			})
		}
		for k := range run {
			if k > 0 {
				a, _ = appendHistogram(a[:0], run[k-1])
				b, _ = appendHistogram(b[:0], run[k])
				if bytes.Equal(a, b) {
					continue
				}
			}
			out = append(out, run[k])
		}
		i = j
	}
	return out, a, b
}

func canonicalExemplars(es []Exemplar) []Exemplar {
	if len(es) < 2 {
		return es
	}
	c := func(a, b Exemplar) int {
		return cmp.Or(cmp.Compare(a.T, b.T), cmp.Compare(math.Float64bits(a.V), math.Float64bits(b.V)),
			labels.Compare(a.Labels, b.Labels))
	}
	slices.SortFunc(es, c)
	return slices.CompactFunc(es, func(a, b Exemplar) bool { return c(a, b) == 0 })
}
