package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/wmrl/wmrl/bench/workload"
	"github.com/wmrl/wmrl/topics"
)

func flattenSteps(steps []workload.Step) []*kgo.Record {
	var out []*kgo.Record
	for _, s := range steps {
		out = append(out, s.Records()...)
	}
	return out
}

func produceCopies(ctx context.Context, opts []kgo.Opt, recs []*kgo.Record) error {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	cp := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		cp[i] = &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers}
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := cl.ProduceSync(pctx, cp...).FirstErr(); err != nil {
		return fmt.Errorf("produce inputs: %w", err)
	}
	return nil
}

// passThrough copies every input record to out in transactions (one per poll), committing input
// offsets in the same transaction: the minimum any EOS consume→produce stage costs.
func passThrough(ctx context.Context, opts []kgo.Opt, names topics.Names, out, id string, want int) (time.Duration, error) {
	sess, err := kgo.NewGroupTransactSession(append(append([]kgo.Opt(nil), opts...),
		kgo.ConsumerGroup(id), kgo.ConsumeTopics(names.Steps(), names.Predicted(), names.Executed()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.TransactionalID(id),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.Balancers(kgo.RangeBalancer()), kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)...)
	if err != nil {
		return 0, err
	}
	defer sess.Close()
	var first time.Time
	n := 0
	for n < want {
		pctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		fs := sess.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		var batch []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			batch = append(batch, &kgo.Record{Topic: out, Partition: r.Partition, Key: r.Key, Value: r.Value, Headers: r.Headers})
		})
		if len(batch) == 0 {
			continue
		}
		if first.IsZero() {
			first = time.Now()
		}
		if err := sess.Begin(); err != nil {
			return 0, err
		}
		var perr error
		var pmu sync.Mutex
		for _, r := range batch {
			sess.Produce(ctx, r, func(_ *kgo.Record, err error) {
				if err != nil {
					pmu.Lock()
					perr = err
					pmu.Unlock()
				}
			})
		}
		committed, err := sess.End(ctx, kgo.TransactionEndTry(perr == nil))
		if err != nil {
			return 0, err
		}
		if committed {
			n += len(batch)
		}
	}
	return time.Since(first), nil
}
