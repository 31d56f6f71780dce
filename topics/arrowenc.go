package topics

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// arrowEOS is the Arrow IPC end-of-stream marker that closes every payload.
var arrowEOS = []byte{0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0}

// advCodec encodes advantage batches of one schema. A payload is an IPC stream of the schema
// message, one record batch and the end-of-stream marker. The schema message is the same for
// every payload, so it is made once, and the record builders and IPC writers, which cost more
// than filling 64 rows, are pooled and reused across steps.
type advCodec struct {
	schema *arrow.Schema
	v2     bool
	head   func() ([]byte, error) // the schema message
	empty  func() ([]byte, error) // the payload of zero rows
	pool   sync.Pool              // *advEncoder
}

// advEncoder is one reusable builder and writer; the writer has written its schema message once
// (started) and from then on writes only record batches to buf.
type advEncoder struct {
	b       *array.RecordBuilder
	w       *ipc.Writer
	buf     bytes.Buffer
	started bool
}

var advCodecs = map[string]*advCodec{
	SchemaAdvantages:   newAdvCodec(AdvantageSchema, false),
	SchemaAdvantagesV2: newAdvCodec(AdvantageSchemaV2, true),
}

// advCodecFor returns the codec of schema id (SchemaAdvantages for anything but v2, as
// arrowSchemaFor).
func advCodecFor(id string) *advCodec {
	if id == SchemaAdvantagesV2 {
		return advCodecs[SchemaAdvantagesV2]
	}
	return advCodecs[SchemaAdvantages]
}

func newAdvCodec(schema *arrow.Schema, v2 bool) *advCodec {
	c := &advCodec{schema: schema, v2: v2}
	c.head = sync.OnceValues(func() ([]byte, error) {
		// A stream without batches is the schema message and the end-of-stream marker.
		var buf bytes.Buffer
		w := ipc.NewWriter(&buf, ipc.WithSchema(schema), ipc.WithAllocator(memory.NewGoAllocator()))
		if err := w.Close(); err != nil {
			return nil, fmt.Errorf("encode advantages: schema message: %w", err)
		}
		b := buf.Bytes()
		if !bytes.HasSuffix(b, arrowEOS) {
			return nil, fmt.Errorf("encode advantages: an empty IPC stream does not end with the end-of-stream marker")
		}
		return b[:len(b)-len(arrowEOS)], nil
	})
	c.empty = sync.OnceValues(func() ([]byte, error) { return c.encode(nil) })
	return c
}

// encodeAdvantagesAs encodes rows with the columns of schema id (which must fit the rows).
func encodeAdvantagesAs(rows []AdvantageRow, id string) ([]byte, error) {
	return advCodecFor(id).encode(rows)
}

func (c *advCodec) encode(rows []AdvantageRow) ([]byte, error) {
	e, _ := c.pool.Get().(*advEncoder)
	if e == nil {
		e = c.newEncoder()
	}
	out, err := c.encodeWith(e, rows)
	if err != nil {
		// The writer may be failed for good; the encoder is dropped.
		return nil, err
	}
	c.pool.Put(e)
	return out, nil
}

// newEncoder returns an encoder whose builder and writer share one reuseAllocator.
func (c *advCodec) newEncoder() *advEncoder {
	mem := new(reuseAllocator)
	e := &advEncoder{b: array.NewRecordBuilder(mem, c.schema)}
	e.w = ipc.NewWriter(&e.buf, ipc.WithSchema(c.schema), ipc.WithAllocator(mem))
	return e
}

// encodeWith encodes rows with e, which the caller holds alone.
func (c *advCodec) encodeWith(e *advEncoder, rows []AdvantageRow) ([]byte, error) {
	head, err := c.head()
	if err != nil {
		return nil, err
	}
	c.fill(e.b, rows)
	rec := e.b.NewRecordBatch()
	e.buf.Reset()
	err = e.w.Write(rec)
	// Released before e is handed on: its buffers return to e's allocator.
	rec.Release()
	if err != nil {
		return nil, fmt.Errorf("encode advantages: %w", err)
	}
	batch := e.buf.Bytes()
	if !e.started {
		if !bytes.HasPrefix(batch, head) {
			return nil, fmt.Errorf("encode advantages: the IPC writer's schema message differs from the cached one")
		}
		batch, e.started = batch[len(head):], true
	}
	out := make([]byte, 0, len(head)+len(batch)+len(arrowEOS))
	return append(append(append(out, head...), batch...), arrowEOS...), nil
}

// fill appends rows to b, which must be empty.
func (c *advCodec) fill(b *array.RecordBuilder, rows []AdvantageRow) {
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
		if c.v2 {
			if r.StalenessOK {
				b.Field(colStaleness).(*array.Int64Builder).Append(r.Staleness)
			} else {
				b.Field(colStaleness).(*array.Int64Builder).AppendNull()
			}
			str(colMaskReason).Append(string(r.MaskReason))
		}
	}
}
