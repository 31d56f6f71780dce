package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/topics"
)

// rolloutStages is what the tests of `wmrl worldmodel` and `wmrl sandbox` against hostile rollouts
// share: a topic set of their own on the real broker, the two stages to start on it, and a reader
// of their outputs and dead letters.
type rolloutStages struct {
	t       *testing.T
	h       *e2eHarness
	brokers []string
	names   topics.Names
	groups  map[string]string
	wmURL   string
	argv    string
	// count is records per output topic, dead the latest dead letter per stage (read).
	count map[string]int
	dead  map[string]topics.DeadLetter
}

func newRolloutStages(t *testing.T, bin string) *rolloutStages {
	brokers := testenv.Kafka(t)
	unique := testenv.Name(t)
	prefix := unique + "."
	s := &rolloutStages{t: t, brokers: brokers, names: topics.NewNames(prefix),
		groups: map[string]string{"worldmodel": unique + "-worldmodel", "sandbox": unique + "-sandbox"},
		count:  map[string]int{}, dead: map[string]topics.DeadLetter{}}
	redisURL := testenv.Redis(t)
	t.Cleanup(func() { e2eCleanup(t, brokers, redisURL, prefix, unique, s.groups) })
	s.h = &e2eHarness{t: t, bin: bin, global: []string{"--brokers", strings.Join(brokers, ","), "--topic-prefix", prefix}}
	t.Cleanup(s.h.stopAll)
	s.h.run(time.Minute, 0, "topics", "create", "--partitions", "1")
	wm := httptest.NewServer(testenv.WorldModel(nil))
	t.Cleanup(wm.Close)
	s.wmURL, s.argv = wm.URL, e2eScoreArgv(t)
	return s
}

// rollout is rollout i of group 0-q of run r, an anchor whose artifact the test scorers read.
func (s *rolloutStages) rollout(i int) *kgo.Record {
	r := topics.Rollout{RolloutRef: topics.RolloutRef{RunID: "r", Step: 0, GroupID: "0-q", RolloutID: fmt.Sprintf("0-q-%d", i), Stream: "main", PolicyVersion: "v"},
		Anchor: true, Index: i, Artifact: fmt.Sprintf(`{"rollout":"%d","wm":0.5,"exec":0.7}`, i),
		CreatedAt: time.Unix(1_700_000_000, 0).UTC()}
	rec, err := s.names.RolloutRecord(r)
	if err != nil {
		s.t.Fatal(err)
	}
	return rec
}

// start starts `wmrl worldmodel` and `wmrl sandbox`, in that order.
func (s *rolloutStages) start() []*e2eProc {
	return []*e2eProc{
		s.h.start("worldmodel", "worldmodel", "--backend", "openai", "--base-url", s.wmURL+"/v1", "--model", "m",
			"--metrics-addr", "127.0.0.1:0", "--group", s.groups["worldmodel"]),
		s.h.start("sandbox", "sandbox", "--single-step-no-private", "--argv", s.argv, "--slots", "1", "--timeout", "10s",
			"--metrics-addr", "127.0.0.1:0", "--group", s.groups["sandbox"]),
	}
}

// reader returns a function that reads the predicted, executed and dead-letter topics from the
// start until each scoring topic holds outputs records and both stages dead-lettered, failing
// after timeout in all.
func (s *rolloutStages) reader(timeout time.Duration) (readUntil func(outputs int)) {
	t, names := s.t, s.names
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.brokers...), kgo.ConsumeTopics(names.Predicted(), names.Executed(), names.DLQ()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return func(outputs int) {
		t.Helper()
		for s.count[names.Predicted()] < outputs || s.count[names.Executed()] < outputs || len(s.dead) < 2 {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("outputs %v, dead letters from %d stages: a stage stalled", s.count, len(s.dead))
			}
			fs.EachRecord(func(r *kgo.Record) {
				s.count[r.Topic]++
				if r.Topic != names.DLQ() {
					return
				}
				d, err := topics.ParseDeadLetter(r)
				if err != nil {
					t.Fatal(err)
				}
				s.dead[d.Stage] = d
			})
		}
	}
}
