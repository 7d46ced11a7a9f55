package promread

import (
	"errors"
	"io"
	"sync/atomic"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// Why a one-series read keeps the pages it decodes.
//
// A page at offset X of a segment's BLOB costs a walk of the BLOB's
// overflow chain up to X, once per snapshot (archive.SegmentBlob): at a
// million series, with 5-7 MB segments, that walk and opening the BLOB
// were a third of a warm one-series query_range's CPU (more than half of
// its segment reads), and every segment of the stream pays it again on
// each question. The pages themselves are small (a page per column per
// segment, tens of KiB), and a dashboard asks for the same few series over
// and over, so readSegment keeps the pages of lone-series reads and opens
// the BLOB only when a page is missing.
//
// Pages have a cache of their own (store.pages), 1/pageCacheShare of
// Options.CacheBytes: a page is the cheapest thing to read again, so pages
// evict one another, never the directories and layouts every question
// needs, and they still find room when those fill the rest. A read of a
// long run of series (a metric, a broad selector) keeps none: it would
// flush the pages of the lone series a dashboard asks for.
const pageCacheShare = 8

// keepRunRows is the longest run of series, in rows from its first
// series' first row to its last series' last, whose pages are kept: a few
// pages a column, since a page holds at least PageRows rows (bar a row
// group's last: the encoder cuts a page at the first series boundary
// PageRows rows on). A segment's series are sorted by labels, so a
// selective selector's often sit together (one metric's series with one
// id, on every instance), and a dashboard asks for them as often as for
// a lone series. At a million series the 100 series of the benchmark's
// temperature_celsius{id="5"} are one run of ~500 rows a segment;
// keeping their pages took its warm query_range over an hour from 4.7 to
// 3.4 ms (medians of three restarts, 30 asks each).
const keepRunRows = 2 * promsample.PageRows

// segPages is one segment's pages in the store's page cache, as a
// promsample.PageCache. keep says whether pages read now are kept.
type segPages struct {
	c    *cache
	seg  segNo
	keep bool
}

func (p *segPages) key(off int64, sum uint64) cacheKey {
	return cacheKey{seg: p.seg, kind: kindPage, off: off, sum: sum}
}

func (p *segPages) Page(off int64, sum uint64) ([]byte, bool) {
	v, ok := p.c.get(p.key(off, sum))
	if !ok {
		return nil, false
	}
	b, ok := v.([]byte)
	return b, ok
}

func (p *segPages) AddPage(off int64, sum uint64, b []byte) {
	if p.keep {
		p.c.put(p.key(off, sum), b, int64(cap(b)))
	}
}

// lazySegment is a segment's BLOB, opened on the first read: a read whose
// layout and pages are all cached opens nothing. listed is the segment's
// catalog entry from tx's own snapshot (or one of the same version), whose
// row id spares the open a lookup (archive.OpenListedSegment).
type lazySegment struct {
	tx     *archive.ReadTx
	id     segmentID
	listed archive.StreamSegment
	blob   *archive.SegmentBlob
	opened *atomic.Int64 // counts the opens
}

func (l *lazySegment) open() (*archive.SegmentBlob, error) {
	if l.blob != nil {
		return l.blob, nil
	}
	b, found, err := l.tx.OpenListedSegment(l.id.source, l.listed)
	if err != nil {
		return nil, err
	}
	if !found {
		// The list is this snapshot's, or one of the same version or
		// segments epoch, which holds the same segments rows (catalog).
		return nil, errors.New("listed but absent")
	}
	l.blob = b
	l.opened.Add(1)
	return b, nil
}

// ReadAt reads the segment, opening it first if need be.
func (l *lazySegment) ReadAt(p []byte, off int64) (int, error) {
	b, err := l.open()
	if err != nil {
		return 0, err
	}
	return b.ReadAt(p, off)
}

var _ io.ReaderAt = (*lazySegment)(nil)
