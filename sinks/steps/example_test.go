package steps_test

import (
	"fmt"

	"github.com/wmrl/wmrl/sinks/steps"
	"github.com/wmrl/wmrl/topics"
)

// The Assembler is the client-independent core: feed records in any order, get complete steps.
func ExampleAssembler() {
	names := topics.NewNames("")
	recs, _ := names.AdvantageRecords("run-7", "", 4, exampleRows("run-7", 4), topics.DefaultChunkBytes)
	a := steps.NewAssembler(steps.AssemblerConfig{Run: "run-7"})
	for i, r := range recs {
		r.Partition, r.Offset = 0, int64(10+i)
		ready, errs := a.Add(r)
		for _, st := range ready {
			fmt.Printf("run %s step %d: %d rows from %v\n", st.Run, st.Step, len(st.Rows), st.Records)
			a.Release(st) // the step is done (a Stream does this in Ack)
		}
		for _, err := range errs {
			fmt.Println("skipped:", err)
		}
	}
	fmt.Println("commit:", a.Offsets().Committable())

	// A record without a chunk header is reported by position and skipped.
	bad := *recs[0]
	bad.Offset, bad.Headers = 11, bad.Headers[:4]
	_, errs := a.Add(&bad)
	fmt.Println(errs[0])
	// Output:
	// run run-7 step 4: 3 rows from [wmrl.advantages.v1/0@10]
	// commit: map[wmrl.advantages.v1:map[0:11]]
	// advantages record wmrl.advantages.v1/0@11 (run run-7 step 4): header wmrl-chunk missing: bad header
}

func exampleRows(run string, step int64) []topics.AdvantageRow {
	return []topics.AdvantageRow{
		{RunID: run, Stream: "mle", Step: step, GroupID: "g0", RolloutID: "g0-r0", Source: topics.SourceAnchor,
			Predicted: 0.7, PredictedOK: true, Calibrated: 0.6, Executed: 0.5, ExecutedOK: true, Used: 0.5, Advantage: 1, Weight: 2, Mask: true},
		{RunID: run, Stream: "mle", Step: step, GroupID: "g0", RolloutID: "g0-r1", Source: topics.SourceAnchor,
			Predicted: 0.4, PredictedOK: true, Calibrated: 0.3, Executed: 0.1, ExecutedOK: true, Used: 0.1, Advantage: -1, Weight: 2, Mask: true},
		{RunID: run, Stream: "mle", Step: step, GroupID: "g1", RolloutID: "g1-r0"},
	}
}
