package promsample

import (
	"math"
	"math/bits"
)

// Divisors of the scaled integer path. A value v is stored as the integer
// k = v*D in __int__ (with D in __div__) when |k| <= 2^53 and k/D gives v's
// exact bits: IEEE division is correctly rounded, so a decimal like 12.34
// (what an exporter prints and Prometheus parses) is exactly 1234/100, and
// k/2^-e is exactly k*2^e. Decimal divisors turn 2-decimal gauges and
// counters (node_cpu_seconds_total) into small-delta integers; binary ones
// strip the zero low bits of byte counts in pages (multiples of 4096).
const maxDecimalDivisor = 1e6 // divisors 10, 100, ..., 1e6 (each exact)

const maxBinaryShift = 24

// scaledInt returns k with k/div == v bit for bit, if there is one.
func scaledInt(v, div float64) (int64, bool) {
	if div == 1 {
		return isIntegral(v)
	}
	k := math.Round(v * div)
	if !(k >= -maxInt53 && k <= maxInt53) { // also refuses NaN
		return 0, false
	}
	// Check exactly what the reader computes (this also refuses -0).
	if ik := int64(k); math.Float64bits(float64(ik)/div) == math.Float64bits(v) {
		return ik, true
	}
	return 0, false
}

// chooseDivisor picks a series' divisor: the one that puts the most of its
// samples on the integer path, preferring 1, then the largest binary
// shift, then the smallest decimal.
func chooseDivisor(samples []Sample) float64 {
	if len(samples) == 0 {
		return 1
	}
	ints := 0
	tz := maxBinaryShift
	for _, s := range samples {
		if k, ok := isIntegral(s.V); ok {
			ints++
			if k != 0 {
				tz = min(tz, bits.TrailingZeros64(uint64(k)))
			}
		}
	}
	if ints == len(samples) {
		if tz > 0 && tz < maxBinaryShift {
			return math.Ldexp(1, -tz)
		}
		return 1
	}
	best, bestN := 1.0, ints
	for d := 10.0; d <= maxDecimalDivisor; d *= 10 {
		n := 0
		for _, s := range samples {
			if _, ok := scaledInt(s.V, d); ok {
				n++
			}
		}
		if n > bestN+len(samples)/8 { // worth a divisor column entry
			best, bestN = d, n
		}
		if n == len(samples) {
			break
		}
	}
	return best
}
