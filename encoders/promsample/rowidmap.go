package promsample

// RowIDMap maps uint32 keys to uint32 values for the span of one row
// being built, and is emptied in constant time by Reset: open addressing
// with linear probing over slots stamped with the row's generation. Row
// building maps ids to the row's local ids: a row encoder, the caller's
// symbol ids to the row's string ids (RowEncoder); a receiver, its series
// not yet anchored to their local ids. A Go map cleared for every row
// cost a probe and an insert per new series and per string of its
// labels, and clearing one walks every slot it ever grew to, so a map
// that once met a large row paid for it on every row after: at a million
// series the two maps were 4% of the receiver's CPU. The zero value is
// ready; it is not safe for concurrent use.
type RowIDMap struct {
	slots []rowIDSlot // a power of two long, at most half full
	gen   uint32      // the row's generation; a slot of another is empty
	n     int         // entries of this generation
}

type rowIDSlot struct{ gen, key, val uint32 }

// maxKeptRowIDSlots bounds the table a RowIDMap keeps across Resets (12
// bytes a slot: 768 KiB).
const maxKeptRowIDSlots = 1 << 16

// Reset empties m.
func (m *RowIDMap) Reset() {
	m.n = 0
	m.gen++
	if m.gen == 0 || len(m.slots) > maxKeptRowIDSlots {
		// The stamps wrapped (after 2^32 rows), or one row grew the
		// table past what is worth keeping: start over.
		m.slots, m.gen = nil, 1
	}
}

// Len returns the number of entries.
func (m *RowIDMap) Len() int { return m.n }

// Get returns key's value and whether m has one.
func (m *RowIDMap) Get(key uint32) (uint32, bool) {
	if m.n == 0 {
		return 0, false
	}
	s := m.slot(key)
	return s.val, s.gen == m.gen
}

// Set sets key's value, adding key if it is new.
func (m *RowIDMap) Set(key, val uint32) {
	if m.gen == 0 {
		m.gen = 1 // the zero value's first use
	}
	if 2*(m.n+1) > len(m.slots) {
		m.grow()
	}
	s := m.slot(key)
	if s.gen != m.gen {
		m.n++
	}
	*s = rowIDSlot{gen: m.gen, key: key, val: val}
}

// slot returns key's slot, or the empty one where it goes; m has slots.
func (m *RowIDMap) slot(key uint32) *rowIDSlot {
	mask := uint32(len(m.slots) - 1)
	for i := (key * 0x9e3779b1) & mask; ; i = (i + 1) & mask {
		if s := &m.slots[i]; s.gen != m.gen || s.key == key {
			return s
		}
	}
}

// grow doubles the table, moving this generation's entries.
func (m *RowIDMap) grow() {
	old := m.slots
	m.slots = make([]rowIDSlot, max(256, 2*len(old)))
	mask := uint32(len(m.slots) - 1)
	for _, s := range old {
		if s.gen != m.gen {
			continue
		}
		i := (s.key * 0x9e3779b1) & mask
		for m.slots[i].gen == m.gen {
			i = (i + 1) & mask
		}
		m.slots[i] = s
	}
}
