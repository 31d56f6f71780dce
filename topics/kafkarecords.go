package topics

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// RolloutRecord encodes r as a record for the rollouts topic, keyed by run_id.
func (n Names) RolloutRecord(r Rollout) (*kgo.Record, error) {
	b, err := n.Codec().EncodeRollout(r)
	if err != nil {
		return nil, err
	}
	return n.keyedRecord(n.Rollouts(), SchemaRollout, r.RunID, r.Step, r.Stream, b)
}

// StepRecord encodes m as a record for the steps topic, keyed by run_id.
func (n Names) StepRecord(m StepManifest) (*kgo.Record, error) {
	b, err := n.Codec().EncodeStep(m)
	if err != nil {
		return nil, err
	}
	return n.keyedRecord(n.Steps(), SchemaStep, m.RunID, m.Step, "", b)
}

// EndRequestRecord encodes the end-of-run record of run (EndOfRunMarker) as a request on the
// run-control topic (Runs), keyed by run_id. `wmrl correct` relays a valid request onto the run's
// steps partition inside its transaction; only a relayed end ends the run (consumers/correct
// runend.go), so only principals that may write the run-control topic can end runs.
func (n Names) EndRequestRecord(run string, lastStep int64, at time.Time) (*kgo.Record, error) {
	m := EndOfRunMarker(run, lastStep, at)
	b, err := n.Codec().EncodeStep(m)
	if err != nil {
		return nil, err
	}
	return n.keyedRecord(n.Runs(), SchemaStep, m.RunID, m.Step, "", b)
}

// PredictedRecord encodes p as a record for the predicted-rewards topic, keyed by run_id.
func (n Names) PredictedRecord(p PredictedReward) (*kgo.Record, error) {
	b, err := n.Codec().EncodePredicted(p)
	if err != nil {
		return nil, err
	}
	return n.keyedRecord(n.Predicted(), SchemaPredicted, p.RunID, p.Step, p.Stream, b)
}

// ExecutedRecord encodes e as a record for the executed-rewards topic, keyed by run_id.
func (n Names) ExecutedRecord(e ExecutedReward) (*kgo.Record, error) {
	b, err := n.Codec().EncodeExecuted(e)
	if err != nil {
		return nil, err
	}
	return n.keyedRecord(n.Executed(), SchemaExecuted, e.RunID, e.Step, e.Stream, b)
}

// CalibrationRecord encodes s as a record for the compacted calibration topic, keyed by
// CalibrationKey(run, stream) so compaction keeps the latest snapshot of each stream.
// When n frames the calibration topic (Names.Framed) the value is a framed
// wmrl.v1.CalibrationSnapshot, else the binary layout (EncodeCalibration).
func (n Names) CalibrationRecord(s CalibrationSnapshot) (*kgo.Record, error) {
	b, ct, err := n.frameMessage(n.Calibration(), indexCalibrationSnapshot, func() ([]byte, error) { return EncodeCalibrationProto(s) })
	if b == nil && err == nil {
		b, err = EncodeCalibration(s)
	}
	if err != nil {
		return nil, err
	}
	r := keyedRecord(n.Calibration(), SchemaCalibration, s.RunID, s.Step, s.Stream, b)
	r.Key = CalibrationKey(s.RunID, s.Stream)
	setContentType(r, ct)
	return r, nil
}

// keyedRecord is a record keyed by run with the standard headers (and wmrl-stream if stream is set).
func keyedRecord(topic, schema, run string, step int64, stream string, value []byte) *kgo.Record {
	var extra []kgo.RecordHeader
	if stream != "" {
		extra = append(extra, Header(HeaderStream, stream))
	}
	return &kgo.Record{Topic: topic, Key: []byte(run), Value: value, Headers: Headers(schema, run, step, extra...)}
}

// keyedRecord is keyedRecord for a record topic in n's format: a binary record's content-type
// says so, since its bytes do not, and says whether it is Confluent-framed (Names.Framed).
func (n Names) keyedRecord(topic, schema, run string, step int64, stream string, value []byte) (*kgo.Record, error) {
	ct := ""
	switch {
	case n.Framed(topic):
		v, err := n.Registry.FrameValue(topic, value)
		if err != nil {
			return nil, err
		}
		value, ct = v, ContentTypeProtobufConfluent
	case n.Codec().binary():
		ct = ContentTypeProtobuf
	}
	r := keyedRecord(topic, schema, run, step, stream, value)
	setContentType(r, ct)
	return r, nil
}

// AdvantageRecords chunks one step's rows (ChunkAdvantages with maxBytes, e.g. DefaultChunkBytes)
// into records for the advantages topic, keyed by run, with headers wmrl-chunk "i/n" and
// wmrl-rows. Every row must belong to run and step (ErrConflict otherwise). A non-empty stream
// additionally requires every row to belong to it and sets wmrl-stream; an empty stream allows a
// step's rows from several streams in one set of chunks. Produce the records in order, in one
// transaction, so a trainer sees all n chunks of a step or none. When n frames the advantages
// topic (Names.Framed) each chunk's Arrow bytes travel in a framed wmrl.v1.AdvantageBatch.
func (n Names) AdvantageRecords(run, stream string, step int64, rows []AdvantageRow, maxBytes int) ([]*kgo.Record, error) {
	if msg := checkID(run); msg != "" {
		return nil, &FieldError{Record: "advantages", Field: "run_id", Value: run, Reason: msg}
	}
	if stream != "" {
		if msg := checkID(stream); msg != "" {
			return nil, &FieldError{Record: "advantages", Field: "stream", Value: stream, Reason: msg}
		}
	}
	if step < 0 {
		return nil, &FieldError{Record: "advantages", Field: "step", Value: step, Reason: "must be >= 0"}
	}
	for i := range rows {
		r := &rows[i]
		var field string
		var value any
		switch {
		case r.RunID != run:
			field, value = "run_id", r.RunID
		case r.Step != step:
			field, value = "step", r.Step
		case stream != "" && r.Stream != stream:
			field, value = "stream", r.Stream
		default:
			continue
		}
		return nil, fmt.Errorf("advantages row %d: %w", i, &FieldError{
			Record: recordName("advantage", "run", r.RunID, "rollout", r.RolloutID),
			Field:  field, Value: value,
			Reason: fmt.Sprintf("batch is for run=%s stream=%q step=%d", run, stream, step), Err: ErrConflict,
		})
	}
	chunks, err := chunkAdvantages(rows, maxBytes)
	if err != nil {
		return nil, err
	}
	out := make([]*kgo.Record, len(chunks))
	for i, c := range chunks {
		var extra []kgo.RecordHeader
		if stream != "" {
			extra = append(extra, Header(HeaderStream, stream))
		}
		extra = append(extra, Header(HeaderChunk, FormatChunk(i, len(chunks))), Header(HeaderRows, strconv.Itoa(c.rows)))
		v, ct, err := n.frameMessage(n.Advantages(), indexAdvantageBatch, func() ([]byte, error) { return EncodeAdvantagesProto(c.payload, c.schema) })
		if err != nil {
			return nil, fmt.Errorf("advantages run %s step %d chunk %d: %w", run, step, i, err)
		}
		if v == nil {
			v = c.payload
		}
		out[i] = &kgo.Record{Topic: n.Advantages(), Key: []byte(run), Value: v, Headers: Headers(c.schema, run, step, extra...)}
		setContentType(out[i], ct)
	}
	return out, nil
}

// CalibrationKey is the calibration topic's key, "run_id/stream". Ids never contain '/'
// (ValidID), so the key splits unambiguously.
func CalibrationKey(run, stream string) []byte {
	return []byte(run + "/" + stream)
}

// ParseCalibrationKey splits a calibration key into run and stream, both valid ids.
func ParseCalibrationKey(k []byte) (run, stream string, err error) {
	run, stream, ok := strings.Cut(string(k), "/")
	if !ok {
		return "", "", &FieldError{Record: "calibration key", Field: "key", Value: string(k), Reason: "want run_id/stream"}
	}
	if msg := checkID(run); msg != "" {
		return "", "", &FieldError{Record: "calibration key", Field: "run_id", Value: run, Reason: msg}
	}
	if msg := checkID(stream); msg != "" {
		return "", "", &FieldError{Record: "calibration key", Field: "stream", Value: stream, Reason: msg}
	}
	return run, stream, nil
}
