package archive

import (
	"hash/maphash"
	"sync"
)

// Keeping a segment's page chain from one snapshot to the next.
//
// A read in place (blobpages.go) finds the page at offset X of a
// segment by following its overflow chain from the first page and
// checking each link against the snapshot's pointer map. That walk was
// done again in every snapshot, so a question about a new series over an
// hour at a million series (~30 segments a stream, ~1,400 links to the
// middle of each) spent a quarter of its CPU walking and reading
// pointer-map pages it had read in the question before.
//
// A segment's chain is the list of its overflow pages, and it changes
// only when pages move or the row is written anew:
//
//   - Segments rows are never updated: a segment is inserted whole and
//     deleted whole (write.go). A deleted segment's pages may go to a
//     segment inserted later, but that is another row: rows are told
//     apart by their rowid, first overflow page and the record's bytes in
//     its leaf (source, stream, seq, rows, first_ts, last_ts and the
//     segment's first bytes), and no two segments share those (seq only
//     grows; a merge takes its run's first seq with the run's last
//     last_ts).
//   - A B-tree balance moves cells between leaves, never an overflow page.
//   - In an auto-vacuum INCREMENTAL file, pages move only in
//     incremental_vacuum (the writer's reclaims) and when a table or
//     index is created (the root page's place is cleared), which changes
//     the schema cookie.
//
// So the writer counts its reclaims as it counts its segments changes
// (Writer.moves, the same double count as segmentsEpoch), a read handle
// that follows it loads the count before and after its snapshot starts,
// and two snapshots whose loads agree (equal, even) and whose schema
// cookies agree see every segment's pages where the other saw them. A
// chain walked and checked in one of them is kept (chainCache) and taken
// as it is in the others; a walk past its end goes on from there, checked
// link by link, and the longer chain is kept. A handle that follows no
// writer keeps nothing and checks every link, as before. Like the
// segments epoch, this rests on the writer being the only one that moves
// pages while it runs, which its lock holds the operator commands to.
type chainCache struct {
	seed   maphash.Seed
	mu     sync.Mutex
	moves  uint64 // the reclaim count the chains hold for
	cookie uint32 // and the schema cookie
	chains map[chainKey][]uint32
	links  int // in all the chains: bounded by maxChainLinks
}

// chainKey tells a segments row apart from any other in one file (see
// above).
type chainKey struct {
	rowid   int64
	first   uint32
	payload int64
	local   uint64 // maphash of the record's bytes in its leaf
}

// maxChainLinks bounds what a cache holds: 16 MiB of links, the chains of
// 16 GiB of segments at 4 KiB pages. Past it the cache starts over.
const maxChainLinks = 4 << 20

func newChainCache() *chainCache {
	return &chainCache{seed: maphash.MakeSeed(), chains: map[chainKey][]uint32{}}
}

func (c *chainCache) key(rowid int64, cl *cell) chainKey {
	return chainKey{rowid: rowid, first: cl.first, payload: cl.payload, local: maphash.Bytes(c.seed, cl.local)}
}

// get returns the chain kept for k in snapshots of (moves, cookie), or
// nil. The chain is shared: read it, never append to it.
func (c *chainCache) get(k chainKey, moves uint64, cookie uint32) []uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if moves != c.moves || cookie != c.cookie {
		return nil
	}
	return c.chains[k]
}

// put keeps chain (checked in a snapshot of (moves, cookie)) for k if it
// is longer than the one kept. A snapshot of a later count or another
// cookie starts the cache over; one of an earlier count keeps nothing.
func (c *chainCache) put(k chainKey, moves uint64, cookie uint32, chain []uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case moves < c.moves:
		return
	case moves > c.moves || cookie != c.cookie:
		c.reset(moves, cookie)
	}
	old := c.chains[k]
	if len(chain) <= len(old) {
		return
	}
	if c.links+len(chain)-len(old) > maxChainLinks {
		c.reset(moves, cookie)
		old = nil
	}
	c.links += len(chain) - len(old)
	c.chains[k] = chain
}

func (c *chainCache) reset(moves uint64, cookie uint32) {
	c.moves, c.cookie, c.links = moves, cookie, 0
	clear(c.chains)
}
