package task

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/mat"
)

// WorldModelConfig sets the fidelity of the proxy. Each knob is a real
// shortcut whose side effects become the world model's bias and noise.
type WorldModelConfig struct {
	// Seed varies which training rows the proxy draws; the draw is also
	// keyed by the problem and the solution, so predictions are
	// deterministic.
	Seed int64
	// Subsample is the number of training rows the proxy fits on. Fewer
	// rows: cheaper, noisier, pessimistic for data-hungry models.
	Subsample int
	// Probe is the number of other training rows the proxy scores the fit
	// on (a small self-made hold-out; the real validation rows are never
	// available to it).
	Probe int
	// IterFraction scales the solution's iterations/boosting rounds (at
	// least one is run). Short runs under-rate slow learners and miss late
	// divergence.
	IterFraction float64
	// CapacityFraction scales the random network's width and the Fourier
	// feature dimension.
	CapacityFraction float64
	// Optimism in [0,1] is the weight of the in-sample score of the fit in
	// the raw proxy score, like judging an experiment partly by its training
	// loss. It makes the proxy optimistic for configurations that overfit.
	Optimism float64
	// Floor, Ceil and Gamma define the monotone read-out
	// Floor + (Ceil−Floor)·raw^Gamma, which compresses the range and lifts
	// poor scores, as a hedging judge would.
	Floor, Ceil, Gamma float64
}

// DefaultWorldModelConfig is calibrated so that the proxy costs ~1/20 of a
// real execution while remaining clearly informative.
func DefaultWorldModelConfig() WorldModelConfig {
	return WorldModelConfig{
		Subsample:        48,
		Probe:            48,
		IterFraction:     0.1,
		CapacityFraction: 0.25,
		Optimism:         0.5,
		Floor:            0.1,
		Ceil:             0.9,
		Gamma:            0.7,
	}
}

// Validate reports the first invalid knob.
func (c WorldModelConfig) Validate() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("%w: %s = %v, want %s", ErrInvalidConfig, field, v, want)
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case c.Subsample < 2:
		return bad("Subsample", c.Subsample, ">= 2")
	case c.Probe < 2:
		return bad("Probe", c.Probe, ">= 2")
	case c.Subsample+c.Probe > NumTrain:
		return bad("Subsample+Probe", c.Subsample+c.Probe, fmt.Sprintf("<= %d training rows", NumTrain))
	case !(c.IterFraction > 0 && c.IterFraction <= 1):
		return bad("IterFraction", c.IterFraction, "in (0,1]")
	case !(c.CapacityFraction > 0 && c.CapacityFraction <= 1):
		return bad("CapacityFraction", c.CapacityFraction, "in (0,1]")
	case !(c.Optimism >= 0 && c.Optimism <= 1):
		return bad("Optimism", c.Optimism, "in [0,1]")
	case !(finite(c.Floor) && finite(c.Ceil) && c.Floor >= 0 && c.Floor < c.Ceil && c.Ceil <= 1):
		return bad("Floor/Ceil", [2]float64{c.Floor, c.Ceil}, "0 <= Floor < Ceil <= 1")
	case !(c.Gamma > 0 && finite(c.Gamma)):
		return bad("Gamma", c.Gamma, "> 0")
	}
	return nil
}

// WorldModel is the cheap proxy for Execute: it runs the solution's own code
// at low fidelity on a subsample of the training view and reads the result
// through a monotone distortion. It never sees validation rows or real
// scores; its bias and noise are consequences of those shortcuts.
type WorldModel struct {
	cfg WorldModelConfig
	err error
}

// NewWorldModel returns a world model for cfg. A config whose fields other
// than Seed are all zero means DefaultWorldModelConfig (with that Seed). An
// invalid config makes every Predict return the validation error.
func NewWorldModel(cfg WorldModelConfig) *WorldModel {
	if (cfg == WorldModelConfig{Seed: cfg.Seed}) {
		seed := cfg.Seed
		cfg = DefaultWorldModelConfig()
		cfg.Seed = seed
	}
	return &WorldModel{cfg: cfg, err: cfg.Validate()}
}

// Config returns the effective configuration.
func (w *WorldModel) Config() WorldModelConfig { return w.cfg }

// Predict estimates the score Execute would give s, from the training view
// only. It is deterministic in (config, problem identity, s.Effective()).
func (w *WorldModel) Predict(ctx context.Context, train TrainView, s Solution) (float64, error) {
	if w.err != nil {
		return 0, w.err
	}
	if train.x == nil {
		return 0, ErrNoProblem
	}
	if train.kind != Regression && train.kind != Classification {
		return 0, fmt.Errorf("%w: %d", ErrInvalidKind, int(train.kind))
	}
	if err := s.Validate(); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("task: world model: %w", err)
	}
	c := w.cfg
	e := s.Effective()
	seed := runSeed(0x776f726c64^uint64(c.Seed), train.seed, train.kind, e)
	perm := rand.New(rand.NewPCG(seed, 0x73756273616d706c)).Perm(train.Rows())
	fitX, fitY := rows(train, perm[:c.Subsample])
	probeX, probeY := rows(train, perm[c.Subsample:c.Subsample+c.Probe])
	fid := fidelity{iterFrac: c.IterFraction, capFrac: c.CapacityFraction}
	out, err := run(ctx, train.kind, fitX, fitY, e, fid, seed, probeX, fitX)
	if err != nil {
		return 0, fmt.Errorf("task: world model %s: %w", s, err)
	}
	held := score(train.kind, out[0], probeY)
	in := score(train.kind, out[1], fitY)
	raw := (1-c.Optimism)*held + c.Optimism*in
	return c.Floor + (c.Ceil-c.Floor)*math.Pow(raw, c.Gamma), nil
}

func rows(t TrainView, idx []int) (*mat.Dense, []float64) {
	x := mat.NewDense(len(idx), t.Cols(), nil)
	y := make([]float64, len(idx))
	for i, r := range idx {
		x.SetRow(i, t.x.RawRowView(r))
		y[i] = t.y[r]
	}
	return x, y
}
