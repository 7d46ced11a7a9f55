package export

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	promread "github.com/dendro-receiver/dendro-receiver/promql-read"
)

// Options selects what Export writes. The zero value exports everything.
type Options struct {
	// Matchers select the series (all must match); none selects every
	// series.
	Matchers []*labels.Matcher
	// Start and End bound sample time, Unix ms: [Start, End), End
	// excluded, so consecutive exports tile. Both zero: all time.
	Start, End int64
	// Progress, when set, is called with partitions (metric-days) done of
	// partitions.
	Progress func(done, total int64)
	// Skipped, when set, is called with each file that exists and is
	// therefore not written again.
	Skipped func(path string)
	// RowGroupRows is the rows of one Parquet row group; 0 means
	// DefaultRowGroupRows.
	RowGroupRows int
}

// DefaultRowGroupRows is large enough that a reader's per-row-group cost
// vanishes and small enough that a writer holds a few tens of MB.
const DefaultRowGroupRows = 1 << 20

// Report describes a finished export.
type Report struct {
	Files   int   // written
	Skipped int   // existing, left alone
	Rows    int64 // rows written
	Bytes   int64 // bytes written
	Took    time.Duration
}

const day = 24 * time.Hour

// Export writes the samples of a (a read handle) that opts selects into
// dir (created if missing) as described in the package doc.
func Export(ctx context.Context, a *archive.Archive, dir string, opts Options) (Report, error) {
	started := time.Now()
	var rep Report
	start, end := opts.Start, opts.End
	if start == 0 && end == 0 {
		start, end = math.MinInt64, math.MaxInt64
	}
	if end <= start {
		return rep, fmt.Errorf("export: the range [%d, %d) is empty", start, end)
	}
	if opts.RowGroupRows <= 0 {
		opts.RowGroupRows = DefaultRowGroupRows
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return rep, err
	}
	// No sample limit (an export is as large as the data), a small cache
	// (each segment is read for the metric-days it holds, not again).
	q, err := promread.NewQueryable(a, promread.Options{MaxSamples: math.MaxInt, CacheBytes: 64 << 20})
	if err != nil {
		return rep, err
	}
	if err := q.Warm(ctx); err != nil {
		return rep, fmt.Errorf("indexing the archive: %w", err)
	}
	minT, maxT, ok, err := sampleSpan(ctx, a, start, end-1)
	if err != nil {
		return rep, err
	}
	if !ok {
		rep.Took = time.Since(started)
		return rep, nil
	}
	names, err := metricNames(ctx, q, minT, maxT, opts.Matchers)
	if err != nil {
		return rep, err
	}
	first := time.UnixMilli(minT).UTC().Truncate(day)
	last := time.UnixMilli(maxT).UTC().Truncate(day)
	days := int(last.Sub(first)/day) + 1
	sel := selection(opts.Matchers, opts.Start, opts.End)
	total, done := int64(len(names)*days), int64(0)
	for _, name := range names {
		for d := first; !d.After(last); d = d.Add(day) {
			if err := ctx.Err(); err != nil {
				return rep, err
			}
			if opts.Progress != nil {
				opts.Progress(done, total)
			}
			done++
			path := filepath.Join(dir, "__name__="+hiveEscape(name), "date="+d.Format("2006-01-02"), "part-"+sel+".parquet")
			if _, err := os.Lstat(path); err == nil {
				rep.Skipped++
				if opts.Skipped != nil {
					opts.Skipped(path)
				}
				continue
			}
			lo, hi := max(start, d.UnixMilli()), min(end, d.Add(day).UnixMilli())
			rows, bytes, err := exportPartition(ctx, q, name, lo, hi-1, opts, path)
			if err != nil {
				return rep, fmt.Errorf("%s: %w", path, err)
			}
			if rows > 0 {
				rep.Files++
				rep.Rows += rows
				rep.Bytes += bytes
			}
		}
	}
	if opts.Progress != nil {
		opts.Progress(total, total)
	}
	rep.Took = time.Since(started)
	return rep, nil
}

// selection names what a command selected: the same matchers and range
// give the same file names, others different ones.
func selection(ms []*labels.Matcher, start, end int64) string {
	var b strings.Builder
	strs := make([]string, len(ms))
	for i, m := range ms {
		strs[i] = m.String()
	}
	slices.Sort(strs)
	fmt.Fprintf(&b, "%s|%d|%d", strings.Join(strs, ","), start, end)
	return strconv.FormatUint(xxhash.Sum64String(b.String()), 16)
}

// sampleSpan is the sample-time span of everything the archive holds,
// clipped to [mint, maxt]: the sealed segments' indexes and the live
// tails decoded.
func sampleSpan(ctx context.Context, a *archive.Archive, mint, maxt int64) (lo, hi int64, ok bool, err error) {
	lo, hi = math.MaxInt64, math.MinInt64
	err = a.View(ctx, func(tx *archive.ReadTx) error {
		srcs, err := tx.Sources()
		if err != nil {
			return err
		}
		for _, s := range srcs {
			streams, err := tx.Streams(s.ID)
			if err != nil {
				return err
			}
			for _, st := range streams {
				metas, err := tx.SegmentMetas(s.ID, st)
				if err != nil {
					return err
				}
				for _, m := range metas {
					x, err := promsample.ParseIndex(m.Index)
					if err != nil {
						return fmt.Errorf("source %d stream %s segment %d: %w", s.ID, st, m.Seq, err)
					}
					if x.Samples+x.Histograms > 0 {
						lo, hi = min(lo, x.MinT), max(hi, x.MaxT)
					}
				}
				live, err := tx.LiveWAL(s.ID, st)
				if err != nil {
					return err
				}
				ss, err := promsample.ReadRows(live, promsample.AllTime())
				if err != nil {
					return fmt.Errorf("source %d stream %s live tail: %w", s.ID, st, err)
				}
				for _, x := range ss {
					for _, smp := range x.Samples {
						lo, hi = min(lo, smp.T), max(hi, smp.T)
					}
					for _, h := range x.Histograms {
						lo, hi = min(lo, h.T), max(hi, h.T)
					}
				}
			}
		}
		return nil
	})
	lo, hi = max(lo, mint), min(hi, maxt)
	return lo, hi, err == nil && lo <= hi, err
}

func metricNames(ctx context.Context, q *promread.Queryable, mint, maxt int64, ms []*labels.Matcher) ([]string, error) {
	qr, err := q.Querier(mint, maxt)
	if err != nil {
		return nil, err
	}
	defer qr.Close()
	names, _, err := qr.LabelValues(ctx, labels.MetricName, nil, ms...)
	return names, err
}

// exportPartition writes one metric's samples in [mint, maxt] (Unix ms,
// inclusive) to path; nothing when there are none. It returns the rows
// and bytes written.
func exportPartition(ctx context.Context, q *promread.Queryable, name string, mint, maxt int64, opts Options, path string) (int64, int64, error) {
	qr, err := q.Querier(mint, maxt)
	if err != nil {
		return 0, 0, err
	}
	defer qr.Close()
	ms := append([]*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, labels.MetricName, name)}, opts.Matchers...)
	set := qr.Select(ctx, true, &storage.SelectHints{Start: mint, End: maxt}, ms...)
	var series []storage.Series
	for set.Next() {
		series = append(series, set.At())
	}
	if err := set.Err(); err != nil {
		return 0, 0, err
	}
	if len(series) == 0 {
		return 0, 0, nil
	}
	slices.SortFunc(series, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
	// The label columns: every label any series has, but the metric name
	// (a partition column).
	seen := map[string]bool{}
	for _, s := range series {
		s.Labels().Range(func(l labels.Label) {
			if l.Name != labels.MetricName {
				seen[l.Name] = true
			}
		})
	}
	labelNames := make([]string, 0, len(seen))
	for n := range seen {
		labelNames = append(labelNames, n)
	}
	slices.Sort(labelNames)

	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return 0, 0, err
	}
	// What an interrupted run of this file left.
	base := strings.TrimSuffix(filepath.Base(path), ".parquet")
	stale, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "."+base+"-*.tmp"))
	for _, f := range stale {
		os.Remove(f)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+base+"-*.tmp")
	if err != nil {
		return 0, 0, err
	}
	defer os.Remove(tmp.Name()) // after the rename it names nothing
	// Not the *os.File itself: the Parquet writer closes a sink that is an
	// io.Closer, and the file is synced before it is closed.
	fw, err := newFileWriter(struct{ io.Writer }{tmp}, labelNames, opts.RowGroupRows)
	if err != nil {
		tmp.Close()
		return 0, 0, err
	}
	var it chunkenc.Iterator
	var fh *histogram.FloatHistogram
	for _, s := range series {
		if err := ctx.Err(); err != nil {
			tmp.Close()
			return 0, 0, err
		}
		fw.series(s.Labels())
		it = s.Iterator(it)
		for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
			var err error
			switch vt {
			case chunkenc.ValFloat:
				t, v := it.At()
				if t < mint || t > maxt {
					continue
				}
				err = fw.float(t, v)
			case chunkenc.ValHistogram, chunkenc.ValFloatHistogram:
				t := it.AtT()
				if t < mint || t > maxt {
					continue
				}
				var h *histogram.FloatHistogram
				if vt == chunkenc.ValHistogram {
					_, ih := it.AtHistogram(nil)
					h = ih.ToFloat(fh)
				} else {
					_, h = it.AtFloatHistogram(fh)
				}
				fh = h
				err = fw.histogram(t, h)
			}
			if err != nil {
				tmp.Close()
				return 0, 0, err
			}
		}
		if err := it.Err(); err != nil {
			tmp.Close()
			return 0, 0, err
		}
	}
	rows, err := fw.close()
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, 0, err
	}
	if rows == 0 {
		return 0, 0, nil
	}
	fi, err := os.Stat(tmp.Name())
	if err != nil {
		return 0, 0, err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return 0, 0, err
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return 0, 0, err
	}
	return rows, fi.Size(), nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, os.ErrInvalid) {
		return nil // a directory that cannot be synced (some filesystems)
	}
	return err
}

// hiveEscape escapes a partition value as Hive's FileUtils.escapePathName
// does; an empty value is Hive's null partition.
func hiveEscape(v string) string {
	if v == "" {
		return "__HIVE_DEFAULT_PARTITION__"
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < 0x20 || c == 0x7f || strings.IndexByte("\"#%'*/:=?\\{[]^", c) >= 0 {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
