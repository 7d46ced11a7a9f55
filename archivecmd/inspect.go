package archivecmd

import (
	"context"
	"fmt"
	"math"
	"os"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// Report is what Inspect found: the file, and per source and stream what
// the catalog and the segments' indexes say, plus the live tail decoded.
//
// Counts: Samples are float samples plus native histogram samples as
// stored (a sender's exact retry that landed in two segments counts
// twice; reads drop it). Series are distinct label sets; the archive's
// and a source's are unions, so they are not the sum of their streams'
// when a series moved between streams or sources. Sample times are Unix
// milliseconds (MinTime > MaxTime: no samples); receipt times (the
// archive's row ts) are Unix nanoseconds.
type Report struct {
	Path      string
	FileBytes int64 // the main file
	// Sidecars are SQLite's files beside it. A handle's own open makes
	// them, so Inspect does not look: the caller fills this from
	// Sidecars(path), called before it opened the archive.
	Sidecars  []Sidecar
	PageSize  int64
	Pages     int64
	FreePages int64
	// ApplicationID and SchemaVersion are the header stamp.
	ApplicationID uint32
	SchemaVersion int64

	Sources []SourceReport
	Stats
}

// Stats are the counts shared by a report, its sources and their streams.
type Stats struct {
	Segments     int64
	SealedRows   int64 // wal rows the segments hold
	LiveRows     int64 // wal rows above the sealed watermark
	SegmentBytes int64
	LiveBytes    int64
	Series       int64
	Samples      int64 // float samples + histogram samples
	Histograms   int64 // of Samples, the histogram samples
	MinTime      int64 // sample time, Unix ms; MinTime > MaxTime: no samples
	MaxTime      int64
	// FirstReceived and LastReceived span the rows (segments and live),
	// Unix ns; FirstReceived > LastReceived: no rows.
	FirstReceived int64
	LastReceived  int64
}

// Sidecar is one of SQLite's files beside the archive.
type Sidecar struct {
	Name  string // "-wal", "-shm", "-journal", "-ballast" (a server with --retention.size keeps one)
	Bytes int64
}

// SourceReport describes one source.
type SourceReport struct {
	ID       int64
	Labels   map[string]string
	UUID     string
	Complete bool
	Streams  []StreamReport
	Stats
}

// StreamReport describes one stream of a source.
type StreamReport struct {
	Name string
	Stats
	// Unreadable says what could not be read (a segment index, the live
	// tail); what could is counted. Verify says more.
	Unreadable []string
}

// Sidecars lists SQLite's files present beside the archive at path: -wal
// and -shm while anything has it open or after a crash, -journal after a
// crash in a rollback-journal mode.
func Sidecars(path string) []Sidecar {
	var out []Sidecar
	for _, side := range []string{"-wal", "-shm", "-journal", "-ballast"} {
		if fi, err := os.Lstat(path + side); err == nil {
			out = append(out, Sidecar{Name: side, Bytes: fi.Size()})
		}
	}
	return out
}

// seriesSet is a set of series by SeriesHash (a collision would make two
// series count once; at 64 bits that takes billions of series).
type seriesSet map[uint64]struct{}

func (s seriesSet) addAll(o seriesSet) {
	for k := range o {
		s[k] = struct{}{}
	}
}

func newStats() Stats {
	return Stats{MinTime: math.MaxInt64, MaxTime: math.MinInt64, FirstReceived: math.MaxInt64, LastReceived: math.MinInt64}
}

// add folds o into s, except Series (a set's size, counted by the caller).
func (s *Stats) add(o Stats) {
	s.Segments += o.Segments
	s.SealedRows += o.SealedRows
	s.LiveRows += o.LiveRows
	s.SegmentBytes += o.SegmentBytes
	s.LiveBytes += o.LiveBytes
	s.Samples += o.Samples
	s.Histograms += o.Histograms
	s.MinTime, s.MaxTime = min(s.MinTime, o.MinTime), max(s.MaxTime, o.MaxTime)
	s.received(o.FirstReceived, o.LastReceived)
}

func (s *Stats) received(first, last int64) {
	s.FirstReceived, s.LastReceived = min(s.FirstReceived, first), max(s.LastReceived, last)
}

// Inspect describes the archive a reads, in one snapshot. It reads every
// segment's catalog index (never its bytes, except for segments written
// before indexes carried their series) and decodes every live tail.
func Inspect(ctx context.Context, a *archive.Archive) (*Report, error) {
	r := &Report{Path: a.Path(), Stats: newStats()}
	fi, err := os.Stat(a.Path())
	if err != nil {
		return nil, err
	}
	r.FileBytes = fi.Size()
	sn, err := archive.Sniff(a.Path())
	if err != nil {
		return nil, err
	}
	if sn.Stamped {
		r.ApplicationID = archive.ApplicationID
	}
	r.SchemaVersion = sn.Version
	all := seriesSet{}
	err = a.View(ctx, func(tx *archive.ReadTx) error {
		ps, err := tx.PageStats()
		if err != nil {
			return err
		}
		r.PageSize, r.Pages, r.FreePages = ps.PageSize, ps.Pages, ps.Free
		srcs, err := tx.Sources()
		if err != nil {
			return err
		}
		for _, src := range srcs {
			sr := SourceReport{ID: int64(src.ID), Labels: src.Labels, UUID: src.UUID, Complete: src.Complete, Stats: newStats()}
			srcSeries := seriesSet{}
			streams, err := tx.Streams(src.ID)
			if err != nil {
				return err
			}
			for _, st := range streams {
				if err := ctx.Err(); err != nil {
					return err
				}
				str, set, err := inspectStream(tx, src.ID, st)
				if err != nil {
					return fmt.Errorf("source %d stream %s: %w", src.ID, st, err)
				}
				sr.Streams = append(sr.Streams, str)
				sr.add(str.Stats)
				srcSeries.addAll(set)
			}
			sr.Series = int64(len(srcSeries))
			all.addAll(srcSeries)
			r.Sources = append(r.Sources, sr)
			r.add(sr.Stats)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.Series = int64(len(all))
	return r, nil
}

func inspectStream(tx *archive.ReadTx, src archive.SourceID, stream string) (StreamReport, seriesSet, error) {
	s := StreamReport{Name: stream, Stats: newStats()}
	set := seriesSet{}
	metas, err := tx.SegmentMetas(src, stream)
	if err != nil {
		return s, nil, err
	}
	for _, m := range metas {
		s.Segments++
		s.SegmentBytes += m.Size
		s.received(m.FirstTS, m.LastTS)
		s.SealedRows += m.Rows
		x, err := promsample.ParseIndex(m.Index)
		if err != nil {
			s.Unreadable = append(s.Unreadable, fmt.Sprintf("segment %d: %v", m.Seq, err))
			continue
		}
		s.Samples += x.Samples + x.Histograms
		s.Histograms += x.Histograms
		if x.Samples+x.Histograms > 0 {
			s.MinTime, s.MaxTime = min(s.MinTime, x.MinT), max(s.MaxTime, x.MaxT)
		}
		if x.Table != nil {
			for i := range x.Table.Len() {
				if x.Table.Rows[i] > 0 {
					set[x.Table.Hashes[i]] = struct{}{}
				}
			}
			continue
		}
		// An index from before the series table: the series come from
		// the segment itself.
		b, ok, err := tx.SegmentBytes(src, stream, m.Seq)
		if err != nil || !ok {
			return s, nil, err
		}
		ss, err := promsample.ReadSegment(b, promsample.AllTime())
		if err != nil {
			s.Unreadable = append(s.Unreadable, fmt.Sprintf("segment %d: %v", m.Seq, err))
			continue
		}
		for _, x := range ss {
			if len(x.Samples)+len(x.Histograms) > 0 {
				set[promsample.SeriesHash(x.Labels)] = struct{}{}
			}
		}
	}
	live, err := tx.LiveWAL(src, stream)
	if err != nil {
		return s, nil, err
	}
	if len(live) > 0 {
		s.received(live[0].TS, live[len(live)-1].TS)
		s.LiveRows = int64(len(live))
		for _, r := range live {
			s.LiveBytes += int64(len(r.Data))
		}
		ss, err := promsample.ReadRows(live, promsample.AllTime())
		if err != nil {
			s.Unreadable = append(s.Unreadable, fmt.Sprintf("live tail: %v", err))
		}
		for _, x := range ss {
			n := int64(len(x.Samples) + len(x.Histograms))
			if n == 0 {
				continue
			}
			set[promsample.SeriesHash(x.Labels)] = struct{}{}
			s.Samples += n
			s.Histograms += int64(len(x.Histograms))
			for _, smp := range x.Samples {
				s.MinTime, s.MaxTime = min(s.MinTime, smp.T), max(s.MaxTime, smp.T)
			}
			for _, h := range x.Histograms {
				s.MinTime, s.MaxTime = min(s.MinTime, h.T), max(s.MaxTime, h.T)
			}
		}
	}
	s.Series = int64(len(set))
	return s, set, nil
}
