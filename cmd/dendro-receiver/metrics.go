package main

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/membudget"
	promread "github.com/dendro-receiver/dendro-receiver/promql-read"
	"github.com/dendro-receiver/dendro-receiver/receiver"
)

// archiveCollector turns the archive's and writer's stats into metrics at
// scrape time (the archive package knows nothing of Prometheus).
type archiveCollector struct {
	w   *archive.Writer
	r   *archive.Archive
	ing *receiver.Ingester

	commits, rowsCommitted, rowsDropped, droppedTicks, retries, commitSeconds   *prometheus.Desc
	seals, segmentBytes, sealSeconds, deferredSeals, compactions, evictions     *prometheus.Desc
	evictedSegments, evictedLive, checkpoints, checkpointErrors, pagesWritten   *prometheus.Desc
	groupedCommits, groupFallbacks, writerCacheBytes, prunedRows, sealsBehind   *prometheus.Desc
	fileBytes, freePages, walRows, sidecarBytes, sources, segments, streams, up *prometheus.Desc
	outages, probes, outageSeconds, earlyEvictions, earlyEvicted, earlyBytes    *prometheus.Desc
	ballastReleases, holds, heldWrites, held                                    *prometheus.Desc
}

func newArchiveCollector(w *archive.Writer, r *archive.Archive, ing *receiver.Ingester) *archiveCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("dendro_"+name, help, nil, nil)
	}
	return &archiveCollector{w: w, r: r, ing: ing,
		commits:          d("writer_commits_total", "Appends (requests) committed."),
		rowsCommitted:    d("writer_rows_committed_total", "Wal rows committed."),
		rowsDropped:      d("writer_rows_dropped_total", "Wal rows the writer did not commit (out of order, failed ticks)."),
		droppedTicks:     d("writer_dropped_ticks_total", "Append transactions lost to retryable failures."),
		retries:          d("writer_retries_total", "Retries of retryable SQLite failures."),
		commitSeconds:    d("writer_commit_seconds_total", "Time spent committing appends."),
		seals:            d("writer_seals_total", "Segments sealed."),
		segmentBytes:     d("writer_segment_bytes_total", "Bytes of segments sealed."),
		sealSeconds:      d("writer_seal_seconds_total", "Time spent sealing."),
		deferredSeals:    d("writer_deferred_seals_total", "Seals deferred by retryable failures."),
		compactions:      d("writer_compactions_total", "Segment merges."),
		evictions:        d("writer_evictions_total", "Retention passes."),
		evictedSegments:  d("writer_evicted_segments_total", "Segments removed by retention."),
		evictedLive:      d("writer_evicted_live_rows_total", "Unsealed rows removed by retention."),
		checkpoints:      d("writer_checkpoints_total", "Passive checkpoints run."),
		checkpointErrors: d("writer_checkpoint_errors_total", "Passive checkpoints that failed."),
		pagesWritten:     d("writer_sidecar_pages_written_total", "Pages written to the -wal sidecar."),
		prunedRows:       d("writer_pruned_rows_total", "Sealed wal rows deleted after their seal."),
		sealsBehind:      d("writer_seals_behind_total", "Seals that found a stream at least twice --seal.max-rows behind; they run at normal CPU priority."),
		writerCacheBytes: d("writer_page_cache_bytes", "Heap memory of the writer connection's SQLite page cache."),
		groupedCommits:   d("writer_grouped_commits_total", "Transactions that committed several waiting requests together."),
		groupFallbacks:   d("writer_group_fallbacks_total", "Groups whose shared transaction failed, so each request was committed alone."),
		fileBytes:        d("archive_file_bytes", "Size of the archive's pages (the -wal sidecar not counted)."),
		freePages:        d("archive_free_pages", "Pages on the archive's free list."),
		walRows:          d("archive_wal_rows", "Rows in the wal table."),
		sidecarBytes:     d("archive_sidecar_bytes", "Size of the -wal sidecar."),
		sources:          d("archive_sources", "Sources in the archive."),
		segments:         d("archive_segments", "Segments in the archive."),
		streams:          d("ingest_streams", "Streams written this session."),
		up:               d("writer_up", "1 while the archive writer can commit; 0 while it cannot (a full disk, EIO: it retries) and once it stopped on a failure."),
		outages:          d("writer_outages_total", "Times the writer found it could not commit (it retries on a backoff and refuses writes meanwhile)."),
		probes:           d("writer_probes_total", "Idle writes the writer made in outages to learn whether it can commit again."),
		outageSeconds:    d("writer_outage_seconds", "How long the writer has been unable to commit; 0 while it commits."),
		earlyEvictions:   d("ingest_early_evictions_total", "Evictions of the oldest segments to keep --retention.disk-reserve free, before --retention.size asked for them."),
		earlyEvicted:     d("ingest_early_evicted_segments_total", "Segments those early evictions removed."),
		earlyBytes:       d("ingest_early_evicted_bytes_total", "Bytes of segments those early evictions removed."),
		ballastReleases:  d("ingest_ballast_releases_total", "Times a full disk, or a seal that needed its room, took the ballast beside the archive (half of --retention.disk-reserve) so that seals and evictions could commit."),
		holds:            d("ingest_holds_total", "Times writes were held (refused 507) so that the room left on the disk went to sealing the live rows."),
		heldWrites:       d("ingest_held_writes_total", "Writes refused 507 while writes were held for seals."),
		held:             d("ingest_writes_held", "1 while writes are held (refused 507) so that the room left on the disk goes to sealing the live rows."),
	}
}

func (c *archiveCollector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

func (c *archiveCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	s := c.w.Stats()
	counter(c.commits, float64(s.Commits))
	counter(c.rowsCommitted, float64(s.RowsCommitted))
	counter(c.rowsDropped, float64(s.RowsDropped))
	counter(c.droppedTicks, float64(s.DroppedTicks))
	counter(c.retries, float64(s.Retries))
	counter(c.commitSeconds, time.Duration(s.CommitNanos).Seconds())
	counter(c.seals, float64(s.Seals))
	counter(c.segmentBytes, float64(s.SegmentBytes))
	counter(c.sealSeconds, time.Duration(s.SealNanos).Seconds())
	counter(c.deferredSeals, float64(s.DeferredSeals))
	counter(c.compactions, float64(s.Compactions))
	counter(c.evictions, float64(s.Evictions))
	counter(c.evictedSegments, float64(s.EvictedSegments))
	counter(c.evictedLive, float64(s.EvictedLiveRows))
	counter(c.checkpoints, float64(s.Checkpoints))
	counter(c.checkpointErrors, float64(s.CheckpointErrors))
	counter(c.pagesWritten, float64(s.PagesWritten))
	counter(c.prunedRows, float64(s.PrunedRows))
	counter(c.sealsBehind, float64(s.SealsBehind))
	gauge(c.writerCacheBytes, float64(s.CacheBytes))
	counter(c.groupedCommits, float64(s.GroupedCommits))
	counter(c.groupFallbacks, float64(s.GroupFallbacks))
	counter(c.outages, float64(s.Outages))
	counter(c.probes, float64(s.Probes))
	up, down := 1.0, 0.0
	if h := c.w.Health(); h != nil {
		up = 0
		var cc *archive.CannotCommitError
		if errors.As(h, &cc) {
			down = time.Since(cc.Since).Seconds()
		}
	}
	gauge(c.up, up)
	gauge(c.outageSeconds, down)
	is := c.ing.Stats()
	counter(c.earlyEvictions, float64(is.EarlyEvictions))
	counter(c.earlyEvicted, float64(is.EarlyEvictedSegments))
	counter(c.earlyBytes, float64(is.EarlyEvictedBytes))
	counter(c.ballastReleases, float64(is.BallastReleases))
	counter(c.holds, float64(is.Holds))
	counter(c.heldWrites, float64(is.HeldWrites))
	held := 0.0
	if is.Held {
		held = 1
	}
	gauge(c.held, held)
	_, streams := c.ing.Sources()
	gauge(c.streams, float64(streams))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if st, err := c.r.Stats(ctx); err == nil {
		gauge(c.fileBytes, float64(st.Bytes()))
		gauge(c.freePages, float64(st.Free))
		gauge(c.walRows, float64(st.WALRows))
		gauge(c.sidecarBytes, float64(st.SidecarBytes))
		gauge(c.sources, float64(st.Sources))
		gauge(c.segments, float64(st.Segments))
	}
}

// memoryCollector reports the memory plan's shares and the budget.
type memoryCollector struct {
	plan                           memoryPlan
	b                              *membudget.Budget
	share, inUse, waiting, refused *prometheus.Desc
}

func newMemoryCollector(plan memoryPlan, b *membudget.Budget) *memoryCollector {
	return &memoryCollector{plan: plan, b: b,
		share:   prometheus.NewDesc("dendro_memory_share_bytes", "How --memory.limit is shared (share=limit, go_soft_limit, fixed, ingest, sqlite_readers, reads, gc_headroom).", []string{"share"}, nil),
		inUse:   prometheus.NewDesc("dendro_memory_budget_reserved_bytes", "Bytes reserved against --memory.limit, the fixed shares included.", nil, nil),
		waiting: prometheus.NewDesc("dendro_memory_budget_waiting", "Reservations waiting for memory.", nil, nil),
		refused: prometheus.NewDesc("dendro_memory_budget_refused_total", "Reservations refused: larger than the budget, or their wait ended first.", nil, nil),
	}
}

func (c *memoryCollector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

func (c *memoryCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range []struct {
		name string
		v    int64
	}{{"limit", c.plan.limit}, {"go_soft_limit", c.plan.goLimit}, {"fixed", c.plan.fixed}, {"ingest", c.plan.ingest},
		{"sqlite_readers", c.plan.sqlite}, {"reads", c.plan.reads}, {"gc_headroom", c.plan.gcSlack}} {
		ch <- prometheus.MustNewConstMetric(c.share, prometheus.GaugeValue, float64(s.v), s.name)
	}
	st := c.b.Stats()
	ch <- prometheus.MustNewConstMetric(c.inUse, prometheus.GaugeValue, float64(st.InUse))
	ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(st.Waiting))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(st.Refused))
}

// queryCacheCollector reports promql-read's segment caches: the one of
// segments' directories, layouts and metadata, and the one of lone series'
// pages and samples (together --query.cache-bytes), so that an operator can see what
// the reads hold of the memory budget and how often they find it.
type queryCacheCollector struct {
	q                                   *promread.Queryable
	bytes, limit, entries, hits, misses *prometheus.Desc
}

func newQueryCacheCollector(q *promread.Queryable) *queryCacheCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("dendro_query_cache_"+name, help, []string{"cache"}, nil)
	}
	return &queryCacheCollector{q: q,
		bytes:   d("bytes", "Bytes the read caches hold (cache=segments: directories, layouts and metadata; cache=pages: lone series' pages and decoded samples)."),
		limit:   d("limit_bytes", "What each read cache may hold; together --query.cache-bytes."),
		entries: d("entries", "Entries in each read cache."),
		hits:    d("hits_total", "Lookups each read cache answered."),
		misses:  d("misses_total", "Lookups each read cache could not answer."),
	}
}

func (c *queryCacheCollector) Describe(ch chan<- *prometheus.Desc) {
	prometheus.DescribeByCollect(c, ch)
}

func (c *queryCacheCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range []struct {
		cache string
		st    promread.CacheStats
	}{{"segments", c.q.CacheStats()}, {"pages", c.q.PageCacheStats()}} {
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(s.st.Bytes), s.cache)
		ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(max(s.st.MaxBytes, 0)), s.cache)
		ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(s.st.Entries), s.cache)
		ch <- prometheus.MustNewConstMetric(c.hits, prometheus.CounterValue, float64(s.st.Hits), s.cache)
		ch <- prometheus.MustNewConstMetric(c.misses, prometheus.CounterValue, float64(s.st.Misses), s.cache)
	}
}
