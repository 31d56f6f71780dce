package topics

import (
	"errors"
	"reflect"
	"testing"
)

// TestProtoCalibrationMatchesBinary: a snapshot, a window chunk and an end record decode to the
// same values from Protobuf as from their binary layouts.
func TestProtoCalibrationMatchesBinary(t *testing.T) {
	for _, s := range []CalibrationSnapshot{sampleCalibration(), sampleCalibrationDebias()} {
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
