package seriesindex

import (
	"math/bits"
	"slices"
	"sync"
	"unsafe"

	"github.com/prometheus/prometheus/model/labels"
)

// postings maps label name -> value -> the sorted Refs of the series with
// that label (as Prometheus's MemPostings does, over symbol ids). A
// matcher's answer is computed from these lists without visiting a
// series that does not match: Select intersects the lists of the
// matchers a series must satisfy and subtracts those of the values it must
// not have.
type postings struct {
	mu    sync.RWMutex
	names map[uint32]*nameIndex
}

// nameIndex holds one label name's posting lists, a value's in one of
// the two maps.
type nameIndex struct {
	values map[uint32][]Ref    // short lists
	big    map[uint32]*bigList // long ones; nil until one is
}

func (p *postings) init() { p.names = map[uint32]*nameIndex{} }

// get returns the list of value v (empty if none).
func (ni *nameIndex) get(v uint32) plist {
	if b := ni.big[v]; b != nil {
		return plist{big: b}
	}
	return plist{refs: ni.values[v]}
}

// all yields every value and its list.
func (ni *nameIndex) all(yield func(v uint32, l plist) bool) {
	for v, refs := range ni.values {
		if !yield(v, plist{refs: refs}) {
			return
		}
	}
	for v, b := range ni.big {
		if !yield(v, plist{big: b}) {
			return
		}
	}
}

// addLocked lists r under each of its pairs; p.mu is held.
func (p *postings) addLocked(r Ref, pairs []uint32) {
	for i := 0; i+1 < len(pairs); i += 2 {
		ni := p.names[pairs[i]]
		if ni == nil {
			ni = &nameIndex{values: map[uint32][]Ref{}}
			p.names[pairs[i]] = ni
		}
		v := pairs[i+1]
		if b := ni.big[v]; b != nil {
			b.add(r)
			continue
		}
		list := ni.values[v]
		if n := len(list); n == 0 || list[n-1] < r {
			// The common case: a new series has the largest Ref so far.
			list = append(list, r)
		} else {
			// A reused Ref: insert it.
			k, _ := slices.BinarySearch(list, r)
			list = slices.Insert(list, k, r)
		}
		// Considered again at each doubling: counting its keys is
		// linear, so amortized constant.
		if n := len(list); n >= bigAt && n&(n-1) == 0 && dense(list) {
			if ni.big == nil {
				ni.big = map[uint32]*bigList{}
			}
			ni.big[v] = newBig(list)
			delete(ni.values, v)
			continue
		}
		ni.values[v] = list
	}
}

// remove drops gone (whose entries still hold their pairs) from every list.
func (p *postings) remove(x *Index, gone []Ref) {
	// The Refs to drop from each list: a list is filtered once, a long
	// one only where its Refs are.
	touched := map[[2]uint32][]Ref{}
	for _, r := range gone {
		for pr := x.Pairs(r); pr.Len() > 0; {
			n, v := pr.Next()
			touched[[2]uint32{n, v}] = append(touched[[2]uint32{n, v}], r)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for nv, refs := range touched {
		ni := p.names[nv[0]]
		if ni == nil {
			continue
		}
		if b := ni.big[nv[1]]; b != nil {
			for _, r := range refs {
				b.remove(r)
			}
			if b.n == 0 {
				delete(ni.big, nv[1])
			}
		} else if list := ni.values[nv[1]]; len(list) > 0 {
			slices.Sort(refs)
			kept := make([]Ref, 0, len(list))
			j := 0
			for _, r := range list {
				for j < len(refs) && refs[j] < r {
					j++
				}
				if j == len(refs) || refs[j] != r {
					kept = append(kept, r)
				}
			}
			if len(kept) == 0 {
				delete(ni.values, nv[1])
			} else {
				ni.values[nv[1]] = kept
			}
		}
		if len(ni.values) == 0 && len(ni.big) == 0 {
			delete(p.names, nv[0])
		}
	}
}

func (p *postings) bytes() int64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	var n int64
	for _, ni := range p.names {
		// Map entries, slice headers and pointers, roughly.
		n += 48 + int64(len(ni.values))*40 + int64(len(ni.big))*16
		for _, refs := range ni.values {
			n += int64(cap(refs)) * int64(unsafe.Sizeof(Ref(0)))
		}
		for _, b := range ni.big {
			n += b.bytes()
		}
	}
	return n
}

// refSet is what a series must be in to satisfy one matcher: a posting
// list, or the union of several as a bitmap; n is its size.
type refSet struct {
	n    int
	list plist
	bm   bitmap
}

// Postings returns the live series whose labels satisfy every matcher,
// sorted by Ref. A matcher that matches the empty value is also satisfied
// by a series without the label, as in PromQL.
func (x *Index) Postings(ms []*labels.Matcher) []Ref {
	x.post.mu.RLock()
	defer x.post.mu.RUnlock()
	var pos []refSet // each a set the series must be in
	var neg []plist  // lists it must not be in
	for _, m := range ms {
		name, ok := x.syms.lookup(m.Name)
		var ni *nameIndex
		if ok {
			ni = x.post.names[name]
		}
		if m.Matches("") {
			// Satisfied without the label: the series must not have a
			// value m refuses.
			if ni == nil {
				continue
			}
			for v, l := range ni.all {
				if !m.Matches(x.syms.get(v)) {
					neg = append(neg, l)
				}
			}
			continue
		}
		if ni == nil {
			return nil
		}
		var lists []plist
		switch set := matcherSet(m); {
		case set != nil:
			for _, s := range set {
				if id, ok := x.syms.lookup(s); ok {
					if l := ni.get(id); l.len() > 0 {
						lists = append(lists, l)
					}
				}
			}
		default:
			for v, l := range ni.all {
				if m.Matches(x.syms.get(v)) {
					lists = append(lists, l)
				}
			}
		}
		if len(lists) == 0 {
			return nil
		}
		pos = append(pos, x.union(lists))
	}
	var out []Ref
	if len(pos) == 0 {
		out = x.all()
	} else {
		slices.SortFunc(pos, func(a, b refSet) int { return a.n - b.n })
		// The smallest set, copied (lists are the index's own), filtered
		// by the others.
		if s := pos[0]; s.bm != nil {
			out = s.bm.appendTo(make([]Ref, 0, s.n))
		} else {
			out = s.list.appendTo(make([]Ref, 0, s.n))
		}
		for _, s := range pos[1:] {
			if s.bm != nil {
				out = slices.DeleteFunc(out, func(r Ref) bool { return !s.bm.has(r) })
			} else {
				out = s.list.filter(out)
			}
			if len(out) == 0 {
				return nil
			}
		}
	}
	if len(neg) > 0 {
		out = x.subtract(out, neg)
	}
	return out
}

// matcherSet returns the values an equality or a regexp of alternatives
// matches exactly, or nil when m must be tested value by value.
func matcherSet(m *labels.Matcher) []string {
	switch m.Type {
	case labels.MatchEqual:
		return []string{m.Value}
	case labels.MatchRegexp:
		return m.SetMatches()
	}
	return nil
}

// all returns every live Ref, sorted.
func (x *Index) all() []Ref {
	max := x.maxRef()
	out := make([]Ref, 0, x.Len())
	for r := Ref(1); r <= max; r++ {
		if x.entry(r).flags.Load()&flagLive != 0 {
			out = append(out, r)
		}
	}
	return out
}

// union returns the set of the Refs of lists. The lists of one label's
// values are disjoint; a bitmap over the Refs merges many of them in one
// pass (a long list's bitmap containers a word at a time).
func (x *Index) union(lists []plist) refSet {
	if len(lists) == 1 {
		return refSet{n: lists[0].len(), list: lists[0]}
	}
	total := 0
	bm := newBitmap(x.maxRef())
	for _, l := range lists {
		total += l.len()
		l.orInto(bm)
	}
	return refSet{n: total, bm: bm}
}

// subtract removes from sorted refs every Ref in the lists neg.
func (x *Index) subtract(refs []Ref, neg []plist) []Ref {
	bm := newBitmap(x.maxRef())
	for _, l := range neg {
		l.orInto(bm)
	}
	out := refs[:0:0]
	for _, r := range refs {
		if !bm.has(r) {
			out = append(out, r)
		}
	}
	return out
}

// intersect appends to dst the values of a also in b (both sorted); dst
// may be a[:0], whose elements it overwrites only behind where it reads.
func intersect(dst, a, b []Ref) []Ref {
	if len(a) > len(b) {
		a, b = b, a
		dst = dst[:0:0] // a and b swapped: dst may alias b now
	}
	j := 0
	for _, v := range a {
		// Gallop: the next candidate is at or after j.
		k, step := j, 1
		for k < len(b) && b[k] < v {
			j = k + 1
			k += step
			step *= 2
		}
		hi := min(k+1, len(b))
		j += searchRef(b[j:hi], v)
		if j < len(b) && b[j] == v {
			dst = append(dst, v)
			j++
		}
	}
	return dst
}

func searchRef(s []Ref, v Ref) int {
	lo, hi := 0, len(s)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s[m] < v {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// bitmap is a set of Refs up to a maximum.
type bitmap []uint64

func newBitmap(max Ref) bitmap { return make(bitmap, int(max)/64+1) }

func (b bitmap) set(r Ref)      { b[r/64] |= 1 << (r % 64) }
func (b bitmap) has(r Ref) bool { return int(r/64) < len(b) && b[r/64]&(1<<(r%64)) != 0 }

func (b bitmap) appendTo(out []Ref) []Ref {
	for i, w := range b {
		for w != 0 {
			t := bits.TrailingZeros64(w)
			out = append(out, Ref(i*64+t))
			w &= w - 1
		}
	}
	return out
}

// Select returns the series that satisfy ms and hold data in [mint,
// maxt] (sample time, Unix ms, inclusive), sorted by Ref.
func (x *Index) Select(ms []*labels.Matcher, mint, maxt int64) []Ref {
	refs := x.Postings(ms)
	out := refs[:0]
	for _, r := range refs {
		if lo, hi, ok := x.Span(r); ok && lo <= maxt && hi >= mint {
			out = append(out, r)
		}
	}
	return out
}

// inRange reports whether r holds data in [mint, maxt].
func (x *Index) inRange(r Ref, mint, maxt int64) bool {
	lo, hi, ok := x.Span(r)
	return ok && lo <= maxt && hi >= mint
}

// LabelValues returns the values of label name among the series that
// satisfy ms and hold data in [mint, maxt], sorted.
func (x *Index) LabelValues(name string, ms []*labels.Matcher, mint, maxt int64) []string {
	nameID, ok := x.syms.lookup(name)
	if !ok {
		return nil
	}
	var ids []uint32
	if len(ms) == 0 {
		x.post.mu.RLock()
		if ni := x.post.names[nameID]; ni != nil {
			for v, l := range ni.all {
				if l.any(func(r Ref) bool { return x.inRange(r, mint, maxt) }) {
					ids = append(ids, v)
				}
			}
		}
		x.post.mu.RUnlock()
	} else {
		seen := map[uint32]struct{}{}
		for _, r := range x.Select(ms, mint, maxt) {
			for p := x.Pairs(r); p.Len() > 0; {
				if n, v := p.Next(); n == nameID {
					seen[v] = struct{}{}
					break
				}
			}
		}
		for v := range seen {
			ids = append(ids, v)
		}
	}
	return x.sortedStrings(ids)
}

// LabelNames returns the label names of the series that satisfy ms and
// hold data in [mint, maxt], sorted.
func (x *Index) LabelNames(ms []*labels.Matcher, mint, maxt int64) []string {
	var ids []uint32
	if len(ms) == 0 {
		x.post.mu.RLock()
		for n, ni := range x.post.names {
			for _, l := range ni.all {
				if l.any(func(r Ref) bool { return x.inRange(r, mint, maxt) }) {
					ids = append(ids, n)
					break
				}
			}
		}
		x.post.mu.RUnlock()
	} else {
		seen := map[uint32]struct{}{}
		for _, r := range x.Select(ms, mint, maxt) {
			for p := x.Pairs(r); p.Len() > 0; {
				n, _ := p.Next()
				seen[n] = struct{}{}
			}
		}
		for n := range seen {
			ids = append(ids, n)
		}
	}
	return x.sortedStrings(ids)
}

func (x *Index) sortedStrings(ids []uint32) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		out = append(out, x.syms.get(id))
	}
	slices.Sort(out)
	return out
}
