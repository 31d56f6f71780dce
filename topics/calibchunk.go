package topics

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// SchemaCalibrationChunk names the calibration topic's window chunk records. A (run, stream)'s
// snapshot (key run_id/stream) carries the state's head; its window pairs travel in chunk records
// keyed run_id/stream/slot, so compaction keeps one record per slot and a sealed step rewrites only
// the chunks its new pairs fell into (see correction.ChunkPairs).
const SchemaCalibrationChunk = "wmrl.calibration.chunk.v1"

// chunkMagic opens a chunk record's value.
const chunkMagic = "WMRLCCK\x00"

// CalibrationChunk is one window chunk of a (run, stream)'s correction state: the pairs with
// absolute index in [First, First+len(Pairs)/16), all within chunk number Chunk.
type CalibrationChunk struct {
	RunID  string
	Stream string
	Slot   int
	// Step is the sealed step whose transaction wrote the chunk.
	Step  int64
	Chunk uint64
	First uint64
	// Pairs are x, y float64 bits, little endian, oldest first (correction.State.AppendWindow).
	Pairs []byte
}

// CalibrationChunkKey is the key of a chunk slot, "run_id/stream/slot".
func CalibrationChunkKey(run, stream string, slot int) []byte {
	return []byte(run + "/" + stream + "/" + strconv.Itoa(slot))
}

// IsCalibrationChunk reports whether a calibration topic record is a window chunk (by its key,
// which has two '/' where a snapshot's has one), so readers of snapshots can skip it.
func IsCalibrationChunk(r *kgo.Record) bool { return bytes.Count(r.Key, []byte("/")) == 2 }

// EncodeCalibrationChunk returns the value of a chunk record.
//
// Layout (little endian): magic[8] | slot u32 | step i64 | chunk u64 | first u64 | pairs.
func EncodeCalibrationChunk(c CalibrationChunk) []byte {
	le := binary.LittleEndian
	b := make([]byte, 0, len(chunkMagic)+28+len(c.Pairs))
	b = append(b, chunkMagic...)
	b = le.AppendUint32(b, uint32(c.Slot))
	b = le.AppendUint64(b, uint64(c.Step))
	b = le.AppendUint64(b, c.Chunk)
	b = le.AppendUint64(b, c.First)
	return append(b, c.Pairs...)
}

// DecodeCalibrationChunk parses a chunk record's key and value; chunkPairs is the chunk size the
// pairs must fit in (correction.ChunkPairs).
func DecodeCalibrationChunk(key, value []byte, chunkPairs uint64) (CalibrationChunk, error) {
	return decodeKeyedChunk(key, value, chunkPairs, DecodeCalibrationChunkValue)
}

// decodeKeyedChunk checks a chunk record's key and decodes its value with decode (the binary
// layout or the Protobuf message).
func decodeKeyedChunk(key, value []byte, chunkPairs uint64, decode func([]byte, uint64) (CalibrationChunk, error)) (CalibrationChunk, error) {
	bad := func(field string, v any, reason string) (CalibrationChunk, error) {
		return CalibrationChunk{}, &FieldError{Record: "calibration chunk " + string(key), Field: field, Value: v, Reason: reason}
	}
	parts := strings.Split(string(key), "/")
	if len(parts) != 3 {
		return bad("key", string(key), "want run_id/stream/slot")
	}
	if msg := checkID(parts[0]); msg != "" {
		return bad("run_id", parts[0], msg)
	}
	if msg := checkID(parts[1]); msg != "" {
		return bad("stream", parts[1], msg)
	}
	slot, err := strconv.Atoi(parts[2])
	if err != nil || slot < 0 {
		return bad("slot", parts[2], "want a non-negative integer")
	}
	c, err := decode(value, chunkPairs)
	if err != nil {
		return CalibrationChunk{}, fmt.Errorf("calibration chunk %s: %w", key, err)
	}
	if c.Slot != slot {
		return bad("slot", c.Slot, fmt.Sprintf("value names another slot than the key (%d)", slot))
	}
	c.RunID, c.Stream = parts[0], parts[1]
	return c, nil
}

// DecodeCalibrationChunkValue parses a chunk value without its key (Redis stores chunks by
// number under a key of their own); RunID and Stream stay empty.
func DecodeCalibrationChunkValue(value []byte, chunkPairs uint64) (CalibrationChunk, error) {
	bad := func(field string, v any, reason string) (CalibrationChunk, error) {
		return CalibrationChunk{}, &FieldError{Record: "calibration chunk", Field: field, Value: v, Reason: reason}
	}
	const fixed = len(chunkMagic) + 28
	if len(value) < fixed || !bytes.HasPrefix(value, []byte(chunkMagic)) {
		return bad("value", len(value), "not a calibration chunk")
	}
	le := binary.LittleEndian
	c := CalibrationChunk{Slot: int(le.Uint32(value[8:])),
		Step: int64(le.Uint64(value[12:])), Chunk: le.Uint64(value[20:]), First: le.Uint64(value[28:]),
		Pairs: value[fixed:]}
	return checkChunk(c, chunkPairs)
}

// checkChunk validates a decoded chunk value, whichever format carried it.
func checkChunk(c CalibrationChunk, chunkPairs uint64) (CalibrationChunk, error) {
	bad := func(field string, v any, reason string) (CalibrationChunk, error) {
		return CalibrationChunk{}, &FieldError{Record: "calibration chunk", Field: field, Value: v, Reason: reason}
	}
	n := uint64(len(c.Pairs) / 16)
	if chunkPairs == 0 || c.Chunk >= math.MaxUint64/chunkPairs-1 {
		return bad("chunk", c.Chunk, "out of range")
	}
	if len(c.Pairs)%16 != 0 || c.First < c.Chunk*chunkPairs || c.First+n > (c.Chunk+1)*chunkPairs {
		return bad("pairs", len(c.Pairs), fmt.Sprintf("pairs from %d do not fit chunk %d", c.First, c.Chunk))
	}
	if c.Step < 0 {
		return bad("step", c.Step, "must be >= 0")
	}
	return c, nil
}

// CalibrationChunkRecord returns c as a record for the calibration topic.
func (n Names) CalibrationChunkRecord(c CalibrationChunk) (*kgo.Record, error) {
	return n.EncodedCalibrationChunkRecord(c, EncodeCalibrationChunk(c))
}

// EncodedCalibrationChunkRecord is CalibrationChunkRecord with the binary value already encoded
// (EncodeCalibrationChunk(c)), for a writer that stores the same bytes elsewhere too (the Redis
// copy, which keeps the binary layout). When n frames the calibration topic (Names.Framed) the
// record carries c as a framed wmrl.v1.CalibrationChunk instead, and value is not used.
func (n Names) EncodedCalibrationChunkRecord(c CalibrationChunk, value []byte) (*kgo.Record, error) {
	v, ct, err := n.frameMessage(n.Calibration(), indexCalibrationChunk, func() ([]byte, error) { return EncodeCalibrationChunkProto(c) })
	if err != nil {
		return nil, fmt.Errorf("calibration chunk %s/%s/%d: %w", c.RunID, c.Stream, c.Slot, err)
	}
	if v != nil {
		value = v
	}
	r := &kgo.Record{Topic: n.Calibration(), Key: CalibrationChunkKey(c.RunID, c.Stream, c.Slot),
		Value: value, Headers: Headers(SchemaCalibrationChunk, c.RunID, c.Step, Header(HeaderStream, c.Stream))}
	setContentType(r, ct)
	return r, nil
}
