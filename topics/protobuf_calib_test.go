package topics

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
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

// FuzzDecodeCalibrationProto: no input panics the calibration topic's and the advantages
// wrapper's Protobuf decoders, and what they accept re-encodes to bytes that decode to the same.
// Cases 4-7 feed the same bytes to the readers' content-type switch (Names.Decode*Record) as a
// record value that is bare, bare Protobuf or Confluent-framed by its content-type (which/8):
// nothing panics, and a framed value accepted decodes as its frame's payload does bare.
func FuzzDecodeCalibrationProto(f *testing.F) {
	snap, _ := EncodeCalibrationProto(sampleCalibrationDebias())
	chunk, _ := EncodeCalibrationChunkProto(CalibrationChunk{Slot: 1, Step: 2, Chunk: 1, First: 64, Pairs: make([]byte, 32)})
	end, _ := EncodeCalibrationEndProto(sampleCalibrationEnd())
	arrowIPC, _ := EncodeAdvantages(sampleAdvantages())
	adv, _ := EncodeAdvantagesProto(arrowIPC, SchemaAdvantages)
	for i, b := range [][]byte{snap, chunk, end, adv} {
		f.Add(uint8(i), b)
		f.Add(uint8(4+(i+1)%4+8), b)                                       // bare Protobuf record
		f.Add(uint8(4+(i+1)%4+16), append([]byte{0, 0, 0, 0, 7, 0}, b...)) // framed, index [0]
	}
	f.Add(uint8(4+1+16), append([]byte{0, 0, 0, 0, 7, 2, 4}, chunk...)) // framed chunk, index [2]
	f.Add(uint8(4+2+16), append([]byte{0, 0, 0, 0, 7, 2, 6}, end...))   // framed end, index [3]
	f.Add(uint8(4), arrowIPC)
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		if which%8 >= 4 {
			fuzzSideRecord(t, which, b)
			return
		}
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

// fuzzSideRecord decodes b as the value of an advantages, snapshot, chunk or end record
// (which%4) whose content-type is bare, Protobuf or framed ((which/8)%3), without a registry.
func fuzzSideRecord(t *testing.T, which uint8, b []byte) {
	names := NewNames("fz.")
	cts := []string{"", ContentTypeProtobuf, ContentTypeProtobufConfluent}
	ct := cts[int(which/8)%3]
	rec := func(topic, key string, v []byte, ct string) *kgo.Record {
		r := &kgo.Record{Topic: topic, Key: []byte(key), Value: v}
		if ct != "" {
			r.Headers = []kgo.RecordHeader{Header(HeaderContentType, ct)}
		}
		return r
	}
	read := func(v []byte, ct string) (any, error) {
		ctx := context.Background()
		switch which % 4 {
		case 0:
			return names.DecodeAdvantageRecord(ctx, rec(names.Advantages(), "r1", v, ct))
		case 1:
			return names.DecodeCalibrationRecord(ctx, rec(names.Calibration(), "r1/s", v, ct))
		case 2:
			return names.DecodeCalibrationChunkRecord(ctx, rec(names.Calibration(), "r1/s/1", v, ct), 64)
		}
		return names.DecodeCalibrationEndRecord(ctx, rec(names.Calibration(), "r1", v, ct))
	}
	got, err := read(b, ct)
	if err != nil || ct != ContentTypeProtobufConfluent {
		return
	}
	_, payload, ferr := skipFrameIndex(b)
	if ferr != nil {
		t.Fatalf("framed value accepted, but its frame does not parse: %v", ferr)
	}
	if again, err := read(payload, ContentTypeProtobuf); err != nil || !reflect.DeepEqual(got, again) {
		t.Fatalf("framed value decodes to %+v, its payload bare to %+v, %v", got, again, err)
	}
}
