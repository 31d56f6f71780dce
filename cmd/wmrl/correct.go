package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/wmrl/wmrl/consumers/correct"
	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
)

func init() { register(newCorrectCmd) }

// correctionFlags binds the correction-math flags shared by correct, replay and bench
// correction: --mode picks the base config, and every other flag overrides it only when given,
// so `--mode reference` alone is exactly the authors' configuration.
func correctionFlags(f *pflag.FlagSet) func() (correction.Config, error) {
	var (
		mode, adv, mapName  string
		window, minPairs    int
		weightCap, eps      float64
		ddof                int
		noDebias, noDenoise bool
		trustGate           bool
	)
	f.StringVar(&mode, "mode", "default", "correction mode: default (exact isotonic, per-step refit) or reference (the authors' code)")
	f.StringVar(&adv, "advantage", "grpo", "advantage estimator: grpo or drgrpo")
	f.StringVar(&mapName, "map", "isotonic", "default mode's calibration map: isotonic (exact isotonic regression), centred (centred isotonic, keeps the ranking between block centres) or zspace (the authors' abandoned variant: φ(z)=E[z_exec|z_wm] on within-group standardised pairs, applied to world-model advantages; 12 quantile bins, --min-pairs 400 unless given)")
	f.IntVar(&window, "window", 5000, "anchor-pair FIFO window")
	f.IntVar(&minPairs, "min-pairs", 200, "identity calibration until this many anchor pairs")
	f.Float64Var(&weightCap, "weight-cap", 4, "anchor weight is clipped to [1, weight-cap]")
	f.Float64Var(&eps, "eps", 1e-4, "GRPO std epsilon")
	f.IntVar(&ddof, "ddof", 0, "0 population or 1 sample std for GRPO")
	f.BoolVar(&noDebias, "no-debias", false, "ablation: disable Online Debiasing (identity calibration)")
	f.BoolVar(&noDenoise, "no-denoise", false, "ablation: disable Inverse-Variance Denoising (anchor weight 1)")
	f.BoolVar(&trustGate, "trust-gate", false, "mask a step's world-model rows (weight 0, mask false; the anchors carry the step) while the window's anchor pairs "+
		"correlate with the world model below 1/√(n−2), n ≥ 10 pairs: there the world model says too little about the truth to help (docs/anchors.md, "+
		"\"Trust gate\"); IVD cannot see this case, it measures scatter around the map, not whether the map has a slope. Default mode only")
	return func() (correction.Config, error) {
		var c correction.Config
		switch strings.ToLower(mode) {
		case "default":
			c = correction.DefaultConfig()
		case "reference":
			c = correction.ReferenceConfig()
		default:
			return c, fmt.Errorf("--mode %q: want default or reference", mode)
		}
		switch strings.ToLower(adv) {
		case "grpo":
			c.Advantage = correction.GRPO
		case "drgrpo", "dr-grpo", "dr.grpo":
			c.Advantage = correction.DrGRPO
		default:
			return c, fmt.Errorf("--advantage %q: want grpo or drgrpo", adv)
		}
		if f.Changed("map") {
			k, err := correction.ParseMapKind(strings.ToLower(mapName))
			if err != nil {
				return c, fmt.Errorf("--map: %w", err)
			}
			if k == correction.MapZSpace {
				z := correction.ZSpaceConfig()
				c.Bins, c.MinPairs = z.Bins, z.MinPairs
			}
			c.Map = k
		}
		if f.Changed("window") {
			c.Window = window
		}
		if f.Changed("min-pairs") {
			c.MinPairs = minPairs
		}
		if f.Changed("weight-cap") {
			c.WeightCap = weightCap
		}
		if f.Changed("eps") {
			c.Eps = eps
		}
		if f.Changed("ddof") {
			c.DDOF = ddof
		}
		c.Debias = !noDebias
		c.Denoise = !noDenoise
		c.TrustGate = trustGate
		if err := c.Validate(); err != nil {
			return c, err
		}
		return c, nil
	}
}

// correctOptions holds correct's flags; its run method is the command's body.
type correctOptions struct {
	a          *app
	cfg        correct.Config
	correction func() (correction.Config, error)
}

func newCorrectCmd(a *app) *cobra.Command {
	o := &correctOptions{a: a}
	cmd := &cobra.Command{
		Use: "correct",
		Example: `  wmrl correct --metrics-addr :9466
  wmrl correct --topic-prefix lab. --redis redis://redis:6379/0 --redis-prefix lab --transactional-id lab-correct-0
  wmrl correct --mode reference --window 2000 --max-masked-share 0.2`,
		Short: "Run the stateful correction consumer (exactly-once, Kafka transactions)",
		Long: `correct joins step manifests, predicted and executed rewards per run, seals each complete step
in order, runs the correction core (Online Debiasing + Inverse-Variance Denoising + group-relative
advantages) and produces the advantage rows (Arrow IPC chunks) and the calibration snapshots in
the same Kafka transaction as its input offsets. Read its outputs with read_committed.

State: the compacted calibration topic is the source of truth; Redis (--redis) caches versioned
snapshots under <redis-prefix>:{run/stream}:… for fast loads and for other services (see
'go doc github.com/wmrl/wmrl/consumers/correct' for the key layout).

Every instance needs its own --transactional-id, stable across its restarts: a restarted instance
fences its predecessor's unfinished transaction. Its default, wmrl-correct-<host>, carries the
topic prefix under any prefix other than wmrl. (lab.wmrl-correct-<host>), as the group and the
Redis prefix do, so the correct of a second pipeline on the host does not fence the first. It is also the default --instance-id (static
group membership), so a restarted instance takes its partitions back without a rebalance. SIGTERM
finishes the current transaction and leaves the group. Broker and Redis outages are ridden out in
place (the transaction is aborted, state rebuilt from the changelog once the broker answers);
/readyz is non-200 meanwhile.

Runs end with their end-of-run record ('wmrl runs end', 'wmrl generate') or, with
--run-idle-timeout, after a time without input: the run leaves memory, its end is written to the
changelog (a rebuild skips it) and to Redis, and --ended-run-retention later its changelog keys
are tombstoned and its Redis keys expire (docs/stages.md, "The end of a run").`,
		Args: cobra.NoArgs,
		RunE: o.run,
	}
	o.correction = correctionFlags(cmd.Flags())
	cfg := &o.cfg
	f := cmd.Flags()
	f.StringVar(&cfg.Group, "group", correct.DefaultGroup, "consumer group (under a --topic-prefix other than wmrl.: <prefix>"+correct.DefaultGroup+")")
	f.StringVar(&cfg.TransactionalID, "transactional-id", hostTransactionalID(), "transactional id (unique per instance, stable across restarts; under a --topic-prefix other than wmrl.: <prefix>"+hostTransactionalID()+")")
	f.StringVar(&cfg.InstanceID, "instance-id", "", "static group member id (stable per instance): a restart takes its partitions back at once (default: the --transactional-id, itself from the host/pod name; set it empty for dynamic membership)")
	f.DurationVar(&cfg.SessionTimeout, "session-timeout", 0, "group session timeout (default 45s)")
	f.IntVar(&cfg.ChunkBytes, "chunk-bytes", topics.DefaultChunkBytes, "maximum bytes of one Arrow payload on the advantages topic")
	f.IntVar(&cfg.KeepStates, "keep-states", correct.DefaultKeepStates, "versioned Redis snapshots kept per run/stream")
	f.StringVar(&cfg.RedisPrefix, "redis-prefix", correct.DefaultRedisPrefix, "Redis key namespace (under a --topic-prefix other than wmrl.: <prefix>"+correct.DefaultRedisPrefix+")")
	f.BoolVar(&cfg.AllowConfigChange, "allow-config-change", false, "continue when stored state was built with other correction settings (its calibration restarts)")
	f.StringVar(&cfg.MetricsAddr, "metrics-addr", "127.0.0.1:9466", "serve Prometheus /metrics, /healthz and /readyz here (:9466 for every interface; empty: off)")
	f.Float64Var(&cfg.MaxMaskedShare, "max-masked-share", correct.DefaultMaxMaskedShare, "warn when more than this share of a step's rows (per stream) are masked: no usable reward from the world model or the sandbox (exported as wmrl_correct_masked_share either way)")
	f.Int64Var(&cfg.MaxStaleness, "max-staleness", 0, "mask (reason stale) the rows of steps whose manifest's policy_step lags the step by more than this many steps; 0: off")
	f.DurationVar(&cfg.TxnTimeout, "txn-timeout", correct.DefaultTxnTimeout, "broker-side transaction timeout")
	f.IntVar(&cfg.MaxTxnSteps, "max-txn-steps", correct.DefaultMaxTxnSteps, "while a backlog is being read, seal at most this many steps per transaction (1: one poll per transaction)")
	f.DurationVar(&cfg.MaxTxnLinger, "max-txn-linger", correct.DefaultMaxTxnLinger, "longest a backlog batch waits before its transaction commits (live traffic commits every poll)")
	f.DurationVar(&cfg.ProgressInterval, "progress-interval", correct.DefaultProgressInterval, "period of the info-level progress line")
	f.DurationVar(&cfg.EndedRunRetention, "ended-run-retention", correct.DefaultEndedRunRetention,
		"how long an ended run's calibration changelog keys and Redis keys stay after its end: then its changelog keys are tombstoned (compaction drops them) and its Redis keys expire; until then dashboards and 'wmrl runs' show it and its late records are dead-lettered run_ended. Default a day: late records of a finished run arrive within hours, and 50 runs a day leave ~50 ended runs behind, not every run ever seen. 0: keep them for ever")
	f.DurationVar(&cfg.RunIdleTimeout, "run-idle-timeout", 0,
		"end a run that has had no input record for this long, by publishing its end-of-run record (reason idle) at its last sealed step; buffered incomplete steps are dead-lettered run_ended. 0 (the default): off, since a trainer paused for a long evaluation or checkpoint must not lose its run. Where trainers die without ending their runs, set it well above the longest pause (e.g. 6h)")
	limitFlags(f, &cfg.Limits, true)
	return cmd
}

// limitFlags registers the buffering limits of the correction consumer (correct.Limits); replay
// takes the per-run and per-step ones (part of correct.DigestConfig).
func limitFlags(f *pflag.FlagSet, l *correct.Limits, instance bool) {
	f.IntVar(&l.PendingStepsPerRun, "max-pending-steps-per-run", correct.DefaultPendingStepsPerRun, "dead-letter (pending-steps-exceeded) records of steps this many or more steps beyond the run's first incomplete step")
	f.IntVar(&l.StepGroups, "max-step-groups", correct.DefaultStepGroups, "dead-letter (step-too-large) manifests with more groups")
	f.IntVar(&l.StepRows, "max-step-rows", correct.DefaultStepRows, "dead-letter (step-too-large) manifests claiming more rollouts in all, and rewards beyond 3× this many for a step without a manifest")
	if instance {
		f.IntVar(&l.PendingSteps, "max-pending-steps", correct.DefaultPendingSteps, "per instance: dead-letter (instance-pending-exceeded) records that would open a step beyond this many buffered ones")
		f.IntVar(&l.PendingGroups, "max-pending-groups", correct.DefaultPendingGroups, "per instance: dead-letter (instance-pending-exceeded) manifests that would buffer more groups in all")
		f.IntVar(&l.ActiveRuns, "max-active-runs", correct.DefaultActiveRuns, "per instance: dead-letter (too-many-runs) records of a new run while this many runs are held (docs/capacity.md sizes it)")
		f.IntVar(&l.HeldDeadLetters, "max-held-dead-letters", correct.DefaultHeldDeadLetters, "per instance: past this many dead letters waiting for their transaction, fold further ones per partition into one dead letter by reference (dead-letters-exceeded)")
	}
}

func (o *correctOptions) run(cmd *cobra.Command, _ []string) error {
	a, cfg := o.a, o.cfg
	cfg.TransactionalID = a.identity(cmd, "transactional-id", cfg.TransactionalID, hostTransactionalID())
	cfg.RedisPrefix = a.identity(cmd, "redis-prefix", cfg.RedisPrefix, correct.DefaultRedisPrefix)
	if !cmd.Flags().Changed("instance-id") {
		// Both ids are unique per instance and stable across its restarts, so one can be the other.
		cfg.InstanceID = cfg.TransactionalID
	}
	cc, err := o.correction()
	if err != nil {
		return err
	}
	cfg.Correction = cc
	if cfg.EndedRunRetention < 0 || cfg.RunIdleTimeout < 0 {
		return fmt.Errorf("--ended-run-retention %v, --run-idle-timeout %v: durations are >= 0 (0: keep for ever, off)", cfg.EndedRunRetention, cfg.RunIdleTimeout)
	}
	if cfg.EndedRunRetention == 0 {
		cfg.EndedRunRetention = -1 // for ever (Config's zero is the default)
	}
	// Replay derives the same bound from the same flag, so it skips the same batches.
	cfg.Limits.BatchBytes = a.conn.BatchLimit(topics.MaxRecordBytes)
	if cfg.KafkaOpts, err = a.kafkaOpts(); err != nil {
		return err
	}
	rdb, err := a.redis()
	if err != nil {
		return err
	}
	defer rdb.Close()
	cfg.Redis = rdb
	if err := a.useRegistry(); err != nil {
		return err
	}
	cfg.Names = a.conn.Names()
	cfg.Group = a.groupFor(cmd, cfg.Group, correct.DefaultGroup)
	cfg.Logger = a.log
	cfg.StartupTimeout = a.startupLeft()
	c, err := correct.NewConsumer(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	return c.Run(ctx)
}
