package archive

import (
	"sort"
	"strings"
	"time"
)

// SealPolicy is advice for when a stream's live rows should become a
// segment; the archive never seals on its own. The caller keeps a
// SegmentAccount per stream and seals when it says so. Segment size is a
// read-throughput decision: durability is per append, so no policy trades
// against loss.
type SealPolicy struct {
	MaxBytes int64         // live row bytes; 0 means 8 MiB
	MaxRows  int64         // live rows; 0 means 900
	MaxAge   time.Duration // since the first live row; 0 means 300 s
	// Align, when > 0, cuts segments on buckets of this width in row-ts
	// units (floor division, so negative timestamps bucket correctly).
	Align int64
}

// Default seal policy values (the reference's).
const (
	DefaultSealMaxBytes = 8 << 20
	DefaultSealMaxRows  = 900
	DefaultSealMaxAge   = 300 * time.Second
	// StaggerBuckets is how many first-seal offsets the stagger spreads
	// streams over; the first segment's caps shrink by up to 50%.
	StaggerBuckets = 64
)

// WithDefaults returns p with zero fields set to their defaults.
func (p SealPolicy) WithDefaults() SealPolicy {
	if p.MaxBytes <= 0 {
		p.MaxBytes = DefaultSealMaxBytes
	}
	if p.MaxRows <= 0 {
		p.MaxRows = DefaultSealMaxRows
	}
	if p.MaxAge <= 0 {
		p.MaxAge = DefaultSealMaxAge
	}
	return p
}

// SegmentAccount is one stream's bookkeeping toward its next seal. It is
// not safe for concurrent use.
type SegmentAccount struct {
	maxBytes, maxRows int64
	maxAge            time.Duration
	align             int64
	bytes, rows       int64
	opened            time.Time
	firstBucket       int64
	lastBucket        int64
}

// OpenFirst starts a stream's account with its first segment's caps
// staggered by stagger_bucket(stream, sourceKey), so streams and sources
// that started together do not all seal on the same tick. now is when the
// account opens.
func OpenFirst(stream, sourceKey string, p SealPolicy, now time.Time) *SegmentAccount {
	p = p.WithDefaults()
	b := int64(StaggerBucket(stream, sourceKey))
	a := &SegmentAccount{
		maxBytes: max(p.MaxBytes-(p.MaxBytes/128)*b, 1),
		maxRows:  max(p.MaxRows-(p.MaxRows/128)*b, 1),
		maxAge:   p.MaxAge - (p.MaxAge/128)*time.Duration(b),
		align:    p.Align,
		opened:   now,
	}
	return a
}

// AddRow counts a row of n bytes at ts.
func (a *SegmentAccount) AddRow(n int, ts int64) {
	if a.rows == 0 {
		a.firstBucket = a.bucket(ts)
	}
	a.lastBucket = a.bucket(ts)
	a.rows++
	a.bytes += int64(n)
}

func (a *SegmentAccount) bucket(ts int64) int64 {
	if a.align <= 0 {
		return 0
	}
	q := ts / a.align
	if ts%a.align < 0 {
		q--
	}
	return q
}

// StartsNewBucket reports whether ts falls in another alignment bucket than
// the segment's first row.
func (a *SegmentAccount) StartsNewBucket(ts int64) bool {
	return a.align > 0 && a.rows > 0 && a.bucket(ts) != a.firstBucket
}

// Due reports whether the stream should seal: it has a row and has reached
// a cap, or crossed an alignment bucket.
func (a *SegmentAccount) Due(now time.Time) bool {
	if a.rows == 0 {
		return false
	}
	return a.bytes >= a.maxBytes || a.rows >= a.maxRows || now.Sub(a.opened) >= a.maxAge || a.firstBucket != a.lastBucket
}

// Rotate starts the next segment with the full, unstaggered policy.
func (a *SegmentAccount) Rotate(p SealPolicy, now time.Time) {
	p = p.WithDefaults()
	*a = SegmentAccount{maxBytes: p.MaxBytes, maxRows: p.MaxRows, maxAge: p.MaxAge, align: p.Align, opened: now}
}

// Carry counts rows that a seal bounded by WriterOptions.MaxSealRows or
// MaxSealBytes left live toward the next segment. They arrived before the
// account opened, so the account's age runs from opened if that is
// earlier. Alignment is not tracked for carried rows.
func (a *SegmentAccount) Carry(rows, bytes int64, opened time.Time) {
	if rows <= 0 {
		return
	}
	if opened.Before(a.opened) {
		a.opened = opened
	}
	a.rows += rows
	a.bytes += bytes
}

// Opened is when the account started counting (or the earliest carried
// rows' account did).
func (a *SegmentAccount) Opened() time.Time { return a.opened }

// Rows and Bytes are what the account has counted since it opened.
func (a *SegmentAccount) Rows() int64  { return a.rows }
func (a *SegmentAccount) Bytes() int64 { return a.bytes }

// Targets are the account's current caps (staggered for a first segment).
func (a *SegmentAccount) Targets() (bytes, rows int64, age time.Duration) {
	return a.maxBytes, a.maxRows, a.maxAge
}

// StaggerBucket is FNV-1a 64 with an extra shift-fold per byte over stream,
// a 0xff separator and sourceKey, modulo StaggerBuckets. It must not change:
// it decides where every archive's streams first seal.
func StaggerBucket(stream, sourceKey string) uint64 {
	const offset, prime = 0xcbf29ce484222325, 0x100000001b3
	h := uint64(offset)
	absorb := func(b byte) {
		h ^= uint64(b)
		h *= prime
		h ^= uint64(b >> 6)
		h *= prime
	}
	for i := 0; i < len(stream); i++ {
		absorb(stream[i])
	}
	absorb(0xff)
	for i := 0; i < len(sourceKey); i++ {
		absorb(sourceKey[i])
	}
	return h % StaggerBuckets
}

// SourceStaggerKey is a source's stagger key: k=v pairs in key order joined
// by U+0001.
func SourceStaggerKey(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + labels[k]
	}
	return strings.Join(parts, "\u0001")
}
