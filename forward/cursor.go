package forward

import (
	"encoding/json"
	"fmt"
	"math"
)

// The cursor: where an upstream is in each stream of a source, kept in the
// source's metadata under CursorKeyPrefix + the upstream's name.
//
// Why sources.metadata and not the format's caller_rows table: a cursor is
// one small value per (source, upstream) that is replaced, never appended
// to; metadata is a per-source map that every copy of the archive carries,
// that time retention never touches (caller_rows are evicted below the
// retention cutoff, and this archive implements no caller-row floors), and
// that the writer already patches in order with the appends. caller_rows
// would need a row per update, a delete of the older ones, and a floor to
// survive retention. The cost of metadata is that a write rewrites the
// source's whole metadata object (a few KB); cursor writes are staged and
// ride on the writer's next commit (archive.Writer.StageMetadata), a few
// times a second, so they add no transaction of their own while the
// archive is being written.
//
// A stream's units are its sealed segments and its wal rows, each covering
// a receipt-time range ([FirstTS, LastTS] of a segment; a row's ts): the
// stream is read as the sequence of units by LastTS. A position is "every
// unit with LastTS <= Done is complete, and of the unit after it (Kind,
// First, Last) the first K items" (items: a unit's samples, histograms and
// exemplars, series by series, in the unit's own order, which is the same
// every time the unit is read).
//
// Per stream the cursor holds
//
//	p  the acknowledged position: everything before it reached the
//	   upstream (2xx). A restart resumes here.
//	h  the written-ahead position: nothing at or after it was ever sent.
//	   The forwarder stages h before it dispatches past it and waits for
//	   the commit, so after a kill -9 the items between p and h are
//	   exactly those that may have been sent and are sent again (counted
//	   as resent). h - p is about two and a half of the upstream's
//	   windows (h a window and a half ahead of the stream's dispatch, the
//	   dispatch up to one ahead of p), and what was acknowledged since
//	   the last commit.
//	e  when p is inside an epoch of format-2 rows: the ts of the epoch's
//	   first row, from which a restart reads rows again to learn the
//	   series the later rows refer to (the prune keeps them: KeepWAL).

// CursorKeyPrefix starts the sources.metadata key of an upstream's cursor.
const CursorKeyPrefix = "forward_cursor/"

// cursorVersion is the format of the value.
const cursorVersion = 1

type unitKind int8

const (
	kindNone unitKind = iota
	kindRow
	kindSegment
)

// pos is a position in a stream (see above).
type pos struct {
	Done  int64
	Kind  unitKind
	First int64
	Last  int64
	K     int64
}

// start is the position before everything.
var start = pos{Done: math.MinInt64}

// covers reports whether item k of unit (kind, first, last) is before p:
// p has been dispatched (or acknowledged) up to and not including it.
func (p pos) covers(kind unitKind, first, last, k int64) bool {
	if last <= p.Done {
		return true
	}
	return p.Kind == kind && p.First == first && p.Last == last && k < p.K
}

type jsonPos struct {
	D int64     `json:"d"`
	U *[4]int64 `json:"u,omitempty"` // kind, first, last, k
}

func (p pos) toJSON() jsonPos {
	j := jsonPos{D: p.Done}
	if p.Kind != kindNone {
		j.U = &[4]int64{int64(p.Kind), p.First, p.Last, p.K}
	}
	return j
}

func (j jsonPos) pos() (pos, error) {
	p := pos{Done: j.D}
	if j.U != nil {
		k := unitKind(j.U[0])
		if k != kindRow && k != kindSegment || j.U[3] < 0 || j.U[2] <= j.D || j.U[1] > j.U[2] {
			return pos{}, fmt.Errorf("partial unit %v after %d", *j.U, j.D)
		}
		p.Kind, p.First, p.Last, p.K = k, j.U[1], j.U[2], j.U[3]
	}
	return p, nil
}

type jsonStream struct {
	P jsonPos `json:"p"`
	H jsonPos `json:"h"`
	E *int64  `json:"e,omitempty"`
}

type jsonCursor struct {
	V int                   `json:"v"`
	S map[string]jsonStream `json:"s"`
}

// streamCursor is one stream's part of a cursor.
type streamCursor struct {
	p, h   pos
	e      int64
	hasE   bool
	loaded bool
}

func encodeCursor(streams map[string]streamCursor) (string, error) {
	c := jsonCursor{V: cursorVersion, S: make(map[string]jsonStream, len(streams))}
	for name, s := range streams {
		js := jsonStream{P: s.p.toJSON(), H: s.h.toJSON()}
		if s.hasE {
			e := s.e
			js.E = &e
		}
		c.S[name] = js
	}
	b, err := json.Marshal(c)
	return string(b), err
}

func decodeCursor(v string) (map[string]streamCursor, error) {
	var c jsonCursor
	if err := json.Unmarshal([]byte(v), &c); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCursor, err)
	}
	if c.V != cursorVersion {
		return nil, fmt.Errorf("%w: version %d (this build writes %d)", ErrCursor, c.V, cursorVersion)
	}
	out := make(map[string]streamCursor, len(c.S))
	for name, js := range c.S {
		p, err := js.P.pos()
		if err != nil {
			return nil, fmt.Errorf("%w: stream %s: p: %v", ErrCursor, name, err)
		}
		h, err := js.H.pos()
		if err != nil {
			return nil, fmt.Errorf("%w: stream %s: h: %v", ErrCursor, name, err)
		}
		sc := streamCursor{p: p, h: h, loaded: true}
		if js.E != nil {
			sc.e, sc.hasE = *js.E, true
		}
		out[name] = sc
	}
	return out, nil
}
