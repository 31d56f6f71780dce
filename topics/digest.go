package topics

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"math"
	"sort"
)

// SortRows puts advantage rows in canonical order: run, step, stream, group, rollout. Digests
// and replays compare rows in this order, so arrival order never matters.
func SortRows(rows []AdvantageRow) {
	sort.Slice(rows, func(i, j int) bool {
		a, b := &rows[i], &rows[j]
		if a.RunID != b.RunID {
			return a.RunID < b.RunID
		}
		if a.Step != b.Step {
			return a.Step < b.Step
		}
		if a.Stream != b.Stream {
			return a.Stream < b.Stream
		}
		if a.GroupID != b.GroupID {
			return a.GroupID < b.GroupID
		}
		return a.RolloutID < b.RolloutID
	})
}

// Digest is a running SHA-256 over advantage rows in canonical form. Each row is encoded as:
// strings as big-endian uint32 length plus UTF-8 bytes, integers as big-endian 64-bit, floats
// as the big-endian IEEE-754 bits (a value whose OK flag is false is encoded as 0), booleans as
// one byte; fields in this order: run_id, stream, step, group_id, rollout_id, policy_version,
// source, predicted, predicted_ok, calibrated, executed, executed_ok, used, advantage, weight,
// mask, calibration_version. The v2 fields follow only when set, each as a tag byte and its
// value: 0x01 and the staleness as a big-endian int64 when StalenessOK, then 0x02 and the mask
// reason as a string when it is not empty. Rows without them therefore digest exactly as before
// v2, and the form stays unambiguous because a row's first byte (the high byte of run_id's
// length, which is at most 128) is always 0. The form is simple on purpose: the Python client
// reproduces it with struct.pack.
type Digest struct {
	h    hash.Hash
	rows int
	buf  []byte
}

// Tags of the optional v2 fields in a row's digest form.
const (
	digestTagStaleness  = 0x01
	digestTagMaskReason = 0x02
)

// NewDigest starts an empty digest.
func NewDigest() *Digest { return &Digest{h: sha256.New()} }

// Add feeds rows, which must already be in canonical order (see SortRows).
func (d *Digest) Add(rows ...AdvantageRow) {
	for i := range rows {
		r := &rows[i]
		b := d.buf[:0]
		b = appendString(b, r.RunID)
		b = appendString(b, r.Stream)
		b = binary.BigEndian.AppendUint64(b, uint64(r.Step))
		b = appendString(b, r.GroupID)
		b = appendString(b, r.RolloutID)
		b = appendString(b, r.PolicyVersion)
		b = appendString(b, string(r.Source))
		b = appendFloat(b, r.Predicted, r.PredictedOK)
		b = appendBool(b, r.PredictedOK)
		b = appendFloat(b, r.Calibrated, true)
		b = appendFloat(b, r.Executed, r.ExecutedOK)
		b = appendBool(b, r.ExecutedOK)
		b = appendFloat(b, r.Used, true)
		b = appendFloat(b, r.Advantage, true)
		b = appendFloat(b, r.Weight, true)
		b = appendBool(b, r.Mask)
		b = binary.BigEndian.AppendUint64(b, r.CalibrationVersion)
		if r.StalenessOK {
			b = append(b, digestTagStaleness)
			b = binary.BigEndian.AppendUint64(b, uint64(r.Staleness))
		}
		if r.MaskReason != "" {
			b = append(b, digestTagMaskReason)
			b = appendString(b, string(r.MaskReason))
		}
		d.h.Write(b)
		d.buf = b
		d.rows++
	}
}

// Rows is the number of rows added.
func (d *Digest) Rows() int { return d.rows }

// Hex returns the hex SHA-256 of the rows added so far.
func (d *Digest) Hex() string { return hex.EncodeToString(d.h.Sum(nil)) }

// DigestRows sorts a copy of rows canonically and returns its hex digest.
func DigestRows(rows []AdvantageRow) string {
	sorted := append([]AdvantageRow(nil), rows...)
	SortRows(sorted)
	d := NewDigest()
	d.Add(sorted...)
	return d.Hex()
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func appendFloat(b []byte, v float64, ok bool) []byte {
	if !ok {
		v = 0
	}
	return binary.BigEndian.AppendUint64(b, math.Float64bits(v))
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}
