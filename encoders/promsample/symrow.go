package promsample

// symRow is RowEncoder's map from a caller's symbol id to its string's id
// in the row being encoded: open addressing with linear probing over
// slots stamped with the row's generation, so that starting a row is a
// counter's increment. A Go map cost a third of a row of new series in
// lookups, and clearing it walked every slot it had ever grown to: under
// a million series a row encoder that once met a large row paid for it
// on every row after.
type symRow struct {
	slots []symSlot // a power of two long, at most half full
	gen   uint32    // the row's generation; a slot of another is empty
	n     int       // entries of this generation
}

// symSlot is one entry: key maps to val in generation gen.
type symSlot struct{ gen, key, val uint32 }

// maxKeptSymSlots bounds the table a row encoder keeps between rows
// (12 bytes a slot: 768 KiB).
const maxKeptSymSlots = 1 << 16

// reset empties the table for a new row; a table is reset before its
// first use.
func (t *symRow) reset() {
	t.n = 0
	t.gen++
	if t.gen == 0 || len(t.slots) > maxKeptSymSlots {
		// The stamps wrapped (after 2^32 rows), or one row grew the table
		// past what is worth keeping: start over.
		t.slots, t.gen = nil, 1
	}
}

// slot returns key's slot: its entry when it has one in this generation,
// else the empty slot where set puts it.
func (t *symRow) slot(key uint32) *symSlot {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	mask := uint32(len(t.slots) - 1)
	for i := (key * 0x9e3779b1) & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.gen != t.gen || s.key == key {
			return s
		}
	}
}

// set fills the empty slot s (from slot) with key's entry.
func (t *symRow) set(s *symSlot, key, val uint32) {
	*s = symSlot{gen: t.gen, key: key, val: val}
	t.n++
}

// grow doubles the table, moving this generation's entries.
func (t *symRow) grow() {
	old := t.slots
	t.slots = make([]symSlot, max(256, 2*len(old)))
	mask := uint32(len(t.slots) - 1)
	for _, s := range old {
		if s.gen != t.gen {
			continue
		}
		i := (s.key * 0x9e3779b1) & mask
		for t.slots[i].gen == t.gen {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}
