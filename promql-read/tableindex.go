package promread

import (
	"math"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

// tableIndexer adds segments' series tables to the series index. It is
// one goroutine's (the caller's), and keeps what it learnt from the last
// table it indexed of each stream: that table's series hashes and Refs,
// in table order.
//
// The segments of a stream list mostly the same series, in the same order
// (metric name, then labels), so the stream's last table predicts the
// next one's series: a predicted Ref is confirmed by its hash and labels
// (HasPairs) without probing the index's hash table. At a million series
// that probe is a cache miss per series per segment, a third of the CPU of
// the index rebuilt at open (an hour of 1 M-series data is 22 M table
// entries). HasPairs requires that a predicted Ref was handed out less
// than seriesindex.ReuseAfter ago: a stream's last table is not used
// once it is older than half that (a rebuild of weeks of data can take
// longer).
type tableIndexer struct {
	x *seriesindex.Index

	remap []uint32 // the table's symbol id -> the index's (notLooked, absent)
	pairs []uint32 // a series' pairs in the index's ids
	refs  []seriesindex.Ref
	// Series of the table the index lacks (or whose labels hold a symbol
	// the index lacks): their positions and pairs (the table's ids,
	// freshOff delimiting them), added once the table parsed whole.
	fresh    []int
	freshIDs []uint32
	freshOff []int

	last map[seriesindex.Loc]*lastTable
	prev *lastTable // the last table of the stream being indexed, or nil
	next int        // the position in prev expected next

	predicted int // series found by prediction (tests)
}

// lastTable is what a tableIndexer keeps of a stream's last table.
type lastTable struct {
	hashes []uint64 // the table's, as parsed; never written
	refs   []seriesindex.Ref
	at     time.Time // when its Refs were found
}

// predictFor is how long a last table's Refs are used as predictions.
const predictFor = seriesindex.ReuseAfter / 2

const (
	notLooked = math.MaxUint32     // remap: not asked of the index yet
	absent    = math.MaxUint32 - 1 // remap: the index has no such symbol
)

func newTableIndexer(x *seriesindex.Index) *tableIndexer {
	return &tableIndexer{x: x, last: map[seriesindex.Loc]*lastTable{}}
}

// index parses a segment's catalog index raw and adds its series to the
// index, each observed at loc over the segment's sample-time span in a row
// received at recv. It returns the parsed index, its table without labels.
// A raw index that does not parse changes nothing in the index.
func (ti *tableIndexer) index(raw []byte, loc seriesindex.Loc, recv int64) (promsample.Index, error) {
	ti.refs, ti.fresh, ti.freshIDs, ti.freshOff = ti.refs[:0], ti.fresh[:0], ti.freshIDs[:0], append(ti.freshOff[:0], 0)
	ti.prev, ti.next = ti.last[loc], 0
	if ti.prev != nil && time.Since(ti.prev.at) > predictFor {
		ti.prev.hashes, ti.prev.refs = nil, ti.prev.refs[:0]
	}
	var symbols []string
	x, err := promsample.ParseIndexFunc(raw, func(syms []string, i int, hash uint64, pairs []uint32) {
		if i == 0 {
			symbols = syms
			ti.remap = ti.remap[:0]
			for range syms {
				ti.remap = append(ti.remap, notLooked)
			}
		}
		ti.refs = append(ti.refs, ti.find(syms, hash, pairs))
		if ti.refs[i] == 0 {
			ti.fresh = append(ti.fresh, i)
			ti.freshIDs = append(ti.freshIDs, pairs...)
			ti.freshOff = append(ti.freshOff, len(ti.freshIDs))
		}
	})
	if err != nil {
		return x, err
	}
	if x.Table == nil {
		return x, nil
	}
	var sb labels.ScratchBuilder
	for k, i := range ti.fresh {
		sb.Reset()
		p := ti.freshIDs[ti.freshOff[k]:ti.freshOff[k+1]]
		for j := 0; j+1 < len(p); j += 2 {
			sb.Add(symbols[p[j]], symbols[p[j+1]])
		}
		ti.refs[i], _ = ti.x.Add(sb.Labels())
	}
	for _, r := range ti.refs {
		ti.x.Observe(r, loc, x.MinT, x.MaxT, recv)
	}
	// The table's hashes are never written, so they are kept, not copied
	// (its directory holds them, or an equal table's instead: newDir);
	// the Refs are swapped with the last table's buffer.
	lt := ti.prev
	if lt == nil {
		lt = &lastTable{}
		ti.last[loc] = lt
	}
	lt.hashes, lt.at = x.Table.Hashes, time.Now()
	lt.refs, ti.refs = ti.refs, lt.refs
	return x, nil
}

// find returns the index's Ref of the series with hash and the table's
// pairs, 0 when the index lacks it (or one of its symbols).
func (ti *tableIndexer) find(syms []string, hash uint64, pairs []uint32) seriesindex.Ref {
	ti.pairs = ti.pairs[:0]
	for _, id := range pairs {
		switch ti.remap[id] {
		case absent:
			return 0
		case notLooked:
			got, ok := ti.x.SymbolID(syms[id])
			if !ok {
				ti.remap[id] = absent
				return 0
			}
			ti.remap[id] = got
		}
		ti.pairs = append(ti.pairs, ti.remap[id])
	}
	// The last table's series at next, or the one after it (a series that
	// left between the two segments).
	for k := ti.next; ti.prev != nil && k < ti.next+2 && k < len(ti.prev.hashes); k++ {
		if ti.prev.hashes[k] == hash {
			if r := ti.prev.refs[k]; ti.x.HasPairs(r, hash, ti.pairs) {
				ti.next = k + 1
				ti.predicted++
				return r
			}
			break
		}
	}
	return ti.x.FindPairs(hash, ti.pairs)
}
