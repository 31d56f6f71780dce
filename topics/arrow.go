package topics

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/wmrl/wmrl/topics/internal/arrowguard"
)

// ArrowSchemaKey is the Arrow schema-metadata key that carries the schema id (SchemaAdvantages),
// mirroring the wmrl-schema header so a batch saved to a file still says what it is.
const ArrowSchemaKey = "wmrl-schema"

// MaxAdvantageBytes bounds one Arrow payload DecodeAdvantages accepts. Producers chunk far below
// it (see DefaultChunkBytes); the bound exists so hostile input cannot make the reader allocate.
const MaxAdvantageBytes = 16 << 20

// DefaultChunkBytes is the chunk size AdvantageRecords callers should use with a broker at its
// default message.max.bytes (1 MiB): it leaves room for headers and record-batch overhead.
const DefaultChunkBytes = 768 << 10

// Column indexes of AdvantageSchema, in AdvantageRow field order; the OK flags have no column
// because they are the validity of the predicted and executed columns.
const (
	colRunID = iota
	colStream
	colStep
	colGroupID
	colRolloutID
	colPolicyVersion
	colSource
	colPredicted
	colCalibrated
	colExecuted
	colUsed
	colAdvantage
	colWeight
	colMask
	colCalibrationVersion
	numAdvantageCols
)

// AdvantageSchema is the Arrow schema of advantage batches. Column names equal AdvantageRow's
// JSON names; predicted and executed are nullable (null ⇔ the OK flag is false); every other
// column is non-nullable. Strings are plain utf8 (not large_string, not dictionary), so pyarrow
// readers see exactly these types. The schema metadata carries ArrowSchemaKey=SchemaAdvantages.
var AdvantageSchema = arrow.NewSchema([]arrow.Field{
	colRunID:              {Name: "run_id", Type: arrow.BinaryTypes.String},
	colStream:             {Name: "stream", Type: arrow.BinaryTypes.String},
	colStep:               {Name: "step", Type: arrow.PrimitiveTypes.Int64},
	colGroupID:            {Name: "group_id", Type: arrow.BinaryTypes.String},
	colRolloutID:          {Name: "rollout_id", Type: arrow.BinaryTypes.String},
	colPolicyVersion:      {Name: "policy_version", Type: arrow.BinaryTypes.String},
	colSource:             {Name: "source", Type: arrow.BinaryTypes.String},
	colPredicted:          {Name: "predicted", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	colCalibrated:         {Name: "calibrated", Type: arrow.PrimitiveTypes.Float64},
	colExecuted:           {Name: "executed", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	colUsed:               {Name: "used", Type: arrow.PrimitiveTypes.Float64},
	colAdvantage:          {Name: "advantage", Type: arrow.PrimitiveTypes.Float64},
	colWeight:             {Name: "weight", Type: arrow.PrimitiveTypes.Float64},
	colMask:               {Name: "mask", Type: arrow.FixedWidthTypes.Boolean},
	colCalibrationVersion: {Name: "calibration_version", Type: arrow.PrimitiveTypes.Uint64},
}, metadataPtr(arrow.NewMetadata([]string{ArrowSchemaKey}, []string{SchemaAdvantages})))

func metadataPtr(m arrow.Metadata) *arrow.Metadata { return &m }

// ValidateAdvantages validates every row and the batch as a whole: no two rows for the same
// (run, step, group, rollout), which would double-count a rollout in the loss (ErrConflict).
func ValidateAdvantages(rows []AdvantageRow) error {
	type key struct {
		run   string
		step  int64
		group string
		id    string
	}
	seen := make(map[key]int, len(rows))
	for i := range rows {
		r := &rows[i]
		if err := r.Validate(); err != nil {
			return fmt.Errorf("advantages row %d: %w", i, err)
		}
		k := key{r.RunID, r.Step, r.GroupID, r.RolloutID}
		if j, dup := seen[k]; dup {
			return fmt.Errorf("advantages row %d: %w", i, &FieldError{
				Record: recordName("advantage", "run", r.RunID, "rollout", r.RolloutID),
				Field:  "rollout_id", Value: r.RolloutID,
				Reason: fmt.Sprintf("duplicate of row %d", j), Err: ErrConflict,
			})
		}
		seen[k] = i
	}
	return nil
}

// EncodeAdvantages validates rows (ValidateAdvantages) and encodes them as one Arrow IPC stream
// holding one record batch, rows in the given order (the correction consumer emits them in
// canonical order). Equal input gives equal bytes. Zero rows give a valid stream with an empty
// batch.
func EncodeAdvantages(rows []AdvantageRow) ([]byte, error) {
	if err := ValidateAdvantages(rows); err != nil {
		return nil, err
	}
	return encodeAdvantages(rows)
}

func encodeAdvantages(rows []AdvantageRow) ([]byte, error) {
	mem := memory.NewGoAllocator()
	b := array.NewRecordBuilder(mem, AdvantageSchema)
	defer b.Release()
	b.Reserve(len(rows))
	str := func(i int) *array.StringBuilder { return b.Field(i).(*array.StringBuilder) }
	f64 := func(i int) *array.Float64Builder { return b.Field(i).(*array.Float64Builder) }
	for i := range rows {
		r := &rows[i]
		str(colRunID).Append(r.RunID)
		str(colStream).Append(r.Stream)
		b.Field(colStep).(*array.Int64Builder).Append(r.Step)
		str(colGroupID).Append(r.GroupID)
		str(colRolloutID).Append(r.RolloutID)
		str(colPolicyVersion).Append(r.PolicyVersion)
		str(colSource).Append(string(r.Source))
		if r.PredictedOK {
			f64(colPredicted).Append(r.Predicted)
		} else {
			f64(colPredicted).AppendNull()
		}
		f64(colCalibrated).Append(r.Calibrated)
		if r.ExecutedOK {
			f64(colExecuted).Append(r.Executed)
		} else {
			f64(colExecuted).AppendNull()
		}
		f64(colUsed).Append(r.Used)
		f64(colAdvantage).Append(r.Advantage)
		f64(colWeight).Append(r.Weight)
		b.Field(colMask).(*array.BooleanBuilder).Append(r.Mask)
		b.Field(colCalibrationVersion).(*array.Uint64Builder).Append(r.CalibrationVersion)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(AdvantageSchema), ipc.WithAllocator(mem))
	if err := w.Write(rec); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("encode advantages: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encode advantages: %w", err)
	}
	return buf.Bytes(), nil
}

// DecodeAdvantages strictly decodes an Arrow IPC stream of advantage rows: the schema must carry
// ArrowSchemaKey=SchemaAdvantages (else ErrUnknownSchema) and the columns of AdvantageSchema by
// name, order and type (a non-nullable column may be declared nullable, as pyarrow does by
// default, but must hold no nulls); the stream holds one or more batches and nothing after its
// end; every row must validate (ValidateAdvantages). Corrupt input, including input that makes
// the Arrow reader panic, yields ErrMalformed.
func DecodeAdvantages(b []byte) (rows []AdvantageRow, err error) {
	if len(b) > MaxAdvantageBytes {
		return nil, fmt.Errorf("advantages: %d bytes exceeds the %d byte limit: %w", len(b), MaxAdvantageBytes, ErrTooLarge)
	}
	defer func() {
		if p := recover(); p != nil {
			rows, err = nil, malformed("arrow", fmt.Errorf("advantages: reader panic: %v", p))
		}
	}()
	end, err := arrowguard.Check(b)
	if err != nil {
		return nil, malformed("arrow", err)
	}
	if end < len(b) {
		return nil, malformed("arrow", fmt.Errorf("advantages: %d bytes after the end of the stream", len(b)-end))
	}
	limit := int64(len(b)) + 1
	rd, err := ipc.NewReader(bytes.NewReader(b), ipc.WithAllocator(memory.NewGoAllocator()),
		ipc.WithMetadataSizeLimit(limit), ipc.WithBodySizeLimit(limit))
	if err != nil {
		return nil, malformed("arrow", fmt.Errorf("advantages: %w", err))
	}
	defer rd.Release()
	if err := checkAdvantageSchema(rd.Schema()); err != nil {
		return nil, err
	}
	batches := 0
	for rd.Next() {
		batches++
		if rows, err = appendAdvantageRows(rows, rd.RecordBatch()); err != nil {
			return nil, err
		}
	}
	if err := rd.Err(); err != nil {
		return nil, malformed("arrow", fmt.Errorf("advantages: %w", err))
	}
	if batches == 0 {
		return nil, malformed("arrow", errors.New("advantages: stream holds no record batch"))
	}
	if err := ValidateAdvantages(rows); err != nil {
		return nil, err
	}
	return rows, nil
}

func checkAdvantageSchema(s *arrow.Schema) error {
	md := s.Metadata()
	got, ok := md.GetValue(ArrowSchemaKey)
	if !ok {
		return &FieldError{Record: "advantages", Field: "schema", Reason: fmt.Sprintf("Arrow schema metadata has no %q key (want %q)", ArrowSchemaKey, SchemaAdvantages), Err: ErrUnknownSchema}
	}
	if got != SchemaAdvantages {
		return &FieldError{Record: "advantages", Field: "schema", Value: got, Reason: fmt.Sprintf("want %q", SchemaAdvantages), Err: ErrUnknownSchema}
	}
	want := AdvantageSchema.Fields()
	have := s.Fields()
	if len(have) != len(want) {
		return malformed("arrow", fmt.Errorf("advantages: %d columns, want %d", len(have), len(want)))
	}
	for i, w := range want {
		h := have[i]
		switch {
		case h.Name != w.Name:
			return malformed("arrow", fmt.Errorf("advantages: column %d is %q, want %q", i, h.Name, w.Name))
		case !arrow.TypeEqual(h.Type, w.Type):
			return &FieldError{Record: "advantages", Field: w.Name, Value: h.Type.String(), Reason: "wrong Arrow type, want " + w.Type.String(), Err: ErrMalformed}
		case w.Nullable && !h.Nullable:
			return &FieldError{Record: "advantages", Field: w.Name, Reason: "column must be nullable", Err: ErrMalformed}
		}
	}
	return nil
}

func appendAdvantageRows(rows []AdvantageRow, rec arrow.RecordBatch) ([]AdvantageRow, error) {
	n := int(rec.NumRows())
	if rec.NumCols() != numAdvantageCols || n < 0 {
		return nil, malformed("arrow", fmt.Errorf("advantages: batch has %d columns and %d rows", rec.NumCols(), n))
	}
	for i := 0; i < numAdvantageCols; i++ {
		col := rec.Column(i)
		if col.Len() != n {
			return nil, malformed("arrow", fmt.Errorf("advantages: column %q has %d values for %d rows", AdvantageSchema.Field(i).Name, col.Len(), n))
		}
		if err := array.ValidateFull(col); err != nil {
			return nil, malformed("arrow", fmt.Errorf("advantages: column %q: %w", AdvantageSchema.Field(i).Name, err))
		}
		if !AdvantageSchema.Field(i).Nullable && col.NullN() > 0 {
			return nil, &FieldError{Record: "advantages", Field: AdvantageSchema.Field(i).Name, Reason: fmt.Sprintf("%d nulls in a non-nullable column", col.NullN()), Err: ErrMalformed}
		}
	}
	str := func(i int) *array.String { return rec.Column(i).(*array.String) }
	f64 := func(i int) *array.Float64 { return rec.Column(i).(*array.Float64) }
	var (
		step  = rec.Column(colStep).(*array.Int64)
		mask  = rec.Column(colMask).(*array.Boolean)
		calv  = rec.Column(colCalibrationVersion).(*array.Uint64)
		pred  = f64(colPredicted)
		exec  = f64(colExecuted)
		start = len(rows)
	)
	rows = append(rows, make([]AdvantageRow, n)...)
	for i := 0; i < n; i++ {
		r := &rows[start+i]
		r.RunID = str(colRunID).Value(i)
		r.Stream = str(colStream).Value(i)
		r.Step = step.Value(i)
		r.GroupID = str(colGroupID).Value(i)
		r.RolloutID = str(colRolloutID).Value(i)
		r.PolicyVersion = str(colPolicyVersion).Value(i)
		r.Source = Source(str(colSource).Value(i))
		if pred.IsValid(i) {
			r.Predicted, r.PredictedOK = pred.Value(i), true
		}
		r.Calibrated = f64(colCalibrated).Value(i)
		if exec.IsValid(i) {
			r.Executed, r.ExecutedOK = exec.Value(i), true
		}
		r.Used = f64(colUsed).Value(i)
		r.Advantage = f64(colAdvantage).Value(i)
		r.Weight = f64(colWeight).Value(i)
		r.Mask = mask.Value(i)
		r.CalibrationVersion = calv.Value(i)
	}
	return rows, nil
}

// ChunkAdvantages validates rows and splits them, in order, into Arrow IPC payloads of at most
// maxBytes each (every payload is a complete stream, decodable on its own). A step that fits
// whole is one payload; otherwise rows are packed by an estimate of their encoded size, each
// payload is verified, and any that came out too big is halved. A single row that cannot fit
// gives ErrTooLarge. Zero rows give one payload with an empty batch, so even an empty step
// announces itself.
func ChunkAdvantages(rows []AdvantageRow, maxBytes int) ([][]byte, error) {
	chunks, err := chunkAdvantages(rows, maxBytes)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(chunks))
	for i, c := range chunks {
		out[i] = c.payload
	}
	return out, nil
}

// advantageChunk is one encoded payload and the number of rows in it.
type advantageChunk struct {
	payload []byte
	rows    int
}

func chunkAdvantages(rows []AdvantageRow, maxBytes int) ([]advantageChunk, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("chunk advantages: maxBytes %d must be positive", maxBytes)
	}
	if err := ValidateAdvantages(rows); err != nil {
		return nil, err
	}
	empty, err := encodeAdvantages(nil)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		if len(empty) > maxBytes {
			return nil, fmt.Errorf("chunk advantages: an empty batch needs %d bytes, limit %d: %w", len(empty), maxBytes, ErrTooLarge)
		}
		return []advantageChunk{{empty, 0}}, nil
	}
	if whole, err := encodeAdvantages(rows); err != nil {
		return nil, err
	} else if len(whole) <= maxBytes {
		return []advantageChunk{{whole, len(rows)}}, nil
	}
	// Each of the 15 columns has up to three 8-byte-aligned buffers.
	overhead := len(empty) + numAdvantageCols*3*8
	var out []advantageChunk
	start, size := 0, overhead
	for i := range rows {
		est := estimateRowBytes(&rows[i])
		if i > start && size+est > maxBytes {
			if out, err = appendChunks(out, rows[start:i], maxBytes); err != nil {
				return nil, err
			}
			start, size = i, overhead
		}
		size += est
	}
	return appendChunks(out, rows[start:], maxBytes)
}

// estimateRowBytes: 8 fixed-width columns of 8 bytes, 7 string offsets of 4 bytes, the string
// bytes, and a byte for the mask and validity bits.
func estimateRowBytes(r *AdvantageRow) int {
	return 8*8 + 7*4 + 1 + len(r.RunID) + len(r.Stream) + len(r.GroupID) + len(r.RolloutID) + len(r.PolicyVersion) + len(r.Source)
}

func appendChunks(out []advantageChunk, rows []AdvantageRow, maxBytes int) ([]advantageChunk, error) {
	b, err := encodeAdvantages(rows)
	if err != nil {
		return nil, err
	}
	if len(b) <= maxBytes {
		return append(out, advantageChunk{b, len(rows)}), nil
	}
	if len(rows) == 1 {
		return nil, fmt.Errorf("chunk advantages: row for rollout %q needs %d bytes, limit %d: %w", rows[0].RolloutID, len(b), maxBytes, ErrTooLarge)
	}
	half := len(rows) / 2
	if out, err = appendChunks(out, rows[:half], maxBytes); err != nil {
		return nil, err
	}
	return appendChunks(out, rows[half:], maxBytes)
}
