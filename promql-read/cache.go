package promread

import (
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
//
// Its entries live in one slice, linked by index into the recency list,
// and the map holds indexes: neither the map nor the list holds a pointer
// of its own. With container/list each entry was three small objects
// (the element, the entry and the value) that the collector marked on
// every cycle, and at a million series the caches hold a few hundred
// thousand entries (a selective selector keeps one per series and
// segment): marking them was much of the collector's work, which was a
// quarter of the CPU of such questions.
type cache struct {
	mu       sync.Mutex
	maxBytes int64
	bytes    int64
	items    map[cacheKey]int32 // the entry's index in ents
	// ents[0] is the recency list's sentinel: its next is the most
	// recently used entry, its prev the least (0 both when empty). A slot
	// that holds no entry is on the free list (free, linked by next).
	ents   []cacheEntry
	free   int32
	hits   int64
	misses int64
}

type cacheEntry struct {
	key        cacheKey
	value      any
	size       int64
	prev, next int32
}

func newCache(maxBytes int64) *cache {
	return &cache{maxBytes: maxBytes, items: map[cacheKey]int32{}, ents: make([]cacheEntry, 1)}
}

// unlink takes entry i out of the recency list.
func (c *cache) unlink(i int32) {
	e := &c.ents[i]
	c.ents[e.prev].next, c.ents[e.next].prev = e.next, e.prev
}

// pushFront puts entry i at the front of the recency list.
func (c *cache) pushFront(i int32) {
	first := c.ents[0].next
	c.ents[i].prev, c.ents[i].next = 0, first
	c.ents[first].prev, c.ents[0].next = i, i
}

// toFront marks entry i as just used.
func (c *cache) toFront(i int32) {
	if c.ents[0].next != i {
		c.unlink(i)
		c.pushFront(i)
	}
}

// drop removes entry i (held under its key) and frees its slot. When
// three quarters of the slots are free, the live entries move to a new
// slice (shrink): the slots count in no budget, and after a burst of
// small entries the slice would otherwise keep their number for good.
func (c *cache) drop(i int32) {
	c.unlink(i)
	e := &c.ents[i]
	delete(c.items, e.key)
	c.bytes -= e.size
	*e = cacheEntry{next: c.free} // lets go of the value
	c.free = i
	if len(c.ents) > minShrinkSlots && len(c.items) < len(c.ents)/4 {
		c.shrink()
	}
}

// minShrinkSlots: a slice this small is never shrunk.
const minShrinkSlots = 1024

// shrink moves the live entries, in recency order, to a slice twice their
// number, and renumbers them in the map.
func (c *cache) shrink() {
	ents := make([]cacheEntry, 1, 2*len(c.items)+1)
	for i := c.ents[0].next; i != 0; i = c.ents[i].next {
		n := int32(len(ents))
		e := c.ents[i]
		e.prev, e.next = n-1, 0
		ents[n-1].next = n
		ents = append(ents, e)
		c.items[e.key] = n
	}
	ents[0].prev = int32(len(ents) - 1) // 0 when empty
	c.ents, c.free = ents, 0
}

func (c *cache) get(k cacheKey) (any, bool) {
	if c == nil || c.maxBytes <= 0 {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	i, ok := c.items[k]
	if !ok {
		c.misses++
		return nil, false
	}
	c.hits++
	c.toFront(i)
	return c.ents[i].value, true
}

// touch marks k as just used, if it is held, without counting a lookup.
func (c *cache) touch(k cacheKey) {
	if c == nil || c.maxBytes <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if i, ok := c.items[k]; ok {
		c.toFront(i)
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
	size += 128 // the entry and its map slot, generously
	c.mu.Lock()
	defer c.mu.Unlock()
	i, held := c.items[k]
	grow := size
	if held {
		grow -= c.ents[i].size
	}
	if !evict && c.bytes+grow > c.maxBytes {
		return false
	}
	if held {
		c.ents[i].value, c.ents[i].size = v, size
		c.toFront(i)
	} else {
		if c.free != 0 {
			i, c.free = c.free, c.ents[c.free].next
		} else {
			i = int32(len(c.ents))
			c.ents = append(c.ents, cacheEntry{})
		}
		c.ents[i] = cacheEntry{key: k, value: v, size: size}
		c.pushFront(i)
		c.items[k] = i
	}
	c.bytes += grow
	for c.bytes > c.maxBytes {
		last := c.ents[0].prev
		if last == 0 {
			break
		}
		c.drop(last)
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
	if i, ok := c.items[k]; ok {
		c.drop(i)
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
