package demo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/sim"
	"github.com/wmrl/wmrl/sinks/trainer"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/task"
	"github.com/wmrl/wmrl/topics"
)

// train is the trainer sink: it takes each step's fused advantages off the topic, applies the
// policy-gradient update, reads the sealed calibration state back from Redis for the progress
// display and lets the generator sample the next step.
func (a *armRun) train(ctx context.Context, stream *trainer.Stream, store *statestore.Store, run string) (sim.Result, error) {
	res := sim.Result{Arm: a.arm.Name, Seed: a.cfg.Seed, InitialScore: a.pol.ExpectedScore(a.eval)}
	n := a.cfg.Sim.Groups * a.cfg.Sim.GroupSize
	adv, wts, masked := make([]float64, n), make([]float64, n), make([]bool, n)
	weightInForce := 1.0
	corr, err := correction.New(a.arm.Correction)
	if err != nil {
		return res, fmt.Errorf("trainer: arm %s: %w", a.arm.Name, err)
	}
	// window is the state sealed after the previous step: the trust gate of step v is decided on it.
	window := corr.NewState(run, sim.Stream)
	for v := int64(0); v < int64(a.cfg.Sim.Steps); v++ {
		st, samples, err := a.nextStep(ctx, stream, v, n)
		if err != nil {
			return res, err
		}
		rec := sim.StepRecord{Step: int(v), CalibrationMAE: math.NaN(), RawMAE: math.NaN(), AnchorWeight: weightInForce,
			Gate: window.Gate(), GateOn: a.arm.Correction.TrustGate}
		var calErr, rawErr float64
		pairs := 0
		groups := map[string]bool{}
		for _, r := range st.Rows {
			i, err := a.index(r.GroupID, r.RolloutID, int(v))
			if err != nil {
				return res, err
			}
			adv[i], wts[i], masked[i] = r.Advantage, r.Weight, !r.Mask
			if r.ExecutedOK {
				groups[r.GroupID] = true
				if r.PredictedOK {
					res.Pairs = append(res.Pairs, sim.Pair{Step: int(v), Predicted: r.Predicted, Executed: r.Executed})
					calErr += math.Abs(r.Calibrated - r.Executed)
					rawErr += math.Abs(r.Predicted - r.Executed)
					pairs++
				}
			}
		}
		if err := a.pol.Update(samples, adv, wts, masked, a.cfg.Sim.LR); err != nil {
			return res, fmt.Errorf("trainer: update step %d: %w", v, err)
		}
		state, err := a.sealedState(ctx, store, run, v)
		if err != nil {
			return res, err
		}
		rec.DebiasShift = debiasShift(corr, st.Rows)
		rec.Score = a.pol.ExpectedScore(a.eval)
		rec.Entropy = a.pol.Entropy()
		rec.AnchorGroups = len(groups)
		if pairs > 0 {
			rec.CalibrationMAE, rec.RawMAE = calErr/float64(pairs), rawErr/float64(pairs)
		}
		a.recordCounters(&rec, state)
		weightInForce = state.AnchorWeight()
		window = state
		res.State = state
		res.Steps = append(res.Steps, rec)
		res.Maps = sim.AppendMap(res.Maps, int(v), state)
		if err := st.Ack(ctx); err != nil {
			return res, fmt.Errorf("trainer: ack step %d: %w", v, err)
		}
		a.policyMu.Lock()
		a.trained = v + 1
		a.policyCond.Broadcast()
		a.policyMu.Unlock()
		a.onStep(rec)
	}
	res.Final = a.pol.Clone()
	return res, nil
}

// nextStep waits up to the stall timeout for step v's n advantage rows and takes the step's n
// samples over from the generator.
func (a *armRun) nextStep(ctx context.Context, stream *trainer.Stream, v int64, n int) (*trainer.Step, []task.Solution, error) {
	sctx, cancel := context.WithTimeout(ctx, a.cfg.StallTimeout)
	st, err := stream.Next(sctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return nil, nil, fmt.Errorf("%w: no advantages for step %d within %s", ErrStalled, v, a.cfg.StallTimeout)
		}
		return nil, nil, fmt.Errorf("trainer: %w", err)
	}
	if st.Step != v {
		return nil, nil, fmt.Errorf("trainer: got step %d, want %d", st.Step, v)
	}
	a.policyMu.Lock()
	samples := a.samples[v]
	delete(a.samples, v)
	a.policyMu.Unlock()
	if len(st.Rows) != n || len(samples) != n {
		return nil, nil, fmt.Errorf("trainer: step %d has %d rows and %d samples, want %d", v, len(st.Rows), len(samples), n)
	}
	return st, samples, nil
}

// recordCounters copies into rec the arm's execution and prediction counters so far and the
// fit of the step's sealed state.
func (a *armRun) recordCounters(rec *sim.StepRecord, state *correction.State) {
	rec.Executions = int(a.executions.Load())
	rec.ExecCompute = time.Duration(a.execNanos.Load())
	rec.ExecOverhead = time.Duration(a.ovhNanos.Load())
	rec.Predictions = int(a.predictions.Load())
	rec.WMCompute = time.Duration(a.wmNanos.Load())
	rec.NoiseRatio, _ = state.NoiseRatio()
	rec.FitVersion = state.FitVersion()
	rec.Pairs = state.Pairs()
}

// index maps a row back to its sample: group j of the step, rollout i of the group.
func (a *armRun) index(groupID, rolloutID string, step int) (int, error) {
	for j := range a.cfg.Sim.Groups {
		if topics.GroupID(int64(step), j) != groupID {
			continue
		}
		for i := range a.cfg.Sim.GroupSize {
			if topics.RolloutID(groupID, i) == rolloutID {
				return j*a.cfg.Sim.GroupSize + i, nil
			}
		}
	}
	return 0, fmt.Errorf("trainer: row %s/%s is not a rollout of step %d", groupID, rolloutID, step)
}

// sealedState reads the calibration state sealed after step v from Redis. The consumer writes
// Redis right after its transaction commits, so the trainer may see the advantages a moment
// before the state: poll briefly.
func (a *armRun) sealedState(ctx context.Context, store *statestore.Store, run string, v int64) (*correction.State, error) {
	deadline := time.Now().Add(a.cfg.StallTimeout)
	for {
		b, err := store.ReadState(ctx, run, sim.Stream, v)
		if err == nil {
			st, err := correction.DecodeState(b)
			if err != nil {
				return nil, fmt.Errorf("redis state of step %d: %w", v, err)
			}
			return st, nil
		}
		if !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("redis state of step %d: %w", v, err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: no Redis state for step %d within %s", ErrStalled, v, a.cfg.StallTimeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}
