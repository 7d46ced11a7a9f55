package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
)

// staleNaN is Prometheus's stale marker (value.StaleNaN).
const staleNaN = 0x7ff0000000000002

// sample is one float sample: Unix ms and the value's bits.
type sample struct {
	T    int64
	Bits uint64
}

func (s sample) String() string {
	return fmt.Sprintf("%d=%v(%#x)", s.T, math.Float64frombits(s.Bits), s.Bits)
}

// rawSamples asks Prometheus for the raw samples of selector over the hour
// before at: an instant query of a range selector returns a matrix of the
// stored samples themselves, with no PromQL evaluation in between. Keys are
// labels.Labels.String().
func (p *prometheus) rawSamples(ctx context.Context, selector string, at time.Time) (map[string][]sample, error) {
	q := url.Values{"query": {selector + "[1h]"}, "time": {strconv.FormatInt(at.Unix(), 10)}}
	code, body, err := httpGet(ctx, p.url+"/api/v1/query?"+q.Encode())
	if err != nil {
		return nil, err
	}
	if code != 200 {
		return nil, fmt.Errorf("query %s: %d %s", selector, code, body)
	}
	var resp struct {
		Status string
		Data   struct {
			ResultType string
			Result     []struct {
				Metric map[string]string
				Values [][2]json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("query %s: %w", selector, err)
	}
	if resp.Status != "success" || resp.Data.ResultType != "matrix" {
		return nil, fmt.Errorf("query %s: status %q, result type %q", selector, resp.Status, resp.Data.ResultType)
	}
	out := make(map[string][]sample, len(resp.Data.Result))
	for _, r := range resp.Data.Result {
		ss := make([]sample, 0, len(r.Values))
		for _, v := range r.Values {
			t, err := parseMillis(string(v[0]))
			if err != nil {
				return nil, err
			}
			var s string
			if err := json.Unmarshal(v[1], &s); err != nil {
				return nil, err
			}
			// Prometheus prints floats with strconv.FormatFloat(v, 'f', -1,
			// 64), which ParseFloat inverts exactly (including "-0", "+Inf").
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return nil, err
			}
			ss = append(ss, sample{T: t, Bits: math.Float64bits(f)})
		}
		out[labels.FromMap(r.Metric).String()] = ss
	}
	return out, nil
}

// parseMillis turns Prometheus's JSON timestamp (seconds with at most three
// decimals, e.g. 1435781451.781) into milliseconds without going through a
// float.
func parseMillis(s string) (int64, error) {
	sec, frac, _ := strings.Cut(s, ".")
	if len(frac) > 3 {
		return 0, fmt.Errorf("timestamp %s: more than millisecond precision", s)
	}
	frac += strings.Repeat("0", 3-len(frac))
	a, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("timestamp %s: %w", s, err)
	}
	b, err := strconv.ParseInt(frac, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("timestamp %s: %w", s, err)
	}
	return a*1000 + b, nil
}

// archived is what an archive holds, merged per series over every source,
// stream, segment and live tail, the way a reader must: sorted by T, exact
// duplicates (same T and bits) dropped. Conflicts lists timestamps that
// carry two different values, which no merge may hide.
type archived struct {
	Series   map[string][]sample // by labels.Labels.String()
	Sources  int
	Streams  int // over every source, whether or not ms matched in them
	Segments int
	// MostInASegment: the most samples matching ms that one segment holds.
	MostInASegment int
	LiveRows       int
	Conflicts      []string
}

// readArchive opens the archive file read-only (beside a running writer, or
// after one stopped), reads every series matching ms in one snapshot, and
// closes it again, so that it never holds the file open between calls.
func readArchive(ctx context.Context, path string, ms ...*labels.Matcher) (*archived, error) {
	a, err := archive.Open(path)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	q := promsample.AllTime(ms...)
	raw := map[string][]sample{}
	res := &archived{}
	add := func(ss []promsample.Series) {
		for _, s := range ss {
			k := s.Labels.String()
			for _, x := range s.Samples {
				raw[k] = append(raw[k], sample{T: x.T, Bits: math.Float64bits(x.V)})
			}
		}
	}
	err = a.View(ctx, func(tx *archive.ReadTx) error {
		sources, err := tx.Sources()
		if err != nil {
			return err
		}
		res.Sources = len(sources)
		for _, src := range sources {
			streams, err := tx.Streams(src.ID)
			if err != nil {
				return err
			}
			res.Streams += len(streams)
			for _, st := range streams {
				segs, err := tx.Segments(src.ID, st)
				if err != nil {
					return err
				}
				for _, seg := range segs {
					ss, err := promsample.ReadSegment(seg.Bytes, q)
					if err != nil {
						return fmt.Errorf("source %d stream %q segment %d: %w", src.ID, st, seg.Seq, err)
					}
					n := 0
					for _, s := range ss {
						n += len(s.Samples)
					}
					res.MostInASegment = max(res.MostInASegment, n)
					add(ss)
				}
				res.Segments += len(segs)
				rows, err := tx.LiveWAL(src.ID, st)
				if err != nil {
					return err
				}
				res.LiveRows += len(rows)
				ss, err := promsample.ReadRows(rows, q)
				if err != nil {
					return fmt.Errorf("source %d stream %q live rows: %w", src.ID, st, err)
				}
				add(ss)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	res.Series = make(map[string][]sample, len(raw))
	for k, ss := range raw {
		slices.SortFunc(ss, func(a, b sample) int {
			if a.T != b.T {
				return cmp.Compare(a.T, b.T)
			}
			return cmp.Compare(a.Bits, b.Bits)
		})
		ss = slices.Compact(ss)
		for i := 1; i < len(ss); i++ {
			if ss[i].T == ss[i-1].T {
				res.Conflicts = append(res.Conflicts, fmt.Sprintf("%s at %d: %v and %v", k, ss[i].T, ss[i-1], ss[i]))
			}
		}
		res.Series[k] = ss
	}
	sort.Strings(res.Conflicts)
	return res, nil
}

// sameValue is bit equality, except that two NaNs that are not stale
// markers match: Prometheus's JSON prints every NaN as "NaN", so the
// reference cannot say which payload it stored.
func sameValue(archivedBits, promBits uint64) bool {
	if archivedBits == promBits {
		return true
	}
	a, p := math.Float64frombits(archivedBits), math.Float64frombits(promBits)
	return math.IsNaN(a) && math.IsNaN(p) && archivedBits != staleNaN && promBits != staleNaN
}

// missing compares want (from Prometheus, samples at or before cutoff only)
// with the archive and returns how many samples were compared and a
// description of the first few absent or different ones.
func missing(want map[string][]sample, got *archived, cutoff int64) (compared int, problems []string) {
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		have := got.Series[k]
		for _, s := range want[k] {
			if s.T > cutoff {
				continue
			}
			compared++
			i, found := slices.BinarySearchFunc(have, s.T, func(x sample, t int64) int { return cmp.Compare(x.T, t) })
			switch {
			case !found:
				problems = append(problems, fmt.Sprintf("%s: sample %v absent (archive has %d samples of it)", k, s, len(have)))
			case !sameValueAt(have, i, s):
				problems = append(problems, fmt.Sprintf("%s: at %d archive has %v, Prometheus %v", k, s.T, have[i], s))
			}
		}
	}
	return compared, problems
}

// sameValueAt reports whether any archived sample at s.T (after exact
// de-duplication there is one, unless there is a conflict) matches s.
func sameValueAt(have []sample, i int, s sample) bool {
	for ; i < len(have) && have[i].T == s.T; i++ {
		if sameValue(have[i].Bits, s.Bits) {
			return true
		}
	}
	return false
}

// summarize is the first n problems and the count of the rest.
func summarize(problems []string, n int) string {
	if len(problems) <= n {
		return strings.Join(problems, "\n")
	}
	return strings.Join(problems[:n], "\n") + fmt.Sprintf("\n... and %d more", len(problems)-n)
}
