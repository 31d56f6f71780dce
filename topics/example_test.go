package topics_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/topics"
)

func ExampleEncodeRollout() {
	b, err := topics.EncodeRollout(topics.Rollout{
		RolloutRef: topics.RolloutRef{RunID: "r1", Step: 0, GroupID: "g0", RolloutID: "g0-r1", Stream: "mle"},
		Index:      1,
		Artifact:   "model=ridge", CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	})
	fmt.Println(string(b), err)

	_, err = topics.EncodeRollout(topics.Rollout{RolloutRef: topics.RolloutRef{RunID: "r1/x", GroupID: "g0", RolloutID: "g0-r1", Stream: "mle"}})
	fmt.Println(topics.Reason(err))
	// Output:
	// {"schema":"wmrl.rollout.v1","run_id":"r1","step":0,"group_id":"g0","rollout_id":"g0-r1","stream":"mle","policy_version":"","anchor":false,"index":1,"artifact":"model=ridge","created_at":"2026-01-02T03:04:05Z"} <nil>
	// invalid-field:run_id
}

func ExampleDecodePredicted() {
	_, err := topics.DecodePredicted([]byte(`{"schema":"wmrl.reward.predicted.v1","run_id":"r1","step":1,"group_id":"g3",` +
		`"rollout_id":"g3-r2","stream":"mle","policy_version":"p1","anchor":false,"score":1.5,"status":"ok","created_at":"2026-01-02T03:04:05Z"}`))
	var fe *topics.FieldError
	if errors.As(err, &fe) {
		fmt.Println(fe.Field, "|", err)
	}
	// Output:
	// score | predicted run=r1 rollout=g3-r2: field "score": value 1.5: out of range [0,1]
}

func ExampleIsAnchor() {
	// The generator decides anchors once; every stage and the Python client agree on the hash.
	for _, g := range []string{"g0", "g1", "g4", "g5"} {
		fmt.Printf("%s %.4f %v\n", g, topics.AnchorHash("r1", g), topics.IsAnchor("r1", g, 0.25))
	}
	// Output:
	// g0 0.7144 false
	// g1 0.3295 false
	// g4 0.6762 false
	// g5 0.0658 true
}

func ExampleDeadLetterWriter_Record() {
	w := topics.NewDeadLetterWriter(topics.NewNames(""), "worldmodel")
	src := &kgo.Record{Topic: "wmrl.rollouts.v1", Partition: 2, Offset: 41, Key: []byte("r1"), Value: []byte(`{"schema":"wmrl.rollout.v9"}`)}
	_, err := topics.DecodeRollout(src.Value)
	dl := w.Record(src, err) // produce dl, in the same transaction as the consumer's offsets

	d, _ := topics.ParseDeadLetter(dl)
	fmt.Println(dl.Topic, string(dl.Value))
	fmt.Println(d.Reason, d.Stage, d.SourceTopic, d.SourcePartition, d.SourceOffset)
	fmt.Println(d.Error)
	// Output:
	// wmrl.dlq.v1 {"schema":"wmrl.rollout.v9"}
	// unknown-schema worldmodel wmrl.rollouts.v1 2 41
	// rollout: field "schema": value "wmrl.rollout.v9": want "wmrl.rollout.v1"
}

func ExampleNames_AdvantageRecords() {
	rows := []topics.AdvantageRow{
		{RunID: "r1", Stream: "mle", Step: 4, GroupID: "g0", RolloutID: "g0-r0", Source: topics.SourceWorldModel,
			Predicted: 0.7, PredictedOK: true, Calibrated: 0.6, Used: 0.6, Advantage: 1, Weight: 1, Mask: true},
		{RunID: "r1", Stream: "mle", Step: 4, GroupID: "g0", RolloutID: "g0-r1", Source: topics.SourceWorldModel,
			Predicted: 0.3, PredictedOK: true, Calibrated: 0.2, Used: 0.2, Advantage: -1, Weight: 1, Mask: true},
	}
	recs, err := topics.NewNames("").AdvantageRecords("r1", "mle", 4, rows, topics.DefaultChunkBytes)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range recs {
		chunk, _ := topics.HeaderValue(r.Headers, topics.HeaderChunk)
		n, _ := topics.HeaderValue(r.Headers, topics.HeaderRows)
		back, _ := topics.DecodeAdvantages(r.Value)
		fmt.Println(r.Topic, string(r.Key), chunk, n, back[1].Advantage)
	}
	// Output:
	// wmrl.advantages.v1 r1 0/1 2 -1
}

func ExampleCodec() {
	// One place picks the codec: the stage's --format (topics.Names.Format) for what it writes,
	// the record's content-type header for what it reads.
	names := topics.NewNames("")
	names.Format = topics.FormatProtobuf
	rec, err := names.PredictedRecord(topics.PredictedReward{
		RolloutRef: topics.RolloutRef{RunID: "r1", Step: 1, GroupID: "g3", RolloutID: "g3-r2", Stream: "mle"},
		Score:      new(0.5), Status: topics.StatusOK, CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	})
	if err != nil {
		panic(err)
	}
	ct, _ := topics.HeaderValue(rec.Headers, topics.HeaderContentType)
	p, err := topics.DecodePredictedRecord(rec)
	fmt.Println(len(rec.Value), "bytes,", ct, "|", p.Schema, p.RolloutID, *p.Score, err)

	_, err = topics.CodecFor(topics.FormatProtobuf).DecodePredicted(rec.Value[:len(rec.Value)-2])
	fmt.Println(topics.Reason(err))
	// Output:
	// 43 bytes, application/x-protobuf | wmrl.reward.predicted.v1 g3-r2 0.5 <nil>
	// invalid-field:created_at
}
