package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/model"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// The operator commands: dendro-receiver COMMAND [flags]. The server is
// the default command, so `dendro-receiver --archive.path=X` serves.

// opCommand runs one operator command with its own arguments.
type opCommand func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// subcommand returns the operator command args names, or nil when args
// are the server's.
func subcommand(args []string) opCommand {
	if len(args) == 0 {
		return nil
	}
	switch args[0] {
	case "inspect":
		return inspectCmd
	case "verify":
		return verifyCmd
	case "backup":
		return backupCmd
	case "compact":
		return compactCmd
	case "evict":
		return evictCmd
	case "query":
		return queryCmd
	case "export":
		return exportCmd
	case "help":
		return helpCmd
	}
	return nil
}

// commandsHelp lists the operator commands (the server's --help and
// `dendro-receiver help` print it).
const commandsHelp = `Commands (each with --help and an example):
  inspect   what an archive holds: sources, streams, segments, series, samples, pages, sidecars
  verify    check an archive down to every sample; exit 1 with each problem on its own line
  backup    an exact copy of an archive, while a server writes it
  compact   merge small segments (the server must be stopped)
  evict     remove data received before a time (the server must be stopped)
  query     evaluate PromQL straight from an archive file
  export    write the samples as a Hive-partitioned Parquet dataset
Without a command, dendro-receiver serves.`

func helpCmd(_ context.Context, _ []string, stdout, _ io.Writer) error {
	_, err := fmt.Fprintln(stdout, "usage: dendro-receiver [COMMAND] [flags]\n\n"+commandsHelp+
		"\n\nRun dendro-receiver --help for the server's flags, dendro-receiver COMMAND --help for a command's.")
	return err
}

// opApp is the flag parser of one operator command.
type opApp struct {
	*kingpin.Application
	archivePath *string
	terminated  bool
}

// newOpApp makes a command's parser: help is its description, example a
// command line shown under it.
func newOpApp(name, help, example string, stdout io.Writer) *opApp {
	app := kingpin.New("dendro-receiver "+name, help+"\n\nExample:\n  "+example)
	app.Writer(stdout)
	app.UsageWriter(stdout)
	app.HelpFlag.Short('h')
	o := &opApp{Application: app}
	o.archivePath = app.Flag("archive.path", "The archive file.").Default(filepath.Join("data", "dendro.db")).String()
	// --help prints and "terminates": parse returns instead of exiting.
	app.Terminate(func(int) { o.terminated = true })
	return o
}

// parse parses args; ok is false after --help.
func (o *opApp) parse(args []string) (ok bool, err error) {
	_, err = o.Parse(args)
	if o.terminated { // --help printed; a missing argument is no error then
		return false, nil
	}
	if err != nil {
		return false, usage("%s: %v", o.Name, err)
	}
	return true, nil
}

// checkArchive refuses, before anything opens it, a path that is not a
// dendro archive this build reads, each with its own one-line reason.
func checkArchive(path string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return usage("--archive.path %s: no such file", path)
	case err != nil:
		return usage("--archive.path: %v", err)
	case fi.IsDir():
		return usage("--archive.path %s is a directory", path)
	}
	s, err := archive.Sniff(path)
	if err != nil {
		return usage("--archive.path: %v", err)
	}
	if !s.Stamped {
		return usage("--archive.path %s is not a dendro archive", path)
	}
	if s.Version != archive.SchemaVersion {
		return usage("--archive.path %s is a dendro archive of schema version %d; this build reads %d", path, s.Version, archive.SchemaVersion)
	}
	return nil
}

// openRead opens the read handle: it never writes, so it serves a live
// archive, read-only media and a crashed archive alike.
func openRead(path string) (*archive.Archive, error) {
	if err := checkArchive(path); err != nil {
		return nil, err
	}
	a, err := archive.Open(path)
	if err != nil {
		return nil, openError(path, err)
	}
	return a, nil
}

// openWrite opens the exclusive write handle, refused while a server (or
// anything else) has the archive open.
func openWrite(cmd, path string) (*archive.WriteHandle, error) {
	if err := checkArchive(path); err != nil {
		return nil, err
	}
	h, err := archive.OpenWrite(path)
	switch {
	case errors.Is(err, archive.ErrInUse):
		return nil, fmt.Errorf("%s: %s is in use (a running dendro-receiver?): %s changes segments under the writer's feet, "+
			"so it needs the archive to itself; stop the server first", cmd, path, cmd)
	case errors.Is(err, archive.ErrReadOnlyMedia):
		return nil, fmt.Errorf("%s: %s is on read-only media; %s writes", cmd, path, cmd)
	case err != nil:
		return nil, openError(path, err)
	}
	return h, nil
}

func openError(path string, err error) error {
	if errors.Is(err, archive.ErrNotAnArchive) || errors.Is(err, archive.ErrUnsupportedSchema) {
		return usage("--archive.path %s: %v", path, err)
	}
	return fmt.Errorf("opening %s: %w", path, err)
}

// parseTime reads a time flag: RFC 3339 ("2024-05-01T12:00:00Z"), a date
// ("2024-05-01", UTC midnight), Unix seconds ("1714564800.5"), "now", or
// "now-DURATION" ("now-1h", "now-7d").
func parseTime(s string, now time.Time) (time.Time, error) {
	switch {
	case s == "now":
		return now, nil
	case strings.HasPrefix(s, "now-"):
		d, err := model.ParseDuration(s[len("now-"):])
		if err != nil {
			return time.Time{}, err
		}
		return now.Add(-time.Duration(d)), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	if t, ok := unixSeconds(s); ok {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q is not a time (RFC 3339, YYYY-MM-DD, Unix seconds, now or now-1h)", s)
}

// timeFlag is a time flag's value, parsed against one "now".
type timeFlag struct {
	name string
	now  time.Time
	t    *time.Time
	set  *bool
}

func (f timeFlag) Set(s string) error {
	t, err := parseTime(s, f.now)
	if err != nil {
		return fmt.Errorf("--%s: %w", f.name, err)
	}
	*f.t, *f.set = t, true
	return nil
}

func (f timeFlag) String() string { return "" }

// addTime declares a time flag; set says whether it was given.
func (o *opApp) addTime(name, help string, now time.Time) (t *time.Time, set *bool) {
	t, set = new(time.Time), new(bool)
	o.Flag(name, help).SetValue(timeFlag{name: name, now: now, t: t, set: set})
	return t, set
}

// unixSeconds reads "1714564800" or "1714564800.123" exactly (a float
// would round the milliseconds a query's --time names).
func unixSeconds(s string) (time.Time, bool) {
	whole, frac, _ := strings.Cut(s, ".")
	sec, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || len(frac) > 9 || (whole == "" || whole == "-") {
		return time.Time{}, false
	}
	var ns int64
	if frac != "" {
		n, err := strconv.ParseUint(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
		if err != nil {
			return time.Time{}, false
		}
		ns = int64(n)
		if strings.HasPrefix(whole, "-") {
			ns = -ns
		}
	}
	return time.Unix(sec, ns).UTC(), true
}

func formatMS(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

func formatNS(ns int64) string {
	return time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
}

// enumValue is a flag that takes one of a few words.
type enumValue struct {
	allowed []string
	v       *string
}

func (e enumValue) Set(s string) error {
	if !slices.Contains(e.allowed, s) {
		return fmt.Errorf("%q is not one of %s", s, strings.Join(e.allowed, ", "))
	}
	*e.v = s
	return nil
}

func (e enumValue) String() string { return *e.v }

// addEnum declares a flag whose value is one of allowed (the first is the
// default); its errors name the flag.
func (o *opApp) addEnum(name, help string, allowed ...string) *string {
	v := new(string)
	*v = allowed[0]
	o.Flag(name, help).Default(allowed[0]).SetValue(named(name, enumValue{allowed, v}))
	return v
}
