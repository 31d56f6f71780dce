package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"

	"github.com/wmrl/wmrl/task"
)

// ErrorModel replaces the task's proxy world model by the paper's error model
// r̂(τ) = r(τ) + b(τ) + ξ(τ) (docs/error_grid.md): r is the rollout's real
// execution score, b(τ) = Bias·(2κ(τ) − 1) a bias driven by the solution's
// elaborateness κ (Elaborateness), not by r, and ξ ~ N(0, Noise²) drawn per
// rollout from a stream keyed by (seed, step, group, index). r̂ is not clipped.
//
// Building r̂ needs r for every rollout. Those executions are a simulation
// device: they are not counted as executions, and they are cached in Scores
// (shared by every run of a grid) because Execute is a pure function of
// (problem, effective solution).
type ErrorModel struct {
	Bias, Noise float64
	// Distortion, if not nil, replaces the real score r by g(r) in r̂ (the
	// calibration-bias family, docs/error_grid.md): r̂ = g(r) + b(τ) + ξ.
	Distortion *Distortion
	// Adversarial reads the truth backwards, r̂ = −g(r) + b(τ) + ξ: a judge that ranks rollouts
	// in reverse, which no increasing calibration map can repair (docs/anchors.md, "Gate cells").
	Adversarial bool
	// Scores caches real scores; nil means no caching.
	Scores *ScoreCache
}

// Validate reports an unusable error model.
func (m ErrorModel) Validate() error {
	if !(m.Bias >= 0) || math.IsInf(m.Bias, 0) || !(m.Noise >= 0) || math.IsInf(m.Noise, 0) {
		return fmt.Errorf("%w: error model bias %v noise %v, want finite and >= 0", ErrConfig, m.Bias, m.Noise)
	}
	if m.Distortion != nil {
		return m.Distortion.Validate()
	}
	return nil
}

// Distortion is a judge that reads a monotone function of the truth,
// g(r) = Offset + Scale·r^Gamma on r ∈ [0, 1]: Gamma ≠ 1 is the non-affine
// miscalibration Online Debiasing exists for, Gamma = 1 an affine one that
// std-normalised GRPO cancels inside every group.
type Distortion struct {
	Offset, Scale, Gamma float64
}

// Power is g(r) = r^γ.
func Power(gamma float64) Distortion { return Distortion{Scale: 1, Gamma: gamma} }

// Affine is g(r) = offset + scale·r.
func Affine(offset, scale float64) Distortion {
	return Distortion{Offset: offset, Scale: scale, Gamma: 1}
}

// Validate reports a distortion that is not finite or not strictly increasing.
func (d Distortion) Validate() error {
	if !(d.Scale > 0) || !(d.Gamma > 0) || math.IsInf(d.Scale, 0) || math.IsInf(d.Gamma, 0) || math.IsNaN(d.Offset) || math.IsInf(d.Offset, 0) {
		return fmt.Errorf("%w: distortion offset %v scale %v gamma %v, want finite, scale and gamma > 0", ErrConfig, d.Offset, d.Scale, d.Gamma)
	}
	return nil
}

// Apply is g(r); r below 0 (never a real score) is read as 0.
func (d Distortion) Apply(r float64) float64 {
	return d.Offset + d.Scale*math.Pow(math.Max(r, 0), d.Gamma)
}

// String names the shape as docs/error_grid.md does: "r^2", "0.3+0.4r".
func (d Distortion) String() string {
	if d.Offset == 0 && d.Scale == 1 {
		return "r^" + strconv.FormatFloat(d.Gamma, 'g', -1, 64)
	}
	s := strconv.FormatFloat(d.Offset, 'g', -1, 64) + "+" + strconv.FormatFloat(d.Scale, 'g', -1, 64) + "r"
	if d.Gamma != 1 {
		s += "^" + strconv.FormatFloat(d.Gamma, 'g', -1, 64)
	}
	return s
}

// Elaborateness κ(s) ∈ [0, 1] is the mean of three normalised features of
// the effective configuration: model family (ridge 0 … boosting 1), feature
// transform (raw 0 … fourier 1) and size — training length or capacity,
// index / 3; no model has both, and Effective zeroes the one it lacks. Plain
// ridge on raw features is 0, boosting on Fourier features with the most
// rounds is 1. It is what a judge reading the code sees as "more work went
// into this".
func Elaborateness(s task.Solution) float64 {
	e := s.Effective()
	return (float64(e.Model)/4 + float64(e.Features)/3 + float64(e.Iters+e.Capacity)/3) / 3
}

// noiseStream is the PCG stream of ξ ("sim-xi").
const noiseStream = 0x73696d2d7869

// predict is r̂ for rollout i of group j at step v of seed, given its real score r.
func (m ErrorModel) predict(r float64, s task.Solution, seed int64, v, j, i int) float64 {
	xi := 0.0
	if m.Noise > 0 {
		key := splitmix(splitmix(splitmix(uint64(v))^uint64(j)) ^ uint64(i))
		xi = rand.New(rand.NewPCG(uint64(seed)^key, noiseStream)).NormFloat64()
	}
	if m.Distortion != nil {
		r = m.Distortion.Apply(r)
	}
	if m.Adversarial {
		r = -r
	}
	return r + float64(m.Bias*(2*Elaborateness(s)-1)) + float64(m.Noise*xi)
}

// ScoreCache memoises real execution scores per (seed, step, group,
// effective solution), which identifies the training problem and the
// solution; it is safe for concurrent use.
type ScoreCache struct {
	mu sync.Mutex
	m  map[scoreKey]float64
}

type scoreKey struct {
	seed      int64
	step, grp int
	effective task.Solution
}

// NewScoreCache returns an empty cache.
func NewScoreCache() *ScoreCache { return &ScoreCache{m: map[scoreKey]float64{}} }

// Len is the number of cached scores.
func (c *ScoreCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// score returns Execute(p, s), from the cache when c is not nil and holds
// it; hit says whether no execution ran.
func (c *ScoreCache) score(ctx context.Context, p *task.Problem, s task.Solution, seed int64, v, j int) (score float64, hit bool, err error) {
	if c == nil {
		score, err = task.Execute(ctx, p, s)
		return score, false, err
	}
	k := scoreKey{seed, v, j, s.Effective()}
	c.mu.Lock()
	score, hit = c.m[k]
	c.mu.Unlock()
	if hit {
		return score, true, nil
	}
	if score, err = task.Execute(ctx, p, s); err != nil {
		return 0, false, err
	}
	c.mu.Lock()
	c.m[k] = score
	c.mu.Unlock()
	return score, false, nil
}
