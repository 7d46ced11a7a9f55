package promsample

import (
	"errors"
	"math"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/schema"
	"github.com/prometheus/prometheus/model/labels"
)

// Column names of a segment. Label columns are named after their label;
// a label whose name starts with "__" (other than __name__) is stored in a
// column named LabelColumnEscape+name so it can never collide with these.
const (
	ColMetric         = "__name__"    // BYTE_ARRAY (STRING), required
	ColTimestamp      = "__ts__"      // INT64 TIMESTAMP(MILLIS, UTC), required
	ColValue          = "__value__"   // DOUBLE, null on the integer path and for histograms
	ColInt            = "__int__"     // INT64 k: the value is k / coalesce(__div__, 1), exactly
	ColDiv            = "__div__"     // DOUBLE divisor of __int__ (10^p or 2^-e), null when 1
	ColHist           = "__hist__"    // BYTE_ARRAY, one native histogram (format in doc.go)
	ColHistCount      = "__h_count__" // DOUBLE, the histogram's count (for SQL)
	ColHistSum        = "__h_sum__"   // DOUBLE, the histogram's sum (for SQL)
	LabelColumnEscape = "__label__"
)

// Footer key-value metadata keys.
const (
	KeyEncoder      = "dendro.encoder"     // EncoderVersion
	KeyMinTime      = "dendro.min_time_ms" // decimal Unix ms; absent when the segment has no samples
	KeyMaxTime      = "dendro.max_time_ms"
	KeySegmentIndex = "dendro.index"  // base64 (std) of the Index encoding
	KeyExtras       = "dendro.extras" // base64 (std) of a row-format Batch: exemplars and metadata
	// KeyDataChecksum is the xxhash64 (lowercase hex) of the file's bytes
	// before the footer: the leading magic and every page.
	KeyDataChecksum = "dendro.data_xxh64"
)

// DefaultRowGroupRows is the row count at which a row group is cut at the
// next series boundary (a quarter of it at the next metric boundary). A
// one-series read decodes the row groups holding that series: smaller
// groups make it cheaper, and each group costs ~100 bytes of footer per
// column plus a page per column.
const DefaultRowGroupRows = 32 << 10

// PageRows is how many rows a value column's page holds at most before
// the next series boundary starts a new one. A read of one series decodes
// about a page per column at each of its ends: smaller pages waste less of
// it, and each costs a page header and an offset index entry (~40 bytes).
const PageRows = 4096

// MaxRowGroupRows bounds a row group: the writer cuts a series longer than
// 4*RowGroupRows into pieces (consecutive row groups; the reader joins
// them), and the reader refuses a larger group, which bounds what a corrupt
// footer can make it allocate (~40 bytes per row).
const MaxRowGroupRows = 1 << 20

// labelColumn maps a label name to its column name.
func labelColumn(name string) string {
	if strings.HasPrefix(name, "__") {
		return LabelColumnEscape + name
	}
	return name
}

// columnLabel maps a column name back to a label name; ok is false for the
// fixed columns.
func columnLabel(col string) (string, bool) {
	if strings.HasPrefix(col, LabelColumnEscape) {
		return col[len(LabelColumnEscape):], true
	}
	if strings.HasPrefix(col, "__") {
		return "", false
	}
	return col, true
}

// labelDictionary decides whether a label column (or __name__) with rows
// non-null rows and values distinct values in a segment is
// dictionary-encoded. Tests replace it to write every column one way:
// segments sealed before dictionaries use DELTA_BYTE_ARRAY throughout.
var labelDictionary = func(rows, values int) bool { return rows >= dictRowsPerValue*values }

// dictRowsPerValue is how many rows per distinct value a label column
// needs for dictionary encoding; below it, DELTA_BYTE_ARRAY. With few rows
// per value the column is mostly distinct values (a unique id, short
// series): the dictionary stores each once, LZ4 finds little to share
// between them, and the bit-packed indices cost bits on every row, while
// DELTA_BYTE_ARRAY shares prefixes between consecutive values and its
// repeated rows compress away. Measured on rwload-shaped data plus a
// random 36-byte id label per series, the whole segment with that column
// as a dictionary versus delta: 4 rows per series +10%, 16 +2.2%, 32 and
// 64 +1.5%, 120 -1.9%; the dictionary column still encodes and decodes
// faster. 32 keeps the size cost at about 1.5% where it is paid.
const dictRowsPerValue = 32

// dictionaryLabels returns, per label name (labels.MetricName for
// __name__), whether its column is dictionary-encoded: by default when it
// has at least dictRowsPerValue rows per distinct value in the segment.
func dictionaryLabels(series []*seriesData, symbols []string) map[string]bool {
	var dc dictCounter
	for _, s := range series {
		dc.add(s.pairs, s.numRows(), len(symbols))
	}
	return dc.result(symbols)
}

// dictCounter counts, per label name's rank, the rows and the distinct
// values of a segment's series, for dictionaryLabels. A value is counted
// under the first name it comes with by marking it (first); under another
// name, by the (name, value) pairs in more (rare: a value shared by two
// label names).
type dictCounter struct {
	rows, values []int
	first        []uint32 // per value: 1 + the name it was first counted under
	more         map[uint64]struct{}
}

// add counts a series of n rows whose labels are pairs, ranks among
// nsym symbols.
func (dc *dictCounter) add(pairs []uint32, n, nsym int) {
	if n == 0 {
		return
	}
	if dc.rows == nil {
		dc.rows, dc.values, dc.first = make([]int, nsym), make([]int, nsym), make([]uint32, nsym)
	}
	for i := 0; i+1 < len(pairs); i += 2 {
		name, v := pairs[i], pairs[i+1]
		dc.rows[name] += n
		switch dc.first[v] {
		case 0:
			dc.first[v] = name + 1
			dc.values[name]++
		case name + 1:
		default:
			k := uint64(name)<<32 | uint64(v)
			if _, ok := dc.more[k]; !ok {
				if dc.more == nil {
					dc.more = map[uint64]struct{}{}
				}
				dc.more[k] = struct{}{}
				dc.values[name]++
			}
		}
	}
}

// result is the decision per label name counted.
func (dc *dictCounter) result(symbols []string) map[string]bool {
	dict := make(map[string]bool)
	for r, n := range dc.rows {
		if n > 0 {
			dict[symbols[r]] = labelDictionary(n, dc.values[r])
		}
	}
	return dict
}

// segmentSchema builds the Parquet schema and writer properties.
func segmentSchema(labelNames []string, dict map[string]bool, mem memory.Allocator, pageIndex bool) (*schema.GroupNode, *parquet.WriterProperties, error) {
	var errs []error
	node := func(n *schema.PrimitiveNode, err error) schema.Node {
		errs = append(errs, err)
		return n
	}
	str := schema.StringLogicalType{}
	fields := schema.FieldList{node(schema.NewPrimitiveNodeLogical(ColMetric, parquet.Repetitions.Required, str, parquet.Types.ByteArray, -1, -1))}
	opts := []parquet.WriterProperty{
		// The page index of the columns a read of a few series decodes
		// (PagedColumns): with it a reader seeks to the pages holding
		// their rows (cut at series boundaries, see planBreaks). The
		// writer writes a page index only when it is on by default, and a
		// column's own properties copy the defaults when first set, so
		// this comes first and the other columns turn it off.
		parquet.WithPageIndexEnabled(pageIndex),
		parquet.WithPageIndexEnabledFor(ColMetric, false),
		parquet.WithAllocator(mem),
		parquet.WithCompression(compress.Codecs.Lz4Raw),
		parquet.WithDictionaryDefault(false),
		parquet.WithVersion(parquet.V2_LATEST),
		parquet.WithDataPageVersion(parquet.DataPageV1),
		parquet.WithMaxRowGroupLength(math.MaxInt64),
		// Values reach the column encoders one batch at a time, and a
		// dictionary column's index buffer grows by reallocation with
		// each (1,024 rows by default): a tenth of the seal's bytes
		// allocated. A batch of a whole default row group grows it once.
		// Pages are still cut at the page size, so the file is the same.
		parquet.WithBatchSize(DefaultRowGroupRows),
		parquet.WithCreatedBy("dendro-receiver " + EncoderVersion),
		// __name__ and the label columns hold one run per series: a
		// dictionary page and RLE_DICTIONARY indices (see writeStrings)
		// where dictionaryLabels chose it, DELTA_BYTE_ARRAY otherwise.
		parquet.WithDictionaryFor(ColMetric, dict[labels.MetricName]),
		parquet.WithEncodingFor(ColMetric, parquet.Encodings.DeltaByteArray),
	}
	for _, n := range labelNames {
		col := labelColumn(n)
		fields = append(fields, node(schema.NewPrimitiveNodeLogical(col, parquet.Repetitions.Optional, str, parquet.Types.ByteArray, -1, -1)))
		opts = append(opts,
			parquet.WithDictionaryFor(col, dict[n]),
			parquet.WithEncodingFor(col, parquet.Encodings.DeltaByteArray),
			parquet.WithPageIndexEnabledFor(col, false))
	}
	fields = append(fields,
		node(schema.NewPrimitiveNodeLogical(ColTimestamp, parquet.Repetitions.Required,
			schema.NewTimestampLogicalType(true, schema.TimeUnitMillis), parquet.Types.Int64, -1, -1)),
		schema.NewFloat64Node(ColValue, parquet.Repetitions.Optional, -1),
		schema.NewInt64Node(ColInt, parquet.Repetitions.Optional, -1),
		schema.NewFloat64Node(ColDiv, parquet.Repetitions.Optional, -1),
		schema.NewByteArrayNode(ColHist, parquet.Repetitions.Optional, -1),
		schema.NewFloat64Node(ColHistCount, parquet.Repetitions.Optional, -1),
		schema.NewFloat64Node(ColHistSum, parquet.Repetitions.Optional, -1),
	)
	opts = append(opts,
		parquet.WithEncodingFor(ColTimestamp, parquet.Encodings.DeltaBinaryPacked),
		parquet.WithEncodingFor(ColValue, parquet.Encodings.ByteStreamSplit),
		parquet.WithEncodingFor(ColInt, parquet.Encodings.DeltaBinaryPacked),
		parquet.WithEncodingFor(ColHist, parquet.Encodings.DeltaByteArray),
		// Histogram pages are stored uncompressed: github.com/parquet-go/parquet-go
		// v0.32.0 fails on some LZ4_RAW pages of this column ("decoding
		// definition levels of data page v1: unexpected EOF") that arrow-go
		// and pierrec/lz4 decode fine; root cause not yet found. The blobs
		// are mostly float bits and barely compress anyway.
		parquet.WithCompressionFor(ColHist, compress.Codecs.Uncompressed),
		parquet.WithEncodingFor(ColHistCount, parquet.Encodings.ByteStreamSplit),
		parquet.WithEncodingFor(ColHistSum, parquet.Encodings.ByteStreamSplit),
		// Statistics only where a reader prunes with them (label columns and
		// the timestamp); value columns would pay for them in every page header.
		parquet.WithStatsFor(ColTimestamp, false),
		parquet.WithStatsFor(ColValue, false),
		parquet.WithStatsFor(ColInt, false),
		parquet.WithStatsFor(ColDiv, false),
		parquet.WithEncodingFor(ColDiv, parquet.Encodings.ByteStreamSplit),
		parquet.WithStatsFor(ColHist, false),
		parquet.WithStatsFor(ColHistCount, false),
		parquet.WithStatsFor(ColHistSum, false),
		parquet.WithPageIndexEnabledFor(ColHistCount, false),
		parquet.WithPageIndexEnabledFor(ColHistSum, false),
	)
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	root, err := schema.NewGroupNode("promsample", parquet.Repetitions.Required, fields, -1)
	if err != nil {
		return nil, nil, err
	}
	return root, parquet.NewWriterProperties(opts...), nil
}
