package promsample

import (
	"context"
	"fmt"
	"slices"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// ReadArchive answers q from a whole archive in one snapshot: for every
// source and every sample stream, the sealed segments in seq order whose
// index says they may hold matching samples in [q.MinT, q.MaxT], then the
// live tail. Series with one label set are merged across segments,
// streams and sources, in time order, exact duplicates (same timestamp and
// value bits, or the same histogram or exemplar: a sender's retry) dropped.
// Series are sorted by labels.
//
// It is the reference reader: tests and tools use it to check what an
// archive holds. The query path (promql-read) prunes and streams instead of
// materializing everything.
func ReadArchive(ctx context.Context, a *archive.Archive, q Query) ([]Series, error) {
	c := newCollector()
	err := a.View(ctx, func(tx *archive.ReadTx) error {
		srcs, err := tx.Sources()
		if err != nil {
			return err
		}
		for _, src := range srcs {
			streams, err := tx.Streams(src.ID)
			if err != nil {
				return err
			}
			for _, st := range streams {
				if err := readStream(tx, src.ID, st, q, c); err != nil {
					return fmt.Errorf("source %d stream %s: %w", src.ID, st, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	series, _ := c.finish()
	out := c.output(series)
	slices.SortFunc(out, func(a, b Series) int { return labels.Compare(a.Labels, b.Labels) })
	return out, nil
}

func readStream(tx *archive.ReadTx, src archive.SourceID, stream string, q Query, c *collector) error {
	metas, err := tx.SegmentMetas(src, stream)
	if err != nil {
		return err
	}
	for _, m := range metas {
		if x, err := ParseIndex(m.Index); err == nil && !x.Overlaps(q.MinT, q.MaxT) {
			continue // the index says nothing here is in range: the bytes are never read
		}
		b, ok, err := tx.SegmentBytes(src, stream, m.Seq)
		if err != nil || !ok {
			return err
		}
		ss, err := ReadSegment(b, q)
		if err != nil {
			return fmt.Errorf("segment %d: %w", m.Seq, err)
		}
		for _, s := range ss {
			c.addSeries(s)
		}
	}
	live, err := tx.LiveWAL(src, stream)
	if err != nil {
		return err
	}
	ss, err := ReadRows(live, q)
	if err != nil {
		return err
	}
	for _, s := range ss {
		c.addSeries(s)
	}
	return nil
}
