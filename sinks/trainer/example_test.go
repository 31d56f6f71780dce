package trainer_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/sinks/trainer"
	"github.com/wmrl/wmrl/topics"
)

func exampleRows(run string, step int64) []topics.AdvantageRow {
	return []topics.AdvantageRow{
		{RunID: run, Stream: "mle", Step: step, GroupID: "g0", RolloutID: "g0-r0", Source: topics.SourceAnchor,
			Predicted: 0.7, PredictedOK: true, Calibrated: 0.6, Executed: 0.5, ExecutedOK: true, Used: 0.5, Advantage: 1, Weight: 2, Mask: true},
		{RunID: run, Stream: "mle", Step: step, GroupID: "g0", RolloutID: "g0-r1", Source: topics.SourceAnchor,
			Predicted: 0.4, PredictedOK: true, Calibrated: 0.3, Executed: 0.1, ExecutedOK: true, Used: 0.1, Advantage: -1, Weight: 2, Mask: true},
		{RunID: run, Stream: "mle", Step: step, GroupID: "g1", RolloutID: "g1-r0"},
	}
}

// A trainer process: take complete steps, train on them, acknowledge. A crash before Ack means
// the step is delivered again to the next trainer of the group.
func ExampleStream_Run() {
	s, err := trainer.New(trainer.Config{
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers("127.0.0.1:9092")},
		Names:     topics.NewNames(""),
		Group:     "my-trainer",
		RunID:     "run-7",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	err = s.Run(context.Background(), func(ctx context.Context, st *trainer.Step) error {
		sum := st.Summary()
		fmt.Printf("step %d: %d rows, %d masked\n", st.Step, sum.Rows, sum.Masked)
		return nil // returning an error leaves the step unacknowledged
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// Next and Ack give a trainer loop full control over when a step counts as done.
func ExampleStream_Next() {
	s, err := trainer.New(trainer.Config{KafkaOpts: []kgo.Opt{kgo.SeedBrokers("127.0.0.1:9092")}, RunID: "run-7"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for {
		st, err := s.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		// ... compute the policy-gradient loss from st.Rows (weight, advantage, mask) ...
		if err := st.Ack(ctx); err != nil {
			log.Fatal(err)
		}
	}
}

func ExampleWriteTable() {
	st := &trainer.Step{Run: "run-7", Step: 4, Rows: exampleRows("run-7", 4)}
	_ = trainer.WriteTable(os.Stdout, st)
	s := st.Summary()
	fmt.Printf("rows %d masked %d mean|adv| %.3f anchor weight %.2f\n", s.Rows, s.Masked, s.MeanAbsAdvantage, s.AnchorWeight)
	// Output:
	// group  rollout  source  predicted  calibrated  executed  used    advantage  weight  mask
	// g0     g0-r0    anchor  0.7000     0.6000      0.5000    0.5000  1.0000     2.0000  true
	// g0     g0-r1    anchor  0.4000     0.3000      0.1000    0.1000  -1.0000    2.0000  true
	// g1     g1-r0    -       -          0.0000      -         0.0000  0.0000     0.0000  false
	// rows 3 masked 1 mean|adv| 1.000 anchor weight 2.00
}

// Digest headerless payloads, e.g. the frames of a replay file (consumers/correct ReadReplay).
func ExampleDigestPayloads() {
	payloads, _ := topics.ChunkAdvantages(exampleRows("run-7", 4), topics.DefaultChunkBytes)
	res, err := trainer.DigestPayloads(payloads, "run-7")
	fmt.Println(res.Rows, res.Steps, err, res.Digest == topics.DigestRows(exampleRows("run-7", 4)))
	// Output:
	// 3 1 <nil> true
}
