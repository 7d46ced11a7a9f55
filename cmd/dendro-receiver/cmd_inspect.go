package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/dendro-receiver/dendro-receiver/archivecmd"
)

func inspectCmd(ctx context.Context, args []string, stdout, _ io.Writer) error {
	app := newOpApp("inspect", "Show what an archive holds: sources, their streams (segments, sealed and live rows, "+
		"sample-time span), series and samples, the file's size, pages and sidecars. Reads only: works on a live archive, "+
		"on read-only media, and on a crashed archive without folding its sidecar in.",
		"dendro-receiver inspect --archive.path=/var/lib/dendro-receiver/dendro.db --format=json | jq .samples", stdout)
	format := app.addEnum("format", "table or json.", "table", "json")
	if ok, err := app.parse(args); !ok {
		return err
	}
	// The sidecars before the read handle's own open makes them.
	sidecars := archivecmd.Sidecars(*app.archivePath)
	a, err := openRead(*app.archivePath)
	if err != nil {
		return err
	}
	defer a.Close()
	r, err := archivecmd.Inspect(ctx, a)
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	r.Sidecars = sidecars
	if *format == "json" {
		b, err := json.MarshalIndent(inspectJSON(r), "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	return inspectTable(stdout, r)
}

// The JSON form: snake_case, times as RFC 3339 strings (absent when there
// is nothing to span), counts as numbers.
type (
	inspectReport struct {
		Path          string           `json:"path"`
		FileBytes     int64            `json:"file_bytes"`
		Sidecars      map[string]int64 `json:"sidecars"`
		PageSize      int64            `json:"page_size"`
		Pages         int64            `json:"pages"`
		FreePages     int64            `json:"free_pages"`
		ApplicationID string           `json:"application_id"`
		SchemaVersion int64            `json:"schema_version"`
		inspectStats
		Sources []inspectSource `json:"sources"`
	}
	inspectStats struct {
		Segments      int64  `json:"segments"`
		SealedRows    int64  `json:"sealed_rows"`
		LiveRows      int64  `json:"live_rows"`
		SegmentBytes  int64  `json:"segment_bytes"`
		LiveBytes     int64  `json:"live_bytes"`
		Series        int64  `json:"series"`
		Samples       int64  `json:"samples"`
		Histograms    int64  `json:"histograms"`
		MinTime       string `json:"min_time,omitempty"`
		MaxTime       string `json:"max_time,omitempty"`
		FirstReceived string `json:"first_received,omitempty"`
		LastReceived  string `json:"last_received,omitempty"`
	}
	inspectSource struct {
		ID       int64             `json:"id"`
		Labels   map[string]string `json:"labels"`
		UUID     string            `json:"uuid"`
		Complete bool              `json:"complete"`
		inspectStats
		Streams []inspectStream `json:"streams"`
	}
	inspectStream struct {
		Name string `json:"name"`
		inspectStats
		Unreadable []string `json:"unreadable,omitempty"`
	}
)

func statsJSON(s archivecmd.Stats) inspectStats {
	j := inspectStats{Segments: s.Segments, SealedRows: s.SealedRows, LiveRows: s.LiveRows, SegmentBytes: s.SegmentBytes,
		LiveBytes: s.LiveBytes, Series: s.Series, Samples: s.Samples, Histograms: s.Histograms}
	if s.MinTime <= s.MaxTime {
		j.MinTime, j.MaxTime = formatMS(s.MinTime), formatMS(s.MaxTime)
	}
	if s.FirstReceived <= s.LastReceived {
		j.FirstReceived, j.LastReceived = formatNS(s.FirstReceived), formatNS(s.LastReceived)
	}
	return j
}

func inspectJSON(r *archivecmd.Report) inspectReport {
	j := inspectReport{Path: r.Path, FileBytes: r.FileBytes, Sidecars: map[string]int64{}, PageSize: r.PageSize, Pages: r.Pages,
		FreePages: r.FreePages, ApplicationID: appID(r.ApplicationID), SchemaVersion: r.SchemaVersion, inspectStats: statsJSON(r.Stats),
		Sources: []inspectSource{}}
	for _, s := range r.Sidecars {
		j.Sidecars[s.Name] = s.Bytes
	}
	for _, s := range r.Sources {
		js := inspectSource{ID: s.ID, Labels: s.Labels, UUID: s.UUID, Complete: s.Complete, inspectStats: statsJSON(s.Stats),
			Streams: []inspectStream{}}
		for _, st := range s.Streams {
			js.Streams = append(js.Streams, inspectStream{Name: st.Name, inspectStats: statsJSON(st.Stats), Unreadable: st.Unreadable})
		}
		j.Sources = append(j.Sources, js)
	}
	return j
}

// appID spells the application id as its four ASCII bytes ("dend").
func appID(id uint32) string {
	if id == 0 {
		return ""
	}
	return string([]byte{byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id)})
}

func labelString(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%q", k, m[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func span(s archivecmd.Stats) (samples, received string) {
	samples, received = "-", "-"
	if s.MinTime <= s.MaxTime {
		samples = formatMS(s.MinTime) + " .. " + formatMS(s.MaxTime)
	}
	if s.FirstReceived <= s.LastReceived {
		received = formatNS(s.FirstReceived) + " .. " + formatNS(s.LastReceived)
	}
	return samples, received
}

func inspectTable(w io.Writer, r *archivecmd.Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	side := "none"
	if len(r.Sidecars) > 0 {
		var parts []string
		for _, s := range r.Sidecars {
			parts = append(parts, s.Name+" "+humanBytes(s.Bytes))
		}
		side = strings.Join(parts, ", ")
	}
	samples, received := span(r.Stats)
	fmt.Fprintf(tw, "archive\t%s\n", r.Path)
	fmt.Fprintf(tw, "stamp\tapplication id %q, schema version %d\n", appID(r.ApplicationID), r.SchemaVersion)
	fmt.Fprintf(tw, "file\t%s: %d pages of %d B, %d free (%s)\n", humanBytes(r.FileBytes), r.Pages, r.PageSize, r.FreePages,
		humanBytes(r.FreePages*r.PageSize))
	fmt.Fprintf(tw, "sidecars\t%s\n", side)
	fmt.Fprintf(tw, "sources\t%d\n", len(r.Sources))
	fmt.Fprintf(tw, "segments\t%d (%s), %d sealed rows; %d live rows (%s)\n", r.Segments, humanBytes(r.SegmentBytes), r.SealedRows,
		r.LiveRows, humanBytes(r.LiveBytes))
	fmt.Fprintf(tw, "series\t%d\n", r.Series)
	fmt.Fprintf(tw, "samples\t%d (%d histograms)\n", r.Samples, r.Histograms)
	fmt.Fprintf(tw, "sample time\t%s\n", samples)
	fmt.Fprintf(tw, "received\t%s\n", received)
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range r.Sources {
		state := "open"
		if s.Complete {
			state = "complete"
		}
		samples, received := span(s.Stats)
		fmt.Fprintf(w, "\nsource %d %s uuid %s (%s)\n", s.ID, labelString(s.Labels), s.UUID, state)
		fmt.Fprintf(w, "  %d rows (%d sealed, %d live), %s; %d series, %d samples\n", s.SealedRows+s.LiveRows, s.SealedRows,
			s.LiveRows, humanBytes(s.SegmentBytes+s.LiveBytes), s.Series, s.Samples)
		fmt.Fprintf(w, "  sample time %s\n  received    %s\n", samples, received)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "  STREAM\tSEGMENTS\tSEALED ROWS\tLIVE ROWS\tBYTES\tSERIES\tSAMPLES\tFIRST SAMPLE\tLAST SAMPLE\t")
		for _, st := range s.Streams {
			first, last := "-", "-"
			if st.MinTime <= st.MaxTime {
				first, last = formatMS(st.MinTime), formatMS(st.MaxTime)
			}
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%s\t%d\t%d\t%s\t%s\t\n", st.Name, st.Segments, st.SealedRows, st.LiveRows,
				humanBytes(st.SegmentBytes+st.LiveBytes), st.Series, st.Samples, first, last)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, st := range s.Streams {
			for _, u := range st.Unreadable {
				fmt.Fprintf(w, "  %s: unreadable: %s (run verify)\n", st.Name, u)
			}
		}
	}
	return nil
}
