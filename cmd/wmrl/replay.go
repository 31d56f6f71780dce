package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/consumers/correct"
	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
)

func init() { register(newReplayCmd) }

// replayOptions holds replay's flags; its run method is the command's body.
type replayOptions struct {
	a                                                          *app
	runID, toTopic, out, fromOffsets, redisPrefix, statePrefix string
	fromStep, maxStaleness                                     int64
	partition                                                  int32
	chunkBytes, keep                                           int
	noRedis, allowConfigChange                                 bool
	correction                                                 func() (correction.Config, error)
	limits                                                     correct.Limits
}

func newReplayCmd(a *app) *cobra.Command {
	o := &replayOptions{a: a}
	cmd := &cobra.Command{
		Use: "replay",
		Example: `  wmrl replay --run r1 --out replay.bin
  wmrl replay --run r1 --from-step 100 --to-topic wmrl.replay.advantages.v1`,
		Short: "Re-run correction for one run from the retained input topics and emit its advantages",
		Long: `replay reads the run's records from the steps, predicted and executed topics (read_committed, up
to their current end), re-runs the correction consumer's engine with fresh state, and writes the
advantage rows of every sealed step either to --to-topic (chunked exactly like the live topic) or
to --out FILE: length-prefixed (uint32 big-endian) Arrow IPC payloads exactly as they appear as
record values; 'wmrl digest --file FILE' reads it. The printed digest equals 'wmrl digest --run R
--topic <advantages>' of the live run when every setting that decides the rows is the live
consumer's: the correction flags (--mode, --map, --min-pairs, ...), --max-staleness, the per-run
limits (--max-pending-steps-per-run, --max-step-groups, --max-step-rows) and --max-batch-bytes.
The live consumer records them with every calibration snapshot; replay refuses (exit 2, naming
each differing setting and its flag) when they differ from its own, unless --allow-config-change
(an experiment: another --map on the same inputs).

Replayed states go to an isolated Redis namespace (--redis-prefix, default wmrl-replay-<run>-<time>).
--from-step S emits only steps >= S (earlier ones are still recomputed). --from-offsets
steps=O1,predicted=O2,executed=O3 starts reading the run's partition there instead (for inputs
retention has trimmed); the state after step S-1 then comes from the live namespace
(--state-prefix), which keeps the last --keep-states snapshots.`,
		Args: cobra.NoArgs,
		RunE: o.run,
	}
	o.correction = correctionFlags(cmd.Flags())
	f := cmd.Flags()
	f.StringVar(&o.runID, "run", "", "run id to replay (required)")
	f.Int64Var(&o.fromStep, "from-step", 0, "first step to emit")
	f.StringVar(&o.fromOffsets, "from-offsets", "", "start offsets on the run's partition: steps=N,predicted=N,executed=N")
	f.Int32Var(&o.partition, "partition", -1, "the run's partition (default: hash of the run id, as producers place it)")
	f.StringVar(&o.toTopic, "to-topic", "", "produce the advantages to this topic")
	f.StringVar(&o.out, "out", "", "write the advantages to this replay file")
	f.IntVar(&o.chunkBytes, "chunk-bytes", topics.DefaultChunkBytes, "maximum bytes of one Arrow payload")
	f.StringVar(&o.redisPrefix, "redis-prefix", "", "isolated Redis namespace for the replayed states (default wmrl-replay-<run>-<unix time>; under a --topic-prefix other than wmrl.: <prefix>wmrl-replay-<run>-<unix time>)")
	f.StringVar(&o.statePrefix, "state-prefix", correct.DefaultRedisPrefix, "the live consumer's Redis namespace (read for --from-offsets; as 'wmrl correct --redis-prefix': under a --topic-prefix other than wmrl.: <prefix>"+correct.DefaultRedisPrefix+")")
	f.IntVar(&o.keep, "keep-states", correct.DefaultKeepStates, "snapshots kept per run/stream in the replay namespace")
	f.BoolVar(&o.noRedis, "no-redis", false, "do not write replayed states to Redis")
	f.Int64Var(&o.maxStaleness, "max-staleness", 0, "the live consumer's --max-staleness")
	f.BoolVar(&o.allowConfigChange, "allow-config-change", false, "replay even when the settings differ from the live consumer's (the digest will differ)")
	limitFlags(f, &o.limits, false)
	return cmd
}

func (o *replayOptions) run(cmd *cobra.Command, _ []string) error {
	a := o.a
	if o.runID == "" {
		return errors.New("--run is required")
	}
	if (o.toTopic == "") == (o.out == "") {
		return errors.New("exactly one of --to-topic and --out is required")
	}
	// With --schema-registry the framed records' ids are checked as the live correct checked
	// them (the run's settings say whether it did: schema-ids-checked).
	if err := a.useRegistry(); err != nil {
		return err
	}
	names := a.conn.Names()
	if o.toTopic == names.Advantages() {
		return fmt.Errorf("--to-topic %s is the live advantages topic; replaying into it would duplicate rows", o.toTopic)
	}
	cc, err := o.correction()
	if err != nil {
		return err
	}
	opts, err := a.kafkaOpts()
	if err != nil {
		return err
	}
	// Replay reads the JSON input topics: a batch past their limit is skipped with a warning
	// (topicread.ToEnd), the decision the live consumers make; the engine dead-letters it as the
	// live correct does (Limits.BatchBytes, the same bound).
	opts = append(opts, kgo.MaxDecompressBatchBytes(a.conn.BatchLimit(topics.MaxRecordBytes)))
	o.limits.BatchBytes = a.conn.BatchLimit(topics.MaxRecordBytes)
	rc := correct.ReplayConfig{
		KafkaOpts: opts, Names: names, Run: o.runID, FromStep: o.fromStep, Correction: cc, MaxStaleness: o.maxStaleness,
		Limits: o.limits, AllowConfigChange: o.allowConfigChange, StatePrefix: a.identity(cmd, "state-prefix", o.statePrefix, correct.DefaultRedisPrefix), KeepStates: o.keep, Logger: a.log,
	}
	if o.partition >= 0 {
		rc.Partition = &o.partition
	}
	if o.fromOffsets != "" {
		if rc.FromOffsets, err = parseFromOffsets(o.fromOffsets, names); err != nil {
			return err
		}
	}
	if !o.noRedis || o.fromOffsets != "" {
		rdb, err := a.redis()
		if err != nil {
			return err
		}
		defer rdb.Close()
		rc.Redis = rdb
		rc.RedisPrefix = a.identity(cmd, "redis-prefix", o.redisPrefix, fmt.Sprintf("wmrl-replay-%s-%d", o.runID, time.Now().Unix()))
	}
	ctx, cancel := signalContext()
	defer cancel()
	emit, finish, err := o.emitter(ctx, names)
	if err != nil {
		return err
	}
	res, err := correct.Replay(ctx, rc, emit)
	if err != nil {
		_ = finish(false)
		return err
	}
	if err := finish(true); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "run=%s steps=%d (first %d, last sealed %d) rows=%d digest=%s dead_letters=%d incomplete_steps=%d redis_prefix=%s\n",
		o.runID, res.Steps, res.FirstStep, res.LastStep, res.Rows, res.Digest, res.DeadLetters, res.Incomplete, rc.RedisPrefix)
	if res.Incomplete > 0 {
		a.log.Warn("some steps never completed from the retained inputs", "incomplete", res.Incomplete)
	}
	return nil
}

// emitter returns where replayed steps go: the --out file or the --to-topic topic. finish
// closes it, flushing the file first when complete is true; call it once, also after a failed
// replay.
func (o *replayOptions) emitter(ctx context.Context, names topics.Names) (emit func(int64, []topics.AdvantageRow) error, finish func(complete bool) error, err error) {
	if o.out != "" {
		fh, err := os.Create(o.out)
		if err != nil {
			return nil, nil, err
		}
		w := topics.NewReplayWriter(fh)
		emit = func(_ int64, rows []topics.AdvantageRow) error { return w.WriteRows(rows, o.chunkBytes) }
		finish = func(complete bool) error {
			if !complete {
				return fh.Close()
			}
			if err := w.Flush(); err != nil {
				fh.Close()
				return err
			}
			return fh.Close()
		}
		return emit, finish, nil
	}
	cl, err := o.a.kafka(kgo.DefaultProduceTopic(o.toTopic))
	if err != nil {
		return nil, nil, err
	}
	emit = func(step int64, rows []topics.AdvantageRow) error {
		recs, err := names.AdvantageRecords(o.runID, "", step, rows, o.chunkBytes)
		if err != nil {
			return err
		}
		for _, r := range recs {
			r.Topic = o.toTopic
		}
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return cl.ProduceSync(pctx, recs...).FirstErr()
	}
	finish = func(bool) error {
		cl.Close()
		return nil
	}
	return emit, finish, nil
}

// parseFromOffsets reads "steps=N,predicted=N,executed=N" (short names or full topic names).
func parseFromOffsets(s string, names topics.Names) (map[string]int64, error) {
	short := map[string]string{"steps": names.Steps(), "predicted": names.Predicted(), "executed": names.Executed()}
	out := map[string]int64{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("--from-offsets %q: want topic=offset pairs", part)
		}
		if full, isShort := short[k]; isShort {
			k = full
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("--from-offsets %q: offset must be a non-negative integer", part)
		}
		out[k] = n
	}
	return out, nil
}
