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
	"github.com/wmrl/wmrl/topics"
)

func init() { register(newReplayCmd) }

func newReplayCmd(a *app) *cobra.Command {
	var (
		run, toTopic, out, fromOffsets, redisPrefix, statePrefix string
		fromStep, maxStaleness                                   int64
		partition                                                int32
		chunkBytes, keep                                         int
		noRedis                                                  bool
	)
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Re-run correction for one run from the retained input topics and emit its advantages",
		Long: `replay reads the run's records from the steps, predicted and executed topics (read_committed, up
to their current end), re-runs the correction consumer's engine with fresh state, and writes the
advantage rows of every sealed step either to --to-topic (chunked exactly like the live topic) or
to --out FILE: length-prefixed (uint32 big-endian) Arrow IPC payloads exactly as they appear as
record values; 'wmrl digest --file FILE' reads it. The printed digest equals 'wmrl digest --run R
--topic <advantages>' of the live run when the correction flags match the live consumer's.

Replayed states go to an isolated Redis namespace (--redis-prefix, default wmrl-replay-<run>-<time>).
--from-step S emits only steps >= S (earlier ones are still recomputed). --from-offsets
steps=O1,predicted=O2,executed=O3 starts reading the run's partition there instead (for inputs
retention has trimmed); the state after step S-1 then comes from the live namespace
(--state-prefix), which keeps the last --keep-states snapshots.`,
		Args: cobra.NoArgs,
	}
	corrCfg := correctionFlags(cmd.Flags())
	f := cmd.Flags()
	f.StringVar(&run, "run", "", "run id to replay (required)")
	f.Int64Var(&fromStep, "from-step", 0, "first step to emit")
	f.StringVar(&fromOffsets, "from-offsets", "", "start offsets on the run's partition: steps=N,predicted=N,executed=N")
	f.Int32Var(&partition, "partition", -1, "the run's partition (default: hash of the run id, as producers place it)")
	f.StringVar(&toTopic, "to-topic", "", "produce the advantages to this topic")
	f.StringVar(&out, "out", "", "write the advantages to this replay file")
	f.IntVar(&chunkBytes, "chunk-bytes", topics.DefaultChunkBytes, "maximum bytes of one Arrow payload")
	f.StringVar(&redisPrefix, "redis-prefix", "", "isolated Redis namespace for the replayed states (default wmrl-replay-<run>-<unix time>)")
	f.StringVar(&statePrefix, "state-prefix", correct.DefaultRedisPrefix, "the live consumer's Redis namespace (read for --from-offsets)")
	f.IntVar(&keep, "keep-states", correct.DefaultKeepStates, "snapshots kept per run/stream in the replay namespace")
	f.BoolVar(&noRedis, "no-redis", false, "do not write replayed states to Redis")
	f.Int64Var(&maxStaleness, "max-staleness", 0, "the live consumer's --max-staleness (digests match only with the same value)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if run == "" {
			return errors.New("--run is required")
		}
		if (toTopic == "") == (out == "") {
			return errors.New("exactly one of --to-topic and --out is required")
		}
		names := a.conn.Names()
		if toTopic == names.Advantages() {
			return fmt.Errorf("--to-topic %s is the live advantages topic; replaying into it would duplicate rows", toTopic)
		}
		cc, err := corrCfg()
		if err != nil {
			return err
		}
		opts, err := a.kafkaOpts()
		if err != nil {
			return err
		}
		rc := correct.ReplayConfig{
			KafkaOpts: opts, Names: names, Run: run, FromStep: fromStep, Correction: cc, MaxStaleness: maxStaleness,
			StatePrefix: statePrefix, KeepStates: keep, Logger: a.log,
		}
		if partition >= 0 {
			rc.Partition = &partition
		}
		if fromOffsets != "" {
			if rc.FromOffsets, err = parseFromOffsets(fromOffsets, names); err != nil {
				return err
			}
		}
		if !noRedis || fromOffsets != "" {
			rdb, err := a.redis()
			if err != nil {
				return err
			}
			defer rdb.Close()
			rc.Redis = rdb
			rc.RedisPrefix = redisPrefix
			if rc.RedisPrefix == "" {
				rc.RedisPrefix = fmt.Sprintf("wmrl-replay-%s-%d", run, time.Now().Unix())
			}
		}
		ctx, cancel := signalContext()
		defer cancel()

		var emit func(int64, []topics.AdvantageRow) error
		var finish func() error
		switch {
		case out != "":
			fh, err := os.Create(out)
			if err != nil {
				return err
			}
			defer fh.Close()
			w := topics.NewReplayWriter(fh)
			emit = func(_ int64, rows []topics.AdvantageRow) error { return w.WriteRows(rows, chunkBytes) }
			finish = func() error {
				if err := w.Flush(); err != nil {
					return err
				}
				return fh.Close()
			}
		default:
			cl, err := a.kafka(kgo.DefaultProduceTopic(toTopic))
			if err != nil {
				return err
			}
			defer cl.Close()
			emit = func(step int64, rows []topics.AdvantageRow) error {
				recs, err := names.AdvantageRecords(run, "", step, rows, chunkBytes)
				if err != nil {
					return err
				}
				for _, r := range recs {
					r.Topic = toTopic
				}
				pctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				return cl.ProduceSync(pctx, recs...).FirstErr()
			}
			finish = func() error { return nil }
		}
		res, err := correct.Replay(ctx, rc, emit)
		if err != nil {
			return err
		}
		if err := finish(); err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "run=%s steps=%d (first %d, last sealed %d) rows=%d digest=%s dead_letters=%d incomplete_steps=%d redis_prefix=%s\n",
			run, res.Steps, res.FirstStep, res.LastStep, res.Rows, res.Digest, res.DeadLetters, res.Incomplete, rc.RedisPrefix)
		if res.Incomplete > 0 {
			a.log.Warn("some steps never completed from the retained inputs", "incomplete", res.Incomplete)
		}
		return nil
	}
	return cmd
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
