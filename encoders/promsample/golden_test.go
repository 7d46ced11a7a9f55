package promsample

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/dendro-receiver/dendro-receiver/archive"
)

// goldenSegments are the sha256 of the segment and index bytes (and the
// counts) that goldenInputs encode to, recorded with the encoder of commit
// 65acb04 (labels.Labels per series). A segment's bytes are its format: a
// change of the encoder's internals (how a seal holds series, labels or
// samples) must not move one of them. A change of the format records new
// ones, and says why in its commit.
var goldenSegments = map[string]string{
	"anchored/default":           "5e4041c254889d3d762f2eec rows=121 ts=1700000000000000001..1700000000000000121 unresolved=0",
	"anchored/small-groups":      "ce2dac79bec1ba6d58169106 rows=121 ts=1700000000000000001..1700000000000000121 unresolved=0",
	"anchored/format-v1":         "042c9898b56bd2bb68c8b419 rows=121 ts=1700000000000000001..1700000000000000121 unresolved=0",
	"cut-mid-epoch/default":      "a18855c8a4cf99a4ceba73c7 rows=29 ts=1700000000000000003..1700000000000000031 unresolved=21",
	"mixed-formats/default":      "4a831bc9ede6e16cd17f6a7a rows=50 ts=1700000000000000001..1700000000000000050 unresolved=0",
	"mixed-formats/small-groups": "2c8cbf16be4984814a697693 rows=50 ts=1700000000000000001..1700000000000000050 unresolved=0",
	"dictionary/default":         "49382132f9a20fce45c8a32c rows=5 ts=1700000000000000001..1700000000000000005 unresolved=0",
	"merge/default":              "d815bed8aefbf3be789c888c rows=200 ts=1700000000000000001..1700000000000000050 unresolved=0",
	"merge/small-groups":         "a09d995b270b5113831f314b rows=171 ts=1700000000000000001..1700000000000000050 unresolved=0",
}

// goldenInput is a stream's rows and the options to encode them with.
type goldenInput struct {
	name string
	rows []archive.Row
}

// goldenLong is a series long enough for splitLongSeries at small row
// groups, with samples and histograms interleaved, stale markers, NaNs,
// -0, infinities, exemplars, and its samples sent out of order and twice.
func goldenLong(r *rand.Rand) []Batch {
	ls := labels.FromStrings("__name__", "long_series", "instance", "host-1:9100", "__meta", "m")
	var smp []Sample
	for i := range 300 {
		v := float64(i * 3)
		switch i % 37 {
		case 5:
			v = math.Float64frombits(0x7ff0000000000002) // stale marker
		case 9:
			v = math.NaN()
		case 13:
			v = math.Copysign(0, -1)
		case 17:
			v = math.Inf(-1)
		case 21:
			v = float64(i) / 100
		}
		smp = append(smp, Sample{T: 1_700_000_000_000 + int64(i)*15_000, V: v})
	}
	var out []Batch
	for i := 0; i < len(smp); i += 25 {
		s := Series{Labels: ls, Samples: smp[i : i+25]}
		if i%50 == 0 {
			s.Histograms = []Histogram{randHistogram(r, smp[i].T), randHistogram(r, smp[i+3].T+1)}
			s.Exemplars = []Exemplar{{Labels: labels.FromStrings("trace_id", fmt.Sprint(i)), T: smp[i].T, V: float64(i)}}
		}
		out = append(out, Batch{Series: []Series{s}, Metadata: []Metadata{{MetricFamily: "long_series", Type: "counter", Help: "a long one"}}})
	}
	// Late and retried: the last chunk before the first, then the first again.
	out[0], out[len(out)-1] = out[len(out)-1], out[0]
	return append(out, out[1])
}

// goldenInputs are varied streams of rows: several epochs of anchored rows
// (anchors and references, histograms, exemplars, metadata, specials,
// duplicates, a series long enough to be split), an epoch cut at its start
// (references to anchors not there), format-1 rows between epochs, and an
// rwload-shaped stream whose label columns are dictionaries.
func goldenInputs(t *testing.T) []goldenInput {
	t.Helper()
	var out []goldenInput
	// Anchored: epochs of 6 data rows each, closed, over random batches
	// and the long series.
	r := rand.New(rand.NewPCG(21, 5))
	batches := randBatches(r, 90)
	long := goldenLong(r)
	for i, b := range long {
		at := min(len(batches), 3+i*7)
		batches = slices.Insert(batches, at, b)
	}
	a := newAnchorer(6)
	rows := a.rowsOf(t, batches)
	if a.rows > 0 {
		rows = append(rows, a.close())
	}
	out = append(out, goldenInput{"anchored", rows})

	// Cut mid-epoch: the first two data rows of an epoch gone (a
	// retention), so later rows refer to anchors that are not there.
	a = newAnchorer(0)
	r = rand.New(rand.NewPCG(22, 5))
	cut := a.rowsOf(t, randBatches(r, 30))
	cut = append(cut[2:], a.close())
	out = append(out, goldenInput{"cut-mid-epoch", cut})

	// Mixed: format-1 rows between closed epochs.
	a = newAnchorer(4)
	r = rand.New(rand.NewPCG(23, 5))
	var mixed []archive.Row
	for i, b := range randBatches(r, 40) {
		if i%9 == 8 {
			if a.rows > 0 {
				mixed = append(mixed, a.close())
			}
			data, err := EncodeBatch(&b)
			if err != nil {
				t.Fatal(err)
			}
			mixed = append(mixed, archive.Row{Stream: "s", TS: a.next(), Data: data})
			continue
		}
		mixed = append(mixed, a.rowsOf(t, []Batch{b})...)
	}
	mixed = append(mixed, a.close())
	out = append(out, goldenInput{"mixed-formats", mixed})

	// Dictionary columns: many rows per label value, but for instance
	// (one series each, 20 rows: DELTA_BYTE_ARRAY).
	rw := defaultRW()
	rw.Series, rw.Samples, rw.Sources, rw.SpecialEvery = 400, 20, 400, 53
	streams, _, err := toAnchoredRows(rw.build().requests, 1, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, rows := range streams {
		// Its last epoch is still open: a close marker (of any epoch)
		// closes it.
		rows = append(rows, archive.Row{Stream: "s", TS: rows[len(rows)-1].TS + 1, Data: AppendEpochClose(nil, 1)})
		out = append(out, goldenInput{"dictionary", rows})
	}
	return out
}

// dictionaryColumns counts the dictionary-encoded label columns (and
// __name__) of seg's first row group, of n in all.
func dictionaryColumns(t *testing.T, seg []byte) (dict, n int) {
	t.Helper()
	r, err := file.NewParquetReader(bytes.NewReader(seg))
	if err != nil {
		t.Fatal(err)
	}
	md := r.MetaData()
	for c := 0; c < md.Schema.NumColumns(); c++ {
		name := md.Schema.Column(c).Name()
		if _, ok := columnLabel(name); !ok && name != ColMetric {
			continue
		}
		cc, err := md.RowGroup(0).ColumnChunk(c)
		if err != nil {
			t.Fatal(err)
		}
		n++
		if cc.HasDictionaryPage() {
			dict++
		}
	}
	return dict, n
}

func goldenSum(seg *archive.Segment, unresolved int64) string {
	if seg == nil {
		return "no segment"
	}
	h := sha256.New()
	h.Write(seg.Bytes)
	h.Write([]byte{0})
	h.Write(seg.Index)
	return fmt.Sprintf("%s rows=%d ts=%d..%d unresolved=%d", hex.EncodeToString(h.Sum(nil)[:12]), seg.Rows, seg.FirstTS, seg.LastTS, unresolved)
}

// The encoder writes the bytes recorded in goldenSegments, for Encode and
// for Merge. On a mismatch the test prints what it got: a new entry is
// recorded only with a format change.
func TestEncoderWritesGoldenBytes(t *testing.T) {
	opts := map[string]Options{"default": {}, "small-groups": {RowGroupRows: 3}, "format-v1": {FormatV1: true}}
	got := map[string]string{}
	var merged map[string][]archive.StoredSegment
	merged = map[string][]archive.StoredSegment{}
	for _, in := range goldenInputs(t) {
		for on, o := range opts {
			key := in.name + "/" + on
			if _, ok := goldenSegments[key]; !ok {
				continue
			}
			e := &Encoder{Opts: o}
			seg, err := e.Encode("s", slices.Clone(in.rows))
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			got[key] = goldenSum(seg, e.Unresolved())
			if seg != nil {
				// The writer sizes the index's buffer by encodedLen.
				x, err := ParseIndex(seg.Index)
				if err != nil {
					t.Fatalf("%s: %v", key, err)
				}
				if n := x.encodedLen(); n != len(seg.Index) {
					t.Fatalf("%s: encodedLen %d, index of %d bytes", key, n, len(seg.Index))
				}
			}
			if in.name == "dictionary" && seg != nil {
				// Both ways of writing a label column are covered.
				if d, n := dictionaryColumns(t, seg.Bytes); d == 0 || d == n {
					t.Fatalf("%s: %d of %d label columns are dictionaries", key, d, n)
				}
			}
			if in.name != "dictionary" && seg != nil {
				merged[on] = append(merged[on], archive.StoredSegment{Seq: int64(len(merged[on]) + 1),
					SegmentMeta: archive.SegmentMeta{Rows: seg.Rows, FirstTS: seg.FirstTS, LastTS: seg.LastTS}, Bytes: seg.Bytes, Index: seg.Index})
			}
		}
	}
	for on, segs := range merged {
		key := "merge/" + on
		if _, ok := goldenSegments[key]; !ok {
			continue
		}
		e := &Encoder{Opts: opts[on]}
		seg, n, err := e.Merge("s", segs)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if n != len(segs) {
			t.Fatalf("%s: merged %d of %d segments", key, n, len(segs))
		}
		got[key] = goldenSum(seg, e.Unresolved())
	}
	for key, want := range goldenSegments {
		if got[key] != want {
			t.Errorf("%s:\n got %q\nwant %q", key, got[key], want)
		}
	}
}
