package topics

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestCalibrationChunkRoundTrip(t *testing.T) {
	pairs := make([]byte, 16*3)
	for i := range 6 {
		binary.LittleEndian.PutUint64(pairs[8*i:], uint64(i+1))
	}
	c := CalibrationChunk{RunID: "r1", Stream: "mle", Slot: 5, Step: 42, Chunk: 44, First: 44*128 + 10, Pairs: pairs}
	r, err := NewNames("p.").CalibrationChunkRecord(c)
	if err != nil {
		t.Fatal(err)
	}
	if !IsCalibrationChunk(r) || IsCalibrationChunk(&kgo.Record{Key: CalibrationKey("r1", "mle")}) {
		t.Fatal("IsCalibrationChunk does not tell chunks from snapshots")
	}
	if s, _ := HeaderValue(r.Headers, HeaderSchema); s != SchemaCalibrationChunk {
		t.Fatalf("schema header %q", s)
	}
	got, err := DecodeCalibrationChunk(r.Key, r.Value, 128)
	if err != nil {
		t.Fatal(err)
	}
	if got.RunID != c.RunID || got.Stream != c.Stream || got.Slot != c.Slot || got.Step != c.Step ||
		got.Chunk != c.Chunk || got.First != c.First || !bytes.Equal(got.Pairs, c.Pairs) {
		t.Fatalf("round trip: %+v, want %+v", got, c)
	}
	mut := func(f func(b []byte)) []byte { b := bytes.Clone(r.Value); f(b); return b }
	for _, tc := range []struct {
		name       string
		key, value []byte
	}{
		{"snapshot key", CalibrationKey("r1", "mle"), r.Value},
		{"bad slot", []byte("r1/mle/x"), r.Value},
		{"bad run id", []byte("r 1/mle/5"), r.Value},
		{"slot differs from the key", []byte("r1/mle/6"), r.Value},
		{"not a chunk", r.Key, []byte(`{"schema":"wmrl.calibration.v1"}`)},
		{"half a pair", r.Key, r.Value[:len(r.Value)-8]},
		{"pairs before the chunk", r.Key, mut(func(b []byte) { binary.LittleEndian.PutUint64(b[28:], 43*128) })},
		{"pairs past the chunk", r.Key, mut(func(b []byte) { binary.LittleEndian.PutUint64(b[28:], 45*128-2) })},
		{"negative step", r.Key, mut(func(b []byte) { binary.LittleEndian.PutUint64(b[12:], 1<<63) })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fe *FieldError
			if _, err := DecodeCalibrationChunk(tc.key, tc.value, 128); !errors.As(err, &fe) {
				t.Fatalf("err %v, want a *FieldError", err)
			}
		})
	}
}
