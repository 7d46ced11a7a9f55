package receiver

import (
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

// Series is one series of a Request. Its labels are in the Decoder's
// series index under Ref (seriesindex.Index.Labels): a series the index
// already knows is found by a hash probe and a comparison with the bytes
// on the wire, and its labels are never built again.
type Series struct {
	Ref        seriesindex.Ref
	Samples    []promsample.Sample
	Histograms []promsample.Histogram
	Exemplars  []promsample.Exemplar
}

// wireLabel is one label as it appears in a request, its strings aliasing
// the message.
type wireLabel = seriesindex.Label

// knownSeries finds the series whose labels are exactly ls (in wire
// order): the one predicted after prev if it matches, else by hash. It
// returns 0 when the index does not hold them, or holds them unvalidated
// under the rules in force (legacy: the 1.0 name rules), so the caller
// decodes and validates them. A label set that is unsorted or has an
// empty value never matches (the index holds sorted sets without empty
// values), so it too takes the validating path.
//
// When it hashed ls (hashed), hash is SeriesHash of ls as given, in wire
// order and with any empty values: the hash of the series to add when ls
// turns out to be its labels exactly (seriesLabels.hash).
func knownSeries(x *seriesindex.Index, prev seriesindex.Ref, ls []wireLabel, legacy bool, h *promsample.SeriesHasher) (ref seriesindex.Ref, hash uint64, hashed bool) {
	if len(ls) == 0 {
		return 0, 0, false
	}
	if prev != 0 {
		if n := x.Next(prev); n != 0 && wireEqual(x, n, ls) && x.Validated(n, legacy) {
			return n, 0, false
		}
	}
	h.Reset()
	for _, l := range ls {
		h.Add(l.Name, l.Value)
	}
	hash = h.Sum()
	r := x.Find(hash, func(r seriesindex.Ref) bool { return wireEqual(x, r, ls) })
	if r == 0 || !x.Validated(r, legacy) {
		return 0, hash, true
	}
	return r, hash, true
}

// wireEqual reports whether r's labels are exactly ls, in order.
func wireEqual(x *seriesindex.Index, r seriesindex.Ref, ls []wireLabel) bool {
	return x.EqualLabels(r, ls)
}
