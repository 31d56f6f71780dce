package main

import (
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/bench"
	"github.com/wmrl/wmrl/bench/workload"
	"github.com/wmrl/wmrl/consumers/correct"
	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
)

func init() { benchCommands = append(benchCommands, newBenchCorrectionCmd) }

// benchCorrectionOptions holds bench correction's flags; its run method is the command's body.
type benchCorrectionOptions struct {
	a          *app
	cfg        bench.CorrectionConfig
	correction func() (correction.Config, error)
	embedded   bool
	target     float64
	cpuProfile string
	rounds     int
}

func newBenchCorrectionCmd(a *app) *cobra.Command {
	o := &benchCorrectionOptions{a: a, cfg: bench.CorrectionConfig{
		Workload: workload.Config{Runs: 6, Steps: 1000, Groups: 8, GroupSize: 8, AnchorEvery: 4, Streams: 2, FailEvery: 50, Seed: 1},
	}}
	cmd := &cobra.Command{
		Use: "correction",
		Example: `  wmrl bench correction --embedded
  wmrl bench correction --runs 4 --streams 2 --steps 500 --partitions 3`,
		Short: "Correction consumer vs a pass-through transactional consume→produce; Redis round trips; latency",
		Long: `Writes a synthetic workload (manifests, predicted and executed rewards) to fresh topics, then in
one run on the same broker measures records/s of (1) a pass-through transactional consume→produce
of those records and (2) the correction consumer over the same records; Redis round trips per
sealed step (counted with a go-redis hook, startup excluded); and the latency from a step's last
reward to its advantages being visible to a read_committed consumer (p50/p99, one step at a time).
The measurement repeats for --rounds alternating rounds (pass-through, then correction, each on
fresh topics; the latency phase only in the last): one round's ratio moves by a third on a shared
machine, so the verdict is the median. Prints the last round's full report, then every round and
min/median/max. Uses --brokers and --redis, or an in-process kfake + miniredis with --embedded.
Exits 1 when the median ratio is below --target. The topics and Redis keys are deleted afterwards.`,
		Args: cobra.NoArgs,
		RunE: o.run,
	}
	cfg := &o.cfg
	f := cmd.Flags()
	o.correction = correctionFlags(f)
	f.IntVar(&cfg.Workload.Runs, "runs", cfg.Workload.Runs, "runs")
	f.IntVar(&cfg.Workload.Steps, "steps", cfg.Workload.Steps, "steps per run")
	f.IntVar(&cfg.Workload.Groups, "groups", cfg.Workload.Groups, "groups per step")
	f.IntVar(&cfg.Workload.GroupSize, "group-size", cfg.Workload.GroupSize, "rollouts per group (G)")
	f.IntVar(&cfg.Workload.AnchorEvery, "anchor-every", cfg.Workload.AnchorEvery, "every n-th group is an anchor group")
	f.IntVar(&cfg.Workload.Streams, "streams", cfg.Workload.Streams, "streams per run")
	f.Int32Var(&cfg.Partitions, "partitions", 3, "partitions of the benchmark topics")
	f.IntVar(&cfg.LatencySteps, "latency-steps", 100, "steps timed one at a time in the latency phase")
	f.IntVar(&cfg.ChunkBytes, "chunk-bytes", topics.DefaultChunkBytes, "maximum bytes of one Arrow payload")
	f.IntVar(&cfg.MaxTxnSteps, "max-txn-steps", correct.DefaultMaxTxnSteps, "while a backlog waits, poll on until this many steps are buffered before one transaction (1: a transaction per poll)")
	f.DurationVar(&cfg.MaxTxnLinger, "max-txn-linger", correct.DefaultMaxTxnLinger, "longest time a backlog's transaction is put off")
	f.Int32Var(&cfg.FetchMaxPartitionBytes, "fetch-max-partition-bytes", 1<<20, "bytes one fetch returns per partition, both consumers (1 MiB: the Kafka and franz-go default)")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole benchmark to this file; samples carry phase=passthrough or phase=correction (go tool pprof -tagfocus phase=correction)")
	f.BoolVar(&o.embedded, "embedded", false, "use an in-process kfake broker and miniredis instead of --brokers/--redis")
	f.BoolVar(&cfg.KeepTopics, "keep-topics", false, "do not delete the benchmark topics and Redis keys")
	f.Float64Var(&o.target, "target", 0.8, "minimum median ratio of correction to pass-through records/s")
	f.IntVar(&o.rounds, "rounds", 3, "alternating rounds of both phases; the verdict is their median ratio")
	return cmd
}

func (o *benchCorrectionOptions) run(_ *cobra.Command, _ []string) error {
	a, cfg := o.a, o.cfg
	cc, err := o.correction()
	if err != nil {
		return err
	}
	cfg.Correction = cc
	cfg.Logger = a.log.With("bench", "correction")
	cfg.Format = a.conn.Format // the global --format: the input records' wire format
	// --schema-registry: the input is Confluent-framed and correct checks the ids, as in a stage.
	if cfg.Registry, err = a.conn.SchemaRegistry(); err != nil {
		return err
	}
	if o.embedded {
		kc, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return err
		}
		defer kc.Close()
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		cfg.KafkaOpts = []kgo.Opt{kgo.SeedBrokers(kc.ListenAddrs()...)}
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		defer rdb.Close()
		cfg.Redis = rdb
	} else {
		if cfg.KafkaOpts, err = a.conn.KafkaOpts(); err != nil {
			return err
		}
		rdb, err := a.redis()
		if err != nil {
			return err
		}
		defer rdb.Close()
		cfg.Redis = rdb
	}
	ctx, cancel := signalContext()
	defer cancel()
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if o.rounds < 1 {
		return fmt.Errorf("--rounds %d: need at least 1", o.rounds)
	}
	var rounds bench.CorrectionRounds
	latency := cfg.LatencySteps
	for i := range o.rounds {
		cfg.LatencySteps = 0
		if i == o.rounds-1 {
			cfg.LatencySteps = latency
		}
		rep, err := bench.Correction(ctx, cfg)
		if err != nil {
			return fmt.Errorf("round %d: %w", i+1, err)
		}
		cfg.Logger.Info("bench: round done", "round", i+1, "of", o.rounds, "ratio", fmt.Sprintf("%.3f", rep.Ratio))
		rounds = append(rounds, rep)
	}
	fmt.Fprint(a.stdout, rounds[len(rounds)-1])
	fmt.Fprintln(a.stdout, "(the latency covers only the last two hops, last reward → sealed → committed; python/bench/roundtrip.py times the trainer's whole round trip, publish → judge → predicted → executed → sealed → committed → client)")
	fmt.Fprint(a.stdout, rounds)
	return belowTarget("median ratio", rounds.MedianRatio(), o.target)
}
