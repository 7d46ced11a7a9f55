package seriesindex

import (
	"sync"
	"unsafe"
)

// hashTable maps a series' SeriesHash to its Ref, in shards (by the hash's
// top bits) with a lock each, so that decoders probing concurrently never
// serialize on one lock and an addition blocks only its shard. A shard is
// an open-addressing table of (tag, ref) slots with linear probing, the
// tag being the hash's low 32 bits: 8 bytes a slot, no pointers for the
// garbage collector, where a map[uint64]Ref costs ~40. The full hash is
// in the series' entry: a probe's caller confirms it (a tag matches
// another hash once in 2^32 slots probed), and a rehash needs only the
// tags, which also place the slots. Equal hashes (a collision) simply
// occupy several slots; a probe asks its caller which one it wants.
type hashTable struct {
	shards [numShards]shard
}

const (
	shardBits = 8
	numShards = 1 << shardBits
)

type shard struct {
	mu    sync.RWMutex
	slots []slot // len is 0 or a power of two
	used  int    // live slots
	tombs int    // removed slots
}

type slot struct {
	tag uint32 // uint32(hash); its low bits are the slot's home
	ref Ref    // 0: empty; tomb: removed
}

const tomb = ^Ref(0)

func (t *hashTable) shard(hash uint64) *shard { return &t.shards[hash>>(64-shardBits)] }

// find returns the first ref with hash's tag for which match says yes, 0 if
// none; match must confirm the full hash. The shard's read lock is held
// while match runs.
func (t *hashTable) find(hash uint64, match func(Ref) bool) Ref {
	s := t.shard(hash)
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.findLocked(hash, match)
}

func (s *shard) findLocked(hash uint64, match func(Ref) bool) Ref {
	if len(s.slots) == 0 {
		return 0
	}
	tag := uint32(hash)
	mask := uint32(len(s.slots) - 1)
	for i := tag & mask; ; i = (i + 1) & mask {
		sl := s.slots[i]
		switch {
		case sl.ref == 0:
			return 0
		case sl.tag == tag && sl.ref != tomb && match(sl.ref):
			return sl.ref
		}
	}
}

// insertLocked adds (hash, ref); the shard's write lock is held.
func (s *shard) insertLocked(hash uint64, ref Ref) {
	if (s.used+s.tombs+1)*10 > len(s.slots)*7 {
		s.rehash()
	}
	tag := uint32(hash)
	mask := uint32(len(s.slots) - 1)
	for i := tag & mask; ; i = (i + 1) & mask {
		sl := &s.slots[i]
		if sl.ref == 0 || sl.ref == tomb {
			if sl.ref == tomb {
				s.tombs--
			}
			*sl = slot{tag: tag, ref: ref}
			s.used++
			return
		}
	}
}

// removeLocked removes (hash, ref); the shard's write lock is held.
func (s *shard) removeLocked(hash uint64, ref Ref) bool {
	if len(s.slots) == 0 {
		return false
	}
	tag := uint32(hash)
	mask := uint32(len(s.slots) - 1)
	for i := tag & mask; ; i = (i + 1) & mask {
		sl := &s.slots[i]
		switch {
		case sl.ref == 0:
			return false
		case sl.ref == ref && sl.tag == tag:
			sl.ref = tomb
			s.used--
			s.tombs++
			return true
		}
	}
}

// rehash grows the table (or only clears its tombs) to a load under 50%.
func (s *shard) rehash() {
	n := 16
	for n*5 < (s.used+1)*10 {
		n *= 2
	}
	old := s.slots
	s.slots = make([]slot, n)
	s.used, s.tombs = 0, 0
	mask := uint32(n - 1)
	for _, sl := range old {
		if sl.ref == 0 || sl.ref == tomb {
			continue
		}
		for i := sl.tag & mask; ; i = (i + 1) & mask {
			if s.slots[i].ref == 0 {
				s.slots[i] = sl
				s.used++
				break
			}
		}
	}
}

// bytes is the tables' memory.
func (t *hashTable) bytes() int64 {
	var n int64
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.RLock()
		n += int64(len(s.slots)) * int64(unsafe.Sizeof(slot{}))
		s.mu.RUnlock()
	}
	return n
}
