package seriesindex

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// Ref names a series in an Index. It is stable while the series is in the
// index; 0 is no series. A removed series' Ref may name another series
// later, so nothing outside the index keeps one across a Remove.
type Ref uint32

// Loc names where a series' data lives: one stream of one source (a
// series of a source lives in one stream, the one its metric name hashes
// to). 0 is unknown.
type Loc uint32

// LocInfo is what a Loc stands for.
type LocInfo struct {
	Source int64 // archive.SourceID
	Stream string
}

// Index is the series index (see the package doc). The zero value is not
// ready; use New.
type Index struct {
	syms  *symbols
	table hashTable

	// Entries, in chunks that never move: entry r is
	// chunks[(r-1)>>chunkBits][(r-1)&chunkMask]. The slice of chunks is
	// replaced (under mu) when it grows.
	chunks atomic.Pointer[[]*[chunkSize]entry]
	mu     sync.Mutex // allocation of refs, chunks and pair space (arena)
	arena  arena      // the series' label pairs
	next   Ref        // refs ever handed out
	free   []freedRef // removed refs, oldest first, reused after ReuseAfter
	live   atomic.Int64

	post postings

	locMu  sync.RWMutex
	locs   []LocInfo // Loc-1 -> info
	locIDs map[LocInfo]Loc
	extra  map[Ref][]Loc // locations beyond an entry's first (rare: one series sent by several sources)

	start time.Time // Touch's clock origin
}

// ReuseAfter is how long a removed series' Ref stays unused: a request
// decoded just before the removal, or a question that selected it, may
// still hold it (a write waits at most 30 s for the writer, a question 2
// minutes), and must find the labels it named, not another series'.
const ReuseAfter = 10 * time.Minute

type freedRef struct {
	ref Ref
	at  time.Time
}

const (
	chunkBits = 12
	chunkSize = 1 << chunkBits
	chunkMask = chunkSize - 1
)

// entry is one series: 64 bytes and no pointers, so the chunks are noscan
// memory (TestEntryHasNoPointers checks it). hash and pairs are written
// before the entry is published (by the shard lock that inserts it) and
// never change while it is live; the rest are atomics updated by ingest
// and reads.
type entry struct {
	hash uint64
	// pairs is the arena offset of the labels: their count, then the
	// (name, value) symbol ids.
	pairs uint64
	loc   atomic.Uint32
	flags atomic.Uint32
	// minT, maxT: sample-time span (Unix ms) of the data the archive holds
	// for it, as far as reads have seen; minT > maxT when none.
	minT, maxT atomic.Int64
	// lastRecv is the receipt ts (the archive's row ts, Unix ns) of the
	// newest row seen holding it.
	lastRecv atomic.Int64
	// anchor is the ingester's stamp of the epoch row that anchored it.
	anchor atomic.Uint64
	// seen is when ingest last wrote it, in seconds since Index.start.
	seen atomic.Uint32
	// next is the Ref that followed it in the last request that held it.
	next atomic.Uint32
}

// Entry flags.
const (
	flagLive = 1 << iota
	// flagLegacy: the labels passed the remote-write 1.0 name rules, so a
	// 1.0 request naming them needs no validation.
	flagLegacy
	// flagValid: the labels passed validation under some scheme.
	flagValid
	// flagMultiLoc: the series has locations beyond loc (Index.extra).
	flagMultiLoc
)

// New returns an empty Index.
func New() *Index {
	x := &Index{syms: newSymbols(), locIDs: map[LocInfo]Loc{}, extra: map[Ref][]Loc{}, start: time.Now()}
	x.chunks.Store(&[]*[chunkSize]entry{})
	x.arena.init()
	x.post.init()
	return x
}

func (x *Index) entry(r Ref) *entry {
	i := uint32(r - 1)
	return &(*x.chunks.Load())[i>>chunkBits][i&chunkMask]
}

// valid reports whether r names a live series.
func (x *Index) valid(r Ref) bool {
	if r == 0 || r > x.maxRef() {
		return false
	}
	return x.entry(r).flags.Load()&flagLive != 0
}

func (x *Index) maxRef() Ref {
	cs := *x.chunks.Load()
	return Ref(len(cs) * chunkSize)
}

// Len is the number of series.
func (x *Index) Len() int { return int(x.live.Load()) }

// Find returns the live series with hash (a SeriesHash) that match accepts,
// or 0. match runs under the hash shard's read lock and must not call
// methods that add or remove series.
func (x *Index) Find(hash uint64, match func(Ref) bool) Ref {
	return x.table.find(hash, func(r Ref) bool { return x.is(r, hash) && match(r) })
}

// is reports whether r is live and has hash: the table's slots hold a
// tag of the hash only, so this confirms a slot (else match would be
// asked about a series of another hash). It runs under the shard's lock,
// which ordered r's hash before the slot naming r.
func (x *Index) is(r Ref, hash uint64) bool {
	if r == 0 || r > x.maxRef() {
		return false
	}
	e := x.entry(r)
	return e.hash == hash && e.flags.Load()&flagLive != 0
}

// Get returns the series with labels ls, or 0.
func (x *Index) Get(ls labels.Labels) Ref {
	return x.Find(promsample.SeriesHash(ls), func(r Ref) bool { return x.Equal(r, ls) })
}

// Add returns the series with labels ls (sorted, no empty values, as
// labels.Labels are), adding it if it is new; added says which.
func (x *Index) Add(ls labels.Labels) (ref Ref, added bool) {
	return x.add(promsample.SeriesHash(ls), ls, nil, false)
}

// AddLabels is Add for labels given as a slice, sorted by name, names
// distinct and no value empty (what a labels.Labels holds), with their
// SeriesHash: a decoder that validated them as it read them off the wire
// adds them without building a labels.Labels or hashing them again.
func (x *Index) AddLabels(ls []Label, hash uint64) (ref Ref, added bool) {
	return x.add(hash, labels.EmptyLabels(), ls, true)
}

// add is Add for a label set with hash hash, given as ls or, when
// sliced, as sl. Both forms are passed rather than a comparison and an
// interning function: the scratch below stays on the stack only while
// the calls that fill it are direct (through a function value it escaped,
// an allocation for every series added).
func (x *Index) add(hash uint64, ls labels.Labels, sl []Label, sliced bool) (ref Ref, added bool) {
	s := x.table.shard(hash)
	s.mu.Lock()
	if r := s.findLocked(hash, func(r Ref) bool {
		if !x.is(r, hash) {
			return false
		}
		if sliced {
			return x.EqualLabels(r, sl)
		}
		return x.Equal(r, ls)
	}); r != 0 {
		s.mu.Unlock()
		return r, false
	}
	// Scratch on the stack for the usual label set.
	var pbuf [32]uint32
	var ebuf [96]byte
	var pairs []uint32
	if sliced {
		pairs = x.syms.internLabels(pbuf[:0], sl)
	} else {
		pairs = x.syms.internPairs(pbuf[:0], ls)
	}
	enc := appendLabels(ebuf[:0], pairs)
	// The postings lock is held from allocating the Ref to listing it, so
	// fresh Refs reach the posting lists in increasing order and are
	// appended. Allocated outside it, two adds that race list theirs out
	// of order, and an insert copies the whole list (a job's list holds
	// every series): at a million series that made indexing quadratic.
	// Lock order: shard, postings, x.mu.
	x.post.mu.Lock()
	ref = x.alloc(enc)
	e := x.entry(ref)
	e.hash = hash
	e.loc.Store(0)
	e.minT.Store(math.MaxInt64)
	e.maxT.Store(math.MinInt64)
	e.lastRecv.Store(math.MinInt64)
	e.anchor.Store(0)
	e.seen.Store(0)
	e.next.Store(0)
	e.flags.Store(flagLive)
	// The entry is complete before a posting list or the table shows it.
	x.post.addLocked(ref, pairs)
	x.post.mu.Unlock()
	s.insertLocked(hash, ref)
	s.mu.Unlock()
	x.live.Add(1)
	return ref, true
}

// alloc returns a free Ref whose entry holds the labels encoded in enc
// (its pairs set), growing the chunks when needed.
func (x *Index) alloc(enc []byte) Ref {
	x.mu.Lock()
	defer x.mu.Unlock()
	var r Ref
	if len(x.free) > 0 && time.Since(x.free[0].at) >= ReuseAfter {
		r = x.free[0].ref
		x.free = x.free[1:]
		// Nothing reads the removed series' pairs any more (ReuseAfter
		// has passed): its space goes back, for this series if it is as
		// long. Released before, a reader holding the old Ref could see
		// another series' labels under it.
		e := x.entry(r)
		x.arena.release(e.pairs, encodedLen(x.arena.at(e.pairs)))
	} else {
		x.next++
		r = x.next
		cs := *x.chunks.Load()
		if int(uint32(r-1)>>chunkBits) == len(cs) {
			grown := make([]*[chunkSize]entry, len(cs)+1)
			copy(grown, cs)
			grown[len(cs)] = new([chunkSize]entry)
			x.chunks.Store(&grown)
		}
	}
	off, dst := x.arena.alloc(len(enc))
	copy(dst, enc)
	x.entry(r).pairs = off
	return r
}

// Remove drops series from the index (retention removed their data and
// ingest has not written them since). Their Refs may be reused.
func (x *Index) Remove(refs []Ref) {
	var gone []Ref
	for _, r := range refs {
		if !x.valid(r) {
			continue
		}
		e := x.entry(r)
		s := x.table.shard(e.hash)
		s.mu.Lock()
		if e.flags.Load()&flagLive != 0 {
			s.removeLocked(e.hash, r)
			e.flags.Store(0)
			gone = append(gone, r)
		}
		s.mu.Unlock()
	}
	if len(gone) == 0 {
		return
	}
	x.post.remove(x, gone)
	x.locMu.Lock()
	for _, r := range gone {
		delete(x.extra, r)
	}
	x.locMu.Unlock()
	now := time.Now()
	x.mu.Lock()
	for _, r := range gone {
		x.free = append(x.free, freedRef{r, now})
	}
	x.mu.Unlock()
	x.live.Add(-int64(len(gone)))
}

// Pairs returns a reader of r's labels as (name, value) symbol ids in
// label order; Symbol turns an id into its string. Together they let a
// caller compare labels without building them.
func (x *Index) Pairs(r Ref) Pairs {
	b, n := x.labels(x.entry(r))
	return Pairs{b: b, n: n}
}

// labels returns e's encoded pairs (and what follows them in the arena)
// and its number of labels.
func (x *Index) labels(e *entry) ([]byte, int) { return labelsAt(x.arena.at(e.pairs)) }

// Symbol returns the string of a symbol id from Pairs.
func (x *Index) Symbol(id uint32) string { return x.syms.get(id) }

// Hash returns r's SeriesHash.
func (x *Index) Hash(r Ref) uint64 { return x.entry(r).hash }

// Labels returns r's labels.
func (x *Index) Labels(r Ref) labels.Labels {
	var b labels.ScratchBuilder
	return x.LabelsWith(r, &b)
}

// LabelsWith returns r's labels, built with b.
func (x *Index) LabelsWith(r Ref, b *labels.ScratchBuilder) labels.Labels {
	b.Reset()
	for p := x.Pairs(r); p.Len() > 0; {
		n, v := p.Next()
		b.Add(x.syms.get(n), x.syms.get(v))
	}
	return b.Labels()
}

// Equal reports whether r's labels are ls.
func (x *Index) Equal(r Ref, ls labels.Labels) bool {
	b, left := x.labels(x.entry(r))
	// One load of the symbols for all the labels: it follows the entry's
	// publication (the caller found r live), so it holds r's ids.
	syms := x.syms.table()
	// The count is checked as ls is read, not by ls.Len, which would
	// read ls twice.
	eq := true
	ls.Range(func(l labels.Label) {
		if !eq {
			return
		}
		if left == 0 {
			eq = false
			return
		}
		left--
		var n, v uint32
		n, b = uvarint(b)
		v, b = uvarint(b)
		eq = syms.get(n) == l.Name && syms.get(v) == l.Value
	})
	return eq && left == 0
}

// Label is a label as a request holds it, for EqualLabels.
type Label struct{ Name, Value string }

// EqualLabels reports whether r's labels are exactly ls, in order: the
// decoder's comparison of the labels on the wire with a known series,
// without building them.
func (x *Index) EqualLabels(r Ref, ls []Label) bool {
	b, n := x.labels(x.entry(r))
	if n != len(ls) {
		return false
	}
	syms := x.syms.table() // as in Equal
	for _, l := range ls {
		var n, v uint32
		n, b = uvarint(b)
		v, b = uvarint(b)
		if syms.get(n) != l.Name || syms.get(v) != l.Value {
			return false
		}
	}
	return true
}

// Get returns the value of label name of r, or "".
func (x *Index) Value(r Ref, name string) string {
	for p := x.Pairs(r); p.Len() > 0; {
		if n, v := p.Next(); x.syms.get(n) == name {
			return x.syms.get(v)
		}
	}
	return ""
}

// Loc returns the location id of (source, stream), registering it.
func (x *Index) Loc(source int64, stream string) Loc {
	k := LocInfo{Source: source, Stream: stream}
	x.locMu.RLock()
	l, ok := x.locIDs[k]
	x.locMu.RUnlock()
	if ok {
		return l
	}
	x.locMu.Lock()
	defer x.locMu.Unlock()
	if l, ok := x.locIDs[k]; ok {
		return l
	}
	x.locs = append(x.locs, k)
	l = Loc(len(x.locs))
	x.locIDs[k] = l
	return l
}

// LocInfo returns what l stands for.
func (x *Index) LocInfo(l Loc) LocInfo {
	x.locMu.RLock()
	defer x.locMu.RUnlock()
	return x.locs[l-1]
}

// Locs returns the locations of r's data.
func (x *Index) Locs(r Ref) []Loc {
	e := x.entry(r)
	l := Loc(e.loc.Load())
	if l == 0 {
		return nil
	}
	if e.flags.Load()&flagMultiLoc == 0 {
		return []Loc{l}
	}
	x.locMu.RLock()
	defer x.locMu.RUnlock()
	return append([]Loc{l}, x.extra[r]...)
}

// FirstLoc returns r's first location (0: none), without allocating.
func (x *Index) FirstLoc(r Ref) Loc { return Loc(x.entry(r).loc.Load()) }

// MultiLoc reports whether r's data lives in more than one location.
func (x *Index) MultiLoc(r Ref) bool { return x.entry(r).flags.Load()&flagMultiLoc != 0 }

// Observe records that the archive holds data of r at loc over [minT, maxT]
// (sample time, Unix ms), in a row received at recv (Unix ns).
func (x *Index) Observe(r Ref, loc Loc, minT, maxT, recv int64) {
	e := x.entry(r)
	if cur := Loc(e.loc.Load()); cur != loc {
		if cur == 0 && e.loc.CompareAndSwap(0, uint32(loc)) {
			// first location
		} else if Loc(e.loc.Load()) != loc {
			x.addLoc(r, e, loc)
		}
	}
	for {
		v := e.minT.Load()
		if minT >= v || e.minT.CompareAndSwap(v, minT) {
			break
		}
	}
	for {
		v := e.maxT.Load()
		if maxT <= v || e.maxT.CompareAndSwap(v, maxT) {
			break
		}
	}
	for {
		v := e.lastRecv.Load()
		if recv <= v || e.lastRecv.CompareAndSwap(v, recv) {
			break
		}
	}
}

func (x *Index) addLoc(r Ref, e *entry, loc Loc) {
	x.locMu.Lock()
	defer x.locMu.Unlock()
	for _, l := range x.extra[r] {
		if l == loc {
			return
		}
	}
	x.extra[r] = append(x.extra[r], loc)
	for {
		f := e.flags.Load()
		if e.flags.CompareAndSwap(f, f|flagMultiLoc) {
			break
		}
	}
}

// Span returns the sample-time span of r's data seen in the archive; ok is
// false while none was (a series ingest created whose rows no read has
// seen yet).
func (x *Index) Span(r Ref) (minT, maxT int64, ok bool) {
	e := x.entry(r)
	minT, maxT = e.minT.Load(), e.maxT.Load()
	return minT, maxT, minT <= maxT
}

// LastReceived returns the receipt ts of the newest row seen holding r.
func (x *Index) LastReceived(r Ref) int64 { return x.entry(r).lastRecv.Load() }

// Anchor returns the ingester's anchor stamp of r (0: none).
func (x *Index) Anchor(r Ref) uint64 { return x.entry(r).anchor.Load() }

// SetAnchor records r's anchor stamp once the row anchoring it committed.
func (x *Index) SetAnchor(r Ref, stamp uint64) { x.entry(r).anchor.Store(stamp) }

// Touch records that ingest wrote r now.
func (x *Index) Touch(r Ref, now time.Time) {
	e := x.entry(r)
	s := uint32(max(now.Sub(x.start)/time.Second, 1))
	if e.seen.Load() != s {
		e.seen.Store(s)
	}
}

// Next returns the series that followed r in the last request holding
// both (a prediction for the next series of a request; 0 if none).
func (x *Index) Next(r Ref) Ref {
	n := Ref(x.entry(r).next.Load())
	if !x.valid(n) {
		return 0
	}
	return n
}

// SetNext records that n followed r.
func (x *Index) SetNext(r, n Ref) {
	e := x.entry(r)
	if Ref(e.next.Load()) != n {
		e.next.Store(uint32(n))
	}
}

// Validated reports whether r's labels passed the 1.0 name rules (legacy)
// or, with legacy false, any validation.
func (x *Index) Validated(r Ref, legacy bool) bool {
	f := x.entry(r).flags.Load()
	if legacy {
		return f&flagLegacy != 0
	}
	return f&flagValid != 0
}

// SetValidated records that r's labels passed validation (legacy: the 1.0
// name rules).
func (x *Index) SetValidated(r Ref, legacy bool) {
	e := x.entry(r)
	add := uint32(flagValid)
	if legacy {
		add |= flagLegacy
	}
	for {
		f := e.flags.Load()
		if f&add == add || f&flagLive == 0 || e.flags.CompareAndSwap(f, f|add) {
			return
		}
	}
}

// Idle calls fn for every series ingest has written but not for longer
// than d (its anchor and prediction are then cleared: the series'
// ingest state leaves, its data stays readable), and returns how many.
func (x *Index) Idle(now time.Time, d time.Duration) int {
	cut := now.Sub(x.start) - d
	if cut <= 0 {
		return 0
	}
	limit := uint32(cut / time.Second)
	n := 0
	max := x.maxRef()
	for r := Ref(1); r <= max; r++ {
		e := x.entry(r)
		if e.flags.Load()&flagLive == 0 {
			continue
		}
		if s := e.seen.Load(); s != 0 && s < limit {
			e.seen.Store(0)
			e.anchor.Store(0)
			e.next.Store(0)
			n++
		}
	}
	return n
}

// Stats describes the index's size.
type Stats struct {
	Series      int
	Symbols     int
	SymbolBytes int64
	// Bytes estimates the index's memory: entries, label pairs, hash
	// table, postings and symbols.
	Bytes int64
}

// Stats returns the index's size.
func (x *Index) Stats() Stats {
	x.syms.mu.Lock()
	ns, sb := int(x.syms.n), x.syms.bytes
	x.syms.mu.Unlock()
	cs := *x.chunks.Load()
	x.mu.Lock()
	pairs := x.arena.bytes()
	x.mu.Unlock()
	b := int64(len(cs))*chunkSize*int64(entrySize) + pairs + x.table.bytes() + x.post.bytes() + sb + int64(ns)*(16+48)
	return Stats{Series: x.Len(), Symbols: ns, SymbolBytes: sb, Bytes: b}
}

const entrySize = unsafe.Sizeof(entry{})

// SymbolID returns the symbol id of s, if any series' labels hold it.
func (x *Index) SymbolID(s string) (uint32, bool) { return x.syms.lookup(s) }

// FindPairs returns the live series with hash whose labels are pairs
// (symbol ids, as Pairs returns them), or 0.
func (x *Index) FindPairs(hash uint64, pairs []uint32) Ref {
	return x.Find(hash, func(r Ref) bool { return x.pairsEqual(r, pairs) })
}

// HasPairs reports whether r is a live series with hash (its SeriesHash)
// and the labels pairs, as FindPairs takes them. A caller that predicts a
// series' Ref, from one it was handed by the index less than ReuseAfter
// ago, confirms it with this instead of probing the hash table.
func (x *Index) HasPairs(r Ref, hash uint64, pairs []uint32) bool {
	return x.valid(r) && x.entry(r).hash == hash && x.pairsEqual(r, pairs)
}

// pairsEqual reports whether r's labels are pairs (symbol ids).
func (x *Index) pairsEqual(r Ref, pairs []uint32) bool {
	p := x.Pairs(r)
	if 2*p.Len() != len(pairs) {
		return false
	}
	for i := 0; i < len(pairs); i += 2 {
		if n, v := p.Next(); n != pairs[i] || v != pairs[i+1] {
			return false
		}
	}
	return true
}

// Collect returns the series whose data lives only at loc, all of it in
// rows received before before (Unix ns), and that ingest is not writing
// (no anchor: idle longer than the ingester's idle timeout, or never
// written by this process): what a retention that removed everything of
// loc older than before has left without data.
func (x *Index) Collect(loc Loc, before int64) []Ref {
	var out []Ref
	max := x.maxRef()
	for r := Ref(1); r <= max; r++ {
		e := x.entry(r)
		f := e.flags.Load()
		if f&flagLive == 0 || f&flagMultiLoc != 0 || Loc(e.loc.Load()) != loc {
			continue
		}
		if e.lastRecv.Load() < before && e.anchor.Load() == 0 {
			out = append(out, r)
		}
	}
	return out
}
