package analytics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/wmrl/wmrl/topics"
)

// readBatchRows bounds the rows per batch when reading a file back, keeping each batch far
// below topics.MaxAdvantageBytes.
const readBatchRows = 4096

// CalibrationRow is one calibration snapshot as stored in a calibration Parquet file.
type CalibrationRow struct {
	Run          string
	Stream       string
	Step         int64
	FitVersion   uint64
	Pairs        int64
	StepPairs    int64
	AnchorWeight float64
	BiasBefore   float64
	BiasAfter    float64
	// BreakpointsX and BreakpointsY are the fit's breakpoints (list<double> columns).
	BreakpointsX []float64
	BreakpointsY []float64
	// Digest is the content address of the correction state the snapshot describes.
	Digest string
}

// CalibrationSchema is the Arrow schema of calibration files.
var CalibrationSchema = arrow.NewSchema([]arrow.Field{
	{Name: "run", Type: arrow.BinaryTypes.String},
	{Name: "stream", Type: arrow.BinaryTypes.String},
	{Name: "step", Type: arrow.PrimitiveTypes.Int64},
	{Name: "fit_version", Type: arrow.PrimitiveTypes.Uint64},
	{Name: "pairs", Type: arrow.PrimitiveTypes.Int64},
	{Name: "step_pairs", Type: arrow.PrimitiveTypes.Int64},
	{Name: "anchor_weight", Type: arrow.PrimitiveTypes.Float64},
	{Name: "bias_before", Type: arrow.PrimitiveTypes.Float64},
	{Name: "bias_after", Type: arrow.PrimitiveTypes.Float64},
	{Name: "breakpoints_x", Type: arrow.ListOf(arrow.PrimitiveTypes.Float64)},
	{Name: "breakpoints_y", Type: arrow.ListOf(arrow.PrimitiveTypes.Float64)},
	{Name: "digest", Type: arrow.BinaryTypes.String},
}, nil)

// CalibrationRowOf projects a snapshot onto the columns of a calibration file.
func CalibrationRowOf(s topics.CalibrationSnapshot) CalibrationRow {
	return CalibrationRow{
		Run: s.RunID, Stream: s.Stream, Step: s.Step, FitVersion: s.FitVersion, Pairs: int64(s.Pairs),
		StepPairs: int64(s.StepPairs), AnchorWeight: s.AnchorWeight, BiasBefore: s.BiasBefore,
		BiasAfter: s.BiasAfter, BreakpointsX: s.BreakX, BreakpointsY: s.BreakY, Digest: s.Digest,
	}
}

func writerProps() (*parquet.WriterProperties, pqarrow.ArrowWriterProperties) {
	return parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd)),
		pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())
}

// encodeAdvantagesParquet writes the steps' rows with the wire schema (topics.AdvantageSchema, or
// AdvantageSchemaV2 for the whole file when a step uses it), one row group per step. The rows go
// through topics.EncodeAdvantagesAs, so the file's columns are exactly the columns a trainer
// receives.
func encodeAdvantagesParquet(steps [][]topics.AdvantageRow) ([]byte, error) {
	id := topics.SchemaAdvantages
	for _, rows := range steps {
		if topics.AdvantageSchemaID(rows) == topics.SchemaAdvantagesV2 {
			id = topics.SchemaAdvantagesV2
		}
	}
	var buf bytes.Buffer
	props, aprops := writerProps()
	w, err := pqarrow.NewFileWriter(topics.ArrowSchemaFor(id), &buf, props, aprops)
	if err != nil {
		return nil, fmt.Errorf("parquet writer: %w", err)
	}
	for _, rows := range steps {
		payload, err := topics.EncodeAdvantagesAs(rows, id)
		if err != nil {
			_ = w.Close()
			return nil, err
		}
		if err := writeIPC(w, payload); err != nil {
			_ = w.Close()
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("parquet close: %w", err)
	}
	return buf.Bytes(), nil
}

func writeIPC(w *pqarrow.FileWriter, payload []byte) error {
	rd, err := ipc.NewReader(bytes.NewReader(payload), ipc.WithAllocator(memory.NewGoAllocator()))
	if err != nil {
		return fmt.Errorf("re-read advantages: %w", err)
	}
	defer rd.Release()
	for rd.Next() {
		if err := w.Write(rd.RecordBatch()); err != nil {
			return fmt.Errorf("parquet write: %w", err)
		}
	}
	return rd.Err()
}

func encodeCalibrationParquet(rows []CalibrationRow) ([]byte, error) {
	b := array.NewRecordBuilder(memory.NewGoAllocator(), CalibrationSchema)
	defer b.Release()
	str := func(i int) *array.StringBuilder { return b.Field(i).(*array.StringBuilder) }
	i64 := func(i int) *array.Int64Builder { return b.Field(i).(*array.Int64Builder) }
	f64 := func(i int) *array.Float64Builder { return b.Field(i).(*array.Float64Builder) }
	list := func(i int, vs []float64) {
		lb := b.Field(i).(*array.ListBuilder)
		lb.Append(true)
		lb.ValueBuilder().(*array.Float64Builder).AppendValues(vs, nil)
	}
	for _, r := range rows {
		str(0).Append(r.Run)
		str(1).Append(r.Stream)
		i64(2).Append(r.Step)
		b.Field(3).(*array.Uint64Builder).Append(r.FitVersion)
		i64(4).Append(r.Pairs)
		i64(5).Append(r.StepPairs)
		f64(6).Append(r.AnchorWeight)
		f64(7).Append(r.BiasBefore)
		f64(8).Append(r.BiasAfter)
		list(9, r.BreakpointsX)
		list(10, r.BreakpointsY)
		str(11).Append(r.Digest)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	props, aprops := writerProps()
	w, err := pqarrow.NewFileWriter(CalibrationSchema, &buf, props, aprops)
	if err != nil {
		return nil, fmt.Errorf("parquet writer: %w", err)
	}
	if err := w.Write(rec); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("parquet write: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("parquet close: %w", err)
	}
	return buf.Bytes(), nil
}

// writeFileAtomic makes data durable under dir/name: temporary file, fsync, rename, fsync of
// the directory. Only after it returns may the offsets of the records in data be committed.
func writeFileAtomic(dir, name string, data []byte) error {
	tmp, err := os.CreateTemp(dir, "."+name+".*.tmp")
	if err != nil {
		return fmt.Errorf("create temp file: %w", err)
	}
	_, werr := tmp.Write(data)
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", tmp.Name(), werr)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("rename to %s: %w", name, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir for fsync: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}

// openRecords calls fn with each batch of the file and the file's Arrow schema, which (unlike
// the batches' own schema) carries the schema metadata stored in the file.
func openRecords(path string, fn func(*arrow.Schema, arrow.RecordBatch) error) error {
	rdr, err := file.OpenParquetFile(path, false)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer rdr.Close()
	fr, err := pqarrow.NewFileReader(rdr, pqarrow.ArrowReadProperties{BatchSize: readBatchRows}, memory.NewGoAllocator())
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	schema, err := fr.Schema()
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	rr, err := fr.GetRecordReader(context.Background(), nil, nil)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	defer rr.Release()
	for rr.Next() {
		if err := fn(schema, rr.RecordBatch()); err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}

// ReadAdvantagesFile reads an advantages Parquet file back into rows. Each batch is decoded by
// topics.DecodeAdvantages, so the file must carry the wire schema and every row must validate.
func ReadAdvantagesFile(path string) ([]topics.AdvantageRow, error) {
	var out []topics.AdvantageRow
	err := openRecords(path, func(schema *arrow.Schema, rec arrow.RecordBatch) error {
		withMeta := array.NewRecordBatch(schema, rec.Columns(), rec.NumRows())
		defer withMeta.Release()
		var buf bytes.Buffer
		w := ipc.NewWriter(&buf, ipc.WithSchema(schema))
		if err := w.Write(withMeta); err != nil {
			return err
		}
		if err := w.Close(); err != nil {
			return err
		}
		rows, err := topics.DecodeAdvantages(buf.Bytes())
		if err != nil {
			return err
		}
		out = append(out, rows...)
		return nil
	})
	return out, err
}

// ReadCalibrationFile reads a calibration Parquet file back.
func ReadCalibrationFile(path string) ([]CalibrationRow, error) {
	var out []CalibrationRow
	err := openRecords(path, func(_ *arrow.Schema, rec arrow.RecordBatch) error {
		if err := checkCalibrationSchema(rec.Schema()); err != nil {
			return err
		}
		str := func(i int) *array.String { return rec.Column(i).(*array.String) }
		i64 := func(i int) *array.Int64 { return rec.Column(i).(*array.Int64) }
		f64 := func(i int) *array.Float64 { return rec.Column(i).(*array.Float64) }
		list := func(i, row int) []float64 {
			l := rec.Column(i).(*array.List)
			start, end := l.ValueOffsets(row)
			vals := l.ListValues().(*array.Float64).Float64Values()[start:end]
			if len(vals) == 0 {
				return nil
			}
			return append([]float64(nil), vals...)
		}
		for j := 0; j < int(rec.NumRows()); j++ {
			out = append(out, CalibrationRow{
				Run: str(0).Value(j), Stream: str(1).Value(j), Step: i64(2).Value(j),
				FitVersion: rec.Column(3).(*array.Uint64).Value(j), Pairs: i64(4).Value(j), StepPairs: i64(5).Value(j),
				AnchorWeight: f64(6).Value(j), BiasBefore: f64(7).Value(j), BiasAfter: f64(8).Value(j),
				BreakpointsX: list(9, j), BreakpointsY: list(10, j), Digest: str(11).Value(j),
			})
		}
		return nil
	})
	return out, err
}

// checkCalibrationSchema compares names and types; Parquet adds field metadata and renames list
// elements ("element"), which a plain Schema.Equal would reject.
func checkCalibrationSchema(s *arrow.Schema) error {
	want := CalibrationSchema.Fields()
	if s.NumFields() != len(want) {
		return fmt.Errorf("calibration file has %d columns, want %d: %w", s.NumFields(), len(want), topics.ErrMalformed)
	}
	for i, w := range want {
		h := s.Field(i)
		ok := h.Name == w.Name && h.Type.ID() == w.Type.ID()
		if lt, isList := h.Type.(*arrow.ListType); ok && isList {
			ok = lt.Elem().ID() == arrow.FLOAT64
		}
		if !ok {
			return fmt.Errorf("calibration column %d is %s %s, want %s %s: %w", i, h.Name, h.Type, w.Name, w.Type, topics.ErrMalformed)
		}
	}
	return nil
}
