package task

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Policy is a factorized softmax policy: one independent categorical
// distribution per decision. It stands in for the agent LLM: sampling a
// solution is generating a rollout, and Update is a GRPO policy-gradient
// step.
type Policy struct {
	logits [numDecisions][]float64
}

// NewPolicy returns the uniform policy (all logits zero).
func NewPolicy() *Policy {
	p := &Policy{}
	for d, n := range decisionSizes {
		p.logits[d] = make([]float64, n)
	}
	return p
}

// Clone returns an independent copy.
func (p *Policy) Clone() *Policy {
	c := &Policy{}
	for d := range p.logits {
		c.logits[d] = append([]float64(nil), p.logits[d]...)
	}
	return c
}

// Probabilities returns the softmax distribution of decision d (0 to 5:
// model, features, reg, lr, iters, capacity), or nil if d is out of range.
func (p *Policy) Probabilities(d int) []float64 {
	if d < 0 || d >= numDecisions {
		return nil
	}
	return softmax(p.logits[d])
}

// Logits returns a copy of the logits of decision d, or nil if out of range.
func (p *Policy) Logits(d int) []float64 {
	if d < 0 || d >= numDecisions {
		return nil
	}
	return append([]float64(nil), p.logits[d]...)
}

func softmax(l []float64) []float64 {
	m := slices.Max(l)
	out := make([]float64, len(l))
	s := 0.0
	for i, v := range l {
		out[i] = math.Exp(v - m)
		s += out[i]
	}
	for i := range out {
		out[i] /= s
	}
	return out
}

// Sample draws n solutions. With the same rng state it returns the same
// solutions.
func (p *Policy) Sample(rng *rand.Rand, n int) ([]Solution, error) {
	if rng == nil {
		return nil, errors.New("task: sample: nil rng")
	}
	if n < 0 {
		return nil, fmt.Errorf("task: sample: negative count %d", n)
	}
	var probs [numDecisions][]float64
	for d := range probs {
		probs[d] = softmax(p.logits[d])
	}
	out := make([]Solution, n)
	for i := range out {
		var c [numDecisions]int
		for d := range c {
			u := rng.Float64()
			k := len(probs[d]) - 1
			acc := 0.0
			for j, q := range probs[d] {
				acc += q
				if u < acc {
					k = j
					break
				}
			}
			c[d] = k
		}
		out[i] = fromChoices(c)
	}
	return out, nil
}

// LogProb returns log π(s), the sum over decisions.
func (p *Policy) LogProb(s Solution) (float64, error) {
	if err := s.Validate(); err != nil {
		return 0, err
	}
	lp := 0.0
	for d, k := range s.choices() {
		lp += math.Log(softmax(p.logits[d])[k])
	}
	return lp, nil
}

// Mode returns the most likely solution (lowest index on ties).
func (p *Policy) Mode() Solution {
	var c [numDecisions]int
	for d, l := range p.logits {
		for j, v := range l {
			if v > l[c[d]] {
				c[d] = j
			}
		}
	}
	return fromChoices(c)
}

// Entropy is the joint entropy in nats (the sum over decisions, exact for a
// factorized policy).
func (p *Policy) Entropy() float64 {
	h := 0.0
	for _, l := range p.logits {
		for _, q := range softmax(l) {
			if q > 0 {
				h -= q * math.Log(q)
			}
		}
	}
	return h
}

// Update takes one policy-gradient step: for every rollout i not masked,
// logits of each decision move by lr · advantages[i] · weights[i] ·
// ∇log π(choice_i), averaged over the unmasked rollouts (GRPO with a
// per-row weight, as fused by WMRL). masked[i] true means row i is skipped
// (e.g. it has no reward); a nil masked skips nothing. All unmasked
// advantages and weights must be finite, weights non-negative. If every row
// is masked the policy is unchanged.
func (p *Policy) Update(samples []Solution, advantages, weights []float64, masked []bool, lr float64) error {
	n := len(samples)
	if len(advantages) != n || len(weights) != n || (masked != nil && len(masked) != n) {
		return fmt.Errorf("%w: lengths samples=%d advantages=%d weights=%d masked=%d", ErrInvalidUpdate, n, len(advantages), len(weights), len(masked))
	}
	if math.IsNaN(lr) || math.IsInf(lr, 0) || lr < 0 {
		return fmt.Errorf("%w: learning rate %v", ErrInvalidUpdate, lr)
	}
	var grad [numDecisions][]float64
	var probs [numDecisions][]float64
	for d := range grad {
		grad[d] = make([]float64, len(p.logits[d]))
		probs[d] = softmax(p.logits[d])
	}
	used := 0
	for i, s := range samples {
		if masked != nil && masked[i] {
			continue
		}
		a, w := advantages[i], weights[i]
		if math.IsNaN(a) || math.IsInf(a, 0) {
			return fmt.Errorf("%w: advantage[%d] = %v", ErrInvalidUpdate, i, a)
		}
		if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 {
			return fmt.Errorf("%w: weight[%d] = %v", ErrInvalidUpdate, i, w)
		}
		if err := s.Validate(); err != nil {
			return fmt.Errorf("%w: sample[%d]: %w", ErrInvalidUpdate, i, err)
		}
		used++
		for d, k := range s.choices() {
			for j, q := range probs[d] {
				ind := 0.0
				if j == k {
					ind = 1
				}
				grad[d][j] += a * w * (ind - q)
			}
		}
	}
	if used == 0 {
		return nil
	}
	step := lr / float64(used)
	for d := range grad {
		for j, g := range grad[d] {
			p.logits[d][j] += step * g
		}
	}
	return nil
}
