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

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// store is the read core shared by the Queryable and the handlers.
type store struct {
	a     *archive.Archive
	cache *cache
	opts  Options
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

// metricEntry is the cached decode of one metric in one segment: every
// series of that metric, all sample times, in (labels) order.
type metricEntry struct {
	series []promsample.Series
	// postings maps label name -> value -> indexes into series, built on
	// the first question with an equality matcher; it turns "find one
	// series among thousands" into a map lookup.
	once     sync.Once
	postings map[string]map[string][]int32
}

func (e *metricEntry) lookup(ms []*labels.Matcher) []int32 {
	var best []int32
	found := false
	for _, m := range ms {
		if m.Type != labels.MatchEqual || m.Name == labels.MetricName || m.Value == "" {
			continue
		}
		e.once.Do(e.buildPostings)
		p := e.postings[m.Name][m.Value]
		if !found || len(p) < len(best) {
			best, found = p, true
		}
	}
	if !found {
		return nil
	}
	if best == nil {
		return []int32{} // an equality matcher nothing satisfies
	}
	return best
}

// hasSamplesIn reports whether any series holds a float or histogram
// sample in [mint, maxt].
func (e *metricEntry) hasSamplesIn(mint, maxt int64) bool {
	for i := range e.series {
		if len(trimSamples(e.series[i].Samples, mint, maxt))+len(trimHists(e.series[i].Histograms, mint, maxt)) > 0 {
			return true
		}
	}
	return false
}

func (e *metricEntry) buildPostings() {
	e.postings = map[string]map[string][]int32{}
	for i, s := range e.series {
		s.Labels.Range(func(l labels.Label) {
			m := e.postings[l.Name]
			if m == nil {
				m = map[string][]int32{}
				e.postings[l.Name] = m
			}
			m[l.Value] = append(m[l.Value], int32(i))
		})
	}
}

func (e *metricEntry) size() int64 {
	var n int64
	for _, s := range e.series {
		n += int64(s.Labels.ByteSize()) + 96 + int64(len(s.Samples))*16 + int64(len(s.Exemplars))*64
		for _, h := range s.Histograms {
			n += 160
			if h.H != nil {
				n += int64(len(h.H.PositiveBuckets)+len(h.H.NegativeBuckets)) * 8
			}
			if h.FH != nil {
				n += int64(len(h.FH.PositiveBuckets)+len(h.FH.NegativeBuckets)) * 8
			}
		}
	}
	return n * 2 // postings and slack
}

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

// sampleStreams returns the streams of src a question with names must read:
// every sample stream when the metric names are not a finite set, else the
// streams promsample.StreamFor names under the source's recorded bucket
// count. A stream that does not exist simply answers nothing. This trusts
// "stream_buckets": a source whose bucket count changed without that
// metadata following would hide a metric's data in another stream.
// eachStream calls fn, inside the snapshot tx, for every sample stream of
// every source that the name constraint nc allows.
func eachStream(tx *archive.ReadTx, nc nameConstraint, fn func(src archive.SourceInfo, stream string) error) error {
	srcs, err := tx.Sources()
	if err != nil {
		return err
	}
	for _, src := range srcs {
		streams, err := sampleStreams(tx, src, nc)
		if err != nil {
			return err
		}
		for _, st := range streams {
			if err := fn(src, st); err != nil {
				return err
			}
		}
	}
	return nil
}

func sampleStreams(tx *archive.ReadTx, src archive.SourceInfo, nc nameConstraint) ([]string, error) {
	if nc.all {
		all, err := tx.Streams(src.ID)
		if err != nil {
			return nil, err
		}
		return slices.DeleteFunc(all, func(s string) bool { return !strings.HasPrefix(s, promsample.SampleStreamPrefix) }), nil
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
	if p.mint > p.maxt {
		return nil, nil
	}
	acc := newAccumulator(p.budget)
	nc := constrainNames(p.matchers)
	if !nc.all && len(nc.names) == 0 {
		return nil, nil
	}
	err := s.a.View(ctx, func(tx *archive.ReadTx) error {
		return eachStream(tx, nc, func(src archive.SourceInfo, st string) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := s.readStream(tx, src.ID, st, p, nc, acc); err != nil {
				return fmt.Errorf("source %d stream %s: %w", src.ID, st, err)
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	if p.stats != nil {
		p.stats.rawSamples = acc.raw
	}
	return acc.finish(p.exemplars), nil
}

func (s *store) segID(src archive.SourceID, stream string, m archive.StoredSegment) segmentID {
	return segmentID{path: s.a.Path(), source: src, stream: stream, seq: m.Seq, rows: m.Rows,
		firstTS: m.FirstTS, lastTS: m.LastTS, size: m.Size}
}

// index parses (or recalls) a segment's index from the catalog.
func (s *store) index(id segmentID, raw []byte) (*promsample.Index, error) {
	k := cacheKey{seg: id, kind: kindIndex}
	if v, ok := s.cache.get(k); ok {
		return v.(*promsample.Index), nil
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

func (s *store) readStream(tx *archive.ReadTx, src archive.SourceID, stream string, p selectParams, nc nameConstraint, acc *accumulator) error {
	metas, err := tx.SegmentMetas(src, stream)
	if err != nil {
		return err
	}
	for _, m := range metas {
		id := s.segID(src, stream, m)
		x, err := s.index(id, m.Index)
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
		if err := s.readSegment(tx, id, x, need, p, acc); err != nil {
			return fmt.Errorf("segment %d: %w", m.Seq, err)
		}
	}
	if s.cache != nil && s.cache.maxBytes > 0 {
		tail, err := s.liveTail(tx, src, stream)
		if err != nil {
			return fmt.Errorf("live tail: %w", err)
		}
		for _, e := range tail.rows {
			for name, me := range e {
				if !nc.matches(name) {
					continue
				}
				if err := acc.addEntry(me, p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	// No cache: decode and filter the tail.
	rows, err := tx.LiveWAL(src, stream)
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

// tailEntry is a stream's decoded live tail.
type tailEntry struct {
	rows []map[string]*metricEntry
}

// liveTail returns a stream's decoded live tail. The live set is the rows
// above the stream's sealed watermark; rows are append-only, the watermark
// only rises, and retention removes only a prefix, so the live set's
// (count, min ts, max ts) changes whenever the set does: a seal or an
// eviction raises the min, an append raises the count. That fingerprint,
// from one aggregate query, recalls the decoded tail without moving the
// rows' bytes out of SQLite; on a miss the rows are read and each one
// decoded (or recalled: a row's content never changes).
func (s *store) liveTail(tx *archive.ReadTx, src archive.SourceID, stream string) (*tailEntry, error) {
	span, err := tx.LiveSpan(src, stream)
	if err != nil {
		return nil, err
	}
	if span.Rows == 0 {
		return &tailEntry{}, nil
	}
	k := cacheKey{seg: segmentID{path: s.a.Path(), source: src, stream: stream, seq: -2,
		rows: span.Rows, firstTS: span.FirstTS, lastTS: span.LastTS}, kind: kindTail}
	if v, ok := s.cache.get(k); ok {
		return v.(*tailEntry), nil
	}
	rows, err := tx.LiveWAL(src, stream)
	if err != nil {
		return nil, err
	}
	t := &tailEntry{rows: make([]map[string]*metricEntry, 0, len(rows))}
	var size int64
	for i := range rows {
		e, n, err := s.liveRow(src, stream, &rows[i])
		if err != nil {
			return nil, err
		}
		t.rows = append(t.rows, e)
		size += n
	}
	s.cache.put(k, t, size)
	return t, nil
}

// liveRow decodes (or recalls) one live wal row, grouped by metric name. A
// committed row never changes: the wal is append-only and a row leaves it
// only by the prune after a seal, so (source, stream, ts) plus the bytes'
// length and hash name its content.
func (s *store) liveRow(src archive.SourceID, stream string, r *archive.Row) (map[string]*metricEntry, int64, error) {
	k := cacheKey{seg: segmentID{path: s.a.Path(), source: src, stream: stream, seq: -1, firstTS: r.TS,
		size: int64(len(r.Data)), rows: int64(xxhash.Sum64(r.Data))}, kind: kindRow}
	if v, ok := s.cache.get(k); ok {
		re := v.(*rowEntry)
		return re.byMetric, re.size, nil
	}
	b, err := promsample.DecodeBatch(r.Data)
	if err != nil {
		return nil, 0, fmt.Errorf("row ts %d: %w", r.TS, err)
	}
	// Canonical form per series, as the segment reader returns: one entry
	// per label set, samples sorted by (T, bits) without exact duplicates.
	byKey := map[string]*promsample.Series{}
	var order []string
	var key []byte
	for i := range b.Series {
		sr := &b.Series[i]
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
	out := map[string]*metricEntry{}
	var size int64
	for _, k := range order {
		sr := byKey[k]
		sr.Samples = mergeSamples([][]promsample.Sample{sr.Samples, nil})
		sr.Histograms = mergeHists([][]promsample.Histogram{sr.Histograms, nil})
		sr.Exemplars = mergeExemplars([][]promsample.Exemplar{sr.Exemplars, nil})
		name := sr.Labels.Get(labels.MetricName)
		e := out[name]
		if e == nil {
			e = &metricEntry{}
			out[name] = e
		}
		e.series = append(e.series, *sr)
	}
	for _, e := range out {
		slices.SortFunc(e.series, func(a, b promsample.Series) int { return labels.Compare(a.Labels, b.Labels) })
		size += e.size()
	}
	s.cache.put(k, &rowEntry{byMetric: out, size: size}, size)
	return out, size, nil
}

type rowEntry struct {
	byMetric map[string]*metricEntry
	size     int64
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
	out := make(map[string]*metricEntry, len(names))
	for _, n := range names {
		out[n] = &metricEntry{}
	}
	for _, sr := range got {
		e := out[sr.Labels.Get(labels.MetricName)]
		if e == nil {
			continue // a name the index did not list: not asked for
		}
		e.series = append(e.series, sr)
	}
	for n, e := range out {
		slices.SortFunc(e.series, func(a, b promsample.Series) int { return labels.Compare(a.Labels, b.Labels) })
		s.cache.put(cacheKey{seg: id, kind: kindMetric, metric: n}, e, e.size())
	}
	return out, nil
}

// accumulator merges the pieces of each series.
type accumulator struct {
	byKey  map[string]*pieces
	key    []byte
	budget *budget
	raw    int // floats and histograms added, before de-duplication
}

type pieces struct {
	any    bool // labelsOnly: the series has data in range
	lbls   labels.Labels
	floats [][]promsample.Sample
	hists  [][]promsample.Histogram
	ex     [][]promsample.Exemplar
}

func newAccumulator(b *budget) *accumulator {
	return &accumulator{byKey: map[string]*pieces{}, budget: b}
}

// addEntry adds the series of a cached metric entry that match p.
func (a *accumulator) addEntry(e *metricEntry, p selectParams) error {
	if idx := e.lookup(p.matchers); idx != nil {
		for _, k := range idx {
			if err := a.addIfMatch(&e.series[k], p); err != nil {
				return err
			}
		}
		return nil
	}
	for k := range e.series {
		if err := a.addIfMatch(&e.series[k], p); err != nil {
			return err
		}
	}
	return nil
}

func (a *accumulator) addIfMatch(sr *promsample.Series, p selectParams) error {
	if !matchesAll(p.matchers, sr.Labels) {
		return nil
	}
	return a.add(sr, p, true)
}

// add takes the part of sr in [p.mint, p.maxt]; trim is false when sr is
// already restricted to it.
func (a *accumulator) add(sr *promsample.Series, p selectParams, trim bool) error {
	fl, hs, ex := sr.Samples, sr.Histograms, sr.Exemplars
	if trim {
		fl = trimSamples(fl, p.mint, p.maxt)
		hs = trimHists(hs, p.mint, p.maxt)
		ex = trimExemplars(ex, p.mint, p.maxt)
	}
	if !p.exemplars {
		ex = nil
	}
	if len(fl)+len(hs)+len(ex) == 0 {
		return nil
	}
	if p.labelsOnly {
		a.key = sr.Labels.Bytes(a.key[:0])
		if a.byKey[string(a.key)] == nil {
			a.byKey[string(a.key)] = &pieces{lbls: sr.Labels, any: true}
		}
		return nil
	}
	if err := a.budget.take(len(fl) + len(hs)); err != nil {
		return err
	}
	a.raw += len(fl) + len(hs)
	a.key = sr.Labels.Bytes(a.key[:0])
	pc := a.byKey[string(a.key)]
	if pc == nil {
		pc = &pieces{lbls: sr.Labels}
		a.byKey[string(a.key)] = pc
	}
	if len(fl) > 0 {
		pc.floats = append(pc.floats, fl)
	}
	if len(hs) > 0 {
		pc.hists = append(pc.hists, hs)
	}
	if len(ex) > 0 {
		pc.ex = append(pc.ex, ex)
	}
	return nil
}

func (a *accumulator) finish(exemplars bool) []*series {
	out := make([]*series, 0, len(a.byKey))
	for _, pc := range a.byKey {
		sr := &series{lbls: pc.lbls, floats: mergeSamples(pc.floats), hists: mergeHists(pc.hists)}
		if exemplars {
			sr.exemplars = mergeExemplars(pc.ex)
		}
		if len(sr.floats)+len(sr.hists)+len(sr.exemplars) == 0 && !pc.any {
			continue
		}
		out = append(out, sr)
	}
	slices.SortFunc(out, func(a, b *series) int { return labels.Compare(a.lbls, b.lbls) })
	return out
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
	for _, p := range ps {
		n += len(p)
	}
	out := make([]promsample.Sample, 0, n)
	for _, p := range ps {
		out = append(out, p...)
	}
	if !slices.IsSortedFunc(out, compareSample) {
		slices.SortFunc(out, compareSample)
	}
	return slices.CompactFunc(out, func(a, b promsample.Sample) bool {
		return a.T == b.T && math.Float64bits(a.V) == math.Float64bits(b.V)
	})
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
