package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/task"
	"github.com/wmrl/wmrl/topics"
)

// ErrConfig reports an unusable simulation configuration.
var ErrConfig = errors.New("sim: invalid config")

// Config is the task loop shared by all arms of a sweep.
type Config struct {
	Steps     int     // training steps
	Groups    int     // groups per step (one fresh problem each)
	GroupSize int     // rollouts per group (G)
	LR        float64 // policy learning rate
	// WorldModel is the proxy's fidelity; its Seed is replaced by the run's seed.
	WorldModel task.WorldModelConfig
	// ExecOverhead is the simulated sandbox start-up per execution. It is accounted, not slept.
	ExecOverhead time.Duration
	// ErrorModel, if not nil, replaces WorldModel by r̂ = r + b(τ) + ξ (docs/error_grid.md).
	ErrorModel *ErrorModel
}

// DefaultConfig is the paper's step shape (G = 8, 8 groups per step) with the task engineer's
// learning rate and the task's default world model.
func DefaultConfig() Config {
	return Config{Steps: 80, Groups: 8, GroupSize: 8, LR: 1, WorldModel: task.DefaultWorldModelConfig()}
}

// Validate reports the first unusable field.
func (c Config) Validate() error {
	switch {
	case c.Steps < 1:
		return fmt.Errorf("%w: steps %d, want >= 1", ErrConfig, c.Steps)
	case c.Groups < 1:
		return fmt.Errorf("%w: groups %d, want >= 1", ErrConfig, c.Groups)
	case c.GroupSize < 2:
		return fmt.Errorf("%w: group size %d, want >= 2 (advantages are group-relative)", ErrConfig, c.GroupSize)
	case !(c.LR > 0) || math.IsInf(c.LR, 0):
		return fmt.Errorf("%w: lr %v, want > 0", ErrConfig, c.LR)
	case c.ExecOverhead < 0:
		return fmt.Errorf("%w: exec overhead %v, want >= 0", ErrConfig, c.ExecOverhead)
	}
	if err := c.WorldModel.Validate(); err != nil {
		return fmt.Errorf("%w: world model: %w", ErrConfig, err)
	}
	if c.ErrorModel != nil {
		return c.ErrorModel.Validate()
	}
	return nil
}

// StepRecord is the state of one arm after training step Step. Counters are cumulative.
type StepRecord struct {
	Step int
	// Score is the policy's exact expected true score on the held-out problems after the update.
	Score        float64
	Executions   int           // real executions so far (primary compute measure)
	ExecCompute  time.Duration // measured wall time of those executions
	ExecOverhead time.Duration // simulated sandbox start-up, Executions × Config.ExecOverhead
	Predictions  int           // world-model predictions so far
	WMCompute    time.Duration // measured wall time of those predictions
	AnchorGroups int           // anchor groups in this step
	// CalibrationMAE is the mean |f̂(predicted) − executed| over this step's anchor rollouts,
	// under the map in force before the step (out of sample); RawMAE the same for the raw
	// prediction. NaN when the step had no anchor rollouts.
	CalibrationMAE, RawMAE float64
	AnchorWeight           float64 // IVD weight of anchor rows used in this step
	// MaxPropensityWeight is the largest inverse-propensity weight 1/π_g of the step's anchor
	// groups under a weighted policy (routed, mixed); 0 under the others.
	MaxPropensityWeight float64
	NoiseRatio          float64 // s̄² after the step
	FitVersion          uint64  // refits so far
	Pairs               int     // anchor pairs in the window after the step
	Entropy             float64 // policy entropy after the update (nats)
	// DebiasShift is mean |A(f(r̂)) − A(r̂)| over the step's unmasked world-model rows: how far
	// the calibration map moved their advantages (correction.DebiasEffect; 0 without OD).
	DebiasShift float64
	// Gate is the trust gate evaluated on the window this step's rows were calibrated with
	// (correction.Gate), whether or not the arm gates; GateOn says whether it masked the step's
	// world-model rows when closed (Arm.Correction.TrustGate).
	Gate   correction.Gate
	GateOn bool
}

// GateLabel is steps.csv's gate column: "off" for an arm without the trust gate, else "open" or
// "closed".
func (s StepRecord) GateLabel() string {
	if !s.GateOn {
		return "off"
	}
	return s.Gate.String()
}

// Pair is one anchor observation: the raw world-model score and the executed score.
type Pair struct {
	Step                int
	Predicted, Executed float64
}

// Map is the calibration map sealed after Step (breakpoints X → Y; empty: identity).
type Map struct {
	Step       int
	FitVersion uint64
	X, Y       []float64
}

// AppendMap appends the state's map to maps if its fit version is new.
func AppendMap(maps []Map, step int, st *correction.State) []Map {
	if n := len(maps); n > 0 && maps[n-1].FitVersion == st.FitVersion() {
		return maps
	}
	x, y := st.ScoreBreakpoints()
	if x == nil && st.FitVersion() > 0 {
		return maps // the z-space map maps advantages, not scores: nothing to draw
	}
	return append(maps, Map{Step: step, FitVersion: st.FitVersion(), X: x, Y: y})
}

// Result is one arm × seed run.
type Result struct {
	Arm          string
	Seed         int64
	InitialScore float64
	Steps        []StepRecord
	// Pairs are every anchor pair in step order, and State the calibration state sealed after
	// the last step (its Breakpoints are the fitted map), for calibration plots.
	Pairs []Pair
	// Maps are the fitted calibration maps over the run: one per refit, sealed after Step.
	Maps  []Map
	State *correction.State
	// Final is the policy after the last step.
	Final *task.Policy
}

// FinalScore is the score after the last step.
func (r Result) FinalScore() float64 {
	if len(r.Steps) == 0 {
		return r.InitialScore
	}
	return r.Steps[len(r.Steps)-1].Score
}

// Stream is the stream every simulated group belongs to: the generator's default, so a simulated
// run and the same run through the Kafka pipeline build identical calibration states.
const Stream = "main"

// RunID is the run id of a seed; every arm of a seed shares it so they get the same anchor groups.
func RunID(seed int64) string { return "sim-" + strconv.FormatInt(seed, 10) }

// samplerStream is the PCG stream of the policy sampler ("sim-samp"): fixed, so the seed alone
// decides every sampled solution.
const samplerStream = 0x73696d2d73616d70

// NewSampler is the random source the policy samples from in a run of seed. The demo's
// generator uses it too, which is what makes a pipeline arm draw exactly the simulated samples.
func NewSampler(seed int64) *rand.Rand { return rand.New(rand.NewPCG(uint64(seed), samplerStream)) }

// TrainingProblem is the fresh problem of (seed, step, group): a splitmix64 mix of the three,
// kept non-negative so it can never coincide with a held-out problem (negative seeds); the kind
// alternates with a hash bit so both kinds are trained on.
func TrainingProblem(seed int64, step, group int) *task.Problem {
	h := splitmix(splitmix(splitmix(uint64(seed))^uint64(step)) ^ uint64(group))
	kind := task.Regression
	if h>>63 == 1 {
		kind = task.Classification
	}
	return task.NewProblem(int64(h&(1<<62-1)), kind)
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// EvalProblems returns the n fixed held-out problems, alternating regression and classification,
// with seeds −1, −2, … that TrainingProblem never produces.
func EvalProblems(n int) []*task.Problem {
	out := make([]*task.Problem, n)
	for i := range out {
		kind := task.Regression
		if i%2 == 1 {
			kind = task.Classification
		}
		out[i] = task.NewProblem(-int64(i+1), kind)
	}
	return out
}

// predict is the world model's score of solution s of group j, rollout i, of step v (the error
// model's r̂ when cfg has one), counted in rec.
func predict(ctx context.Context, cfg Config, wm *task.WorldModel, p *task.Problem, train task.TrainView, s task.Solution, seed int64, v, j, i int, rec *StepRecord) (float64, error) {
	rec.Predictions++
	if em := cfg.ErrorModel; em != nil {
		// r̂ from the real score: a simulation device, neither an
		// execution nor world-model compute.
		r, _, err := em.Scores.score(ctx, p, s, seed, v, j)
		if err != nil {
			return 0, fmt.Errorf("sim: error model: %w", err)
		}
		return em.predict(r, s, seed, v, j, i), nil
	}
	t0 := time.Now()
	pred, err := wm.Predict(ctx, train, s)
	rec.WMCompute += time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("sim: world model: %w", err)
	}
	return pred, nil
}

// execute is the executed score of an anchor rollout's solution s, counted in rec.
func execute(ctx context.Context, cfg Config, p *task.Problem, s task.Solution, seed int64, v, j int, rec *StepRecord) (float64, error) {
	t0 := time.Now()
	var score float64
	var err error
	if cfg.ErrorModel != nil {
		// Cached scores make the measured time meaningless here;
		// error-grid reports count executions only.
		score, _, err = cfg.ErrorModel.Scores.score(ctx, p, s, seed, v, j)
	} else {
		score, err = task.Execute(ctx, p, s)
	}
	rec.ExecCompute += time.Since(t0)
	rec.Executions++
	rec.ExecOverhead += cfg.ExecOverhead
	if err != nil {
		return 0, fmt.Errorf("sim: execute: %w", err)
	}
	return score, nil
}

// Run trains one arm for one seed. observe, if not nil, is called after every step (from the
// calling goroutine). The result depends only on (cfg, arm, eval, seed), except the measured
// wall times.
func Run(ctx context.Context, cfg Config, arm Arm, eval *task.EvalSet, seed int64, observe func(StepRecord)) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	if eval == nil {
		return Result{}, fmt.Errorf("%w: nil eval set", ErrConfig)
	}
	if err := arm.validate(); err != nil {
		return Result{}, err
	}
	r, err := newArmRun(cfg, arm, eval, seed)
	if err != nil {
		return Result{}, err
	}
	for v := range cfg.Steps {
		if err := ctx.Err(); err != nil {
			return r.res, err
		}
		if err := r.step(ctx, v); err != nil {
			return r.res, err
		}
		if observe != nil {
			observe(r.rec)
		}
	}
	r.res.State = r.state
	r.res.Final = r.pol
	return r.res, nil
}

// validate checks the arm's anchor fraction, and that a policy other than random runs where
// its propensities mean something: a fraction strictly inside (0,1) and the default mode with
// an isotonic or centred map.
func (arm Arm) validate() error {
	if !(arm.AnchorFraction >= 0 && arm.AnchorFraction <= 1) {
		return fmt.Errorf("%w: arm %s: anchor fraction %v, want in [0,1]", ErrConfig, arm.Name, arm.AnchorFraction)
	}
	if arm.Policy == PolicyRandom {
		return nil
	}
	c := arm.Correction
	switch {
	case int(arm.Policy) >= len(policyNames):
		return fmt.Errorf("%w: arm %s: %v", ErrConfig, arm.Name, arm.Policy)
	case !(arm.AnchorFraction > 0 && arm.AnchorFraction < 1):
		return fmt.Errorf("%w: arm %s: policy %v needs an anchor fraction in (0,1), have %v", ErrConfig, arm.Name, arm.Policy, arm.AnchorFraction)
	case c.Mode != correction.ModeDefault || c.Map == correction.MapZSpace:
		return fmt.Errorf("%w: arm %s: policy %v needs the default mode with an isotonic or centred map", ErrConfig, arm.Name, arm.Policy)
	}
	return nil
}

// armRun is one arm-seed run in progress: its models, its correction state, the result so
// far and the buffers every step reuses.
type armRun struct {
	cfg   Config
	arm   Arm
	eval  *task.EvalSet
	seed  int64
	run   string
	corr  *correction.Corrector
	state *correction.State
	wm    *task.WorldModel
	pol   *task.Policy
	rng   *rand.Rand
	res   Result
	rec   StepRecord

	samples []task.Solution
	adv     []float64
	wts     []float64
	masked  []bool
	index   map[string]int // rollout id → position in samples
	rows    []correction.Row
	preds   [][]float64     // world-model scores per group of the current step
	probs   []*task.Problem // training problem per group of the current step
}

func newArmRun(cfg Config, arm Arm, eval *task.EvalSet, seed int64) (*armRun, error) {
	corr, err := correction.New(arm.Correction)
	if err != nil {
		return nil, fmt.Errorf("sim: arm %s: %w", arm.Name, err)
	}
	run := RunID(seed)
	wmCfg := cfg.WorldModel
	wmCfg.Seed = seed
	pol := task.NewPolicy()
	n := cfg.Groups * cfg.GroupSize
	return &armRun{
		cfg: cfg, arm: arm, eval: eval, seed: seed, run: run,
		corr:    corr,
		state:   corr.NewState(run, Stream),
		wm:      task.NewWorldModel(wmCfg),
		pol:     pol,
		rng:     NewSampler(seed),
		res:     Result{Arm: arm.Name, Seed: seed, InitialScore: pol.ExpectedScore(eval)},
		samples: make([]task.Solution, n),
		adv:     make([]float64, n),
		wts:     make([]float64, n),
		masked:  make([]bool, n),
		index:   make(map[string]int, n),
		preds:   make([][]float64, cfg.Groups),
	}, nil
}

// step runs training step v: sample and score, execute the anchors, correct, update the
// policy, and record the step.
func (r *armRun) step(ctx context.Context, v int) error {
	step := correction.Step{Run: r.run, Stream: Stream, Step: int64(v)}
	r.rec.Step, r.rec.AnchorGroups = v, 0
	clear(r.index)
	weightInForce := r.state.AnchorWeight()
	if err := r.sampleAndPredict(ctx, v, &step); err != nil {
		return err
	}
	calErr, rawErr, nPairs, err := r.executeAnchors(ctx, v, &step)
	if err != nil {
		return err
	}
	r.rec.Gate, r.rec.GateOn = r.state.Gate(), r.arm.Correction.TrustGate
	if r.rows, err = r.corr.Advance(r.state, step, r.rows[:0]); err != nil {
		return fmt.Errorf("sim: correct step %d: %w", v, err)
	}
	for _, row := range r.rows {
		i, ok := r.index[row.RolloutID]
		if !ok {
			return fmt.Errorf("sim: correction returned unknown rollout %q", row.RolloutID)
		}
		r.adv[i], r.wts[i], r.masked[i] = row.Advantage, row.Weight, !row.Mask
	}
	if err := r.pol.Update(r.samples, r.adv, r.wts, r.masked, r.cfg.LR); err != nil {
		return fmt.Errorf("sim: update step %d: %w", v, err)
	}
	r.record(v, weightInForce, calErr, rawErr, nPairs)
	return nil
}

// sampleAndPredict samples and scores every group of step v first: a policy other than
// random decides its anchors from the world model's scores. Executions are pure functions of
// (problem, solution), so running them after all predictions leaves random's results as they
// were.
func (r *armRun) sampleAndPredict(ctx context.Context, v int, step *correction.Step) error {
	cfg := r.cfg
	r.probs = r.probs[:0]
	for j := range cfg.Groups {
		p := TrainingProblem(r.seed, v, j)
		gid := topics.GroupID(int64(v), j)
		group, err := r.pol.Sample(r.rng, cfg.GroupSize)
		if err != nil {
			return fmt.Errorf("sim: sample: %w", err)
		}
		g := correction.Group{ID: gid}
		train := p.Train()
		r.preds[j] = r.preds[j][:0]
		for i, s := range group {
			rid := topics.RolloutID(gid, i)
			r.index[rid] = j*cfg.GroupSize + i
			r.samples[j*cfg.GroupSize+i] = s
			pred, err := predict(ctx, cfg, r.wm, p, train, s, r.seed, v, j, i, &r.rec)
			if err != nil {
				return err
			}
			r.preds[j] = append(r.preds[j], pred)
			g.Rollouts = append(g.Rollouts, correction.Rollout{ID: rid, Predicted: correction.Reward{Score: pred, OK: true}})
		}
		r.probs = append(r.probs, p)
		step.Groups = append(step.Groups, g)
	}
	return nil
}

// executeAnchors lets the arm's policy choose the anchor groups of step v and executes their
// rollouts, returning the summed absolute error of the calibrated and the raw world-model
// scores over the nPairs executed rollouts.
func (r *armRun) executeAnchors(ctx context.Context, v int, step *correction.Step) (calErr, rawErr float64, nPairs int, err error) {
	arm, cfg := r.arm, r.cfg
	var unc func(float64) float64
	if arm.Policy != PolicyRandom {
		unc = r.state.Uncertainty().At
	}
	pis := arm.Policy.propensities(arm.AnchorFraction, unc, r.preds)
	r.rec.MaxPropensityWeight = 0
	for j := range step.Groups {
		g := &step.Groups[j]
		if g.Anchor = arm.Policy.chooses(r.run, g.ID, arm.AnchorFraction, pis[j]); !g.Anchor {
			continue
		}
		r.rec.AnchorGroups++
		if arm.Policy.weighted() {
			g.Weight = 1 / pis[j]
			r.rec.MaxPropensityWeight = max(r.rec.MaxPropensityWeight, g.Weight)
		}
		for i := range g.Rollouts {
			ro := &g.Rollouts[i]
			pred := ro.Predicted.Score
			score, err := execute(ctx, cfg, r.probs[j], r.samples[j*cfg.GroupSize+i], r.seed, v, j, &r.rec)
			if err != nil {
				return 0, 0, 0, err
			}
			ro.Executed = correction.Reward{Score: score, OK: true}
			r.res.Pairs = append(r.res.Pairs, Pair{Step: v, Predicted: pred, Executed: score})
			calErr += math.Abs(r.state.Calibrate(pred) - score)
			rawErr += math.Abs(pred - score)
			nPairs++
		}
	}
	return calErr, rawErr, nPairs, nil
}

// record completes step v's record after the policy update and appends it, with the map in
// force, to the result.
func (r *armRun) record(v int, weightInForce, calErr, rawErr float64, nPairs int) {
	rec := &r.rec
	rec.DebiasShift = r.corr.DebiasEffect(r.rows).MeanShift
	rec.Score = r.pol.ExpectedScore(r.eval)
	rec.CalibrationMAE, rec.RawMAE = math.NaN(), math.NaN()
	if nPairs > 0 {
		rec.CalibrationMAE, rec.RawMAE = calErr/float64(nPairs), rawErr/float64(nPairs)
	}
	rec.AnchorWeight = weightInForce
	if r.arm.Correction.Mode == correction.ModeReference {
		// The authors' loop weights a step's anchor rows with the weight
		// after that step's own anchor groups.
		rec.AnchorWeight = r.state.AnchorWeight()
	}
	rec.NoiseRatio, _ = r.state.NoiseRatio()
	rec.FitVersion = r.state.FitVersion()
	rec.Pairs = r.state.Pairs()
	rec.Entropy = r.pol.Entropy()
	r.res.Steps = append(r.res.Steps, *rec)
	r.res.Maps = AppendMap(r.res.Maps, v, r.state)
}
