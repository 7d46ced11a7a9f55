package promsample

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// rowStarts answers what the plain prefix sums (RowStarts) do, at every
// position, for tables around multiples of the stride, with counts large
// enough that the total passes 2^32.
func TestRowStartsMatchesPrefixSums(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, startsStride - 1, startsStride, startsStride + 1, 3 * startsStride, 1000, 1001} {
		for _, big := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d/big=%v", n, big), func(t *testing.T) {
				tab := &SeriesTable{Rows: make([]uint32, n)}
				for i := range tab.Rows {
					if big {
						tab.Rows[i] = uint32(r.Uint64N(1 << 31))
					} else {
						tab.Rows[i] = uint32(1 + r.IntN(300))
					}
				}
				want := tab.RowStarts()
				s := newRowStarts(tab.Rows)
				if s.series() != n || s.total() != want[n] {
					t.Fatalf("series %d total %d, want %d %d", s.series(), s.total(), n, want[n])
				}
				for i := 0; i <= n; i++ {
					if got := s.at(i); got != want[i] {
						t.Fatalf("at(%d) = %d, want %d", i, got, want[i])
					}
					if i == n {
						break
					}
					if from, to := s.span(i); from != want[i] || to != want[i+1] {
						t.Fatalf("span(%d) = [%d, %d), want [%d, %d)", i, from, to, want[i], want[i+1])
					}
				}
				if big && n > 2 && s.total() < 1<<32 {
					t.Fatalf("total %d does not pass 2^32", s.total())
				}
			})
		}
	}
}
