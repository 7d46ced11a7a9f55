package promread

import (
	"math"
	"slices"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// Why a lone series' samples are kept, decoded, beside its pages.
//
// A dashboard asks for the same series on every refresh, and a
// one-series question over an hour reads that series from every segment
// of its stream the hour overlaps: at a million series a stream seals
// every few minutes, so ~22 segments an hour. Its pages are kept
// (segpages.go), so no BLOB is walked again, but each segment still
// decodes them on every question: a page of PageRows rows per column to
// decompress and skip through to the series' own rows, ~0.1 ms a segment.
// What the series holds in one segment is a few hundred bytes (tens to
// hundreds of samples) against tens of KiB for its pages, and it never
// changes: a segment is immutable, and a merged one has another segmentID.
// So readSegment keeps those samples as well, all of them (any question's
// range is cut from them), in the page cache under kindSeries and the
// series' position in the segment, and a repeated question takes them
// from there instead of decoding.
//
// Kept: lone series and the series of short runs, whose pages are kept
// too (keepRunRows); a scan of a metric keeps neither. Only float series
// are kept: a histogram sample holds pointers (spans, buckets) that every
// answer taking it would share.

// keptSamples is one series' float samples in one segment, all of them,
// by T. Shared by every question; read-only.
type keptSamples []promsample.Sample

// keptBytes is what a kept series costs beyond its samples (the slice
// header in the interface, the cache's entry is counted by the cache).
const keptBytes = 24

func seriesKey(seg segNo, ord int) cacheKey {
	return cacheKey{seg: seg, kind: kindSeries, off: int64(ord)}
}

// kept returns the samples of series ord of segment seg if they are kept.
func (s *store) kept(seg segNo, ord int) (keptSamples, bool) {
	v, ok := s.pages.get(seriesKey(seg, ord))
	if !ok {
		return nil, false
	}
	k, ok := v.(keptSamples)
	return k, ok
}

// keep keeps sm as series ord of segment seg. sm must be all of the series
// in the segment (read over every time); one with histograms is not kept.
func (s *store) keep(seg segNo, ord int, sm *promsample.Series) {
	if len(sm.Histograms) > 0 {
		return
	}
	k := keptSamples(slices.Clone(sm.Samples))
	s.pages.put(seriesKey(seg, ord), k, int64(cap(k))*16+keptBytes)
}

// allMinT and allMaxT are the range a series is read over to be kept.
const (
	allMinT = math.MinInt64
	allMaxT = math.MaxInt64
)

// inRange is sm cut to [mint, maxt], sharing sm's slices.
func inRange(sm *promsample.Series, mint, maxt int64) *promsample.Series {
	return &promsample.Series{Samples: trimSamples(sm.Samples, mint, maxt), Histograms: trimHists(sm.Histograms, mint, maxt)}
}

// addKept adds run's series (one segment's, sorted by position) from
// their kept samples, cut to p's range, and reports whether it could: all
// or nothing, so that a run with one series not kept is read in its one
// pass. add is readSegment's.
func (s *store) addKept(seg segNo, run []wanted, p selectParams, add func(wanted, *promsample.Series) error) (bool, error) {
	var one [1]keptSamples
	got := one[:0]
	for _, w := range run {
		k, ok := s.kept(seg, w.ord)
		if !ok {
			return false, nil
		}
		got = append(got, k)
	}
	for i, w := range run {
		if err := add(w, &promsample.Series{Samples: trimSamples(got[i], p.mint, p.maxt)}); err != nil {
			return true, err
		}
	}
	s.seriesKept.Add(int64(len(run)))
	return true, nil
}
