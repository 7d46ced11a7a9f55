package promsample

// rowStarts is where each series of a series table starts in a segment,
// in Parquet rows. It keeps the table's row counts (4 bytes a series,
// which the table holds anyway) and one start every startsStride series,
// and adds up at most startsStride-1 counts to answer; an int64 a series
// was the largest part of a layout, which a reader keeps for as long as
// the segment is read: 1.3 of a segment's 1.6 MB at a million series
// (166,700 series a segment).
type rowStarts struct {
	rows  []uint32 // the table's Rows: shared, read only
	every []int64  // every[k] is series k*startsStride's start; the last is the total
}

const startsStride = 16

func newRowStarts(rows []uint32) rowStarts {
	every := make([]int64, 0, len(rows)/startsStride+2)
	var at int64
	for i, n := range rows {
		if i%startsStride == 0 {
			every = append(every, at)
		}
		at += int64(n)
	}
	// When len(rows) is a multiple of the stride the total is also the
	// start at(len(rows)) looks up.
	return rowStarts{rows: rows, every: append(every, at)}
}

// series is the number of series.
func (s rowStarts) series() int { return len(s.rows) }

// total is the number of rows of all the series.
func (s rowStarts) total() int64 { return s.every[len(s.every)-1] }

// at is series i's first row, 0 <= i <= series() (at(series()) is the
// total).
func (s rowStarts) at(i int) int64 {
	k := i / startsStride
	r := s.every[k]
	for _, n := range s.rows[k*startsStride : i] {
		r += int64(n)
	}
	return r
}

// span is series i's rows [from, to).
func (s rowStarts) span(i int) (from, to int64) {
	from = s.at(i)
	return from, from + int64(s.rows[i])
}

// bytes is its memory, the table's row counts included (a layout can
// outlive the directory that also holds them).
func (s rowStarts) bytes() int64 { return 4*int64(cap(s.rows)) + 8*int64(cap(s.every)) }
