package export

import (
	"errors"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/schema"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
)

// Column names of an exported file (labels are named after themselves,
// see LabelColumn).
const (
	ColTimestamp = "__ts__"
	ColValue     = "__value__"
	ColHistCount = "__h_count__"
	ColHistSum   = "__h_sum__"
	ColHistogram = "__histogram__"
	// PartitionDate is the day partition's key.
	PartitionDate = "date"
	// LabelColumnEscape prefixes a label column that would collide.
	LabelColumnEscape = "__label__"
)

// LabelColumn is the column a label is stored in: its name, or
// LabelColumnEscape+name for a name starting with "__" or equal to a
// partition key.
func LabelColumn(name string) string {
	if strings.HasPrefix(name, "__") || name == PartitionDate {
		return LabelColumnEscape + name
	}
	return name
}

// fileWriter writes one exported file: rows buffered a row group at a
// time, column by column.
type fileWriter struct {
	w          *file.Writer
	labelNames []string
	groupRows  int
	rows       int64

	cur    []string // the current series' value per label column ("": absent)
	labels [][]parquet.ByteArray
	ldef   [][]int16
	ts     []int64
	vals   []float64
	vdef   []int16
	hcount []float64
	hsum   []float64
	hjson  []parquet.ByteArray
	hdef   []int16
	n      int // rows buffered
}

func newFileWriter(out io.Writer, labelNames []string, groupRows int) (*fileWriter, error) {
	var errs []error
	node := func(n *schema.PrimitiveNode, err error) schema.Node {
		errs = append(errs, err)
		return n
	}
	str := schema.StringLogicalType{}
	var fields schema.FieldList
	opts := []parquet.WriterProperty{
		// ZSTD: the files leave dendro for archival and analytics, where
		// size matters and every engine named in the package doc reads it;
		// a file has a handful of columns, so its per-column contexts cost
		// little (the segments' reason for LZ4 does not apply).
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithDictionaryDefault(false),
		parquet.WithVersion(parquet.V2_LATEST),
		parquet.WithDataPageVersion(parquet.DataPageV1),
		parquet.WithMaxRowGroupLength(math.MaxInt64),
		parquet.WithCreatedBy("dendro-receiver export"),
	}
	for _, n := range labelNames {
		col := LabelColumn(n)
		fields = append(fields, node(schema.NewPrimitiveNodeLogical(col, parquet.Repetitions.Optional, str, parquet.Types.ByteArray, -1, -1)))
		// A label repeats its few values over a series' rows: a dictionary
		// makes them a few bits each, and engines filter on it directly.
		opts = append(opts, parquet.WithDictionaryFor(col, true))
	}
	fields = append(fields,
		node(schema.NewPrimitiveNodeLogical(ColTimestamp, parquet.Repetitions.Required,
			schema.NewTimestampLogicalType(true, schema.TimeUnitMillis), parquet.Types.Int64, -1, -1)),
		schema.NewFloat64Node(ColValue, parquet.Repetitions.Optional, -1),
		schema.NewFloat64Node(ColHistCount, parquet.Repetitions.Optional, -1),
		schema.NewFloat64Node(ColHistSum, parquet.Repetitions.Optional, -1),
		node(schema.NewPrimitiveNodeLogical(ColHistogram, parquet.Repetitions.Optional, str, parquet.Types.ByteArray, -1, -1)),
	)
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	root, err := schema.NewGroupNode("dendro_export", parquet.Repetitions.Required, fields, -1)
	if err != nil {
		return nil, err
	}
	w, err := file.NewParquetWriterWithError(out, root, file.WithWriterProps(parquet.NewWriterProperties(opts...)))
	if err != nil {
		return nil, err
	}
	return &fileWriter{w: w, labelNames: labelNames, groupRows: groupRows, cur: make([]string, len(labelNames)),
		labels: make([][]parquet.ByteArray, len(labelNames)), ldef: make([][]int16, len(labelNames))}, nil
}

// series starts the rows of a series.
func (fw *fileWriter) series(ls labels.Labels) {
	for i, n := range fw.labelNames {
		fw.cur[i] = ls.Get(n)
	}
}

func (fw *fileWriter) row(t int64) {
	for i, v := range fw.cur {
		if v == "" {
			fw.ldef[i] = append(fw.ldef[i], 0)
			continue
		}
		fw.ldef[i] = append(fw.ldef[i], 1)
		fw.labels[i] = append(fw.labels[i], parquet.ByteArray(v))
	}
	fw.ts = append(fw.ts, t)
	fw.n++
}

func (fw *fileWriter) float(t int64, v float64) error {
	fw.row(t)
	fw.vals = append(fw.vals, v)
	fw.vdef = append(fw.vdef, 1)
	fw.hdef = append(fw.hdef, 0)
	return fw.maybeFlush()
}

func (fw *fileWriter) histogram(t int64, h *histogram.FloatHistogram) error {
	fw.row(t)
	fw.vdef = append(fw.vdef, 0)
	fw.hdef = append(fw.hdef, 1)
	fw.hcount = append(fw.hcount, h.Count)
	fw.hsum = append(fw.hsum, h.Sum)
	fw.hjson = append(fw.hjson, histogramJSON(h))
	return fw.maybeFlush()
}

func (fw *fileWriter) maybeFlush() error {
	if fw.n < fw.groupRows {
		return nil
	}
	return fw.flush()
}

// flush writes the buffered rows as one row group.
func (fw *fileWriter) flush() error {
	if fw.n == 0 {
		return nil
	}
	rg, err := fw.w.AppendRowGroupChecked()
	if err != nil {
		return err
	}
	next := func() (file.ColumnChunkWriter, error) { return rg.NextColumn() }
	for i := range fw.labelNames {
		if err := writeColumn[*file.ByteArrayColumnChunkWriter](next, fw.labels[i], fw.ldef[i]); err != nil {
			return err
		}
	}
	if err := writeColumn[*file.Int64ColumnChunkWriter](next, fw.ts, nil); err != nil {
		return err
	}
	if err := writeColumn[*file.Float64ColumnChunkWriter](next, fw.vals, fw.vdef); err != nil {
		return err
	}
	if err := writeColumn[*file.Float64ColumnChunkWriter](next, fw.hcount, fw.hdef); err != nil {
		return err
	}
	if err := writeColumn[*file.Float64ColumnChunkWriter](next, fw.hsum, fw.hdef); err != nil {
		return err
	}
	if err := writeColumn[*file.ByteArrayColumnChunkWriter](next, fw.hjson, fw.hdef); err != nil {
		return err
	}
	if err := rg.Close(); err != nil {
		return err
	}
	fw.rows += int64(fw.n)
	for i := range fw.labels {
		fw.labels[i], fw.ldef[i] = fw.labels[i][:0], fw.ldef[i][:0]
	}
	fw.ts, fw.vals, fw.vdef = fw.ts[:0], fw.vals[:0], fw.vdef[:0]
	fw.hcount, fw.hsum, fw.hjson, fw.hdef = fw.hcount[:0], fw.hsum[:0], fw.hjson[:0], fw.hdef[:0]
	fw.n = 0
	return nil
}

// close flushes and writes the footer; it returns the rows written.
func (fw *fileWriter) close() (int64, error) {
	if err := fw.flush(); err != nil {
		return 0, err
	}
	return fw.rows, fw.w.Close()
}

type batchWriter[V any] interface {
	file.ColumnChunkWriter
	WriteBatch(values []V, defLevels, repLevels []int16) (int64, error)
}

func writeColumn[W batchWriter[V], V any](next func() (file.ColumnChunkWriter, error), vals []V, def []int16) error {
	cw, err := next()
	if err != nil {
		return err
	}
	w, ok := cw.(W)
	if !ok {
		return errWrongColumn
	}
	if _, err := w.WriteBatch(vals, def, nil); err != nil {
		return err
	}
	return w.Close()
}

// errWrongColumn is a schema and its writes out of step: a bug here.
var errWrongColumn = errors.New("export: column writer of the wrong type")

// histogramJSON renders h as the Prometheus HTTP API does.
func histogramJSON(h *histogram.FloatHistogram) []byte {
	b := []byte(`{"count":`)
	b = appendFloat(b, h.Count)
	b = append(b, `,"sum":`...)
	b = appendFloat(b, h.Sum)
	found := false
	it := h.AllBucketIterator()
	for it.Next() {
		bk := it.At()
		if bk.Count == 0 {
			continue
		}
		if found {
			b = append(b, ',')
		} else {
			b = append(b, `,"buckets":[`...)
			found = true
		}
		rule := 2 // open both ends
		switch {
		case bk.LowerInclusive && bk.UpperInclusive:
			rule = 3
		case bk.LowerInclusive:
			rule = 1
		case bk.UpperInclusive:
			rule = 0
		}
		b = append(b, '[')
		b = strconv.AppendInt(b, int64(rule), 10)
		b = append(b, ',')
		b = appendFloat(b, bk.Lower)
		b = append(b, ',')
		b = appendFloat(b, bk.Upper)
		b = append(b, ',')
		b = appendFloat(b, bk.Count)
		b = append(b, ']')
	}
	if found {
		b = append(b, ']')
	}
	return append(b, '}')
}

// appendFloat writes a float as the API does: a JSON string.
func appendFloat(b []byte, f float64) []byte {
	b = append(b, '"')
	switch {
	case math.IsInf(f, 1):
		b = append(b, "+Inf"...)
	case math.IsInf(f, -1):
		b = append(b, "-Inf"...)
	case math.IsNaN(f):
		b = append(b, "NaN"...)
	default:
		b = strconv.AppendFloat(b, f, 'f', -1, 64)
	}
	return append(b, '"')
}
