package seriesindex

// RefMap maps Refs to uint32 values for the span of one task, such as the
// series of a request's row not anchored yet, and is emptied in constant
// time by Reset: open addressing with linear probing over slots stamped
// with the task's generation. A Go map cleared for every row cost a probe
// and an insert per new series (1% of the receiver's CPU at a million
// series), and clearing it walks every slot it ever grew to. The zero
// value is ready; it is not safe for concurrent use.
type RefMap struct {
	slots []refSlot // a power of two long, at most half full
	gen   uint32    // the task's generation; a slot of another is empty
	n     int       // entries of this generation
}

type refSlot struct {
	gen uint32
	ref Ref
	val uint32
}

// maxKeptRefSlots bounds the table a RefMap keeps across Resets (12 bytes
// a slot: 768 KiB).
const maxKeptRefSlots = 1 << 16

// Reset empties m.
func (m *RefMap) Reset() {
	m.n = 0
	m.gen++
	if m.gen == 0 || len(m.slots) > maxKeptRefSlots {
		// The stamps wrapped, or one task grew the table past what is
		// worth keeping: start over.
		m.slots, m.gen = nil, 1
	}
}

// Len returns the number of entries.
func (m *RefMap) Len() int { return m.n }

// Get returns r's value and whether m has one.
func (m *RefMap) Get(r Ref) (uint32, bool) {
	if m.n == 0 {
		return 0, false
	}
	s := m.slot(r)
	return s.val, s.gen == m.gen
}

// Set sets r's value, adding r if it is new.
func (m *RefMap) Set(r Ref, v uint32) {
	if m.gen == 0 {
		m.gen = 1 // the zero value's first use
	}
	if 2*(m.n+1) > len(m.slots) {
		m.grow()
	}
	s := m.slot(r)
	if s.gen != m.gen {
		m.n++
	}
	*s = refSlot{gen: m.gen, ref: r, val: v}
}

// slot returns r's slot, or the empty one where it goes.
func (m *RefMap) slot(r Ref) *refSlot {
	mask := uint32(len(m.slots) - 1)
	for i := (uint32(r) * 0x9e3779b1) & mask; ; i = (i + 1) & mask {
		if s := &m.slots[i]; s.gen != m.gen || s.ref == r {
			return s
		}
	}
}

// grow doubles the table, moving this generation's entries.
func (m *RefMap) grow() {
	old := m.slots
	m.slots = make([]refSlot, max(256, 2*len(old)))
	mask := uint32(len(m.slots) - 1)
	for _, s := range old {
		if s.gen != m.gen {
			continue
		}
		i := (uint32(s.ref) * 0x9e3779b1) & mask
		for m.slots[i].gen == m.gen {
			i = (i + 1) & mask
		}
		m.slots[i] = s
	}
}
