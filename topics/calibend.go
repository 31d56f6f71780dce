package topics

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// SchemaCalibrationEnd names the calibration topic's end-of-run records. When `wmrl correct`
// retires an ended run it writes one, keyed by the run id alone, in the transaction that seals
// the run's last step (or, when the last step was sealed before the end-of-run record arrived,
// in the next one), on the run's partition. A consumer rebuilding its state from the changelog
// then knows the run ended: it does not install the run's states and dead-letters its later
// records. After the ended-run retention every key of the run, this one included, is
// tombstoned, so compaction drops the run from the changelog.
const SchemaCalibrationEnd = "wmrl.calibration.end.v1"

// The reasons a run ends, on the changelog and in Redis (statestore.RunEnd).
const (
	EndReasonMarker = "marker" // an end request on the run-control topic (runs end, generate, close_run), relayed by correct
	EndReasonIdle   = "idle"   // wmrl correct --run-idle-timeout published the end-of-run record
)

// HeaderEndReason marks an end-of-run record on the steps topic that `wmrl correct` published
// itself (value EndReasonIdle); a relayed request carries none. `wmrl correct` honours it only
// on a record of a transactional batch (its own), and refuses an end request that carries it.
const HeaderEndReason = "wmrl-end-reason"

// HeaderEndRequest names, on an end-of-run record `wmrl correct` relayed onto the steps topic,
// the request it relays ("<topic>/<partition>/<offset>" of the run-control topic), for tracing.
const HeaderEndRequest = "wmrl-end-request"

// EndRequestID names an end-of-run request by where it lies on the run-control topic: the value
// of HeaderEndRequest, and the key under which `wmrl correct` records its verdict in Redis
// (statestore.EndVerdict), where `wmrl runs end` looks for it.
func EndRequestID(topic string, partition int32, offset int64) string {
	return fmt.Sprintf("%s/%d/%d", topic, partition, offset)
}

// endMagic opens an end record's value.
const endMagic = "WMRLCEN\x00"

// CalibrationEnd is a run's end as the calibration changelog records it.
type CalibrationEnd struct {
	RunID string
	// LastStep is the run's last step: its states are sealed up to it.
	LastStep int64
	// EndedAt is the end-of-run record's created_at: the ended-run retention counts from it.
	EndedAt time.Time
	// Reason is EndReasonMarker or EndReasonIdle.
	Reason string
}

// CalibrationEndKey is the key of run's end record: the run id alone, where a snapshot's key has
// one '/' and a window chunk's two.
func CalibrationEndKey(run string) []byte { return []byte(run) }

// IsCalibrationEnd reports whether a calibration topic record is an end record (by its key).
func IsCalibrationEnd(r *kgo.Record) bool { return !bytes.Contains(r.Key, []byte("/")) }

// Validate checks an end record.
func (e *CalibrationEnd) Validate() error {
	rec := recordName("calibration end", "run", e.RunID)
	if msg := checkID(e.RunID); msg != "" {
		return &FieldError{Record: rec, Field: "run_id", Value: e.RunID, Reason: msg}
	}
	if e.LastStep < 0 {
		return &FieldError{Record: rec, Field: "last_step", Value: e.LastStep, Reason: "must be >= 0"}
	}
	if e.Reason != EndReasonMarker && e.Reason != EndReasonIdle {
		return &FieldError{Record: rec, Field: "reason", Value: e.Reason, Reason: fmt.Sprintf("want %q or %q", EndReasonMarker, EndReasonIdle)}
	}
	return nil
}

// EncodeCalibrationEnd validates e and returns the value of its record.
//
// Layout (little endian): magic[8] | run_id (u16 length + bytes) | last_step i64 |
// ended_at unix milliseconds i64 | reason (u16 length + bytes). Nothing may follow.
func EncodeCalibrationEnd(e CalibrationEnd) ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	b := make([]byte, 0, len(endMagic)+2+len(e.RunID)+16+2+len(e.Reason))
	b = append(b, endMagic...)
	b = append(le.AppendUint16(b, uint16(len(e.RunID))), e.RunID...)
	b = le.AppendUint64(b, uint64(e.LastStep))
	b = le.AppendUint64(b, uint64(e.EndedAt.UnixMilli()))
	return append(le.AppendUint16(b, uint16(len(e.Reason))), e.Reason...), nil
}

// DecodeCalibrationEnd parses an end record's value; the caller checks that its key is
// CalibrationEndKey(RunID).
func DecodeCalibrationEnd(b []byte) (CalibrationEnd, error) {
	if !bytes.HasPrefix(b, []byte(endMagic)) {
		return CalibrationEnd{}, &FieldError{Record: "calibration end", Field: "value", Value: len(b), Reason: "not a calibration end record"}
	}
	le := binary.LittleEndian
	r := b[len(endMagic):]
	str := func() (string, bool) {
		if len(r) < 2 || int(le.Uint16(r)) > len(r)-2 {
			return "", false
		}
		n := int(le.Uint16(r))
		s := string(r[2 : 2+n])
		r = r[2+n:]
		return s, true
	}
	var e CalibrationEnd
	var ok bool
	if e.RunID, ok = str(); !ok || len(r) < 16 {
		return CalibrationEnd{}, malformed("binary", fmt.Errorf("calibration end: value ends early"))
	}
	e.LastStep = int64(le.Uint64(r))
	e.EndedAt = time.UnixMilli(int64(le.Uint64(r[8:]))).UTC()
	r = r[16:]
	if e.Reason, ok = str(); !ok {
		return CalibrationEnd{}, malformed("binary", fmt.Errorf("calibration end: value ends early"))
	}
	if len(r) > 0 {
		return CalibrationEnd{}, malformed("binary", fmt.Errorf("calibration end: %d bytes after the reason", len(r)))
	}
	if err := e.Validate(); err != nil {
		return CalibrationEnd{}, err
	}
	return e, nil
}

// CalibrationEndRecord returns e as a record for the calibration topic (partition unset: the
// writer puts it on the run's partition).
func (n Names) CalibrationEndRecord(e CalibrationEnd) (*kgo.Record, error) {
	b, ct, err := n.frameMessage(n.Calibration(), indexCalibrationEnd, func() ([]byte, error) { return EncodeCalibrationEndProto(e) })
	if b == nil && err == nil {
		b, err = EncodeCalibrationEnd(e)
	}
	if err != nil {
		return nil, err
	}
	r := &kgo.Record{Topic: n.Calibration(), Key: CalibrationEndKey(e.RunID), Value: b,
		Headers: Headers(SchemaCalibrationEnd, e.RunID, e.LastStep)}
	setContentType(r, ct)
	return r, nil
}

// CalibrationTombstone returns the tombstone (nil value) of a calibration topic key: compaction
// drops the key once delete.retention.ms has passed after it.
func (n Names) CalibrationTombstone(key []byte) *kgo.Record {
	return &kgo.Record{Topic: n.Calibration(), Key: key}
}
