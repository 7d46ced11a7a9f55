package receiver

import (
	"sync"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// requestSlab is the backing memory of a decoded Request: its Series and
// the one slice all their float samples are cut from. At 4 samples per
// series these were a quarter of all the bytes the server allocated under
// load; reusing them spares the GC and the zeroing of fresh memory.
type requestSlab struct {
	series  []Series
	samples []promsample.Sample
}

// maxSlabSamples bounds the samples slice a slab keeps for reuse (8 MiB of
// samples), so that one huge request does not pin its memory in the pool.
const maxSlabSamples = 512 << 10

// slabPool recycles request slabs between Decode and Decoder.Recycle.
type slabPool struct{ pool sync.Pool }

// get returns a slab with room for at least series and samples, both
// empty.
func (p *slabPool) get(series, samples int) *requestSlab {
	sl, _ := p.pool.Get().(*requestSlab)
	if sl == nil {
		sl = &requestSlab{}
	}
	if cap(sl.series) < series {
		sl.series = make([]Series, 0, series)
	}
	if cap(sl.samples) < samples {
		sl.samples = make([]promsample.Sample, 0, samples)
	}
	sl.series, sl.samples = sl.series[:0], sl.samples[:0]
	return sl
}

// put takes back a slab nothing refers to any more.
func (p *slabPool) put(sl *requestSlab) {
	if cap(sl.samples) > maxSlabSamples {
		return
	}
	// Series hold histograms and exemplars: clear them so a pooled slab
	// does not keep them alive. Samples hold no pointers.
	clear(sl.series[:cap(sl.series)])
	p.pool.Put(sl)
}

// Recycle hands back the memory of a Request that is no longer used: its
// Series slice and the Samples of every series. Neither may be read or
// kept after the call (histograms, exemplars and metadata are not
// recycled and stay valid). Recycling is optional: a Request that
// is never recycled is collected as usual. Recycling one twice, or one the
// Decoder did not return, does nothing.
func (d *Decoder) Recycle(r *Request) {
	if r == nil || r.slab == nil {
		return
	}
	sl := r.slab
	r.slab, r.Series = nil, nil
	d.slabs.put(sl)
}
