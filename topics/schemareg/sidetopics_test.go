package schemareg

import (
	"context"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/topics"
)

func sideSnapshot() topics.CalibrationSnapshot {
	return topics.CalibrationSnapshot{Schema: topics.SchemaCalibration, RunID: "r1", Stream: "mle", Step: 3, FitVersion: 2, Pairs: 48,
		ConfigHash: "cfg", Settings: "mode=default", Digest: "d", State: []byte{0, 1, 2}, BreakX: []float64{0.1, 0.9},
		BreakY: []float64{0.2, 0.8}, AnchorWeight: 1.5, StepPairs: 16, CreatedAt: at,
		Debias: &topics.DebiasShift{Rows: 4, Groups: 1, MeanShift: 0.25}}
}

func sideChunk() topics.CalibrationChunk {
	return topics.CalibrationChunk{RunID: "r1", Stream: "mle", Slot: 1, Step: 3, Chunk: 1, First: 64 + 2, Pairs: make([]byte, 32)}
}

func sideEnd() topics.CalibrationEnd {
	return topics.CalibrationEnd{RunID: "r1", LastStep: 3, EndedAt: at, Reason: topics.EndReasonMarker}
}

func sideRows() []topics.AdvantageRow {
	return []topics.AdvantageRow{{RunID: "r1", Stream: "mle", Step: 3, GroupID: "g", RolloutID: "g-r0", PolicyVersion: "ckpt-3",
		Source: topics.SourceAnchor, Calibrated: 0.5, Executed: 1, ExecutedOK: true, Used: 1, Advantage: 0.25, Weight: 1, Mask: true}}
}

// sideCase builds one advantages or calibration record and reads it back.
type sideCase struct {
	name  string
	index []int
	build func(topics.Names) (*kgo.Record, error)
	read  func(context.Context, topics.Names, *kgo.Record) (any, error)
	want  any
}

func sideCases() []sideCase {
	const pairs = 64
	return []sideCase{
		{"advantages", []int{0},
			func(n topics.Names) (*kgo.Record, error) {
				recs, err := n.AdvantageRecords("r1", "", 3, sideRows(), topics.DefaultChunkBytes)
				if err != nil {
					return nil, err
				}
				return recs[0], nil
			},
			func(ctx context.Context, n topics.Names, r *kgo.Record) (any, error) {
				return n.DecodeAdvantageRecord(ctx, r)
			},
			sideRows()},
		{"snapshot", []int{0},
			func(n topics.Names) (*kgo.Record, error) { return n.CalibrationRecord(sideSnapshot()) },
			func(ctx context.Context, n topics.Names, r *kgo.Record) (any, error) {
				return n.DecodeCalibrationRecord(ctx, r)
			},
			sideSnapshot()},
		{"chunk", []int{2},
			func(n topics.Names) (*kgo.Record, error) { return n.CalibrationChunkRecord(sideChunk()) },
			func(ctx context.Context, n topics.Names, r *kgo.Record) (any, error) {
				return n.DecodeCalibrationChunkRecord(ctx, r, pairs)
			},
			sideChunk()},
		{"end", []int{3},
			func(n topics.Names) (*kgo.Record, error) { return n.CalibrationEndRecord(sideEnd()) },
			func(ctx context.Context, n topics.Names, r *kgo.Record) (any, error) {
				return n.DecodeCalibrationEndRecord(ctx, r)
			},
			sideEnd()},
	}
}

// With a registry the advantages and calibration records go out Confluent-framed with their
// topic's id and their message's index in advantages.proto / calibration.proto, say so in their
// content-type, and read back to the value written, with the registry (id checked) and without.
// Without a registry, in either format, they are the bare Arrow and binary layouts as before.
func TestSideTopicsFramedAndRead(t *testing.T) {
	names, r := framedNames(t)
	ctx := context.Background()
	for _, c := range sideCases() {
		t.Run(c.name, func(t *testing.T) {
			rec, err := c.build(names)
			if err != nil {
				t.Fatal(err)
			}
			if ct, _ := topics.HeaderValue(rec.Headers, topics.HeaderContentType); ct != topics.ContentTypeProtobufConfluent {
				t.Fatalf("content-type %q", ct)
			}
			f, err := r.Unframe(ctx, rec.Topic, rec.Value)
			if err != nil {
				t.Fatal(err)
			}
			if id, _ := r.ID(rec.Topic); f.ID != id || !topics.EqualMessageIndex(f.Index, c.index) {
				t.Fatalf("frame id %d index %v, want %d %v", f.ID, f.Index, id, c.index)
			}
			for _, reader := range []topics.Names{names, {Prefix: names.Prefix}} {
				got, err := c.read(ctx, reader, rec)
				if err != nil {
					t.Fatalf("registry %v: %v", reader.Registry != nil, err)
				}
				if !reflect.DeepEqual(got, c.want) {
					t.Fatalf("registry %v: read %+v\nwant %+v", reader.Registry != nil, got, c.want)
				}
			}
			// The same record without a registry: not framed, in its own layout, in both formats.
			for _, f := range []topics.Format{topics.FormatJSON, topics.FormatProtobuf} {
				plain := topics.Names{Prefix: names.Prefix, Format: f}
				bare, err := c.build(plain)
				if err != nil {
					t.Fatal(err)
				}
				want := topics.ContentTypeBinary
				if c.name == "advantages" {
					want = topics.ContentTypeArrow
				}
				if ct, _ := topics.HeaderValue(bare.Headers, topics.HeaderContentType); ct != want {
					t.Fatalf("%s without a registry: content-type %q, want %q", f, ct, want)
				}
				if got, err := c.read(ctx, names, bare); err != nil || !reflect.DeepEqual(got, c.want) {
					t.Fatalf("bare record read by a framing reader: %+v, %v", got, err)
				}
			}
		})
	}
}

// A framed advantages or calibration record whose id the registry does not know is
// schema-unknown; another message's index is schema-mismatch, with or without a registry; a
// value that is no frame is malformed. The record keeps its framed content-type throughout.
func TestSideTopicsRefused(t *testing.T) {
	names, r := framedNames(t)
	ctx := context.Background()
	for _, c := range sideCases() {
		rec, err := c.build(names)
		if err != nil {
			t.Fatal(err)
		}
		f, err := r.Unframe(ctx, rec.Topic, rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		otherIndex := []int{1}
		if c.name == "advantages" {
			otherIndex = []int{0, 1}
		}
		for _, bad := range []struct {
			name, reason string
			reader       topics.Names
			value        []byte
		}{
			{"unknown id", "schema-unknown", names, append([]byte{0, 0x7f, 0, 0, 1, 0}, f.Payload...)},
			{"other message index", "schema-mismatch", names, append(must(r.hdr.AppendEncode(nil, f.ID, otherIndex)), f.Payload...)},
			{"other message index, no registry", "schema-mismatch", topics.Names{}, append(must(r.hdr.AppendEncode(nil, f.ID, otherIndex)), f.Payload...)},
			{"no frame", "malformed", names, []byte{1, 2, 3}},
			{"no frame, no registry", "malformed", topics.Names{}, []byte{1, 2, 3}},
		} {
			t.Run(c.name+"/"+bad.name, func(t *testing.T) {
				b := *rec
				b.Value = bad.value
				_, err := c.read(ctx, bad.reader, &b)
				if got := topics.Reason(err); got != bad.reason {
					t.Fatalf("reason %q (%v), want %q", got, err, bad.reason)
				}
			})
		}
	}
}
