package archive

import (
	"encoding/json"
	"fmt"
)

type session struct {
	Session           string `json:"session"`
	ClockAnchorWallNS int64  `json:"clock_anchor_wall_ns"`
	Implementation    string `json:"dendro"`
	ResumedAfterTS    *int64 `json:"resumed_after_ts,omitempty"`
}

// appendSession adds an entry to the source's writer_sessions metadata key.
func appendSession(tx *WriteTx, source SourceID, anchor int64, resumedAfter *int64) (string, error) {
	s, err := tx.Source(source)
	if err != nil {
		return "", err
	}
	id, err := tx.MintUUID()
	if err != nil {
		return "", err
	}
	var sessions []json.RawMessage
	if raw := s.Metadata[MetadataKeyWriterSessions]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &sessions); err != nil {
			sessions = nil // a foreign value: start the list afresh rather than fail the source
		}
	}
	entry, _ := json.Marshal(session{Session: id, ClockAnchorWallNS: anchor, Implementation: implementation, ResumedAfterTS: resumedAfter})
	sessions = append(sessions, entry)
	b, _ := json.Marshal(sessions)
	return id, tx.PatchMetadata(source, map[string]string{MetadataKeyWriterSessions: string(b)})
}

// Reserved sources.metadata keys.
const (
	// MetadataKeyWriterSessions is a JSON array with one entry per writer
	// session of the source: {"session", "clock_anchor_wall_ns", "dendro",
	// "resumed_after_ts"?}. Written by the archive.
	MetadataKeyWriterSessions = "writer_sessions"
	// MetadataKeyEvents is JSON {"events": [...]}; a resume appends an entry
	// of kind "writer_session".
	MetadataKeyEvents = "events"
)

func (l *loop) addSource(spec SourceSpec, uuid string) (*Source, error) {
	var id SourceID
	err := l.withRetries(func() error {
		return l.update(func(tx *WriteTx) error {
			var err error
			if id, uuid, err = tx.InsertSource(spec, uuid); err != nil {
				return err
			}
			if _, err := appendSession(tx, id, spec.ClockAnchorWallNS, nil); err != nil {
				return err
			}
			if v := l.opts.Encoder.Version(); v != "" {
				return tx.PatchMetadata(id, map[string]string{MetadataKeyEncoder: v})
			}
			return nil
		})
	})
	if err != nil {
		return nil, err // not fatal: the writer stays usable
	}
	l.opened++
	return &Source{w: l.w, id: id, uuid: uuid}, nil
}

func (l *loop) resume(id SourceID, anchor int64) (*Source, error) {
	var src SourceInfo
	var last int64
	var hasLast bool
	err := l.view(func(tx *ReadTx) error {
		var err error
		if src, err = tx.Source(id); err != nil {
			return err
		}
		last, hasLast, err = tx.SourceLastTS(id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("resume: %w", err)
	}
	if err := CheckEncoder(id, src.Metadata, l.opts.Encoder); err != nil {
		return nil, err
	}
	if hasLast && anchor <= last {
		return nil, &TimelineBackwardsError{Source: id, TS: anchor, Floor: last}
	}
	err = l.withRetries(func() error {
		return l.update(func(tx *WriteTx) error {
			if err := tx.MarkIncomplete(id); err != nil {
				return err
			}
			var resumedAfter *int64
			details := "previous session left no rows"
			if hasLast {
				resumedAfter = &last
				details = fmt.Sprintf("previous session's last row at %d", last)
			}
			sid, err := appendSession(tx, id, anchor, resumedAfter)
			if err != nil {
				return err
			}
			return appendEvent(tx, id, anchor, details, sid)
		})
	})
	if err != nil {
		return nil, err
	}
	l.opened++
	s := &Source{w: l.w, id: id, uuid: src.UUID}
	if hasLast {
		l.floors[id] = last
		s.floor, s.hasFl = last, true
	}
	return s, nil
}

func appendEvent(tx *WriteTx, source SourceID, ts int64, details, sessionID string) error {
	s, err := tx.Source(source)
	if err != nil {
		return err
	}
	doc := map[string]any{}
	if raw := s.Metadata[MetadataKeyEvents]; raw != "" {
		if json.Unmarshal([]byte(raw), &doc) != nil {
			doc = map[string]any{}
		}
	}
	events, _ := doc["events"].([]any)
	events = append(events, map[string]any{
		"timestamp":   ts,
		"description": "source resumed by a new writer session",
		"kind":        "writer_session",
		"details":     details,
		"id":          "writer_session:" + sessionID,
	})
	doc["events"] = events
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return tx.PatchMetadata(source, map[string]string{MetadataKeyEvents: string(b)})
}
