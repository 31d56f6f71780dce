package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/wmrl/wmrl/bench/workload"
	"github.com/wmrl/wmrl/topics"
)

// latencyProbe times single steps: all of a step's records but its last reward are produced,
// then the last reward; the clock runs from that produce's acknowledgement until every chunk of
// the step is visible to a read_committed consumer of the advantages topic.
type latencyProbe struct{}

func (p *latencyProbe) run(ctx context.Context, cfg CorrectionConfig, names topics.Names) ([]time.Duration, error) {
	wl := cfg.Workload
	wl.Runs, wl.Steps, wl.RunPrefix = 1, cfg.LatencySteps, "latency"
	steps, err := workload.Synthesize(names, wl)
	if err != nil {
		return nil, err
	}
	reader, err := kgo.NewClient(append(append([]kgo.Opt(nil), cfg.KafkaOpts...),
		kgo.ConsumeTopics(names.Advantages()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()), kgo.FetchMaxWait(50*time.Millisecond))...)
	if err != nil {
		return nil, err
	}
	defer reader.Close()
	// Make sure the reader has its start offsets before the first step is produced.
	for i := 0; i < 3; i++ {
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		reader.PollFetches(pctx)
		cancel()
	}
	producer, err := kgo.NewClient(append(append([]kgo.Opt(nil), cfg.KafkaOpts...), kgo.ProducerLinger(0))...)
	if err != nil {
		return nil, err
	}
	defer producer.Close()
	seen := map[string]int{}
	var out []time.Duration
	for _, s := range steps {
		recs := s.Records()
		cp := make([]*kgo.Record, len(recs))
		for i, r := range recs {
			cp[i] = &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers}
		}
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := producer.ProduceSync(pctx, cp[:len(cp)-1]...).FirstErr(); err != nil {
			cancel()
			return nil, err
		}
		if err := producer.ProduceSync(pctx, cp[len(cp)-1]).FirstErr(); err != nil {
			cancel()
			return nil, err
		}
		cancel()
		t0 := time.Now()
		key := fmt.Sprintf("%s/%d", s.Run, s.Step)
		deadline := time.Now().Add(30 * time.Second)
		complete := false
		for !complete {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("step %s not visible after 30s", key)
			}
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			fs := reader.PollFetches(pctx)
			cancel()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			fs.EachRecord(func(r *kgo.Record) {
				run, _ := topics.HeaderValue(r.Headers, topics.HeaderRun)
				step, _ := topics.HeaderValue(r.Headers, topics.HeaderStep)
				ch, _ := topics.HeaderValue(r.Headers, topics.HeaderChunk)
				_, n, err := topics.ParseChunk(ch)
				if err != nil {
					return
				}
				k := run + "/" + step
				seen[k]++
				if k == key && seen[k] == n {
					complete = true
				}
			})
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}
