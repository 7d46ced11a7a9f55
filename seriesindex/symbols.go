package seriesindex

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/prometheus/model/labels"
)

// symbols interns label names and values: a series holds its labels as
// pairs of symbol ids, so a string that many series share (every name,
// most values) is stored once. Ids are dense and never reused, and a
// symbol's string never changes, so Get takes no lock: the string is
// written before any entry holding its id is published (under the lock of
// the shard that publishes the entry), which orders the two.
type symbols struct {
	mu  sync.Mutex
	ids map[string]uint32
	// chunks of symChunk strings; the slice is replaced, never modified,
	// when it grows, and a chunk is filled only below n.
	chunks atomic.Pointer[[]*[symChunk]string]
	n      uint32
	bytes  int64 // of the strings, for Stats
	// recent is, by position in a label set (name, value, name, ...), the
	// string last interned there and its id: consecutive new series share
	// most of their strings at the same positions (every name, the metric,
	// job, instance), and comparing with the last one is cheaper than
	// hashing it into ids. The strings are the table's, never a caller's.
	recent [16]recentSymbol
}

type recentSymbol struct {
	s  string
	id uint32
}

const symChunk = 1 << 12

func newSymbols() *symbols {
	s := &symbols{ids: map[string]uint32{}}
	s.chunks.Store(&[]*[symChunk]string{})
	return s
}

// internPairs appends the ids of ls's names and values, in pairs, adding
// the strings it has not seen. One lock for the whole set: a new series
// interns a dozen strings, and a lock for each was half the cost of
// interning them while four handlers added a million series.
func (s *symbols) internPairs(dst []uint32, ls labels.Labels) []uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := len(dst)
	ls.Range(func(l labels.Label) {
		pos := len(dst) - start
		dst = append(dst, s.internAt(pos, l.Name), s.internAt(pos+1, l.Value))
	})
	return dst
}

// internLabels is internPairs for labels given as a slice.
func (s *symbols) internLabels(dst []uint32, ls []Label) []uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, l := range ls {
		dst = append(dst, s.internAt(2*i, l.Name), s.internAt(2*i+1, l.Value))
	}
	return dst
}

// internAt is internLocked for the string at position pos of a label set
// (see recent); s.mu is held.
func (s *symbols) internAt(pos int, str string) uint32 {
	if pos >= len(s.recent) {
		return s.internLocked(str)
	}
	if r := &s.recent[pos]; r.s == str && r.s != "" {
		return r.id
	}
	id := s.internLocked(str)
	s.recent[pos] = recentSymbol{s.table().get(id), id}
	return id
}

// internLocked returns str's id, adding it on first sight; s.mu is held.
// The caller's string is copied, so it may alias a request buffer.
func (s *symbols) internLocked(str string) uint32 {
	if id, ok := s.ids[str]; ok {
		return id
	}
	str = string([]byte(str)) // own it
	id := s.n
	cs := *s.chunks.Load()
	if int(id/symChunk) == len(cs) {
		grown := make([]*[symChunk]string, len(cs)+1)
		copy(grown, cs)
		grown[len(cs)] = new([symChunk]string)
		s.chunks.Store(&grown)
		cs = grown
	}
	cs[id/symChunk][id%symChunk] = str
	s.ids[str] = id
	s.n++
	s.bytes += int64(len(str))
	return id
}

// lookup returns str's id if it is interned.
func (s *symbols) lookup(str string) (uint32, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.ids[str]
	return id, ok
}

// get returns the string of id.
func (s *symbols) get(id uint32) string { return s.table().get(id) }

// symbolTable is the symbols' chunks at one moment: every id interned
// before it was loaded.
type symbolTable []*[symChunk]string

func (s *symbols) table() symbolTable { return *s.chunks.Load() }

func (t symbolTable) get(id uint32) string { return t[id/symChunk][id%symChunk] }
