package trainer

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/wmrl/wmrl/internal/testenv"
)

// txProducer produces record batches in Kafka transactions, as the correction consumer does.
type txProducer struct {
	t  testing.TB
	cl *kgo.Client
}

func newTxProducer(t testing.TB, seeds []string, txID string) *txProducer {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.TransactionalID(txID), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	t.Cleanup(cl.Close)
	return &txProducer{t: t, cl: cl}
}

// send produces recs (retargeted to topic) in one transaction and commits or aborts it.
func (p *txProducer) send(topic string, commit bool, recs ...*kgo.Record) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.cl.BeginTransaction(); err != nil {
		p.t.Fatalf("begin: %v", err)
	}
	for _, r := range recs {
		c := *r
		c.Topic = topic
		if err := p.cl.ProduceSync(ctx, &c).FirstErr(); err != nil {
			p.t.Fatalf("produce: %v", err)
		}
	}
	end := kgo.TryAbort
	if commit {
		end = kgo.TryCommit
	}
	if err := p.cl.EndTransaction(ctx, end); err != nil {
		p.t.Fatalf("end transaction: %v", err)
	}
}

// nextStep calls Next with a deadline so a missing step fails the test instead of hanging it.
// runAStream opens a Stream of run a on topic, in a group of the test's own, and closes it when
// the test ends; skips collects what OnSkip reports.
func runAStream(t *testing.T, seeds []string, topic string) (s *Stream, skips *[]error) {
	t.Helper()
	skips = new([]error)
	s, err := New(Config{KafkaOpts: []kgo.Opt{kgo.SeedBrokers(seeds...)}, Topic: topic, Group: testenv.Name(t), RunID: "a",
		OnSkip: func(err error) { *skips = append(*skips, err) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, skips
}

func nextStep(t testing.TB, s *Stream, within time.Duration) *Step {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	st, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return st
}

// noStep asserts that no step arrives within d.
func noStep(t testing.TB, s *Stream, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if st, err := s.Next(ctx); err == nil {
		t.Fatalf("unexpected step %s/%d", st.Run, st.Step)
	}
}
