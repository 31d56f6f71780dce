package topics

import (
	"bytes"
	"cmp"
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

// Column indexes of AdvantageSchemaV2 beyond the v1 ones: a v2 batch is a v1 batch with two more
// columns at the end.
const (
	colStaleness = numAdvantageCols + iota
	colMaskReason
	numAdvantageColsV2
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

// AdvantageSchemaV2 is AdvantageSchema followed by staleness (int64, null ⇔ StalenessOK false)
// and mask_reason (utf8, "" for none), with ArrowSchemaKey=SchemaAdvantagesV2.
var AdvantageSchemaV2 = arrow.NewSchema(append(AdvantageSchema.Fields(),
	arrow.Field{Name: "staleness", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	arrow.Field{Name: "mask_reason", Type: arrow.BinaryTypes.String},
), metadataPtr(arrow.NewMetadata([]string{ArrowSchemaKey}, []string{SchemaAdvantagesV2})))

func metadataPtr(m arrow.Metadata) *arrow.Metadata { return &m }

// AdvantageSchemaID is the schema id rows are written with: SchemaAdvantagesV2 when some row
// uses a v2 column (AdvantageRow.UsesV2), else SchemaAdvantages, whose bytes are those of
// writers that predate v2.
func AdvantageSchemaID(rows []AdvantageRow) string {
	for i := range rows {
		if rows[i].UsesV2() {
			return SchemaAdvantagesV2
		}
	}
	return SchemaAdvantages
}

// IsAdvantageSchema reports whether id is an advantage batch schema this package reads.
func IsAdvantageSchema(id string) bool { return id == SchemaAdvantages || id == SchemaAdvantagesV2 }

func arrowSchemaFor(id string) *arrow.Schema {
	if id == SchemaAdvantagesV2 {
		return AdvantageSchemaV2
	}
	return AdvantageSchema
}

// ValidateAdvantages validates every row and the batch as a whole: no two rows for the same
// (run, step, group, rollout), which would double-count a rollout in the loss (ErrConflict).
func ValidateAdvantages(rows []AdvantageRow) error {
	type key struct {
		run   string
		step  int64
		group string
		id    string
	}
	for i := range rows {
		if err := rows[i].Validate(); err != nil {
			return fmt.Errorf("advantages row %d: %w", i, err)
		}
	}
	if distinctSorted(rows) {
		return nil
	}
	seen := make(map[key]int, len(rows))
	for i := range rows {
		r := &rows[i]
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

// distinctSorted reports, without allocating, that rows in strictly increasing canonical order
// (SortRows: run, step, stream, group, rollout; the consumer's order) hold no two rows for the
// same (run, step, group, rollout). Such a pair could only sit in two streams' segments of one
// (run, step), each segment sorted by (group, rollout), so merging every pair of them finds it.
// False means unknown: rows in another order, too many streams, or a duplicate (which
// ValidateAdvantages then names as before).
func distinctSorted(rows []AdvantageRow) bool {
	const maxStreams = 8
	var seg [maxStreams + 1]int // starts of the current (run, step)'s stream segments
	k := 0
	for i := range rows {
		if i > 0 {
			a, b := &rows[i-1], &rows[i]
			c := cmp.Or(cmp.Compare(a.RunID, b.RunID), cmp.Compare(a.Step, b.Step))
			if c > 0 || c == 0 && cmp.Or(cmp.Compare(a.Stream, b.Stream), cmp.Compare(a.GroupID, b.GroupID),
				cmp.Compare(a.RolloutID, b.RolloutID)) >= 0 {
				return false
			}
			if c != 0 {
				if !segmentsDisjoint(rows, seg[:k], i) {
					return false
				}
				k = 0
			}
			if c != 0 || a.Stream != b.Stream {
				if k == maxStreams {
					return false
				}
				seg[k] = i
				k++
			}
		} else {
			seg[0], k = 0, 1
		}
	}
	return segmentsDisjoint(rows, seg[:k], len(rows))
}

// segmentsDisjoint merges every pair of the segments starting at starts (the last ends at end),
// each sorted by (group, rollout) within one (run, step), and reports that no key is in two.
func segmentsDisjoint(rows []AdvantageRow, starts []int, end int) bool {
	bound := func(s int) int {
		if s+1 < len(starts) {
			return starts[s+1]
		}
		return end
	}
	for s := range starts {
		for t := s + 1; t < len(starts); t++ {
			i, iEnd, j, jEnd := starts[s], bound(s), starts[t], bound(t)
			for i < iEnd && j < jEnd {
				a, b := &rows[i], &rows[j]
				switch cmp.Or(cmp.Compare(a.GroupID, b.GroupID), cmp.Compare(a.RolloutID, b.RolloutID)) {
				case -1:
					i++
				case 1:
					j++
				default:
					return false
				}
			}
		}
	}
	return true
}

// EncodeAdvantages validates rows (ValidateAdvantages) and encodes them as one Arrow IPC stream
// holding one record batch, rows in the given order (the correction consumer emits them in
// canonical order), with the schema AdvantageSchemaID picks. Equal input gives equal bytes.
// Zero rows give a valid v1 stream with an empty batch.
func EncodeAdvantages(rows []AdvantageRow) ([]byte, error) {
	if err := ValidateAdvantages(rows); err != nil {
		return nil, err
	}
	return encodeAdvantagesAs(rows, AdvantageSchemaID(rows))
}

// EncodeAdvantagesAs is EncodeAdvantages with the schema chosen by the caller: id is
// SchemaAdvantagesV2, or SchemaAdvantages when no row uses a v2 column. It serves writers that
// keep one schema across several steps (a Parquet file).
func EncodeAdvantagesAs(rows []AdvantageRow, id string) ([]byte, error) {
	if err := ValidateAdvantages(rows); err != nil {
		return nil, err
	}
	if !IsAdvantageSchema(id) || (id == SchemaAdvantages && AdvantageSchemaID(rows) != id) {
		return nil, fmt.Errorf("encode advantages as %q: rows need %q: %w", id, AdvantageSchemaID(rows), ErrUnknownSchema)
	}
	return encodeAdvantagesAs(rows, id)
}

// ArrowSchemaFor returns the Arrow schema of an advantage schema id (AdvantageSchemaV2 for
// SchemaAdvantagesV2, else AdvantageSchema).
func ArrowSchemaFor(id string) *arrow.Schema { return arrowSchemaFor(id) }

// DecodeAdvantages strictly decodes an Arrow IPC stream of advantage rows: the schema must carry
// ArrowSchemaKey=SchemaAdvantages or SchemaAdvantagesV2 (else ErrUnknownSchema) and the columns
// of AdvantageSchema or AdvantageSchemaV2 respectively by name, order and type (a non-nullable column may be declared nullable, as pyarrow does by
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
	schema, err := checkAdvantageSchema(rd.Schema())
	if err != nil {
		return nil, err
	}
	batches := 0
	for rd.Next() {
		batches++
		if rows, err = appendAdvantageRows(rows, rd.RecordBatch(), schema); err != nil {
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

// checkAdvantageSchema returns the wmrl schema (AdvantageSchema or AdvantageSchemaV2) that s
// declares and matches.
func checkAdvantageSchema(s *arrow.Schema) (*arrow.Schema, error) {
	md := s.Metadata()
	got, ok := md.GetValue(ArrowSchemaKey)
	if !ok {
		return nil, &FieldError{Record: "advantages", Field: "schema", Reason: fmt.Sprintf("Arrow schema metadata has no %q key (want %q)", ArrowSchemaKey, SchemaAdvantages), Err: ErrUnknownSchema}
	}
	if !IsAdvantageSchema(got) {
		return nil, &FieldError{Record: "advantages", Field: "schema", Value: got, Reason: fmt.Sprintf("want %q or %q", SchemaAdvantages, SchemaAdvantagesV2), Err: ErrUnknownSchema}
	}
	schema := arrowSchemaFor(got)
	want := schema.Fields()
	have := s.Fields()
	if len(have) != len(want) {
		return nil, malformed("arrow", fmt.Errorf("advantages: %d columns, want %d for %s", len(have), len(want), got))
	}
	for i, w := range want {
		h := have[i]
		switch {
		case h.Name != w.Name:
			return nil, malformed("arrow", fmt.Errorf("advantages: column %d is %q, want %q", i, h.Name, w.Name))
		case !arrow.TypeEqual(h.Type, w.Type):
			return nil, &FieldError{Record: "advantages", Field: w.Name, Value: h.Type.String(), Reason: "wrong Arrow type, want " + w.Type.String(), Err: ErrMalformed}
		case w.Nullable && !h.Nullable:
			return nil, &FieldError{Record: "advantages", Field: w.Name, Reason: "column must be nullable", Err: ErrMalformed}
		}
	}
	return schema, nil
}

func appendAdvantageRows(rows []AdvantageRow, rec arrow.RecordBatch, schema *arrow.Schema) ([]AdvantageRow, error) {
	n := int(rec.NumRows())
	ncols := schema.NumFields()
	if int(rec.NumCols()) != ncols || n < 0 {
		return nil, malformed("arrow", fmt.Errorf("advantages: batch has %d columns and %d rows", rec.NumCols(), n))
	}
	for i := 0; i < ncols; i++ {
		col := rec.Column(i)
		if col.Len() != n {
			return nil, malformed("arrow", fmt.Errorf("advantages: column %q has %d values for %d rows", schema.Field(i).Name, col.Len(), n))
		}
		if err := array.ValidateFull(col); err != nil {
			return nil, malformed("arrow", fmt.Errorf("advantages: column %q: %w", schema.Field(i).Name, err))
		}
		if !schema.Field(i).Nullable && col.NullN() > 0 {
			return nil, &FieldError{Record: "advantages", Field: schema.Field(i).Name, Reason: fmt.Sprintf("%d nulls in a non-nullable column", col.NullN()), Err: ErrMalformed}
		}
	}
	var (
		stale  *array.Int64
		reason *array.String
	)
	if ncols == numAdvantageColsV2 {
		stale, reason = rec.Column(colStaleness).(*array.Int64), rec.Column(colMaskReason).(*array.String)
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
		if stale != nil {
			if stale.IsValid(i) {
				r.Staleness, r.StalenessOK = stale.Value(i), true
			}
			r.MaskReason = MaskReason(reason.Value(i))
		}
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

// advantageChunk is one encoded payload, the number of rows in it and its schema id.
type advantageChunk struct {
	payload []byte
	rows    int
	schema  string
}

func chunkAdvantages(rows []AdvantageRow, maxBytes int) ([]advantageChunk, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("chunk advantages: maxBytes %d must be positive", maxBytes)
	}
	if err := ValidateAdvantages(rows); err != nil {
		return nil, err
	}
	// One schema for the whole step, so every chunk of it has the same columns.
	id := AdvantageSchemaID(rows)
	empty, err := advCodecFor(id).empty()
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		if len(empty) > maxBytes {
			return nil, fmt.Errorf("chunk advantages: an empty batch needs %d bytes, limit %d: %w", len(empty), maxBytes, ErrTooLarge)
		}
		// A copy: the cached payload must not be handed out.
		return []advantageChunk{{bytes.Clone(empty), 0, id}}, nil
	}
	if whole, err := encodeAdvantagesAs(rows, id); err != nil {
		return nil, err
	} else if len(whole) <= maxBytes {
		return []advantageChunk{{whole, len(rows), id}}, nil
	}
	// Each column has up to three 8-byte-aligned buffers.
	overhead := len(empty) + arrowSchemaFor(id).NumFields()*3*8
	var out []advantageChunk
	start, size := 0, overhead
	for i := range rows {
		est := estimateRowBytes(&rows[i])
		if i > start && size+est > maxBytes {
			if out, err = appendChunks(out, rows[start:i], maxBytes, id); err != nil {
				return nil, err
			}
			start, size = i, overhead
		}
		size += est
	}
	return appendChunks(out, rows[start:], maxBytes, id)
}

// estimateRowBytes: 8 fixed-width columns of 8 bytes, 7 string offsets of 4 bytes, the string
// bytes, and a byte for the mask and validity bits; a v2 row adds staleness and mask_reason.
func estimateRowBytes(r *AdvantageRow) int {
	n := 8*8 + 7*4 + 1 + len(r.RunID) + len(r.Stream) + len(r.GroupID) + len(r.RolloutID) + len(r.PolicyVersion) + len(r.Source)
	if r.UsesV2() {
		n += 8 + 4 + len(r.MaskReason)
	}
	return n
}

func appendChunks(out []advantageChunk, rows []AdvantageRow, maxBytes int, id string) ([]advantageChunk, error) {
	b, err := encodeAdvantagesAs(rows, id)
	if err != nil {
		return nil, err
	}
	if len(b) <= maxBytes {
		return append(out, advantageChunk{b, len(rows), id}), nil
	}
	if len(rows) == 1 {
		return nil, fmt.Errorf("chunk advantages: row for rollout %q needs %d bytes, limit %d: %w", rows[0].RolloutID, len(b), maxBytes, ErrTooLarge)
	}
	half := len(rows) / 2
	if out, err = appendChunks(out, rows[:half], maxBytes, id); err != nil {
		return nil, err
	}
	return appendChunks(out, rows[half:], maxBytes, id)
}
