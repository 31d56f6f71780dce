package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/wmrl/wmrl/topics"
	"github.com/wmrl/wmrl/topics/schemareg"
	"github.com/wmrl/wmrl/topics/wirepb"
)

// framedRecord is one record `produce-framed` wrote, as the Python test expects to read it.
type framedRecord struct {
	Topic string `json:"topic"`
	// Message is the full name of the record's message; Index its Confluent message index.
	Message string `json:"message"`
	Index   []int  `json:"index"`
	// ID is the schema id in the frame.
	ID int `json:"id"`
	// JSON is the message in protojson's canonical mapping, which json_format.MessageToDict
	// matches.
	JSON json.RawMessage `json:"json"`
}

// produceFramed registers every topic's schema with the registry (schemareg) and writes, to each
// topic that has one, records of every message kind framed in the Confluent wire format; the
// dead-letter topic gets a dead letter of the rollout record (its value keeps the rollout's
// frame). It prints the records as JSON, for a reader built only from confluent-kafka's
// deserializers and the registry to compare with.
//
//	gohelper produce-framed --brokers B --prefix P --registry URL
func produceFramed(args []string) error {
	fs := flag.NewFlagSet("produce-framed", flag.ContinueOnError)
	var c common
	c.register(fs)
	registry := fs.String("registry", "", "schema registry base URL")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	names := topics.NewNames(c.prefix)
	if err := createTopics(ctx, c.seeds(), names, 1); err != nil {
		return err
	}
	reg, err := schemareg.New(schemareg.Config{URLs: []string{*registry}})
	if err != nil {
		return err
	}
	ss, err := schemareg.Schemas(names)
	if err != nil {
		return err
	}
	if _, err := reg.Register(ctx, ss...); err != nil {
		return err
	}
	at := timestamppb.New(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	policyStep := int64(4)
	score := 0.75
	msgs := []struct {
		topic string
		index []int
		m     proto.Message
	}{
		{names.Rollouts(), []int{0}, &wirepb.Rollout{RunId: "run-1", Step: 4, GroupId: "g1", RolloutId: "g1-r0", Stream: "code",
			PolicyVersion: "p4", Index: 0, Prompt: "2+2?", Artifact: "4", Meta: map[string]string{"lang": "en"}, CreatedAt: at}},
		{names.Steps(), []int{1}, &wirepb.StepManifest{RunId: "run-1", Step: 4, PolicyVersion: "p4", PolicyStep: &policyStep,
			Groups: []*wirepb.GroupManifest{{GroupId: "g1", Stream: "code", Size: 8, Anchor: true}}, CreatedAt: at}},
		{names.Predicted(), []int{0}, &wirepb.PredictedReward{RunId: "run-1", RolloutId: "g1-r0", Score: &score}},
		{names.Executed(), []int{0}, &wirepb.ExecutedReward{RunId: "run-1", RolloutId: "g1-r0", Score: &score}},
		{names.Advantages(), []int{0}, &wirepb.AdvantageBatch{Schema: topics.SchemaAdvantages, ArrowIpc: []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}}},
		{names.Calibration(), []int{0}, &wirepb.CalibrationSnapshot{RunId: "run-1", Stream: "code", Step: 4, FitVersion: 3, Pairs: 12,
			State: []byte{1, 2, 3}, BreakX: []float64{0, 1}, BreakY: []float64{0.1, 0.9}, CreatedAt: at,
			Debias: &wirepb.DebiasShift{Rows: 8, Groups: 1, MeanShift: -0.5}}},
		{names.Calibration(), []int{2}, &wirepb.CalibrationChunk{Slot: 1, Step: 4, Chunk: 2, First: 16, Pairs: []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f}}},
		{names.Calibration(), []int{3}, &wirepb.CalibrationEnd{RunId: "run-1", LastStep: 4, EndedAt: at, Reason: "end-of-run"}},
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	if err != nil {
		return err
	}
	defer cl.Close()
	var out []framedRecord
	var rollout *kgo.Record
	for _, m := range msgs {
		payload, err := proto.Marshal(m.m)
		if err != nil {
			return err
		}
		v, err := reg.AppendFrame(nil, m.topic, m.index, payload)
		if err != nil {
			return err
		}
		rec := &kgo.Record{Topic: m.topic, Key: []byte("run-1"), Value: v}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			return fmt.Errorf("produce to %s: %w", m.topic, err)
		}
		if m.topic == names.Rollouts() {
			rollout = rec
		}
		id, _ := reg.ID(m.topic)
		js, err := protojson.Marshal(m.m)
		if err != nil {
			return err
		}
		out = append(out, framedRecord{Topic: m.topic, Message: string(m.m.ProtoReflect().Descriptor().FullName()), Index: m.index, ID: id, JSON: js})
		if m.topic == names.Rollouts() {
			// The same record dead-lettered: its value keeps the rollout's frame and schema id.
			dl := topics.NewDeadLetterWriter(names, "gohelper").Record(rollout, fmt.Errorf("%w: a test dead letter", topics.ErrInvalid))
			if err := cl.ProduceSync(ctx, dl).FirstErr(); err != nil {
				return fmt.Errorf("produce dead letter: %w", err)
			}
			out = append(out, framedRecord{Topic: names.DLQ(), Message: string(m.m.ProtoReflect().Descriptor().FullName()), Index: m.index, ID: id, JSON: js})
		}
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}
