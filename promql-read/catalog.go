package promread

import (
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
	tx *archive.ReadTx
	m  *catalogMemo // nil: no memo (the version is unknown)
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
	c := &catalog{tx: tx}
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

// The answers below are shared with later snapshots of the same version:
// callers must not modify them.

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
	var ms []archive.StreamSegment
	var err error
	if stream == "" {
		ms, err = c.tx.SourceSegmentMetas(src)
	} else {
		ms, err = c.tx.StreamSegmentMetas(src, stream)
	}
	if err == nil && c.m != nil {
		c.m.metas[k] = ms
	}
	return ms, err
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
