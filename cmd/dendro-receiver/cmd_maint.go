package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/dendro-receiver/dendro-receiver/archivecmd"
	"github.com/dendro-receiver/dendro-receiver/receiver"
)

func verifyCmd(ctx context.Context, args []string, stdout, _ io.Writer) error {
	app := newOpApp("verify", "Check an archive: SQLite's own check, foreign keys and the catalog, then every segment decoded "+
		"(checksums, every page, counts against its index) and every live tail decoded with each sample's series resolved. "+
		"Exit 0 when sound; else exit 1 with each problem on its own line. Reads only: safe on a live archive.",
		"dendro-receiver verify --full --archive.path=/var/lib/dendro-receiver/dendro.db", stdout)
	full := app.Flag("full", "SQLite's full integrity_check instead of quick_check, and every segment read a second time, "+
		"page by page, through the query path's reader.").Bool()
	if ok, err := app.parse(args); !ok {
		return err
	}
	a, err := openRead(*app.archivePath)
	if err != nil {
		return err
	}
	defer a.Close()
	p := newProgress(stdout, "verify", "bytes")
	start := time.Now()
	rep, err := archivecmd.Verify(ctx, a, archivecmd.VerifyOptions{Full: *full, Progress: p.fn()})
	p.clear()
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	for _, pr := range rep.Problems {
		fmt.Fprintln(stdout, pr)
	}
	if !rep.Sound() {
		return fmt.Errorf("verify: %d problem(s) in %s", len(rep.Problems), *app.archivePath)
	}
	fmt.Fprintf(stdout, "sound: %d sources, %d streams, %d segments and %d live rows (%s), %d samples decoded in %s",
		rep.Sources, rep.Streams, rep.Segments, rep.LiveRows, humanBytes(rep.Bytes), rep.Samples, time.Since(start).Round(time.Millisecond))
	if rep.Shadowed > 0 {
		fmt.Fprintf(stdout, "; %d sealed wal rows await their prune (harmless)", rep.Shadowed)
	}
	fmt.Fprintln(stdout)
	return nil
}

func backupCmd(ctx context.Context, args []string, stdout, _ io.Writer) error {
	app := newOpApp("backup", "Write an exact copy of an archive to DEST with SQLite's VACUUM INTO, while a server keeps "+
		"writing it: the copy holds every commit up to the moment it starts, as one compact file. DEST must not exist; "+
		"it appears only once complete.",
		"dendro-receiver backup --archive.path=/var/lib/dendro-receiver/dendro.db /backup/dendro-$(date +%F).db", stdout)
	dest := app.Arg("DEST", "The copy's file name.").Required().String()
	if ok, err := app.parse(args); !ok {
		return err
	}
	a, err := openRead(*app.archivePath)
	if err != nil {
		return err
	}
	defer a.Close()
	p := newProgress(stdout, "backup", "bytes")
	res, err := archivecmd.Backup(ctx, a, *dest, archivecmd.BackupOptions{Progress: p.fn()})
	p.clear()
	if errors.Is(err, archivecmd.ErrDestExists) {
		return usage("backup: %s exists; a backup never overwrites", *dest)
	}
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	_, err = fmt.Fprintf(stdout, "backed up %s to %s: %s in %s\n", *app.archivePath, *dest, humanBytes(res.Bytes), res.Took.Round(time.Millisecond))
	return err
}

func compactCmd(ctx context.Context, args []string, stdout, _ io.Writer) error {
	app := newOpApp("compact", "Merge runs of adjacent small segments of every stream, then return the freed pages to the "+
		"filesystem. Needs the archive to itself: refused while a server runs (which compacts on its own).",
		"dendro-receiver compact --archive.path=/var/lib/dendro-receiver/dendro.db", stdout)
	target := app.Flag("target-rows", "Merge segments up to this many wal rows (requests' shares); segments "+
		"with series tables (sealed since format 2) also past it, up to 64 MiB received within an hour.").
		Default(fmt.Sprint(receiver.DefaultCompactTargetRows)).Int64()
	if ok, err := app.parse(args); !ok {
		return err
	}
	if *target < 1 {
		return usage("compact: --target-rows must be positive")
	}
	h, err := openWrite("compact", *app.archivePath)
	if err != nil {
		return err
	}
	p := newProgress(stdout, "compact", "streams")
	c, err := archivecmd.Compact(ctx, h, archivecmd.CompactOptions{TargetRows: *target, Progress: p.fn()})
	p.clear()
	if cerr := h.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("closing the archive: %w", cerr)
	}
	if err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	_, err = fmt.Fprintf(stdout, "compacted: %d segments, %d merges, %d segments\n", c.Before, c.Merges, c.After)
	return err
}

func evictCmd(ctx context.Context, args []string, stdout, _ io.Writer) error {
	now := time.Now()
	app := newOpApp("evict", "Remove what the archive received before a time (receipt time, as --retention.time counts), "+
		"from every source; a segment holding rows from both sides of the cutoff is kept whole. With --match, only the "+
		"series the selector matches: the segments holding them are rewritten without them (live rows, not sealed yet, "+
		"are left alone and counted). Needs the archive to itself: refused while a server runs.",
		"dendro-receiver evict --archive.path=/var/lib/dendro-receiver/dendro.db --older-than=30d --match='{job=\"old\"}'", stdout)
	before, beforeSet := app.addTime("before", "Remove what was received before this time (RFC 3339, YYYY-MM-DD, Unix seconds, now-DURATION).", now)
	var olderThan model.Duration
	app.Flag("older-than", "Remove what was received longer ago than this (e.g. 30d, 12h).").SetValue(named("older-than", &olderThan))
	match := app.Flag("match", "Only the series this selector matches (e.g. '{__name__=~\"debug_.*\"}').").String()
	if ok, err := app.parse(args); !ok {
		return err
	}
	switch {
	case *beforeSet && olderThan != 0:
		return usage("evict: give --before or --older-than, not both")
	case !*beforeSet && olderThan <= 0:
		return usage("evict: give --before=TIME or --older-than=DURATION")
	case !*beforeSet:
		*before = now.Add(-time.Duration(olderThan))
	}
	var ms []*labels.Matcher
	if *match != "" {
		var err error
		if ms, err = parser.NewParser(parser.Options{}).ParseMetricSelector(*match); err != nil {
			return usage("evict: --match: %v", err)
		}
	}
	h, err := openWrite("evict", *app.archivePath)
	if err != nil {
		return err
	}
	p := newProgress(stdout, "evict", "streams")
	ev, err := archivecmd.Evict(ctx, h, archivecmd.EvictOptions{Before: before.UnixNano(), Matchers: ms, Progress: p.fn()})
	p.clear()
	if cerr := h.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("closing the archive: %w", cerr)
	}
	if err != nil {
		return fmt.Errorf("evict: %w", err)
	}
	cut := before.UTC().Format(time.RFC3339)
	if ms == nil {
		fmt.Fprintf(stdout, "evicted what was received before %s: %d segments, %d wal rows\n", cut, ev.Segments, ev.WALRows)
		if ev.LiveKept > 0 {
			fmt.Fprintf(stdout, "kept %d live wal rows received before the cutoff: they are not sealed yet, and a stream's "+
				"live rows go together; once a server has sealed them (it does at start), evict again\n", ev.LiveKept)
		}
		return nil
	}
	fmt.Fprintf(stdout, "evicted %d series (%d samples) received before %s matching %s: %d segments rewritten, %d deleted\n",
		ev.Series, ev.Samples, cut, *match, ev.Rewritten, ev.Segments)
	if ev.LiveKept > 0 {
		fmt.Fprintf(stdout, "kept %d live wal rows received before the cutoff: rows are not rewritten; "+
			"once a server has sealed them, evict again\n", ev.LiveKept)
	}
	return nil
}
