package promread

import (
	"slices"
	"strings"
	"sync"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// catalog answers a snapshot's catalog questions (sources, streams,
// segment lists, live spans), remembering the answers per snapshot
// version: while no commit becomes visible to a connection, its snapshots
// read the same state, so a repeated question costs one PRAGMA instead of
// three statements. A memo belongs to one connection, and a connection
// serves one snapshot at a time, so a memo is only ever used by the
// goroutine whose snapshot holds that connection.
type catalog struct {
	tx    *archive.ReadTx
	m     *catalogMemo  // nil: no memo (the version is unknown)
	lists *segmentLists // the store's, shared by every connection
}

type catalogMemo struct {
	version archive.SnapshotVersion
	sources []archive.SourceInfo
	hasSrc  bool
	streams map[archive.SourceID][]string
	metas   map[streamRef][]archive.StreamSegment // stream "" = every stream of the source
	spans   map[streamRef]archive.Span
}

// memos holds the newest memo per connection.
type memos struct {
	mu     sync.Mutex
	byConn map[any]*catalogMemo
}

// maxMemos bounds the connections remembered; past it all are forgotten
// (a read pool has a handful of connections).
const maxMemos = 64

// catalogFor returns the catalog of tx, with the memo of its version.
func (s *store) catalogFor(tx *archive.ReadTx) (*catalog, error) {
	v, ok, err := tx.Version()
	if err != nil {
		return nil, err
	}
	c := &catalog{tx: tx, lists: &s.lists}
	if !ok {
		return c, nil
	}
	s.memos.mu.Lock()
	defer s.memos.mu.Unlock()
	m := s.memos.byConn[v.Reader]
	if m == nil || m.version != v {
		if s.memos.byConn == nil || len(s.memos.byConn) >= maxMemos {
			s.memos.byConn = map[any]*catalogMemo{}
		}
		m = &catalogMemo{version: v, streams: map[archive.SourceID][]string{},
			metas: map[streamRef][]archive.StreamSegment{}, spans: map[streamRef]archive.Span{}}
		s.memos.byConn[v.Reader] = m
	}
	c.m = m
	return c, nil
}

// The answers below are shared with later snapshots of the same version,
// and segment lists with every snapshot of the same segments epoch, on
// any goroutine: callers must not modify them.

func (c *catalog) sources() ([]archive.SourceInfo, error) {
	if c.m != nil && c.m.hasSrc {
		return c.m.sources, nil
	}
	srcs, err := c.tx.Sources()
	if err == nil && c.m != nil {
		c.m.sources, c.m.hasSrc = srcs, true
	}
	return srcs, err
}

func (c *catalog) streams(src archive.SourceID) ([]string, error) {
	if c.m != nil {
		if st, ok := c.m.streams[src]; ok {
			return st, nil
		}
	}
	st, err := c.tx.Streams(src)
	if err == nil && c.m != nil {
		c.m.streams[src] = st
	}
	return st, err
}

// segments returns one stream's segments, or every stream's (stream "").
func (c *catalog) segments(src archive.SourceID, stream string) ([]archive.StreamSegment, error) {
	k := streamRef{src, stream}
	if c.m != nil {
		if ms, ok := c.m.metas[k]; ok {
			return ms, nil
		}
	}
	epoch, known := c.tx.SegmentsEpoch()
	if known {
		ms, ok := c.lists.get(epoch, k)
		if !ok && stream != "" {
			// The source's whole list (Warm reads those) holds the
			// stream's: a metric's first question after a restart
			// needs no listing of its own.
			var all []archive.StreamSegment
			if all, ok = c.lists.get(epoch, streamRef{src, ""}); ok {
				ms = streamRun(all, stream)
			}
		}
		if ok {
			if c.m != nil {
				c.m.metas[k] = ms
			}
			return ms, nil
		}
	}
	var ms []archive.StreamSegment
	var err error
	if stream == "" {
		ms, err = c.tx.SourceSegmentMetas(src)
	} else {
		ms, err = c.tx.StreamSegmentMetas(src, stream)
	}
	if err != nil {
		return nil, err
	}
	if c.m != nil {
		c.m.metas[k] = ms
	}
	if known {
		c.lists.put(epoch, k, ms)
	}
	return ms, nil
}

// streamRun returns stream's segments out of all, a source's list sorted
// by (stream, seq), with its capacity cut: all is shared, and an append to
// the run must copy rather than write into the next stream's.
func streamRun(all []archive.StreamSegment, stream string) []archive.StreamSegment {
	lo, _ := slices.BinarySearchFunc(all, stream, func(m archive.StreamSegment, st string) int { return strings.Compare(m.Stream, st) })
	hi := lo
	for hi < len(all) && all[hi].Stream == stream {
		hi++
	}
	return all[lo:hi:hi]
}

// segmentLists are the segment lists read in snapshots of one segments
// epoch (archive.ReadTx.SegmentsEpoch), which every snapshot of that
// epoch shares, whatever its connection and whatever wal rows were
// committed since: under ingest the snapshot version changes with every
// commit, and the per-connection memo with it, but the segments only
// with a seal, a compaction or an eviction. Only the newest epoch's lists
// are kept, at most maxListedSegments segments of them.
type segmentLists struct {
	mu     sync.Mutex
	epoch  uint64
	lists  map[streamRef][]archive.StreamSegment
	listed int // segments in lists
}

// maxListedSegments bounds what segmentLists hold (~100 bytes a segment);
// past it a list is read again in each snapshot, as without them.
const maxListedSegments = 1 << 18

func (l *segmentLists) get(epoch uint64, k streamRef) ([]archive.StreamSegment, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lists == nil || l.epoch != epoch {
		return nil, false
	}
	ms, ok := l.lists[k]
	return ms, ok
}

// put keeps ms, read in a snapshot of epoch, as k's list. A newer epoch
// drops the older one's lists; an older one than kept is not kept.
func (l *segmentLists) put(epoch uint64, k streamRef, ms []archive.StreamSegment) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lists == nil || epoch > l.epoch {
		l.epoch, l.lists, l.listed = epoch, map[streamRef][]archive.StreamSegment{}, 0
	}
	if epoch != l.epoch || l.listed+len(ms) > maxListedSegments {
		return
	}
	if _, ok := l.lists[k]; !ok {
		l.lists[k] = ms
		l.listed += len(ms)
	}
}

func (c *catalog) liveSpan(src archive.SourceID, stream string, watermark int64, sealed bool) (archive.Span, error) {
	k := streamRef{src, stream}
	if c.m != nil {
		if sp, ok := c.m.spans[k]; ok {
			return sp, nil
		}
	}
	sp, err := c.tx.LiveSpanAbove(src, stream, watermark, sealed)
	if err == nil && c.m != nil {
		c.m.spans[k] = sp
	}
	return sp, err
}
