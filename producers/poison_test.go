package producers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/artifact"
	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/producers"
	"github.com/wmrl/wmrl/topics"
)

// A JSONL input with two 10 MB lines on the real broker, bad lines handed to OnBadLine (generate
// --skip-invalid): a line that does not validate (an unknown field padded to 10 MB) goes to the
// dead-letter topic without its value, its group (q3 of step 0, no other line) is left out and
// the run goes on; a 10 MB artifact goes by reference. Every other line is published.
func TestGeneratorPoisonLines(t *testing.T) {
	brokers := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	names := testenv.Topics(t, brokers, 1)
	line := func(v map[string]any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	poison := string(testenv.PoisonJSON(`"step":0,"group_id":"q3","artifact":"x"`, testenv.PoisonBytes))
	input := strings.Join([]string{
		line(map[string]any{"step": 0, "group_id": "q1", "artifact": "a"}),
		line(map[string]any{"step": 0, "group_id": "q1", "artifact": "b"}),
		poison,
		line(map[string]any{"step": 0, "group_id": "q2", "artifact": strings.Repeat("y", testenv.PoisonBytes)}),
		line(map[string]any{"step": 1, "group_id": "q1", "artifact": "c"}),
	}, "\n") + "\n"

	var gen *producers.Generator
	backend, err := producers.NewJSONL(strings.NewReader(input), producers.JSONLConfig{RunID: "r1",
		OnBadLine: func(n int, raw []byte, lerr error) error {
			return gen.DeadLetterInput(ctx, "jsonl:test", int64(n), raw, lerr)
		}})
	if err != nil {
		t.Fatal(err)
	}
	store, err := artifact.NewStore(filepath.Join(t.TempDir(), "claims"), 0)
	if err != nil {
		t.Fatal(err)
	}
	gen, err = producers.New(backend, producers.Config{RunID: "r1", Names: names, KafkaOpts: []kgo.Opt{kgo.SeedBrokers(brokers...)},
		Artifacts: store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer gen.Close()
	st, err := gen.Run(ctx)
	if err != nil {
		t.Fatalf("generate stopped on a poison line: %v", err)
	}
	if st.Rollouts != 4 || st.ByReference != 1 || st.Steps != 2 {
		t.Errorf("stats %+v, want 4 rollouts (1 by reference) in 2 steps", st)
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(names.DLQ(), names.Rollouts()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var ids []string
	var dls []topics.DeadLetter
	for len(ids) < 4 || len(dls) < 1 {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("rollouts %v, dead letters %d", ids, len(dls))
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Topic == names.DLQ() {
				d, err := topics.ParseDeadLetter(r)
				if err != nil {
					t.Fatal(err)
				}
				dls = append(dls, d)
				return
			}
			ro, err := topics.DecodeRollout(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, ro.RolloutID)
		})
	}
	slices.Sort(ids)
	if got := strings.Join(ids, ","); got != "0-q1-0,0-q1-1,0-q2-0,1-q1-0" {
		t.Errorf("rollouts %s", got)
	}
	d := dls[0]
	if d.Reason != "bad-input" || d.Stage != "generate" || d.SourceTopic != "jsonl:test" || d.SourceOffset != 3 ||
		d.Value != nil || len(d.Omitted) != 1 || d.Omitted[0].Bytes != len(poison) || !bytes.Contains([]byte(d.Error), []byte(`unknown field "pad"`)) {
		t.Errorf("dead letter %+v (error %q)", d.Omitted, d.Error)
	}
}
