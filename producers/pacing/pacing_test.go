package pacing_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/producers"
	"github.com/wmrl/wmrl/producers/pacing"
	"github.com/wmrl/wmrl/topics"
)

const (
	run      = "pace-run"
	maxAhead = 2
	steps    = 6
)

// stepsBackend hands out steps 0..n-1 of one group of two rollouts each.
type stepsBackend struct{ next, n int64 }

func (b *stepsBackend) Next(context.Context) (producers.StepBatch, error) {
	if b.next == b.n {
		return producers.StepBatch{}, io.EOF
	}
	s := b.next
	b.next++
	return producers.StepBatch{Step: s, Groups: []producers.GroupSpec{{Rollouts: []producers.RolloutSpec{
		{Artifact: []byte("a")}, {Artifact: []byte("b")}}}}}, nil
}

// syncBuffer is a log sink the test reads while the generator writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPausesAndResumesWithTheSlowestTrainer runs the generator with --max-steps-ahead 2 against
// the real broker and plays the pipeline and two trainers: advantages are written for the
// published steps, and the trainers' groups commit offsets as AdvantageStream.ack does. The
// generator must stop before a step two ahead of the slower trainer, say so in a log line and
// the paused metric, and go on when that trainer commits.
func TestPausesAndResumesWithTheSlowestTrainer(t *testing.T) {
	brokers := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	names := testenv.Topics(t, brokers, 1)
	seeds := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	cl, err := kgo.NewClient(seeds...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	fast, slow := names.Prefix+"trainer-fast", names.Prefix+"trainer-slow"
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	reg := prometheus.NewRegistry()
	pace, err := pacing.New(pacing.Config{KafkaOpts: seeds, Names: names, RunID: run, Groups: []string{fast, slow},
		MaxAhead: maxAhead, Poll: 100 * time.Millisecond, Logger: log, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer pace.Close()
	pace.Start(ctx)
	gen, err := producers.New(&stepsBackend{n: steps}, producers.Config{RunID: run, Names: names, KafkaOpts: seeds,
		Pacer: pace, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer gen.Close()
	done := make(chan error, 1)
	go func() { _, err := gen.Run(ctx); done <- err }()

	paused := func() float64 { return metric(t, reg, "wmrl_generate_paused") }
	// waitPublished waits for manifests 0..n-1, then requires step n to stay unpublished and the
	// generator to report itself paused.
	starts := map[int64]int64{} // step -> offset of its first advantages record
	waitPublished := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for countManifests(ctx, t, brokers, names) < n {
			if time.Now().After(deadline) {
				t.Fatalf("manifests of steps 0..%d not published within 30s; log:\n%s", n-1, logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(time.Second) // long enough for step n to appear if the bound were not kept
		if got := countManifests(ctx, t, brokers, names); got != n {
			t.Fatalf("%d manifests published, want %d (paused before step %d); log:\n%s", got, n, n, logs.String())
		}
		if paused() != 1 {
			t.Fatalf("wmrl_generate_paused = %v while held at step %d", paused(), n)
		}
		// The pipeline seals what was published.
		for s := int64(len(starts)); s < n; s++ {
			starts[s] = writeAdvantages(ctx, t, names, s)
		}
	}
	commit := func(group string, trained int64) {
		t.Helper()
		var os kadm.Offsets
		off, ok := starts[trained]
		if !ok { // trained everything written: commit past the last record, as ack() does
			off = starts[int64(len(starts))-1] + 2
		}
		os.Add(kadm.Offset{Topic: names.Advantages(), Partition: 0, At: off, LeaderEpoch: -1})
		if _, err := adm.CommitOffsets(ctx, group, os); err != nil {
			t.Fatal(err)
		}
	}

	waitPublished(maxAhead) // no trainer has trained anything: steps 0 and 1 only
	if !strings.Contains(logs.String(), "generation paused") || !strings.Contains(logs.String(), "step=2") {
		t.Fatalf("no pause log line for step 2:\n%s", logs.String())
	}
	commit(fast, 2) // the fast trainer has trained 0 and 1; the slow one nothing: still paused
	waitPublished(maxAhead)
	commit(slow, 1) // the slow trainer has trained step 0: step 2 may go, step 3 waits
	waitPublished(3)
	if !strings.Contains(logs.String(), "generation resumed") {
		t.Fatalf("no resume log line:\n%s", logs.String())
	}
	commit(fast, 3)
	commit(slow, 3) // both trained everything sealed (0..2): steps 3 and 4 go
	waitPublished(5)
	commit(slow, 5)
	commit(fast, 5)
	if err := <-done; err != nil {
		t.Fatalf("generator: %v", err)
	}
	if got := countManifests(ctx, t, brokers, names); got != steps {
		t.Fatalf("%d manifests after the trainers caught up, want %d", got, steps)
	}
	if n := metric(t, reg, "wmrl_generate_pauses_total"); n != 3 {
		t.Errorf("wmrl_generate_pauses_total = %v, want 3 (before steps 2, 3 and 5)", n)
	}
	if paused() != 0 || metric(t, reg, "wmrl_generate_paused_seconds_total") <= 0 {
		t.Errorf("after the run: paused %v, paused seconds %v", paused(), metric(t, reg, "wmrl_generate_paused_seconds_total"))
	}
}

// metric reads a gauge or counter of reg by name (-1 when absent).
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if m.GetGauge() != nil {
			return m.GetGauge().GetValue()
		}
		return m.GetCounter().GetValue()
	}
	return -1
}

func countManifests(ctx context.Context, t *testing.T, brokers []string, names topics.Names) int64 {
	t.Helper()
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ends, err := adm.ListEndOffsets(ctx, names.Steps())
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// writeAdvantages writes step s's rows as the correction consumer would (one chunk, in a
// transaction so read_committed readers see it) and returns the offset of its first record.
func writeAdvantages(ctx context.Context, t *testing.T, names topics.Names, s int64) int64 {
	t.Helper()
	rows := []topics.AdvantageRow{}
	for i := 0; i < 2; i++ {
		rows = append(rows, topics.AdvantageRow{RunID: run, Stream: "main", Step: s, GroupID: fmt.Sprintf("%d-0", s),
			RolloutID: fmt.Sprintf("%d-0-%d", s, i), Source: topics.SourceWorldModel, Predicted: 0.5, PredictedOK: true,
			Calibrated: 0.5, Used: 0.5, Weight: 1, Mask: true})
	}
	recs, err := names.AdvantageRecords(run, "", s, rows, topics.DefaultChunkBytes)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(testenv.Kafka(t)...), kgo.TransactionalID(fmt.Sprintf("%s-adv-%d", names.Prefix, s)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	res := cl.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	return res[0].Record.Offset
}
