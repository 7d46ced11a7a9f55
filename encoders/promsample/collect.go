package promsample

import (
	"bytes"
	"cmp"
	"math"
	"slices"
	"strings"

	"github.com/prometheus/prometheus/model/labels"
)

// collector gathers batches into canonical series: one entry per label set,
// series ordered by (metric name, labels), samples by (timestamp, value
// bits), exact duplicates removed. Encode, Merge and ReadRows all go through
// it, so a segment and the rows it was made from read back identically.
type collector struct {
	// byHash finds a series by its labels' hash, and collide, keyed by
	// label bytes, holds the (practically never seen) series whose hash
	// another label set already has. Keyed by the bytes themselves, the
	// map held a second copy of every series' labels: a third of a seal's
	// live heap.
	byHash  map[uint64]*seriesData
	collide map[string]*seriesData
	slab    []seriesData // where the next series are cut from
	meta    map[Metadata]struct{}
	key     []byte
	// symbols, once finish ran: every label name and value of the series,
	// sorted; each series' pairs index it.
	symbols []string
	// pack: float samples are held packed (packedSamples), for the encoder,
	// which holds a whole segment's samples; readers, which hand the
	// samples out, collect them as []Sample.
	pack  bool
	arena packArena // the packed samples' chunks
}

// seriesData is one series in canonical form.
type seriesData struct {
	lbls labels.Labels
	name string // __name__
	// pairs, set by finish: each label's (name, value) as indexes into
	// the collector's symbols, in label order (the segment's series table).
	pairs     []uint32
	samples   []Sample
	packed    packedSamples // float samples in a packing collector (samples is then empty until finish)
	hists     []Histogram
	exemplars []Exemplar
}

func newCollector() *collector {
	return &collector{byHash: make(map[uint64]*seriesData), meta: make(map[Metadata]struct{})}
}

// seriesSlab is how many series a collector allocates at once: one
// allocation instead of one per series, and no size-class rounding.
const seriesSlab = 256

// seriesOf returns the series of ls, adding it if it is new.
func (c *collector) seriesOf(ls labels.Labels) *seriesData {
	h := ls.Hash()
	sd := c.byHash[h]
	if sd != nil && labels.Equal(sd.lbls, ls) {
		return sd
	}
	if sd != nil {
		// Another label set has this hash.
		c.key = ls.Bytes(c.key[:0])
		if sd := c.collide[string(c.key)]; sd != nil {
			return sd
		}
		if c.collide == nil {
			c.collide = map[string]*seriesData{}
		}
		sd = c.newSeries(ls)
		c.collide[string(c.key)] = sd
		return sd
	}
	sd = c.newSeries(ls)
	c.byHash[h] = sd
	return sd
}

func (c *collector) newSeries(ls labels.Labels) *seriesData {
	if len(c.slab) == 0 {
		c.slab = make([]seriesData, seriesSlab)
	}
	sd := &c.slab[0]
	c.slab = c.slab[1:]
	sd.lbls, sd.name = ls, ls.Get(labels.MetricName)
	return sd
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
func (sd *seriesData) sampleSpan() (minT, maxT int64, ok bool) {
	minT, maxT = math.MaxInt64, math.MinInt64
	if sd.packed.n > 0 {
		minT, maxT = sd.packed.span()
		ok = true
	}
	for _, s := range sd.samples {
		minT, maxT, ok = min(minT, s.T), max(maxT, s.T), true
	}
	return minT, maxT, ok
}

// unpack moves sd's packed samples into samples.
func (sd *seriesData) unpack() {
	if sd.packed.n == 0 {
		return
	}
	sd.samples = sd.packed.unpack(sd.samples)
	sd.packed = packedSamples{}
}

// samplesInto returns sd's float samples in canonical order, decoding
// packed ones into scratch (which it may grow and returns too).
func (sd *seriesData) samplesInto(scratch []Sample) (samples, grown []Sample) {
	if sd.packed.n == 0 {
		return sd.samples, scratch
	}
	scratch = sd.packed.unpack(scratch[:0])
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

// finish returns the canonical series and metadata.
func (c *collector) finish() ([]*seriesData, []Metadata) {
	out := make([]*seriesData, 0, len(c.byHash)+len(c.collide))
	for _, sd := range c.byHash {
		out = append(out, sd)
	}
	for _, sd := range c.collide {
		out = append(out, sd)
	}
	// The maps are done with: what they take goes before the segment is
	// written.
	c.byHash, c.collide, c.slab = nil, nil, nil
	var scratchA, scratchB []byte
	for _, sd := range out {
		// Packed samples that arrived in strictly increasing time are
		// canonical already and stay packed; others (late or retried
		// samples: rare) are unpacked and sorted here.
		if !sd.packed.ordered {
			sd.unpack()
		}
		sd.samples = canonicalSamples(sd.samples)
		sd.hists, scratchA, scratchB = canonicalHistograms(sd.hists, scratchA, scratchB)
		sd.exemplars = canonicalExemplars(sd.exemplars)
	}
	c.symbols = sortSeries(out)
	meta := make([]Metadata, 0, len(c.meta))
	for m := range c.meta {
		meta = append(meta, m)
	}
	slices.SortFunc(meta, compareMetadata)
	return out, meta
}

// sortSeries orders series by (metric name, labels): name first, then
// labels.Compare, and returns the sorted distinct strings of their labels,
// with each series' pairs set to its labels' indexes into them. It
// compares ranks, not strings: every distinct string is numbered once, the
// numbers are renumbered into the strings' sorted order, and each series
// gets a key of ranks (its name, then each label's name and value), so
// that comparing two keys element by element, then by length, is comparing
// (name, labels). The ranks are also the segment's series table
// (newSeriesTable), which numbered the strings a second time before. At a
// million series a seal sorts ~170 k series a stream, and comparing their
// labels as strings (three labels deep before two bench-shaped series
// differ) was 13% of the receiver's CPU (profile of the 1 M benchmark).
func sortSeries(out []*seriesData) []string {
	ids := make(map[string]uint32, 1024)
	var strs []string
	// prev holds the previous series' strings by position: neighbouring
	// series mostly share the names and many values, and an equal string
	// skips the map.
	var prev []string
	var prevID []uint32
	id := func(pos int, s string) uint32 {
		if pos < len(prev) && prev[pos] == s {
			return prevID[pos]
		}
		n, ok := ids[s]
		if !ok {
			n = uint32(len(strs))
			strs = append(strs, s)
			ids[s] = n
		}
		for len(prev) <= pos {
			prev, prevID = append(prev, ""), append(prevID, 0)
		}
		prev[pos], prevID[pos] = s, n
		return n
	}
	type keyed struct {
		sd       *seriesData
		off, end uint32
	}
	ks := make([]keyed, len(out))
	keys := make([]uint32, 0, len(out)*8)
	for i, sd := range out {
		off := len(keys)
		// The name is one of the label values (or "", no __name__, which
		// no label string is: names and values are never empty), so it
		// takes its value's rank, shifted by one to put "" first.
		keys = append(keys, 0)
		pos := 0
		sd.lbls.Range(func(l labels.Label) {
			keys = append(keys, id(pos, l.Name), id(pos+1, l.Value))
			if l.Name == labels.MetricName {
				keys[off] = keys[len(keys)-1] + 1
			}
			pos += 2
		})
		if sd.name == "" {
			keys[off] = 0
		}
		ks[i] = keyed{sd: sd, off: uint32(off), end: uint32(len(keys))}
	}
	order := make([]uint32, len(strs))
	for i := range order {
		order[i] = uint32(i)
	}
	slices.SortFunc(order, func(a, b uint32) int { return strings.Compare(strs[a], strs[b]) })
	rank := make([]uint32, len(strs))
	sorted := make([]string, len(strs))
	for r, i := range order {
		rank[i] = uint32(r)
		sorted[r] = strs[i]
	}
	for _, k := range ks {
		if keys[k.off] > 0 {
			keys[k.off] = rank[keys[k.off]-1] + 1
		}
		for i := k.off + 1; i < k.end; i++ {
			keys[i] = rank[keys[i]]
		}
	}
	slices.SortFunc(ks, func(a, b keyed) int {
		return slices.Compare(keys[a.off:a.end], keys[b.off:b.end])
	})
	for i, k := range ks {
		out[i] = k.sd
		k.sd.pairs = keys[k.off+1 : k.end : k.end]
	}
	return sorted
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
