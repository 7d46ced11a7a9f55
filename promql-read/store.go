package promread

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// store is the read core shared by the Queryable and the handlers.
type store struct {
	a     *archive.Archive
	cache *cache
	opts  Options
	// tails remembers, per stream, the cache key of the last live tail
	// built, so the next one can extend it (see liveTail). One small
	// entry per stream ever read; the tails themselves live in the cache.
	tailsMu sync.Mutex
	tails   map[streamRef]cacheKey
	// tailBuilds counts live tails decoded whole and extended from the
	// previous one (for tests and profiles).
	tailBuilds struct{ whole, extended atomic.Int64 }
	// memos remembers catalog answers per connection and snapshot version
	// (see catalog).
	memos memos
	// par is how answers are decoded and encoded on several goroutines.
	par parallelism
}

// series is one series of an answer. Its slices may be shared with the
// cache and are read-only.
type series struct {
	lbls      labels.Labels
	floats    []promsample.Sample    // by T
	hists     []promsample.Histogram // by T
	exemplars []promsample.Exemplar  // by T
}

// budget counts samples against a limit shared by every Select of one
// question (a PromQL query, a remote-read request).
type budget struct {
	limit int64
	used  atomic.Int64
}

func newBudget(limit int) *budget { return &budget{limit: int64(limit)} }

func (b *budget) take(n int) error {
	if b == nil || b.limit <= 0 {
		return nil
	}
	if b.used.Add(int64(n)) > b.limit {
		return &SampleLimitError{Limit: int(b.limit)}
	}
	return nil
}

// selectParams is one Select.
type selectParams struct {
	mint, maxt int64 // sample time, Unix ms, inclusive
	matchers   []*labels.Matcher
	exemplars  bool // keep exemplars (query_exemplars)
	// labelsOnly answers which series have data in range, holding no
	// samples: series, labels and label-values questions over all time
	// cost memory per series, not per sample.
	labelsOnly bool
	budget     *budget
	// stats, when set, receives how many samples the pieces held before
	// merging (so a test can tell a seam that repeats rows from one the
	// de-duplication hides).
	stats *selectStats
}

type selectStats struct {
	rawSamples int
}

// metricEntry is the cached decode of one metric in one segment (or one
// live row, or a live tail): every series of that metric, all sample
// times, in (labels) order, packed (see packed.go). It is immutable once
// built and shared by every reader.
type metricEntry struct {
	series []packedSeries
	chunks []packedChunk
	data   []byte // the XOR chunks' bytes
	extras []seriesExtras
	// postings maps label name -> value -> indexes into series; it turns
	// "find one series among thousands" into a map lookup. Built with the
	// entry, so readers never write to it.
	postings map[string]map[string][]int32
	bytes    int64 // computeSize, as accounted by the cache
}

// byPostings says whether postingsFor answers matcher m: an equality on
// a label other than __name__ with a value ("" also matches series
// without the label, which have no postings).
func byPostings(m *labels.Matcher) bool {
	return m.Type == labels.MatchEqual && m.Name != labels.MetricName && m.Value != ""
}

// postingsFor returns the indexes (ascending) of the series that satisfy
// every matcher byPostings answers: the intersection of their postings.
// ok is false when no matcher is such (every series is a candidate).
// idx is a postings list (read-only: shared with every reader) or, once
// two are intersected, lies in buf; buf is returned, grown if it had to.
func (e *metricEntry) postingsFor(ms []*labels.Matcher, buf []int32) (idx []int32, ok bool, _ []int32) {
	for _, m := range ms {
		if !byPostings(m) {
			continue
		}
		p := e.postings[m.Name][m.Value]
		switch {
		case !ok:
			idx, ok = p, true
			continue
		case len(p) < len(idx):
			idx = intersect(buf[:0], p, idx)
		default:
			idx = intersect(buf[:0], idx, p)
		}
		buf = idx
		if len(idx) == 0 {
			break
		}
	}
	if ok && idx == nil {
		idx = []int32{} // an equality nothing satisfies
	}
	return idx, ok, buf
}

// intersect appends to dst the values of small also in large, both
// ascending. dst may share either input's array from its start: the
// result is a subsequence of each, so every write lands at or behind
// where both are being read.
func intersect(dst, small, large []int32) []int32 {
	j := 0
	for _, x := range small {
		// Gallop: the next candidate is at or after j.
		k, step := j, 1
		for k < len(large) && large[k] < x {
			j = k + 1
			k += step
			step *= 2
		}
		j += searchInt32(large[j:min(k+1, len(large))], x)
		if j < len(large) && large[j] == x {
			dst = append(dst, x)
			j++
		}
	}
	return dst
}

// searchInt32 is the first index of s (ascending) holding a value >= x.
func searchInt32(s []int32, x int32) int {
	lo, hi := 0, len(s)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s[m] < x {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// hasSamplesIn reports whether any series holds a float or histogram
// sample in [mint, maxt].
func (e *metricEntry) hasSamplesIn(u *unpacker, mint, maxt int64) (bool, error) {
	for i := range e.series {
		s := &e.series[i]
		if len(trimHists(e.hists(s), mint, maxt)) > 0 {
			return true, nil
		}
		if ok, err := e.hasFloatsIn(u, s, mint, maxt); ok || err != nil {
			return ok, err
		}
	}
	return false, nil
}

func (e *metricEntry) buildPostings() {
	e.postings = map[string]map[string][]int32{}
	for i := range e.series {
		e.series[i].lbls.Range(func(l labels.Label) {
			m := e.postings[l.Name]
			if m == nil {
				m = map[string][]int32{}
				e.postings[l.Name] = m
			}
			m[l.Value] = append(m[l.Value], int32(i))
		})
	}
}

func (e *metricEntry) size() int64 { return e.bytes }

// nameConstraint is what the __name__ matchers allow: a finite set of
// metric names, or (all) anything.
type nameConstraint struct {
	all   bool
	names []string
	ms    []*labels.Matcher // the __name__ matchers
}

func constrainNames(ms []*labels.Matcher) nameConstraint {
	nc := nameConstraint{all: true}
	for _, m := range ms {
		if m.Name != labels.MetricName {
			continue
		}
		nc.ms = append(nc.ms, m)
		var set []string
		switch m.Type {
		case labels.MatchEqual:
			set = []string{m.Value}
		case labels.MatchRegexp:
			set = m.SetMatches()
		}
		if set == nil {
			continue
		}
		if nc.all {
			nc.all, nc.names = false, slices.Clone(set)
			continue
		}
		nc.names = slices.DeleteFunc(nc.names, func(n string) bool { return !slices.Contains(set, n) })
	}
	if !nc.all {
		nc.names = slices.DeleteFunc(nc.names, func(n string) bool { return !nc.matches(n) })
	}
	return nc
}

func (nc *nameConstraint) matches(name string) bool {
	for _, m := range nc.ms {
		if !m.Matches(name) {
			return false
		}
	}
	return true
}

func matchesAll(ms []*labels.Matcher, ls labels.Labels) bool {
	for _, m := range ms {
		if !m.Matches(ls.Get(m.Name)) {
			return false
		}
	}
	return true
}

// viewStreams runs eachStream in one new snapshot, with its catalog.
func (s *store) viewStreams(ctx context.Context, nc nameConstraint, fn func(c *catalog, src archive.SourceInfo, stream string, segs []archive.StreamSegment) error) error {
	return s.a.View(ctx, func(tx *archive.ReadTx) error {
		c, err := s.catalogFor(tx)
		if err != nil {
			return err
		}
		return eachStream(c, nc, func(src archive.SourceInfo, st string, segs []archive.StreamSegment) error {
			return fn(c, src, st, segs)
		})
	})
}

// eachStream calls fn, inside the snapshot of c, for every sample stream of
// every source that the name constraint nc allows, with that stream's
// sealed segments (catalog only, by seq; one catalog query per source).
func eachStream(c *catalog, nc nameConstraint, fn func(src archive.SourceInfo, stream string, segs []archive.StreamSegment) error) error {
	srcs, err := c.sources()
	if err != nil {
		return err
	}
	for _, src := range srcs {
		streams, err := sampleStreams(c, src, nc)
		if err != nil {
			return err
		}
		var all []archive.StreamSegment
		switch len(streams) {
		case 0:
			continue
		case 1: // a __name__ equality: one stream's catalog rows only
			all, err = c.segments(src.ID, streams[0])
		default:
			all, err = c.segments(src.ID, "")
		}
		if err != nil {
			return err
		}
		for _, st := range streams {
			// all is sorted by (stream, seq): the stream's run is contiguous.
			lo, _ := slices.BinarySearchFunc(all, st, func(m archive.StreamSegment, st string) int { return strings.Compare(m.Stream, st) })
			hi := lo
			for hi < len(all) && all[hi].Stream == st {
				hi++
			}
			if err := fn(src, st, all[lo:hi]); err != nil {
				return err
			}
		}
	}
	return nil
}

// sampleStreams returns the streams of src a question with names must read:
// every sample stream when the metric names are not a finite set, else the
// streams promsample.StreamFor names under the source's recorded bucket
// count. A stream that does not exist simply answers nothing. This trusts
// "stream_buckets": a source whose bucket count changed without that
// metadata following would hide a metric's data in another stream.
func sampleStreams(c *catalog, src archive.SourceInfo, nc nameConstraint) ([]string, error) {
	if nc.all {
		all, err := c.streams(src.ID)
		if err != nil {
			return nil, err
		}
		// all may be shared with the catalog memo: filter a copy.
		return slices.DeleteFunc(slices.Clone(all), func(s string) bool { return !strings.HasPrefix(s, promsample.SampleStreamPrefix) }), nil
	}
	buckets, _ := strconv.Atoi(src.Metadata["stream_buckets"])
	want := make([]string, 0, len(nc.names))
	for _, n := range nc.names {
		want = append(want, promsample.StreamFor(n, buckets))
	}
	slices.Sort(want)
	return slices.Compact(want), nil
}

// selectSeries answers one Select from one snapshot, series sorted by labels.
func (s *store) selectSeries(ctx context.Context, p selectParams) ([]*series, error) {
	sel, err := s.selectPieces(ctx, p)
	if err != nil || sel == nil {
		return nil, err
	}
	out, err := materialize(ctx, sel, p.exemplars, s.par)
	if err != nil {
		return nil, err
	}
	if p.stats != nil {
		p.stats.rawSamples = int(sel.raw.Load())
	}
	return out, nil
}

// selectPieces gathers one Select's pieces from one snapshot; nil when
// nothing can match. The packed pieces it holds stay valid after the
// snapshot ends: cached entries are immutable.
func (s *store) selectPieces(ctx context.Context, p selectParams) (*selection, error) {
	if p.mint > p.maxt {
		return nil, nil
	}
	acc := newAccumulator(p.budget)
	nc := constrainNames(p.matchers)
	if !nc.all && len(nc.names) == 0 {
		return nil, nil
	}
	err := s.viewStreams(ctx, nc, func(c *catalog, src archive.SourceInfo, st string, segs []archive.StreamSegment) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.readStream(c, src.ID, st, segs, p, nc, acc); err != nil {
			return fmt.Errorf("source %d stream %s: %w", src.ID, st, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return acc.finish(p), nil
}

func (s *store) segID(src archive.SourceID, m archive.StreamSegment) segmentID {
	return segmentID{path: s.a.Path(), source: src, stream: m.Stream, seq: m.Seq, rows: m.Rows,
		firstTS: m.FirstTS, lastTS: m.LastTS, size: m.Size}
}

// index parses (or recalls) a segment's index, reading it from the
// catalog only on a miss.
func (s *store) index(tx *archive.ReadTx, id segmentID) (*promsample.Index, error) {
	k := cacheKey{seg: id, kind: kindIndex}
	if v, ok := s.cache.get(k); ok {
		return v.(*promsample.Index), nil
	}
	raw, ok, err := tx.SegmentIndex(id.source, id.stream, id.seq)
	if err != nil {
		return nil, err
	}
	if !ok {
		// Inside one snapshot the catalog row just read cannot vanish.
		return nil, fmt.Errorf("segment %d listed but absent", id.seq)
	}
	x, err := promsample.ParseIndex(raw)
	if err != nil {
		return nil, fmt.Errorf("segment %d index: %w", id.seq, err)
	}
	var n int64 = 64 + int64(len(x.RowGroups))*64
	for _, m := range x.Metrics {
		n += int64(len(m)) + 16
	}
	s.cache.put(k, &x, n)
	return &x, nil
}

// metricInRange reports whether any row group holding metric i may hold a
// sample in [mint, maxt].
func metricInRange(x *promsample.Index, i int, mint, maxt int64) bool {
	for _, g := range x.RowGroups {
		if g.FirstMetric <= i && i <= g.LastMetric && g.MinT <= maxt && g.MaxT >= mint {
			return true
		}
	}
	return len(x.RowGroups) == 0 && x.Overlaps(mint, maxt)
}

func (s *store) readStream(c *catalog, src archive.SourceID, stream string, metas []archive.StreamSegment, p selectParams, nc nameConstraint, acc *accumulator) error {
	for _, m := range metas {
		id := s.segID(src, m)
		x, err := s.index(c.tx, id)
		if err != nil {
			return err
		}
		if !x.Overlaps(p.mint, p.maxt) {
			continue // never fetched: its samples are all outside the range
		}
		var need []string
		for i, name := range x.Metrics {
			if nc.matches(name) && metricInRange(x, i, p.mint, p.maxt) {
				need = append(need, name)
			}
		}
		if len(need) == 0 {
			continue
		}
		if err := s.readSegment(c.tx, id, x, need, p, acc); err != nil {
			return fmt.Errorf("segment %d: %w", m.Seq, err)
		}
	}
	if s.cache != nil && s.cache.maxBytes > 0 {
		tail, err := s.liveTail(c, src, stream, metas)
		if err != nil {
			return fmt.Errorf("live tail: %w", err)
		}
		for name, me := range tail.byMetric {
			if !nc.matches(name) {
				continue
			}
			if err := acc.addEntry(me, p); err != nil {
				return err
			}
		}
		return nil
	}
	// No cache: decode and filter the tail.
	rows, err := c.tx.LiveWAL(src, stream)
	if err != nil {
		return err
	}
	live, err := promsample.ReadRows(rows, promsample.Query{MinT: p.mint, MaxT: p.maxt, Matchers: p.matchers})
	if err != nil {
		return fmt.Errorf("live tail: %w", err)
	}
	for i := range live {
		if err := acc.add(&live[i], p, false); err != nil {
			return err
		}
	}
	return nil
}

// tailEntry is a stream's decoded live tail: every live row merged, one
// packed entry per metric name, as a sealed segment's would be.
type tailEntry struct {
	span     archive.Span
	byMetric map[string]*metricEntry
	bytes    int64
}

// tailKey names a stream's live tail by its live span.
func (s *store) tailKey(src archive.SourceID, stream string, span archive.Span) cacheKey {
	return cacheKey{seg: segmentID{path: s.a.Path(), source: src, stream: stream, seq: -2,
		rows: span.Rows, firstTS: span.FirstTS, lastTS: span.LastTS}, kind: kindTail}
}

// liveTail returns a stream's decoded live tail. The live set is the rows
// above the stream's sealed watermark; rows are append-only and never
// change (the wal's key is (source, stream, ts)), the watermark only
// rises, and retention removes only a prefix, so the live set's (count,
// min ts, max ts) changes whenever the set does: a seal or an eviction
// raises the min, an append raises the count. That fingerprint, from one
// aggregate query, recalls the decoded tail without moving the rows' bytes
// out of SQLite.
//
// On a miss, when the stream's previous tail is still cached and the set
// only grew at the top (same min ts, and exactly count difference rows
// above the previous max ts), only those new rows are read and decoded
// and merged into the previous tail (whose chunks are copied, not
// re-encoded). Otherwise every live row is decoded.
//
// segs are the stream's segments as read in this snapshot: their greatest
// last_ts is the sealed watermark the live predicate compares with.
func (s *store) liveTail(c *catalog, src archive.SourceID, stream string, segs []archive.StreamSegment) (*tailEntry, error) {
	var watermark int64
	if len(segs) > 0 {
		watermark = segs[0].LastTS
		for _, m := range segs[1:] {
			watermark = max(watermark, m.LastTS)
		}
	}
	span, err := c.liveSpan(src, stream, watermark, len(segs) > 0)
	if err != nil {
		return nil, err
	}
	return s.tailFor(c.tx, src, stream, span)
}

func (s *store) tailFor(tx *archive.ReadTx, src archive.SourceID, stream string, span archive.Span) (*tailEntry, error) {
	if span.Rows == 0 {
		return &tailEntry{span: span}, nil
	}
	k := s.tailKey(src, stream, span)
	if v, ok := s.cache.get(k); ok {
		return v.(*tailEntry), nil
	}
	var base *tailEntry
	var rows []archive.Row
	if prev := s.previousTail(src, stream); prev != nil && prev.span.FirstTS == span.FirstTS &&
		prev.span.LastTS < span.LastTS && prev.span.Rows < span.Rows {
		more, err := tx.LiveWALRange(src, stream, prev.span.LastTS+1, span.LastTS)
		if err != nil {
			return nil, err
		}
		if int64(len(more)) == span.Rows-prev.span.Rows {
			base, rows = prev, more
		}
	}
	if base == nil {
		var err error
		if rows, err = tx.LiveWAL(src, stream); err != nil {
			return nil, err
		}
		s.tailBuilds.whole.Add(1)
	} else {
		s.tailBuilds.extended.Add(1)
	}
	added, err := decodeRows(rows)
	if err != nil {
		return nil, err
	}
	t := &tailEntry{span: span, byMetric: map[string]*metricEntry{}}
	if base != nil {
		for name, e := range base.byMetric {
			if _, ok := added[name]; !ok {
				t.byMetric[name] = e // untouched: shared, it is immutable
				t.bytes += e.size()
			}
		}
	}
	for name, list := range added {
		var old *metricEntry
		if base != nil {
			old = base.byMetric[name]
		}
		e, err := extendEntry(old, list)
		if err != nil {
			return nil, fmt.Errorf("live tail: %w", err)
		}
		t.byMetric[name] = e
		t.bytes += e.size()
	}
	s.cache.put(k, t, t.bytes)
	if prev, ok := s.rememberTail(src, stream, k); ok && prev != k {
		// A stream's live set only moves forward: the tail it replaces
		// will not be asked for again (a reader still holding it keeps
		// its own reference), so it leaves the cache now rather than
		// pushing sealed segments out under steady ingest.
		s.cache.remove(prev)
	}
	return t, nil
}

// previousTail returns the last tail built for a stream, if the cache
// still holds it.
func (s *store) previousTail(src archive.SourceID, stream string) *tailEntry {
	s.tailsMu.Lock()
	k, ok := s.tails[streamRef{src, stream}]
	s.tailsMu.Unlock()
	if !ok {
		return nil
	}
	if v, ok := s.cache.get(k); ok {
		return v.(*tailEntry)
	}
	return nil
}

// rememberTail records k as the stream's newest tail and returns the one
// it replaces.
func (s *store) rememberTail(src archive.SourceID, stream string, k cacheKey) (prev cacheKey, ok bool) {
	s.tailsMu.Lock()
	defer s.tailsMu.Unlock()
	if s.tails == nil {
		s.tails = map[streamRef]cacheKey{}
	}
	prev, ok = s.tails[streamRef{src, stream}]
	s.tails[streamRef{src, stream}] = k
	return prev, ok
}

// streamRef names one stream of one source.
type streamRef struct {
	src    archive.SourceID
	stream string
}

// decodeRows decodes wal rows into canonical series (one per label set,
// floats sorted by (T, bits) without exact duplicates), grouped by metric
// name, each group sorted by labels.
func decodeRows(rows []archive.Row) (map[string][]promsample.Series, error) {
	byKey := map[string]*promsample.Series{}
	var order []string
	var key []byte
	var dec promsample.BatchDecoder
	for i := range rows {
		b, err := dec.Decode(rows[i].Data)
		if err != nil {
			return nil, fmt.Errorf("row ts %d: %w", rows[i].TS, err)
		}
		for j := range b.Series {
			sr := &b.Series[j]
			key = sr.Labels.Bytes(key[:0])
			if have := byKey[string(key)]; have != nil {
				have.Samples = append(have.Samples, sr.Samples...)
				have.Histograms = append(have.Histograms, sr.Histograms...)
				have.Exemplars = append(have.Exemplars, sr.Exemplars...)
				continue
			}
			byKey[string(key)] = sr
			order = append(order, string(key))
		}
	}
	byName := map[string][]promsample.Series{}
	for _, k := range order {
		sr := byKey[k]
		sr.Samples = mergeSamples([][]promsample.Sample{sr.Samples, nil})
		sr.Histograms = mergeHists([][]promsample.Histogram{sr.Histograms, nil})
		sr.Exemplars = mergeExemplars([][]promsample.Exemplar{sr.Exemplars, nil})
		name := sr.Labels.Get(labels.MetricName)
		byName[name] = append(byName[name], *sr)
	}
	for _, list := range byName {
		slices.SortFunc(list, func(a, b promsample.Series) int { return labels.Compare(a.Labels, b.Labels) })
	}
	return byName, nil
}

// packMetrics packs each metric's series (sorted by labels).
func packMetrics(byName map[string][]promsample.Series) (map[string]*metricEntry, int64, error) {
	out := make(map[string]*metricEntry, len(byName))
	var size int64
	for name, list := range byName {
		slices.SortFunc(list, func(a, b promsample.Series) int { return labels.Compare(a.Labels, b.Labels) })
		e, err := newMetricEntry(list)
		if err != nil {
			return nil, 0, err
		}
		out[name] = e
		size += e.size()
	}
	return out, size, nil
}

// readSegment adds the series of need (metric names) that match p from one
// sealed segment, decoding what the cache does not hold.
func (s *store) readSegment(tx *archive.ReadTx, id segmentID, x *promsample.Index, need []string, p selectParams, acc *accumulator) error {
	if s.cache == nil || s.cache.maxBytes <= 0 {
		b, err := s.segmentBytes(tx, id)
		if err != nil {
			return err
		}
		got, err := promsample.ReadSegment(b, promsample.Query{MinT: p.mint, MaxT: p.maxt, Matchers: p.matchers})
		if err != nil {
			return err
		}
		for i := range got {
			if err := acc.add(&got[i], p, false); err != nil {
				return err
			}
		}
		return nil
	}
	entries := make([]*metricEntry, len(need))
	var missing []string
	for i, n := range need {
		if v, ok := s.cache.get(cacheKey{seg: id, kind: kindMetric, metric: n}); ok {
			entries[i] = v.(*metricEntry)
		} else {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		decoded, err := s.decodeMetrics(tx, id, x, missing)
		if err != nil {
			return err
		}
		for i, n := range need {
			if entries[i] == nil {
				entries[i] = decoded[n]
			}
		}
	}
	for _, e := range entries {
		if e == nil {
			continue
		}
		if err := acc.addEntry(e, p); err != nil {
			return err
		}
	}
	return nil
}

func (s *store) segmentBytes(tx *archive.ReadTx, id segmentID) ([]byte, error) {
	b, ok, err := tx.SegmentBytes(id.source, id.stream, id.seq)
	if err != nil {
		return nil, err
	}
	if !ok {
		// Inside one snapshot the catalog row just read cannot vanish.
		return nil, fmt.Errorf("segment %d listed but absent", id.seq)
	}
	return b, nil
}

// decodeMetrics decodes every series of the named metrics from a segment
// over all time and caches them per metric.
func (s *store) decodeMetrics(tx *archive.ReadTx, id segmentID, x *promsample.Index, names []string) (map[string]*metricEntry, error) {
	b, err := s.segmentBytes(tx, id)
	if err != nil {
		return nil, err
	}
	var ms []*labels.Matcher
	switch {
	case len(names) == len(x.Metrics):
		// every metric: no matcher at all
	case len(names) == 1:
		ms = []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, labels.MetricName, names[0])}
	default:
		quoted := make([]string, len(names))
		for i, n := range names {
			quoted[i] = regexp.QuoteMeta(n)
		}
		m, err := labels.NewMatcher(labels.MatchRegexp, labels.MetricName, strings.Join(quoted, "|"))
		if err != nil {
			return nil, err
		}
		ms = []*labels.Matcher{m}
	}
	got, err := promsample.ReadSegment(b, promsample.AllTime(ms...))
	if err != nil {
		return nil, err
	}
	byName := make(map[string][]promsample.Series, len(names))
	for _, n := range names {
		byName[n] = nil
	}
	for _, sr := range got {
		n := sr.Labels.Get(labels.MetricName)
		if _, ok := byName[n]; !ok {
			continue // a name the index did not list: not asked for
		}
		byName[n] = append(byName[n], sr)
	}
	out, _, err := packMetrics(byName)
	if err != nil {
		return nil, fmt.Errorf("segment %d: %w", id.seq, err)
	}
	for n, e := range out {
		s.cache.put(cacheKey{seg: id, kind: kindMetric, metric: n}, e, e.size())
	}
	return out, nil
}

func trimSamples(s []promsample.Sample, mint, maxt int64) []promsample.Sample {
	lo, _ := slices.BinarySearchFunc(s, mint, func(x promsample.Sample, t int64) int { return cmp.Compare(x.T, t) })
	hi := len(s)
	if maxt < math.MaxInt64 {
		hi, _ = slices.BinarySearchFunc(s, maxt+1, func(x promsample.Sample, t int64) int { return cmp.Compare(x.T, t) })
	}
	if lo >= hi {
		return nil
	}
	return s[lo:hi:hi]
}

func trimHists(s []promsample.Histogram, mint, maxt int64) []promsample.Histogram {
	lo, _ := slices.BinarySearchFunc(s, mint, func(x promsample.Histogram, t int64) int { return cmp.Compare(x.T, t) })
	hi := len(s)
	if maxt < math.MaxInt64 {
		hi, _ = slices.BinarySearchFunc(s, maxt+1, func(x promsample.Histogram, t int64) int { return cmp.Compare(x.T, t) })
	}
	if lo >= hi {
		return nil
	}
	return s[lo:hi:hi]
}

func trimExemplars(s []promsample.Exemplar, mint, maxt int64) []promsample.Exemplar {
	var out []promsample.Exemplar
	for _, e := range s {
		if e.T >= mint && e.T <= maxt {
			out = append(out, e)
		}
	}
	return out
}

func compareSample(a, b promsample.Sample) int {
	return cmp.Or(cmp.Compare(a.T, b.T), cmp.Compare(math.Float64bits(a.V), math.Float64bits(b.V)))
}

func sameSample(a, b promsample.Sample) bool {
	return a.T == b.T && math.Float64bits(a.V) == math.Float64bits(b.V)
}

// mergeSamples merges sorted pieces into one sorted slice without exact
// duplicates. One piece is returned as is (it is already canonical: the
// decoder sorts and de-duplicates).
func mergeSamples(ps [][]promsample.Sample) []promsample.Sample {
	switch len(ps) {
	case 0:
		return nil
	case 1:
		return ps[0]
	}
	n := 0
	disjoint := true // every piece starts after the one before ends
	for i, p := range ps {
		n += len(p)
		if i > 0 && len(p) > 0 && len(ps[i-1]) > 0 && p[0].T <= ps[i-1][len(ps[i-1])-1].T {
			disjoint = false
		}
	}
	out := make([]promsample.Sample, 0, n)
	for _, p := range ps {
		out = append(out, p...)
	}
	if disjoint && !slices.ContainsFunc(ps, func(p []promsample.Sample) bool { return len(p) == 0 }) {
		// Canonical pieces in time order with no shared timestamp: their
		// concatenation is canonical.
		return out
	}
	if !slices.IsSortedFunc(out, compareSample) {
		slices.SortFunc(out, compareSample)
	}
	return slices.CompactFunc(out, sameSample)
}

func sameHistogram(a, b promsample.Histogram) bool {
	if a.T != b.T {
		return false
	}
	switch {
	case a.H != nil && b.H != nil:
		return a.H.Equals(b.H)
	case a.FH != nil && b.FH != nil:
		return a.FH.Equals(b.FH)
	}
	return false
}

func mergeHists(ps [][]promsample.Histogram) []promsample.Histogram {
	switch len(ps) {
	case 0:
		return nil
	case 1:
		return ps[0]
	}
	var out []promsample.Histogram
	for _, p := range ps {
		out = append(out, p...)
	}
	slices.SortStableFunc(out, func(a, b promsample.Histogram) int { return cmp.Compare(a.T, b.T) })
	// Exact duplicates are adjacent only when a timestamp has at most a few
	// entries; compare within each run of equal timestamps.
	res := out[:0]
	for i := 0; i < len(out); {
		j := i + 1
		for j < len(out) && out[j].T == out[i].T {
			j++
		}
		start := len(res)
		for _, h := range out[i:j] {
			if !slices.ContainsFunc(res[start:], func(x promsample.Histogram) bool { return sameHistogram(x, h) }) {
				res = append(res, h)
			}
		}
		i = j
	}
	return res
}

func mergeExemplars(ps [][]promsample.Exemplar) []promsample.Exemplar {
	switch len(ps) {
	case 0:
		return nil
	case 1:
		return ps[0]
	}
	var out []promsample.Exemplar
	for _, p := range ps {
		out = append(out, p...)
	}
	c := func(a, b promsample.Exemplar) int {
		return cmp.Or(cmp.Compare(a.T, b.T), cmp.Compare(math.Float64bits(a.V), math.Float64bits(b.V)), labels.Compare(a.Labels, b.Labels))
	}
	slices.SortFunc(out, c)
	return slices.CompactFunc(out, func(a, b promsample.Exemplar) bool { return c(a, b) == 0 })
}
