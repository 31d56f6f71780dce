package task

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"
)

// EffectiveSolutions lists every distinct effective solution (decisions the
// model family ignores fixed at index 0), in a fixed order. Every Solution's
// Effective() is in this list exactly once.
func EffectiveSolutions() []Solution {
	var out []Solution
	for m := range len(modelNames) {
		var rec func(d int, c [numDecisions]int)
		rec = func(d int, c [numDecisions]int) {
			if d == numDecisions {
				out = append(out, fromChoices(c))
				return
			}
			if d == decModel || !uses[m][d] {
				rec(d+1, c)
				return
			}
			for k := range decisionSizes[d] {
				c[d] = k
				rec(d+1, c)
			}
		}
		var c [numDecisions]int
		c[decModel] = m
		rec(0, c)
	}
	return out
}

// EvalSet holds the true score of every effective solution, averaged over a
// fixed set of problems. With it, a policy's expected true score is an exact
// finite sum rather than a Monte Carlo estimate, which makes learning curves
// smooth and replayable.
type EvalSet struct {
	problems  []string
	solutions []Solution
	scores    []float64
}

// NewEvalSet executes every effective solution on every problem (about
// len(EffectiveSolutions()) × len(problems) real executions, spread over
// workers goroutines; the result does not depend on workers).
func NewEvalSet(ctx context.Context, problems []*Problem, workers int) (*EvalSet, error) {
	if len(problems) == 0 {
		return nil, errors.New("task: eval set: no problems")
	}
	workers = max(1, workers)
	e := &EvalSet{solutions: EffectiveSolutions()}
	for _, p := range problems {
		if p == nil {
			return nil, ErrNoProblem
		}
		e.problems = append(e.problems, p.String())
	}
	e.scores = make([]float64, len(e.solutions))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for i, sol := range e.solutions {
		g.Go(func() error {
			sum := 0.0
			for _, p := range problems {
				s, err := Execute(ctx, p, sol)
				if err != nil {
					return err
				}
				sum += s
			}
			e.scores[i] = sum / float64(len(problems))
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("task: eval set: %w", err)
	}
	return e, nil
}

// Problems names the problems the scores average over.
func (e *EvalSet) Problems() []string { return append([]string(nil), e.problems...) }

// Len is the number of effective solutions.
func (e *EvalSet) Len() int { return len(e.solutions) }

// At returns effective solution i and its mean true score.
func (e *EvalSet) At(i int) (Solution, float64) { return e.solutions[i], e.scores[i] }

// Best returns the effective solution with the highest mean true score
// (first on ties).
func (e *EvalSet) Best() (Solution, float64) {
	b := 0
	for i, s := range e.scores {
		if s > e.scores[b] {
			b = i
		}
	}
	return e.solutions[b], e.scores[b]
}

// ExpectedScore returns the policy's exact expected true score over the eval
// set's problems: Σ over effective solutions of π(solution) · score, where
// π marginalizes the decisions a model family ignores.
func (p *Policy) ExpectedScore(e *EvalSet) float64 {
	var probs [numDecisions][]float64
	for d := range probs {
		probs[d] = softmax(p.logits[d])
	}
	total := 0.0
	for i, s := range e.solutions {
		q := 1.0
		c := s.choices()
		for d := range c {
			if uses[s.Model][d] {
				q *= probs[d][c[d]]
			}
		}
		total += q * e.scores[i]
	}
	return total
}
