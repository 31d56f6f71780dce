package task

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"time"

	"gonum.org/v1/gonum/stat"
)

// Execute runs the real experiment: it fits solution s on the problem's
// training rows and scores it on the held-out validation rows. The score is
// in [0,1] (validation R² clipped for regression, balanced accuracy rescaled
// so chance is 0 for classification); a fit that diverges scores 0. The
// result is a pure function of (problem seed, kind, s.Effective()), bit for
// bit, so replays reproduce it.
func Execute(ctx context.Context, p *Problem, s Solution) (float64, error) {
	if p == nil {
		return 0, ErrNoProblem
	}
	if p.kind != Regression && p.kind != Classification {
		return 0, fmt.Errorf("%w: %d", ErrInvalidKind, int(p.kind))
	}
	if err := s.Validate(); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("task: execute: %w", err)
	}
	e := s.Effective()
	out, err := run(ctx, p.kind, p.train.x, p.train.y, e, fullFidelity, runSeed(0x65786563, p.seed, p.kind, e), p.valX)
	if err != nil {
		return 0, fmt.Errorf("task: execute %s: %w", s, err)
	}
	return score(p.kind, out[0], p.valY), nil
}

// Executor wraps Execute with an optional fixed start-up overhead that stands
// in for provisioning an exclusive sandbox. The overhead is waited out (it
// occupies the slot, not the CPU) and reported separately from compute.
type Executor struct {
	Overhead time.Duration
}

// Report is the outcome of one Executor run.
type Report struct {
	Score float64
	// Compute is the wall time of the fit and validation.
	Compute time.Duration
	// Overhead is the simulated sandbox start-up time that preceded it.
	Overhead time.Duration
}

// Run waits out the overhead (honouring ctx), then executes s on p.
func (e Executor) Run(ctx context.Context, p *Problem, s Solution) (Report, error) {
	var r Report
	if e.Overhead > 0 {
		t := time.NewTimer(e.Overhead)
		select {
		case <-ctx.Done():
			t.Stop()
			return r, fmt.Errorf("task: sandbox start-up: %w", ctx.Err())
		case <-t.C:
		}
		r.Overhead = e.Overhead
	}
	start := time.Now()
	sc, err := Execute(ctx, p, s)
	r.Compute = time.Since(start)
	if err != nil {
		return r, err
	}
	r.Score = sc
	return r, nil
}

// runSeed derives the seed of a run's internal randomness from its inputs
// (FNV-1a over a domain tag, the problem identity and the effective
// solution's canonical encoding), so runs are reproducible and independent
// of map order, goroutines or wall time.
func runSeed(tag uint64, seed int64, kind Kind, e Solution) uint64 {
	h := fnv.New64a()
	var buf [24]byte
	binary.LittleEndian.PutUint64(buf[0:], tag)
	binary.LittleEndian.PutUint64(buf[8:], uint64(seed))
	binary.LittleEndian.PutUint64(buf[16:], uint64(kind))
	h.Write(buf[:])
	h.Write(e.Encode())
	return h.Sum64()
}

// score turns raw outputs into a score in [0,1]; non-finite outputs score 0.
func score(kind Kind, pred, y []float64) float64 {
	if len(pred) == 0 || len(pred) != len(y) || !allFinite(pred) {
		return 0
	}
	var s float64
	if kind == Classification {
		var tp, fn, tn, fp float64
		for i, v := range pred {
			pos := v > 0
			switch {
			case y[i] == 1 && pos:
				tp++
			case y[i] == 1:
				fn++
			case pos:
				fp++
			default:
				tn++
			}
		}
		var bacc float64
		switch {
		case tp+fn == 0:
			bacc = tn / (tn + fp)
		case tn+fp == 0:
			bacc = tp / (tp + fn)
		default:
			bacc = (tp/(tp+fn) + tn/(tn+fp)) / 2
		}
		s = 2*bacc - 1
	} else {
		s = stat.RSquaredFrom(pred, y, nil)
	}
	if math.IsNaN(s) {
		return 0
	}
	return math.Min(1, math.Max(0, s))
}
