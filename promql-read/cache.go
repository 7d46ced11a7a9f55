package promread

import (
	"container/list"
	"sync"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// segmentID names one immutable sealed segment. seq alone is not enough:
// compaction gives a merged segment the seq of the first segment of its run,
// so a seq can name different bytes over time. A merged segment holds more
// rows and ends later than the one whose seq it took, so (seq, rows,
// first_ts, last_ts, size) differs whenever the bytes do.
type segmentID struct {
	path    string
	source  archive.SourceID
	stream  string
	seq     int64
	rows    int64
	firstTS int64 // receipt time, ns
	lastTS  int64 // receipt time, ns
	size    int64
}

// cacheKey is one cached thing about a segment (seg, its segNo): its
// directory, its layout, its metadata, one of its pages (off and sum: its
// offset and checksum) or one of its series' samples (off: its position).
// It holds no string: a question that reads a hundred series in each of
// a stream's segments makes a cache look-up or two for each, and keyed by
// the segmentID each hashed and compared three strings (measured at 1 M
// series: ~1 µs a store, a quarter of a selective selector's CPU).
type cacheKey struct {
	seg  segNo
	kind uint8
	off  int64
	sum  uint64
}

// segNo is the caches' name for a segmentID: a number segNames gives it.
// 0 names no segment (a hashTable, which directories share).
type segNo uint64

// segNames numbers the segments the store reads, for their cache keys.
// A number names one segmentID for the life of the process: numbers are
// never reused (next only grows, and a uint64 does not wrap), so a cache
// entry can never be found under another segment's name. Past
// maxSegNames the map starts over: a segment read again gets a new
// number, and what was cached under its old one is no longer found and
// ages out of the LRU. Segments a compaction or retention removed would
// otherwise stay in the map for good.
type segNames struct {
	mu   sync.Mutex
	nos  map[segmentID]segNo
	next segNo
}

// maxSegNames bounds segNames's map (~100 bytes an entry): far more
// segments than a question touches, or the caches hold at once.
const maxSegNames = 1 << 16

// of returns id's number, giving it one if it has none.
func (n *segNames) of(id segmentID) segNo {
	n.mu.Lock()
	defer n.mu.Unlock()
	if no, ok := n.nos[id]; ok {
		return no
	}
	if n.nos == nil || len(n.nos) >= maxSegNames {
		n.nos = make(map[segmentID]segNo)
	}
	n.next++
	n.nos[id] = n.next
	return n.next
}

const (
	kindDir uint8 = iota // a segment's directory (segdir.go)
	kindMetadata
	kindLayout // a segment's promsample.SegmentLayout
	kindPage   // a verified page of a segment (segpages.go)
	kindSeries // one series' samples in a segment (segseries.go; off: its position)
	kindTable  // a hashTable directories share (segdir.go; off, sum: its size and fingerprint)
)

// cache is a byte-bounded LRU of immutable values. Values are shared by
// every reader and must never be mutated.
type cache struct {
	mu       sync.Mutex
	maxBytes int64
	bytes    int64
	ll       *list.List // front = most recently used
	items    map[cacheKey]*list.Element
	hits     int64
	misses   int64
}

type cacheEntry struct {
	key   cacheKey
	value any
	size  int64
}

func newCache(maxBytes int64) *cache {
	return &cache{maxBytes: maxBytes, ll: list.New(), items: map[cacheKey]*list.Element{}}
}

func (c *cache) get(k cacheKey) (any, bool) {
	if c == nil || c.maxBytes <= 0 {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[k]
	if !ok {
		c.misses++
		return nil, false
	}
	c.hits++
	c.ll.MoveToFront(e)
	return e.Value.(*cacheEntry).value, true
}

// touch marks k as just used, if it is held, without counting a lookup.
func (c *cache) touch(k cacheKey) {
	if c == nil || c.maxBytes <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[k]; ok {
		c.ll.MoveToFront(e)
	}
}

// put stores v of the given estimated size, evicting the least recently
// used values to make room. A value bigger than half the budget is not
// kept: it would evict everything for one question.
func (c *cache) put(k cacheKey, v any, size int64) { c.store(k, v, size, true) }

// putIfFree stores v as put does if it fits beside what is held, and
// reports whether it did; it evicts nothing.
func (c *cache) putIfFree(k cacheKey, v any, size int64) bool { return c.store(k, v, size, false) }

func (c *cache) store(k cacheKey, v any, size int64, evict bool) bool {
	if c == nil || c.maxBytes <= 0 || size > c.maxBytes/2 {
		return false
	}
	size += 128 // the entry, the key and the list element
	c.mu.Lock()
	defer c.mu.Unlock()
	e, held := c.items[k]
	grow := size
	if held {
		grow -= e.Value.(*cacheEntry).size
	}
	if !evict && c.bytes+grow > c.maxBytes {
		return false
	}
	if held {
		old := e.Value.(*cacheEntry)
		old.value, old.size = v, size
		c.ll.MoveToFront(e)
	} else {
		c.items[k] = c.ll.PushFront(&cacheEntry{key: k, value: v, size: size})
	}
	c.bytes += grow
	for c.bytes > c.maxBytes {
		e := c.ll.Back()
		if e == nil {
			break
		}
		ce := e.Value.(*cacheEntry)
		c.ll.Remove(e)
		delete(c.items, ce.key)
		c.bytes -= ce.size
	}
	return true
}

// remove drops k if it is held.
func (c *cache) remove(k cacheKey) {
	if c == nil || c.maxBytes <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[k]; ok {
		c.ll.Remove(e)
		delete(c.items, k)
		c.bytes -= e.Value.(*cacheEntry).size
	}
}

// CacheStats describes the segment cache.
type CacheStats struct {
	Bytes, MaxBytes int64
	Entries         int
	Hits, Misses    int64
}

func (c *cache) stats() CacheStats {
	if c == nil {
		return CacheStats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Bytes: c.bytes, MaxBytes: c.maxBytes, Entries: len(c.items), Hits: c.hits, Misses: c.misses}
}
