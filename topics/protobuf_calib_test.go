package topics

import (
	"errors"
	"reflect"
	"testing"
)

// TestProtoCalibrationMatchesBinary: a snapshot, a window chunk and an end record decode to the
// same values from Protobuf as from their binary layouts, the optional debias and trust gate
// blocks included.
func TestProtoCalibrationMatchesBinary(t *testing.T) {
	gated := sampleCalibrationDebias()
	gated.Gate = &TrustGate{Closed: true, Pairs: 108, Rho: 0.048, Lo: -0.14, Hi: 0.23}
	open := sampleCalibration()
	open.Gate = &TrustGate{Pairs: 40, Rho: 0.6, Lo: 0.36, Hi: 0.77}
	for _, s := range []CalibrationSnapshot{sampleCalibration(), sampleCalibrationDebias(), gated, open} {
		bin, err := EncodeCalibration(s)
		if err != nil {
			t.Fatal(err)
		}
		want, err := DecodeCalibration(bin)
		if err != nil {
			t.Fatal(err)
		}
		pb, err := EncodeCalibrationProto(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeCalibrationProto(pb)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("snapshot: protobuf %+v, %v\nbinary %+v", got, err, want)
		}
	}

	c := CalibrationChunk{Slot: 3, Step: 7, Chunk: 2, First: 2*64 + 5, Pairs: make([]byte, 16*4)}
	c.Pairs[0] = 1
	want, err := DecodeCalibrationChunkValue(EncodeCalibrationChunk(c), 64)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := EncodeCalibrationChunkProto(c)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeCalibrationChunkValueProto(pb, 64); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("chunk: protobuf %+v, %v\nbinary %+v", got, err, want)
	}
	bad := c
	bad.First = 0 // outside chunk 2
	pb, _ = EncodeCalibrationChunkProto(bad)
	if _, err := DecodeCalibrationChunkValueProto(pb, 64); Reason(err) != "invalid-field:pairs" {
		t.Errorf("chunk outside its range: %v", err)
	}

	e := sampleCalibrationEnd()
	binEnd, err := EncodeCalibrationEnd(e)
	if err != nil {
		t.Fatal(err)
	}
	wantEnd, err := DecodeCalibrationEnd(binEnd)
	if err != nil {
		t.Fatal(err)
	}
	pbEnd, err := EncodeCalibrationEndProto(e)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeCalibrationEndProto(pbEnd); err != nil || !reflect.DeepEqual(got, wantEnd) {
		t.Errorf("end: protobuf %+v, %v\nbinary %+v", got, err, wantEnd)
	}
	if _, err := DecodeCalibrationEndProto(pbEnd[:len(pbEnd)-1]); !errors.Is(err, ErrMalformed) {
		t.Errorf("truncated end record: %v", err)
	}
}

// TestProtoAdvantagesWrapper: the wrapper carries the Arrow bytes unchanged and its schema must
// agree with the rows.
func TestProtoAdvantagesWrapper(t *testing.T) {
	for _, rows := range [][]AdvantageRow{sampleAdvantages(), sampleAdvantagesV2()} {
		arrowIPC, err := EncodeAdvantages(rows)
		if err != nil {
			t.Fatal(err)
		}
		want, err := DecodeAdvantages(arrowIPC)
		if err != nil {
			t.Fatal(err)
		}
		id := AdvantageSchemaID(rows)
		b, err := EncodeAdvantagesProto(arrowIPC, id)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeAdvantagesProto(b)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %v", id, err)
		}
	}
	v2, _ := EncodeAdvantages(sampleAdvantagesV2())
	b, _ := EncodeAdvantagesProto(v2, SchemaAdvantages)
	if _, err := DecodeAdvantagesProto(b); !errors.Is(err, ErrConflict) {
		t.Errorf("v2 rows under a v1 wrapper: %v", err)
	}
	if _, err := EncodeAdvantagesProto(v2, SchemaRollout); !errors.Is(err, ErrUnknownSchema) {
		t.Errorf("wrapper with a rollout schema: %v", err)
	}
}

// FuzzDecodeCalibrationProto: no input panics the calibration topic's and the advantages
// wrapper's Protobuf decoders, and what they accept re-encodes to bytes that decode to the same.
func FuzzDecodeCalibrationProto(f *testing.F) {
	snap, _ := EncodeCalibrationProto(sampleCalibrationDebias())
	chunk, _ := EncodeCalibrationChunkProto(CalibrationChunk{Slot: 1, Step: 2, Chunk: 1, First: 64, Pairs: make([]byte, 32)})
	end, _ := EncodeCalibrationEndProto(sampleCalibrationEnd())
	arrowIPC, _ := EncodeAdvantages(sampleAdvantages())
	adv, _ := EncodeAdvantagesProto(arrowIPC, SchemaAdvantages)
	for i, b := range [][]byte{snap, chunk, end, adv} {
		f.Add(uint8(i), b)
	}
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		switch which % 4 {
		case 0:
			if s, err := DecodeCalibrationProto(b); err == nil {
				again, err := EncodeCalibrationProto(s)
				if err != nil {
					t.Fatalf("decoded snapshot does not re-encode: %v", err)
				}
				if s2, err := DecodeCalibrationProto(again); err != nil || !reflect.DeepEqual(s, s2) {
					t.Fatalf("snapshot round trip: %+v, %v", s2, err)
				}
			}
		case 1:
			if c, err := DecodeCalibrationChunkValueProto(b, 64); err == nil {
				again, _ := EncodeCalibrationChunkProto(c)
				if c2, err := DecodeCalibrationChunkValueProto(again, 64); err != nil || !reflect.DeepEqual(c, c2) {
					t.Fatalf("chunk round trip: %+v, %v", c2, err)
				}
			}
		case 2:
			if e, err := DecodeCalibrationEndProto(b); err == nil {
				again, err := EncodeCalibrationEndProto(e)
				if err != nil {
					t.Fatalf("decoded end does not re-encode: %v", err)
				}
				if e2, err := DecodeCalibrationEndProto(again); err != nil || !reflect.DeepEqual(e, e2) {
					t.Fatalf("end round trip: %+v, %v", e2, err)
				}
			}
		case 3:
			_, _ = DecodeAdvantagesProto(b)
		}
	})
}
