package demo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/consumers/correct"
	"github.com/wmrl/wmrl/consumers/sandbox"
	"github.com/wmrl/wmrl/consumers/worldmodel"
	"github.com/wmrl/wmrl/internal/stage"
	"github.com/wmrl/wmrl/internal/topicadmin"
	"github.com/wmrl/wmrl/producers"
	"github.com/wmrl/wmrl/sim"
	"github.com/wmrl/wmrl/sinks/trainer"
	"github.com/wmrl/wmrl/task"
	"github.com/wmrl/wmrl/topics"
	"github.com/wmrl/wmrl/topics/schemareg"
)

// ErrConfig reports an unusable demo configuration.
var ErrConfig = errors.New("demo: invalid config")

// ErrStalled is returned when an arm makes no progress for Config.StallTimeout: some stage is
// not delivering, and waiting longer would hide it.
var ErrStalled = errors.New("demo: pipeline stalled")

// Config configures one demo: the task loop, the arms, and where Kafka and Redis are.
type Config struct {
	// Sim is the task loop (steps, groups, G, lr, world-model fidelity, sandbox overhead). The
	// overhead is really waited out here: it occupies a sandbox slot, as a sandbox start-up would.
	Sim sim.Config
	// AnchorFraction is the WMRL arm's share of executed groups.
	AnchorFraction float64
	// Arms defaults to Arms(AnchorFraction).
	Arms []sim.Arm
	Seed int64
	// EvalProblems is the number of held-out problems of the exact expected score.
	EvalProblems   int
	TargetFraction float64

	// KafkaOpts connect to an external cluster (seed brokers, TLS, SASL); nil starts an embedded
	// kfake cluster. Redis is the external Redis; nil starts an embedded miniredis.
	KafkaOpts []kgo.Opt
	Redis     redis.UniversalClient
	// Embedded, if set, is an embedded Kafka + Redis started by the caller (StartEmbedded) and
	// used instead of KafkaOpts/Redis; the caller closes it, so it can outlive Run (a dashboard
	// still reading the run's topics).
	Embedded *Embedded
	// TopicPrefix is the base prefix; arm a uses topics, consumer groups and transactional ids
	// under "<TopicPrefix><a>." and Redis keys under "<RedisPrefix>-<a>" so arms never share
	// state. Against an external cluster, make both unique per demo (Run deletes nothing).
	TopicPrefix string
	RedisPrefix string
	Partitions  int32
	// SandboxSlots bounds concurrent executions per arm; WMConcurrency concurrent predictions.
	SandboxSlots  int
	WMConcurrency int
	// Format is the record topics' wire format (empty: JSON). Registry, when set, Confluent-frames
	// them against it (Format must then be Protobuf): each arm's schemas are registered at start.
	Format   topics.Format
	Registry *schemareg.Registry
	// StallTimeout fails the demo when an arm seals no step for this long (default 2 min).
	StallTimeout time.Duration
	Logger       *slog.Logger
	// OnStep is called after each arm's trainer applied a step (from the arms' goroutines,
	// serialized).
	OnStep func(arm string, rec sim.StepRecord)
}

// Default prefixes of a demo's topics and Redis keys.
const (
	DefaultTopicPrefix = "wmrl.demo."
	DefaultRedisPrefix = "wmrl-demo"
)

func (c Config) withPrefixes() Config {
	c.TopicPrefix = cmp.Or(c.TopicPrefix, DefaultTopicPrefix)
	c.RedisPrefix = cmp.Or(c.RedisPrefix, DefaultRedisPrefix)
	return c
}

// ArmTopicPrefix is the topic prefix of an arm's topics.
func (c Config) ArmTopicPrefix(arm string) string { return c.withPrefixes().TopicPrefix + arm + "." }

// ArmRedisPrefix is the Redis key prefix of an arm's correction consumer.
func (c Config) ArmRedisPrefix(arm string) string { return c.withPrefixes().RedisPrefix + "-" + arm }

// RedisPrefixOf maps an arm's topic prefix to its Redis key prefix (for a dashboard following the
// demo); other prefixes map to "".
func (c Config) RedisPrefixOf(topicPrefix string) string {
	base := c.withPrefixes().TopicPrefix
	arm, ok := strings.CutPrefix(topicPrefix, base)
	if !ok || !strings.HasSuffix(arm, ".") {
		return ""
	}
	return c.ArmRedisPrefix(strings.TrimSuffix(arm, "."))
}

// Embedded is an in-process Kafka (kfake) and Redis (miniredis).
type Embedded struct {
	KafkaOpts []kgo.Opt
	Redis     *redis.Client
	cluster   *kfake.Cluster
	mr        *miniredis.Miniredis
}

// StartEmbedded starts an embedded Kafka and Redis; Close stops them.
func StartEmbedded() (*Embedded, error) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return nil, fmt.Errorf("demo: embedded kafka: %w", err)
	}
	mr, err := miniredis.Run()
	if err != nil {
		cluster.Close()
		return nil, fmt.Errorf("demo: embedded redis: %w", err)
	}
	return &Embedded{KafkaOpts: []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)},
		Redis: redis.NewClient(&redis.Options{Addr: mr.Addr()}), cluster: cluster, mr: mr}, nil
}

// Close stops the embedded services.
func (e *Embedded) Close() {
	e.Redis.Close()
	e.mr.Close()
	e.cluster.Close()
}

// Arms are the demo's arms: real-GRPO (every group executed; correction runs, anchors use real
// rewards), pure world model (no anchors, no correction) and WMRL (anchors + OD + IVD).
func Arms(anchorFraction float64) []sim.Arm {
	as, err := sim.ArmsByName([]string{sim.ArmRealGRPO, sim.ArmPureWM, sim.ArmWMRL}, anchorFraction)
	if err != nil {
		panic(err) // standard names: cannot fail
	}
	return as
}

// Outcome is a finished demo.
type Outcome struct {
	Results   []sim.Result
	Summary   []sim.ArmSummary
	Eval      time.Duration // building the eval set
	Elapsed   time.Duration // the pipeline run
	Embedded  bool
	FinalLine string
}

// Run starts Kafka and Redis if not given, creates each arm's topics, runs every stage of every
// arm until all trainers applied cfg.Sim.Steps steps, and shuts the stages down.
func Run(ctx context.Context, cfg Config) (*Outcome, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	out := &Outcome{}
	t0 := time.Now()
	eval, err := sim.Eval(ctx, cfg.EvalProblems, 0)
	if err != nil {
		return nil, err
	}
	out.Eval = time.Since(t0)

	kopts, rdb := cfg.KafkaOpts, cfg.Redis
	emb := cfg.Embedded
	if emb == nil && kopts == nil {
		if emb, err = StartEmbedded(); err != nil {
			return nil, err
		}
		defer emb.Close()
	}
	if emb != nil {
		out.Embedded = true
		kopts, rdb = emb.KafkaOpts, emb.Redis
	}
	if rdb == nil {
		return nil, fmt.Errorf("%w: Kafka options given without a Redis client", ErrConfig)
	}
	arms, err := newArms(ctx, cfg, eval, kopts, rdb)
	if err != nil {
		return nil, err
	}

	t1 := time.Now()
	results, err := runArms(ctx, arms)
	if err != nil {
		return nil, err
	}
	out.Elapsed = time.Since(t1)
	out.Results = results
	out.Summary = sim.Summarize(results, cfg.TargetFraction)
	out.FinalLine = FinalLine(results, cfg.TargetFraction)
	return out, nil
}

// withDefaults validates cfg (arms must have distinct names, since they must not share
// topics) and fills every unset option with its default.
func (cfg Config) withDefaults() (Config, error) {
	if err := cfg.Sim.Validate(); err != nil {
		return cfg, err
	}
	if cfg.Arms == nil {
		cfg.Arms = Arms(cfg.AnchorFraction)
	}
	seen := map[string]bool{}
	for _, arm := range cfg.Arms {
		if arm.Name == "" || seen[arm.Name] {
			return cfg, fmt.Errorf("%w: arm name %q empty or repeated (arms must not share topics)", ErrConfig, arm.Name)
		}
		seen[arm.Name] = true
	}
	cfg = cfg.withPrefixes()
	if cfg.Partitions <= 0 {
		cfg.Partitions = 1
	}
	if cfg.SandboxSlots <= 0 {
		cfg.SandboxSlots = 2
	}
	if cfg.WMConcurrency <= 0 {
		cfg.WMConcurrency = 2
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = 2 * time.Minute
	}
	if cfg.TargetFraction <= 0 {
		cfg.TargetFraction = sim.DefaultTargetFraction
	}
	if cfg.EvalProblems <= 0 {
		cfg.EvalProblems = 2
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg, nil
}

// newArms registers each arm's schemas (with a registry) and creates its topics. Every arm's
// topics exist before any arm starts: a creation failure then returns with nothing running,
// instead of leaving started arms behind the deferred shutdowns of the embedded cluster and
// Redis.
func newArms(ctx context.Context, cfg Config, eval *task.EvalSet, kopts []kgo.Opt, rdb redis.UniversalClient) ([]*armRun, error) {
	var (
		mu   sync.Mutex // cfg.OnStep is called from one arm at a time
		arms = make([]*armRun, len(cfg.Arms))
	)
	if cfg.Registry != nil && cfg.Format != topics.FormatProtobuf {
		return nil, fmt.Errorf("%w: a schema registry frames Protobuf records, format is %q", ErrConfig, cfg.Format)
	}
	for i, arm := range cfg.Arms {
		names := topics.NewNames(cfg.ArmTopicPrefix(arm.Name))
		names.Format = cfg.Format
		if cfg.Registry != nil {
			ss, err := schemareg.Schemas(names)
			if err != nil {
				return nil, err
			}
			if _, err := cfg.Registry.Register(ctx, ss...); err != nil {
				return nil, fmt.Errorf("demo: %s: %w", arm.Name, err)
			}
			names.Registry = cfg.Registry
		}
		a := &armRun{cfg: cfg, arm: arm, eval: eval, kopts: kopts, rdb: rdb, log: cfg.Logger.With("arm", arm.Name),
			names: names}
		a.onStep = func(rec sim.StepRecord) {
			mu.Lock()
			defer mu.Unlock()
			if cfg.OnStep != nil {
				cfg.OnStep(arm.Name, rec)
			}
		}
		if err := a.createTopics(ctx); err != nil {
			return nil, err
		}
		arms[i] = a
	}
	return arms, nil
}

// runArms runs every arm concurrently; the first arm to fail cancels the others and its error
// is returned.
func runArms(ctx context.Context, arms []*armRun) ([]sim.Result, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	results := make([]sim.Result, len(arms))
	for i, a := range arms {
		wg.Go(func() {
			r, err := a.run(ctx)
			if err != nil {
				cancel(fmt.Errorf("arm %s: %w", a.arm.Name, err))
				return
			}
			results[i] = r
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return results, nil
}

// FinalLine is the demo's last line: WMRL's speedup to the target in execution compute and both
// final scores.
func FinalLine(results []sim.Result, targetFraction float64) string {
	var real, wmrl *sim.Result
	for i := range results {
		switch results[i].Arm {
		case sim.ArmRealGRPO:
			real = &results[i]
		case sim.ArmWMRL:
			wmrl = &results[i]
		}
	}
	if real == nil || wmrl == nil {
		return "speedup-to-target: n/a (needs both the wmrl and the real-grpo arm)"
	}
	target := targetFraction * real.FinalScore()
	rt, wt := sim.FirstReach(*real, target), sim.FirstReach(*wmrl, target)
	speed := "n/a"
	switch {
	case !wt.Reached:
		speed = fmt.Sprintf("n/a (WMRL did not reach the target %.3f)", target)
	case wt.Executions == 0:
		speed = "∞ (WMRL reached the target before any execution)"
	default:
		speed = fmt.Sprintf("%.2fx", float64(rt.Executions)/float64(wt.Executions))
	}
	return fmt.Sprintf("speedup-to-target: %s (WMRL vs real-GRPO), final score WMRL %.3f vs real-GRPO %.3f",
		speed, wmrl.FinalScore(), real.FinalScore())
}

// armRun is one arm's pipeline: generator → world model + sandbox → correction → trainer.
type armRun struct {
	cfg    Config
	arm    sim.Arm
	eval   *task.EvalSet
	kopts  []kgo.Opt
	rdb    redis.UniversalClient
	names  topics.Names
	log    *slog.Logger
	onStep func(sim.StepRecord)

	problems sync.Map // "<step>/<group id>" → *task.Problem

	executions           atomic.Int64
	execNanos, ovhNanos  atomic.Int64
	predictions, wmNanos atomic.Int64
	policyMu             sync.Mutex
	policyCond           *sync.Cond
	pol                  *task.Policy
	rng                  *rand.Rand
	trained              int64 // steps applied by the trainer
	samples              map[int64][]task.Solution
}

func (a *armRun) createTopics(ctx context.Context) error {
	cl, err := kgo.NewClient(a.kopts...)
	if err != nil {
		return fmt.Errorf("demo: kafka client: %w", err)
	}
	defer cl.Close()
	plan := topicadmin.DefaultPlan(a.names)
	plan.Partitions = a.cfg.Partitions
	plan.Replication = 1
	if _, err := topicadmin.Create(ctx, kadm.NewClient(cl), plan); err != nil {
		return fmt.Errorf("demo: create topics for %s: %w", a.arm.Name, err)
	}
	return nil
}

// problem is the training problem of a group. Group ids are the generator's defaults
// (topics.GroupID, the demo sets them so), and the problem of (seed, step, j) is the one sim
// trains on, which makes a demo arm comparable to — and, up to wall time, identical with — the
// simulated arm.
func (a *armRun) problem(step int64, groupID string) (*task.Problem, error) {
	key := strconv.FormatInt(step, 10) + "/" + groupID
	if p, ok := a.problems.Load(key); ok {
		return p.(*task.Problem), nil
	}
	v, j, err := topics.ParseGroupID(groupID)
	if err != nil {
		return nil, fmt.Errorf("group of step %d: %w", step, err)
	}
	if v != step || j >= a.cfg.Sim.Groups {
		return nil, fmt.Errorf("group %q is not a demo group of step %d (%d groups)", groupID, step, a.cfg.Sim.Groups)
	}
	p := sim.TrainingProblem(a.cfg.Seed, int(step), j)
	a.problems.Store(key, p)
	return p, nil
}

// SampleStep implements producers.BuiltinPolicy: it waits until the trainer applied step−1
// (on-policy: step v is sampled from the policy after v−1's update), then samples one fresh
// problem's group per slot.
func (a *armRun) SampleStep(ctx context.Context, step int64) ([]producers.GroupSpec, error) {
	stop := context.AfterFunc(ctx, func() {
		a.policyMu.Lock()
		a.policyCond.Broadcast()
		a.policyMu.Unlock()
	})
	defer stop()
	a.policyMu.Lock()
	defer a.policyMu.Unlock()
	for a.trained < step && ctx.Err() == nil {
		a.policyCond.Wait()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var groups []producers.GroupSpec
	var all []task.Solution
	for j := range a.cfg.Sim.Groups {
		gid := topics.GroupID(step, j)
		p, err := a.problem(step, gid)
		if err != nil {
			return nil, err
		}
		sols, err := a.pol.Sample(a.rng, a.cfg.Sim.GroupSize)
		if err != nil {
			return nil, err
		}
		g := producers.GroupSpec{GroupID: gid, Prompt: p.String()}
		for i, s := range sols {
			g.Rollouts = append(g.Rollouts, producers.RolloutSpec{RolloutID: topics.RolloutID(gid, i), Artifact: s.Encode()})
		}
		groups = append(groups, g)
		all = append(all, sols...)
	}
	a.samples[step] = all
	return groups, nil
}

func (a *armRun) predict(ctx context.Context, wm *task.WorldModel) worldmodel.PredictFunc {
	return func(ctx context.Context, in worldmodel.Input) (float64, error) {
		s, err := task.DecodeSolution(in.Artifact)
		if err != nil {
			return 0, err
		}
		p, err := a.problem(in.Step, in.GroupID)
		if err != nil {
			return 0, err
		}
		t0 := time.Now()
		score, err := wm.Predict(ctx, p.Train(), s)
		a.wmNanos.Add(int64(time.Since(t0)))
		a.predictions.Add(1)
		return score, err
	}
}

func (a *armRun) execute(ctx context.Context, job sandbox.Job) (float64, error) {
	s, err := task.DecodeSolution(job.Artifact)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", sandbox.ErrInvalidArtifact, err)
	}
	p, err := a.problem(job.Step, job.GroupID)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", sandbox.ErrInvalidArtifact, err)
	}
	rep, err := task.Executor{Overhead: a.cfg.Sim.ExecOverhead}.Run(ctx, p, s)
	a.executions.Add(1)
	a.execNanos.Add(int64(rep.Compute))
	a.ovhNanos.Add(int64(rep.Overhead))
	return rep.Score, err
}

func (a *armRun) run(ctx context.Context) (sim.Result, error) {
	run := sim.RunID(a.cfg.Seed)
	a.pol = task.NewPolicy()
	a.rng = sim.NewSampler(a.cfg.Seed)
	a.policyCond = sync.NewCond(&a.policyMu)
	a.samples = map[int64][]task.Solution{}
	wmCfg := a.cfg.Sim.WorldModel
	wmCfg.Seed = a.cfg.Seed
	s, err := a.newStages(ctx, task.NewWorldModel(wmCfg), run)
	if err != nil {
		return sim.Result{}, err
	}
	defer s.gen.Close()
	defer s.stream.Close()

	sctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var wg sync.WaitGroup
	component := func(name string, run func(context.Context) error) {
		wg.Go(func() {
			if err := run(sctx); err != nil && sctx.Err() == nil {
				stop(fmt.Errorf("%s: %w", name, err))
			}
		})
	}
	component("world-model stage", s.wm.Run)
	component("sandbox stage", s.sb.Run)
	component("correction consumer", s.corr.Run)
	component("generator", func(ctx context.Context) error { _, err := s.gen.Run(ctx); return err })

	res, err := a.train(sctx, s.stream, s.corr.Store(), run)
	stop(nil)
	wg.Wait()
	if err != nil {
		if cause := context.Cause(sctx); cause != nil && !errors.Is(cause, context.Canceled) {
			return res, cause
		}
		return res, err
	}
	return res, nil
}

// armStages are one arm's pipeline components, all built before any of them runs.
type armStages struct {
	wm, sb *stage.Stage
	corr   *correct.Consumer
	gen    *producers.Generator
	stream *trainer.Stream
}

// newStages builds the arm's world-model and sandbox stages, correction consumer, generator
// and trainer sink. Consumer groups and the transactional id live under the arm's topic
// prefix, so two demos on one cluster (distinct prefixes) never join each other's groups or
// fence each other's correction producer.
func (a *armRun) newStages(ctx context.Context, wm *task.WorldModel, run string) (*armStages, error) {
	var s armStages
	scorer, err := worldmodel.NewBuiltinScorer(a.predict(ctx, wm), 0, 0)
	if err != nil {
		return nil, err
	}
	group := func(stage string) string { return a.names.Prefix + stage }
	s.wm, err = worldmodel.NewStage(
		stage.Config{Name: worldmodel.StageName, Group: group("worldmodel"), Names: a.names, KafkaOpts: a.kopts, Logger: a.log, CommitInterval: 200 * time.Millisecond},
		worldmodel.HandlerConfig{Scorer: scorer, Names: a.names, Concurrency: a.cfg.WMConcurrency, Model: "builtin-task-proxy", Logger: a.log})
	if err != nil {
		return nil, fmt.Errorf("world-model stage: %w", err)
	}
	exec, err := sandbox.NewBuiltinExecutor(a.execute, sandbox.BuiltinConfig{})
	if err != nil {
		return nil, err
	}
	pool, err := sandbox.NewPool(exec, a.cfg.SandboxSlots, sandbox.WithLogger(a.log))
	if err != nil {
		return nil, err
	}
	s.sb, err = sandbox.NewStage(
		stage.Config{Name: sandbox.StageName, Group: group("sandbox"), Names: a.names, KafkaOpts: a.kopts, Logger: a.log, CommitInterval: 200 * time.Millisecond},
		sandbox.HandlerConfig{Pool: pool, Names: a.names})
	if err != nil {
		return nil, fmt.Errorf("sandbox stage: %w", err)
	}
	s.corr, err = correct.NewConsumer(correct.Config{
		KafkaOpts: a.kopts, Redis: a.rdb, Names: a.names, Group: group("correct"),
		TransactionalID: group("correct") + "-0", Correction: a.arm.Correction, RedisPrefix: a.cfg.ArmRedisPrefix(a.arm.Name),
		Logger: a.log, ProgressInterval: time.Hour,
	})
	if err != nil {
		return nil, fmt.Errorf("correction consumer: %w", err)
	}
	backend, err := producers.NewBuiltin(a, 0, int64(a.cfg.Sim.Steps))
	if err != nil {
		return nil, err
	}
	s.gen, err = producers.New(backend, producers.Config{RunID: run, Stream: sim.Stream, AnchorFraction: a.arm.AnchorFraction,
		Names: a.names, KafkaOpts: a.kopts, Logger: a.log})
	if err != nil {
		return nil, fmt.Errorf("generator: %w", err)
	}
	s.stream, err = trainer.New(trainer.Config{KafkaOpts: a.kopts, Names: a.names, Group: group("trainer"), RunID: run, Logger: a.log})
	if err != nil {
		s.gen.Close()
		return nil, fmt.Errorf("trainer sink: %w", err)
	}
	return &s, nil
}
