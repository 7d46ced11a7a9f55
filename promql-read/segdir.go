package promread

import (
	"fmt"
	"slices"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

// segDir is a segment's directory: its catalog index without the labels
// (the row counts and page checksums a SegmentReader needs) and a hash
// table over its series' hashes (hashTable), so that a series of the
// index is found in the segment by its SeriesHash. Immutable once built;
// cached.
//
// A directory is built on the first read of its segment, and again
// whenever the cache let it go: at 1 M series, a segment of 170 k series
// took 30 ms to parse with its labels and sort by hash, most of the first
// one-series question after a restart; parsed without labels into this
// table it takes 7-11 ms.
type segDir struct {
	x     *promsample.Index
	table *hashTable // x.Table.Hashes is table.hashes
	bytes int64      // the directory's own, without a table it shares
}

// hashTable finds a series table's series by their hashes: open
// addressing over the hashes, in table order, built in one pass. The
// segments of a stream mostly list the same series in the same order
// (every active series in each seal), so their tables are equal, and
// the directories of equal tables share one hashTable. At a million
// series that is 2.4 of a segment's 3.1 MB of directory (166,700 series:
// 1.3 MB of hashes, 1 MB of slots), and an hour's 108 segments needed
// 540 MB of directories and layouts, against the default cache's 324 MB:
// the first question about the hour after a restart rebuilt half of
// them (345 ms). A hashTable is a cache entry of its own (kindTable,
// keyed by its hashes' fingerprint), touched whenever a directory that
// shares it is, so the LRU lets it go only after them.
type hashTable struct {
	hashes []uint64
	slots  []uint32            // 1+ the series (table position) whose hash probes here; 0: empty
	dups   map[uint64]struct{} // hashes two series of the segment share (rare; nil if none)
	key    cacheKey
	bytes  int64
}

// dir returns a segment's directory, from the cache or its catalog index.
// ok is false for a segment written before index format 2 (no series
// table), which is read whole (readWhole).
func (s *store) dir(tx *archive.ReadTx, id segmentID) (d *segDir, ok bool, err error) {
	if d, hit := s.cachedDir(id); hit {
		return d, d.x.Table != nil, nil
	}
	raw, found, err := tx.SegmentIndex(id.source, id.stream, id.seq)
	if err != nil {
		return nil, false, err
	}
	if !found {
		return nil, false, fmt.Errorf("segment %d listed but absent", id.seq)
	}
	x, err := promsample.ParseIndexHashes(raw)
	if err != nil {
		return nil, false, fmt.Errorf("segment %d index: %w", id.seq, err)
	}
	d = s.newDir(&x, true)
	s.putDir(id, d, true)
	return d, x.Table != nil, nil
}

// cachedDir returns segment id's directory if the cache holds it, and
// touches its hashTable (kept at least as long as d: hashTable).
func (s *store) cachedDir(id segmentID) (*segDir, bool) {
	v, hit := s.cache.get(cacheKey{seg: s.names.of(id), kind: kindDir})
	if !hit {
		return nil, false
	}
	d := v.(*segDir)
	if d.table != nil {
		s.cache.touch(d.table.key)
	}
	return d, true
}

// putDir caches d as segment id's directory (evicting others if evict,
// else only where there is room), then touches its hashTable, which
// must stay at least as recently used as every directory sharing it.
func (s *store) putDir(id segmentID, d *segDir, evict bool) {
	s.cache.store(cacheKey{seg: s.names.of(id), kind: kindDir}, d, d.bytes, evict)
	if d.table != nil {
		s.cache.touch(d.table.key)
	}
}

// layout returns a segment's layout (its footer, page index and row
// starts), from the cache or read through seg. Reading it walks the
// segment's whole overflow chain, since the footer is at its end; with it
// cached, a read walks only as far as the pages it decodes.
func (s *store) layout(id segmentID, d *segDir, seg *lazySegment) (*promsample.SegmentLayout, error) {
	k := cacheKey{seg: s.names.of(id), kind: kindLayout}
	if v, hit := s.cache.get(k); hit {
		return v.(*promsample.SegmentLayout), nil
	}
	blob, err := seg.open()
	if err != nil {
		return nil, err
	}
	l, err := promsample.OpenSegmentLayout(blob, blob.Size(), d.x)
	if err != nil {
		return nil, err
	}
	s.cache.put(k, l, l.Bytes())
	return l, nil
}

// newDir builds x's directory, dropping its table's labels, with the
// hashTable of an equal table if the cache holds one, else with a new one
// it stores there (evicting others if evict, else only where there is
// room; a table not stored is the directory's own and counted in its
// bytes).
func (s *store) newDir(x *promsample.Index, evict bool) *segDir {
	d := &segDir{x: x, bytes: 256}
	if x.Table == nil {
		return d
	}
	x.Table.DropLabels()
	d.bytes += x.Table.Bytes() - int64(cap(x.Table.Hashes))*8
	for _, sums := range x.PageSums {
		d.bytes += int64(len(sums)) * 8
	}
	h := x.Table.Hashes
	k := cacheKey{kind: kindTable, off: int64(len(h)), sum: fingerprint(h)}
	if v, hit := s.cache.get(k); hit {
		if t := v.(*hashTable); slices.Equal(t.hashes, h) {
			x.Table.Hashes, d.table = t.hashes, t
			return d
		}
	}
	d.table = newHashTable(h, k)
	if !s.cache.store(k, d.table, d.table.bytes, evict) {
		d.bytes += d.table.bytes
	}
	return d
}

// fingerprint folds a table's hashes into one value: equal tables have
// equal fingerprints (newDir compares the hashes before sharing).
func fingerprint(h []uint64) uint64 {
	f := uint64(len(h))
	for _, v := range h {
		f = (f^v)*0x9e3779b97f4a7c15 + 1
	}
	return f
}

// newHashTable builds the table of hashes h (a series table's, in table
// order), stored under k.
func newHashTable(h []uint64, k cacheKey) *hashTable {
	t := &hashTable{hashes: h, key: k}
	// At most 4/5 full, so that a probe for an absent hash (every segment
	// of a stream that does not hold the series) ends after a few slots.
	size := 8
	for size < len(h)+len(h)/4+1 {
		size *= 2
	}
	t.slots = make([]uint32, size)
	mask := uint64(size - 1)
	for o, v := range h {
		i := v & mask
		for t.slots[i] != 0 && h[t.slots[i]-1] != v {
			i = (i + 1) & mask
		}
		if t.slots[i] != 0 {
			if t.dups == nil {
				t.dups = map[uint64]struct{}{}
			}
			t.dups[v] = struct{}{}
			continue
		}
		t.slots[i] = uint32(o) + 1
	}
	t.bytes = 128 + int64(cap(h))*8 + int64(size)*4 + int64(len(t.dups))*16
	return t
}

// lookup returns the table position of the series with hash h, -1 if the
// segment has none, and -2 when several share h (the caller reads the
// segment whole for that series).
func (d *segDir) lookup(h uint64) int {
	t := d.table
	if t == nil || len(t.slots) == 0 {
		return -1
	}
	if _, ok := t.dups[h]; ok {
		return -2
	}
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; t.slots[i] != 0; i = (i + 1) & mask {
		if o := t.slots[i] - 1; t.hashes[o] == h {
			return int(o)
		}
	}
	return -1
}

// find returns where qs are in the segment, sorted by their place there,
// and those it cannot tell apart from another series of the segment by
// hash (read whole). Few are each searched for; many (a metric) are found
// by a walk of the segment's hashes.
func (d *segDir) find(x *seriesindex.Index, qs []qref) (ws []wanted, whole []qref) {
	if len(qs) < d.x.Table.Len()/16 {
		for _, q := range qs {
			switch o := d.lookup(x.Hash(q.ref)); {
			case o >= 0:
				ws = append(ws, wanted{q, o})
			case o == -2:
				whole = append(whole, q)
			}
		}
		slices.SortFunc(ws, func(a, b wanted) int { return a.ord - b.ord })
		return ws, whole
	}
	// byHash holds 1+ the index in qs of the series with that hash; 0
	// once two series of the question share it (both read whole).
	byHash := make(map[uint64]int, len(qs))
	for i, q := range qs {
		h := x.Hash(q.ref)
		if other, ok := byHash[h]; ok {
			if other != 0 {
				whole = append(whole, qs[other-1])
				byHash[h] = 0
			}
			whole = append(whole, q)
			continue
		}
		byHash[h] = i + 1
	}
	for o, h := range d.x.Table.Hashes {
		i, ok := byHash[h]
		if !ok || i == 0 {
			continue
		}
		q := qs[i-1]
		if _, dup := d.table.dups[h]; dup {
			if !slices.Contains(whole, q) {
				whole = append(whole, q)
			}
			continue
		}
		ws = append(ws, wanted{q, o})
	}
	return ws, whole
}

// found is what find answered for one stream's series and a hashTable:
// the segments of a stream mostly share their table (hashTable), and
// then find's answer for them is the same. One per readStream.
type found struct {
	t     *hashTable
	ws    []wanted
	whole []qref
}

// wanted is one series of a Select in one segment.
type wanted struct {
	qref
	ord int
}

// readSegment adds to acc the samples in range of qs (one stream's
// series) in one sealed segment, m as tx's snapshot lists it, reading
// only their pages. memo carries find's answer from one segment of the
// stream to the next.
func (s *store) readSegment(tx *archive.ReadTx, id segmentID, m archive.StreamSegment, qs []qref, memo *found, p selectParams, acc *accumulator) error {
	d, v2, err := s.dir(tx, id)
	if err != nil {
		return err
	}
	if !d.x.Overlaps(p.mint, p.maxt) {
		return nil
	}
	if !v2 {
		return s.readWhole(tx, id, qs, p, acc)
	}
	// find depends only on the table (its hashes, dups and length) and
	// qs, which is the same for every segment of the stream.
	if memo.t == nil || memo.t != d.table {
		memo.ws, memo.whole = d.find(s.x, qs)
		memo.t = d.table
	}
	ws, whole := memo.ws, memo.whole // read only from here on
	if len(whole) > 0 {
		if err := s.readWhole(tx, id, whole, p, acc); err != nil {
			return err
		}
	}
	if len(ws) == 0 {
		return nil
	}
	s.segmentsRead.Add(1)
	seg := &lazySegment{tx: tx, id: id, listed: m, opened: &s.blobsOpened}
	l, err := s.layout(id, d, seg)
	if err != nil {
		return fmt.Errorf("segment %d: %w", id.seq, err)
	}
	no := s.names.of(id)
	pages := &segPages{c: s.pages, seg: no}
	sr, err := l.NewCachedReader(seg, pages)
	if err != nil {
		return fmt.Errorf("segment %d: %w", id.seq, err)
	}
	add := func(w wanted, sm *promsample.Series) error {
		if len(sm.Samples)+len(sm.Histograms) == 0 {
			return nil
		}
		if p.labelsOnly {
			return acc.add(w.slot, nil, nil, nil, true, p)
		}
		var fl []promsample.Sample
		if len(sm.Samples) > 0 {
			fl = acc.copyFloats(sm.Samples)
		}
		var hs []promsample.Histogram
		if len(sm.Histograms) > 0 {
			hs = slices.Clone(sm.Histograms)
		}
		return acc.add(w.slot, fl, hs, nil, len(fl) > 0, p)
	}
	// Series close together in the segment (a metric's, or a selector
	// that keeps most of them) are read in one pass over their rows
	// (ReadRun); a lone one seeks to its own pages.
	var sm promsample.Series
	for lo := 0; lo < len(ws); {
		hi := lo + 1
		for hi < len(ws) {
			_, end := sr.SeriesRows(ws[hi-1].ord)
			start, _ := sr.SeriesRows(ws[hi].ord)
			if start-end > promsample.PageRows {
				break
			}
			hi++
		}
		// A lone series and a short run keep their pages (segpages.go,
		// keepRunRows) and their samples (segseries.go); a long run
		// keeps neither, so a scan of a metric does not fill the cache.
		first, _ := sr.SeriesRows(ws[lo].ord)
		_, last := sr.SeriesRows(ws[hi-1].ord)
		keep := hi-lo == 1 || last-first <= keepRunRows
		if keep {
			done, err := s.addKept(no, ws[lo:hi], p, add)
			if err != nil {
				return err
			}
			if done {
				lo = hi
				continue
			}
		}
		// What is kept is all of a series, so it is read over all time
		// and cut to the question's range here.
		mint, maxt := p.mint, p.maxt
		if keep {
			mint, maxt = allMinT, allMaxT
		}
		if hi-lo == 1 {
			sm.Samples, sm.Histograms = sm.Samples[:0], sm.Histograms[:0]
			pages.keep = true
			err := sr.ReadSeries(ws[lo].ord, mint, maxt, &sm)
			pages.keep = false
			if err != nil {
				return fmt.Errorf("segment %d: %w", id.seq, err)
			}
			s.keep(no, ws[lo].ord, &sm)
			if err := add(ws[lo], inRange(&sm, p.mint, p.maxt)); err != nil {
				return err
			}
		} else {
			run := ws[lo:hi]
			ords := make([]int, len(run))
			for k, w := range run {
				ords[k] = w.ord
			}
			// ReadRun calls fn once per ord, in the order of ords: k
			// follows it through run without a map.
			k := 0
			pages.keep = keep
			err := sr.ReadRun(ords, mint, maxt, func(o int, sm *promsample.Series) error {
				for k < len(run) && run[k].ord != o {
					k++
				}
				if k == len(run) {
					return fmt.Errorf("series %d read out of order", o)
				}
				w := run[k]
				if !keep {
					return add(w, sm)
				}
				s.keep(no, o, sm)
				return add(w, inRange(sm, p.mint, p.maxt))
			})
			pages.keep = false
			if err != nil {
				return fmt.Errorf("segment %d: %w", id.seq, err)
			}
		}
		lo = hi
	}
	if p.exemplars {
		return s.readExemplars(tx, id, ws, p, acc)
	}
	return nil
}

// readWhole reads qs from a segment's bytes with ReadSegment: segments
// without a series table, and series whose hash another series of the
// segment shares.
func (s *store) readWhole(tx *archive.ReadTx, id segmentID, qs []qref, p selectParams, acc *accumulator) error {
	b, err := s.segmentBytes(tx, id)
	if err != nil {
		return err
	}
	want := make(map[uint64][]qref, len(qs))
	for _, q := range qs {
		h := s.x.Hash(q.ref)
		want[h] = append(want[h], q)
	}
	got, err := promsample.ReadSegment(b, promsample.Query{MinT: p.mint, MaxT: p.maxt, Matchers: p.matchers})
	if err != nil {
		return fmt.Errorf("segment %d: %w", id.seq, err)
	}
	for i := range got {
		sr := &got[i]
		for _, q := range want[promsample.SeriesHash(sr.Labels)] {
			if !s.x.Equal(q.ref, sr.Labels) {
				continue
			}
			ex := sr.Exemplars
			if !p.exemplars {
				ex = nil
			}
			if p.labelsOnly {
				acc.add(q.slot, nil, nil, nil, true, p)
				continue
			}
			if err := acc.add(q.slot, sr.Samples, sr.Histograms, ex, len(sr.Samples) > 0, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// readExemplars adds the exemplars of the wanted series, which a segment
// keeps in its footer.
func (s *store) readExemplars(tx *archive.ReadTx, id segmentID, ws []wanted, p selectParams, acc *accumulator) error {
	d, _, err := s.dir(tx, id)
	if err != nil || d.x.Exemplars == 0 {
		return err
	}
	b, err := s.segmentBytes(tx, id)
	if err != nil {
		return err
	}
	got, err := promsample.ReadSegment(b, promsample.Query{MinT: p.mint, MaxT: p.maxt, Matchers: p.matchers})
	if err != nil {
		return fmt.Errorf("segment %d: %w", id.seq, err)
	}
	byHash := map[uint64][]qref{}
	for _, w := range ws {
		h := s.x.Hash(w.ref)
		byHash[h] = append(byHash[h], w.qref)
	}
	for i := range got {
		if len(got[i].Exemplars) == 0 {
			continue
		}
		for _, q := range byHash[promsample.SeriesHash(got[i].Labels)] {
			if s.x.Equal(q.ref, got[i].Labels) {
				if err := acc.add(q.slot, nil, nil, got[i].Exemplars, false, p); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
