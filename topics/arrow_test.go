package topics

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func TestAdvantagesRoundTrip(t *testing.T) {
	for _, rows := range [][]AdvantageRow{sampleAdvantages(), sampleAdvantages()[:1], nil} {
		b, err := EncodeAdvantages(rows)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeAdvantages(b)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) == 0 && len(got) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, rows) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, rows)
		}
	}
}

func TestAdvantagesDeterministic(t *testing.T) {
	a, err := EncodeAdvantages(sampleAdvantages())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		b, err := EncodeAdvantages(sampleAdvantages())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Fatal("equal rows encoded to different bytes")
		}
	}
	// Re-encoding decoded rows gives the same bytes too.
	rows, err := DecodeAdvantages(a)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := EncodeAdvantages(rows)
	if !bytes.Equal(a, b) {
		t.Fatal("decode/encode changed the bytes")
	}
}

func TestAdvantagesNulls(t *testing.T) {
	rows := sampleAdvantages()
	b, _ := EncodeAdvantages(rows)
	rd, err := ipc.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Release()
	if !rd.Next() {
		t.Fatal("no batch")
	}
	rec := rd.RecordBatch()
	pred, exec := rec.Column(colPredicted), rec.Column(colExecuted)
	for i, r := range rows {
		if pred.IsNull(i) == r.PredictedOK || exec.IsNull(i) == r.ExecutedOK {
			t.Errorf("row %d: validity does not follow the OK flags", i)
		}
	}
	if v, _ := rd.Schema().Metadata().GetValue(ArrowSchemaKey); v != SchemaAdvantages {
		t.Errorf("schema metadata %q", v)
	}
}

// encodeWith writes rows under an arbitrary schema, for hostile-producer tests.
func encodeWith(t *testing.T, schema *arrow.Schema, build func(*array.RecordBuilder)) []byte {
	t.Helper()
	b := array.NewRecordBuilder(memory.NewGoAllocator(), schema)
	defer b.Release()
	build(b)
	rec := b.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(schema))
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// fillRow appends one valid row to every column of a builder over AdvantageSchema's fields.
func fillRow(b *array.RecordBuilder, nullAt int) {
	for i, f := range b.Schema().Fields() {
		fb := b.Field(i)
		if i == nullAt {
			fb.AppendNull()
			continue
		}
		switch x := fb.(type) {
		case *array.StringBuilder:
			v := "x1"
			if f.Name == "source" {
				v = string(SourceWorldModel)
			}
			x.Append(v)
		case *array.LargeStringBuilder:
			x.Append("x1")
		case *array.Int64Builder:
			x.Append(1)
		case *array.Float64Builder:
			x.Append(0.5)
		case *array.BooleanBuilder:
			x.Append(f.Name == "mask") // an unmasked row
		case *array.Uint64Builder:
			x.Append(1)
		default:
			panic(fmt.Sprintf("builder %T", fb))
		}
	}
}

func withFields(mod func([]arrow.Field) []arrow.Field, md *arrow.Metadata) *arrow.Schema {
	fs := append([]arrow.Field(nil), AdvantageSchema.Fields()...)
	fs = mod(fs)
	if md == nil {
		m := AdvantageSchema.Metadata()
		md = &m
	}
	return arrow.NewSchema(fs, md)
}

func TestDecodeAdvantagesStrict(t *testing.T) {
	same := func(fs []arrow.Field) []arrow.Field { return fs }
	allNullable := func(fs []arrow.Field) []arrow.Field {
		for i := range fs {
			fs[i].Nullable = true
		}
		return fs
	}
	v3 := arrow.NewMetadata([]string{ArrowSchemaKey}, []string{"wmrl.advantages.v3"})
	v2 := arrow.NewMetadata([]string{ArrowSchemaKey}, []string{SchemaAdvantagesV2})
	none := arrow.NewMetadata(nil, nil)
	tests := []struct {
		name   string
		schema *arrow.Schema
		nullAt int
		reason string
	}{
		{"valid", AdvantageSchema, -1, ""},
		{"pyarrow-style nullable columns", withFields(allNullable, nil), -1, ""},
		{"null in non-nullable column", withFields(allNullable, nil), colRolloutID, "invalid-field:rollout_id"},
		{"null executed is fine", AdvantageSchema, colExecuted, ""},
		{"null predicted on a world_model row", AdvantageSchema, colPredicted, "invalid-field:predicted_ok"},
		{"unknown version", withFields(same, &v3), -1, "unknown-schema"},
		{"v1 columns labelled v2", withFields(same, &v2), -1, "malformed-arrow"},
		{"no metadata", withFields(same, &none), -1, "unknown-schema"},
		{"renamed column", withFields(func(fs []arrow.Field) []arrow.Field { fs[colWeight].Name = "w"; return fs }, nil), -1, "malformed-arrow"},
		{"missing column", withFields(func(fs []arrow.Field) []arrow.Field { return fs[:len(fs)-1] }, nil), -1, "malformed-arrow"},
		{"large_string", withFields(func(fs []arrow.Field) []arrow.Field { fs[colRunID].Type = arrow.BinaryTypes.LargeString; return fs }, nil), -1, "invalid-field:run_id"},
		{"non-nullable predicted", withFields(func(fs []arrow.Field) []arrow.Field { fs[colPredicted].Nullable = false; return fs }, nil), -1, "invalid-field:predicted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := encodeWith(t, tt.schema, func(b *array.RecordBuilder) { fillRow(b, tt.nullAt) })
			_, err := DecodeAdvantages(b)
			if got := Reason(err); got != tt.reason {
				t.Fatalf("Reason = %q, want %q (err %v)", got, tt.reason, err)
			}
		})
	}
}

func TestDecodeAdvantagesCorrupt(t *testing.T) {
	good, _ := EncodeAdvantages(sampleAdvantages())
	cases := map[string][]byte{
		"empty":     nil,
		"garbage":   []byte("not arrow at all"),
		"truncated": good[:len(good)/2],
		"trailing":  append(append([]byte(nil), good...), 1, 2, 3),
		"json":      []byte(`{"schema":"wmrl.advantages.v1"}`),
	}
	// Flip bits in every byte; none may panic or exhaust memory (arrow-go alone would try to
	// allocate hundreds of GB for some), each either fails with a classified error or decodes.
	for i := range good {
		for _, x := range []byte{0x01, 0x80, 0xFF} {
			c := append([]byte(nil), good...)
			c[i] ^= x
			cases[fmt.Sprintf("flip-%d-%x", i, x)] = c
		}
	}
	for name, b := range cases {
		rows, err := DecodeAdvantages(b)
		if err == nil {
			if _, eerr := EncodeAdvantages(rows); eerr != nil {
				t.Errorf("%s: decoded rows do not re-encode: %v", name, eerr)
			}
			continue
		}
		if Reason(err) == "error" {
			t.Errorf("%s: unclassified error %v", name, err)
		}
		if strings.HasPrefix(name, "flip") {
			continue
		}
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v is not ErrMalformed", name, err)
		}
	}
	if _, err := DecodeAdvantages(make([]byte, MaxAdvantageBytes+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized: %v", err)
	}
}

func TestDecodeAdvantagesRejectsInvalidRows(t *testing.T) {
	rows := sampleAdvantages()
	rows[2].Advantage = 0.5
	rows[2].Mask = false
	b, err := encodeAdvantagesAs(rows, AdvantageSchemaID(rows)) // bypass validation, as a foreign producer would
	if err != nil {
		t.Fatal(err)
	}
	_, err = DecodeAdvantages(b)
	if Reason(err) != "invalid-field:advantage" || !strings.Contains(err.Error(), "row 2") {
		t.Fatalf("got %v", err)
	}
}

func manyRows(n int) []AdvantageRow {
	rows := make([]AdvantageRow, n)
	for i := range rows {
		rows[i] = AdvantageRow{
			RunID: "run-0001", Stream: "mle", Step: 12, GroupID: fmt.Sprintf("g%03d", i/8),
			RolloutID: fmt.Sprintf("g%03d-r%d", i/8, i%8), PolicyVersion: "ckpt-12", Source: SourceWorldModel,
			Predicted: float64(i%8) / 8, PredictedOK: true, Calibrated: float64(i%8) / 9, Used: float64(i%8) / 9,
			Advantage: float64(i%8)/4 - 0.875, Weight: 1, Mask: true, CalibrationVersion: 7,
		}
	}
	return rows
}

func TestChunkAdvantages(t *testing.T) {
	rows := manyRows(500)
	whole, _ := EncodeAdvantages(rows)
	for _, max := range []int{len(whole) + 10, 16 << 10, 4 << 10, 2500} {
		chunks, err := ChunkAdvantages(rows, max)
		if err != nil {
			t.Fatalf("max %d: %v", max, err)
		}
		var got []AdvantageRow
		for i, c := range chunks {
			if len(c) > max {
				t.Errorf("max %d: chunk %d has %d bytes", max, i, len(c))
			}
			part, err := DecodeAdvantages(c)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, part...)
		}
		if !reflect.DeepEqual(got, rows) {
			t.Fatalf("max %d: chunks do not reassemble the rows", max)
		}
		if max > len(whole) && len(chunks) != 1 {
			t.Errorf("max %d: %d chunks for a payload that fits", max, len(chunks))
		}
		if max == 4<<10 && len(chunks) < len(whole)/(4<<10) {
			t.Errorf("suspiciously few chunks: %d", len(chunks))
		}
	}
	empty, _ := EncodeAdvantages(nil)
	if _, err := ChunkAdvantages(rows, len(empty)+50); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a row that cannot fit: %v", err)
	}
	if c, err := ChunkAdvantages(nil, 1<<20); err != nil || len(c) != 1 {
		t.Errorf("empty step: %d chunks, %v", len(c), err)
	}
	if _, err := ChunkAdvantages(rows, 0); err == nil {
		t.Error("maxBytes 0 accepted")
	}
}

func BenchmarkEncodeAdvantages(b *testing.B) {
	rows := manyRows(64)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeAdvantages(rows); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeAdvantages(b *testing.B) {
	p, err := EncodeAdvantages(manyRows(64))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeAdvantages(p); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDecodePyarrowStream reads a stream written by pyarrow (all columns declared nullable, as
// pyarrow does by default) from the golden rows: the framing guard and the schema check must
// accept real pyarrow output, not only our own writer's.
func TestDecodePyarrowStream(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "pyarrow", "advantages_nullable.arrows"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := DecodeAdvantages(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rows, sampleAdvantages()) {
		t.Fatalf("pyarrow stream decodes to\n%+v", rows)
	}
}

// BenchmarkChunkAdvantagesTwoStreams is one step of `wmrl bench correction` as the consumer
// encodes it: 8 groups of 8 rollouts, group g in stream g mod 2, rows in canonical order.
func BenchmarkChunkAdvantagesTwoStreams(b *testing.B) {
	rows := manyRows(64)
	for i := range rows {
		rows[i].Stream = fmt.Sprintf("stream%d", i/8%2)
	}
	SortRows(rows)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ChunkAdvantages(rows, DefaultChunkBytes); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkChunkAdvantages is the correction consumer's per-step encode: one step's rows (64, as
// in `wmrl bench correction`) chunked at DefaultChunkBytes.
func BenchmarkChunkAdvantages(b *testing.B) {
	rows := manyRows(64)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ChunkAdvantages(rows, DefaultChunkBytes); err != nil {
			b.Fatal(err)
		}
	}
}
