package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/topics"
)

func cliRows(run string, step int64) []topics.AdvantageRow {
	var rows []topics.AdvantageRow
	for i := 0; i < 4; i++ {
		v := float64(i) / 4
		rows = append(rows, topics.AdvantageRow{RunID: run, Stream: "mle", Step: step, GroupID: "g0",
			RolloutID: fmt.Sprintf("g0-r%d", i), Source: topics.SourceWorldModel, Predicted: v, PredictedOK: true,
			Calibrated: v, Used: v, Advantage: v - 0.375, Weight: 1, Mask: true})
	}
	return rows
}

// TestTrainAndDigestCommands runs `wmrl train` and `wmrl digest` against an in-process broker
// holding two committed steps of run a, one aborted step and a step of run b.
func TestTrainAndDigestCommands(t *testing.T) {
	names := topics.NewNames("cli.")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, names.Advantages()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("cli"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var want []topics.AdvantageRow
	for _, s := range []struct {
		run    string
		step   int64
		commit bool
	}{{"a", 0, true}, {"b", 0, true}, {"a", 1, false}, {"a", 1, true}} {
		rows := cliRows(s.run, s.step)
		if !s.commit {
			rows[0].Advantage = 9
		}
		recs, err := names.AdvantageRecords(s.run, "", s.step, rows, topics.DefaultChunkBytes)
		if err != nil {
			t.Fatal(err)
		}
		if err := prod.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := prod.EndTransaction(ctx, kgo.TransactionEndTry(s.commit)); err != nil {
			t.Fatal(err)
		}
		if s.commit && s.run == "a" {
			want = append(want, rows...)
		}
	}
	global := []string{"--brokers=" + strings.Join(c.ListenAddrs(), ","), "--topic-prefix=cli.", "--log-level=error"}
	runCLI := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		a := &app{stdout: &out, stderr: &out}
		root := newRoot(a)
		root.SetArgs(append(args, global...))
		if err := root.Execute(); err != nil {
			t.Fatalf("wmrl %v: %v\n%s", args, err, out.String())
		}
		return out.String()
	}

	out := runCLI("train", "--run=a", "--max-steps=2", "--print", "--group=g1")
	for _, s := range []string{"run a step 0 rows 4 masked 0", "run a step 1 rows 4", "group  rollout  source", "g0     g0-r3    world_model"} {
		if !strings.Contains(out, s) {
			t.Errorf("train output lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "9.0000") || strings.Contains(out, "run b") {
		t.Errorf("train showed aborted or other-run rows:\n%s", out)
	}

	wantLine := fmt.Sprintf("digest %s rows %d steps 2\n", topics.DigestRows(want), len(want))
	if got := runCLI("digest", "--run=a"); got != wantLine {
		t.Errorf("digest --topic: %q, want %q", got, wantLine)
	}
	if got := runCLI("digest", "--run=a", "--file="+filepath.Join("..", "..", "sinks", "trainer", "testdata", "replay.bin")); !strings.HasPrefix(got, "digest ") || !strings.Contains(got, "rows 96 steps 3") {
		t.Errorf("digest --file: %q", got)
	}
}
