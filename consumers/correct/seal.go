package correct

import (
	"encoding/hex"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sort"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

// complete reports whether every rollout of every group has its rewards. Executed rewards whose
// rollout id is not among a full group's predicted ids are dead-lettered here (the world model
// scores every rollout, so its ids are authoritative).
func (e *engine) complete(b *stepBuf) bool {
	if b.manifest == nil {
		return false
	}
	ok := true
	for _, g := range b.manifest.Groups {
		p := b.pred[g.GroupID]
		if p == nil || len(p.order) < g.Size {
			ok = false
			continue
		}
		if !g.Anchor {
			continue
		}
		x := b.exec[g.GroupID]
		if x == nil {
			ok = false
			continue
		}
		for _, id := range slices.Clone(x.order) {
			if _, known := p.byID[id]; !known {
				rw := x.byID[id]
				x.remove(id)
				e.deadLetter(rw.rec, kindExecuted, conflict("executed reward for rollout %s, which has no predicted reward in full group %s", id, g.GroupID))
			}
		}
		if len(x.order) < g.Size {
			ok = false
		}
	}
	return ok
}

// sealReady seals, per run in run-id order, every step that is next in line and complete. Runs
// are independent (each holds its own states), so with several runs they are sealed on all cores;
// the output keeps run-id order, so results do not depend on the split.
func (e *engine) sealReady() ([]*sealed, error) {
	type job struct {
		rb    *runBuf
		steps []*stepBuf
		out   []*sealed
		err   error
	}
	var jobs []*job
	for _, id := range slices.Sorted(maps.Keys(e.runs)) {
		rb := e.runs[id]
		var steps []*stepBuf
		// complete reads (and dead-letters from) one step's buffers alone, so the whole line
		// can be judged before any of it is sealed.
		for v := rb.sealed + 1; ; v++ {
			b := rb.steps[v]
			if b == nil || !e.complete(b) {
				break
			}
			steps = append(steps, b)
		}
		if len(steps) > 0 {
			jobs = append(jobs, &job{rb: rb, steps: steps})
		}
	}
	for len(e.scratch) < max(1, min(runtime.GOMAXPROCS(0), len(jobs))) {
		e.scratch = append(e.scratch, new(sealScratch))
	}
	// A seal that fails stops only its own run; the error is returned below, in run order.
	_ = ordered(len(jobs), func(slot, i int) error {
		j := jobs[i]
		for _, b := range j.steps {
			s, err := e.seal(j.rb, b, e.scratch[slot])
			if err != nil {
				j.err = err
				return nil
			}
			j.out = append(j.out, s)
		}
		return nil
	}, nil)
	var out []*sealed
	for _, j := range jobs {
		out = append(out, j.out...)
		for _, b := range j.steps[:len(j.out)] {
			e.dropStep(b) // counted here, not in seal: runs seal concurrently
		}
		if j.err != nil {
			return out, j.err
		}
		e.retireIfDone(j.rb)
	}
	return out, nil
}

// sealScratch is one sealing goroutine's reusable buffers for the correction core's input
// rollouts and output rows, which seal converts at once.
type sealScratch struct {
	rollouts []correction.Rollout
	rows     []correction.Row
}

// seal runs the correction core for every stream of the run at step b.step and advances the run.
// Streams without groups in this step advance with an empty step; a stream first seen now is
// fast-forwarded from an empty state through empty steps 0..step−1, which is deterministic.
func (e *engine) seal(rb *runBuf, b *stepBuf, sc *sealScratch) (*sealed, error) {
	v := b.step
	stale := stalenessOf(b.manifest, e.maxStaleness)
	byStream := sc.groups(b, stale.masked)
	streams := slices.Collect(maps.Keys(rb.states))
	var fresh []string
	for s := range byStream {
		if _, ok := rb.states[s]; !ok {
			streams = append(streams, s)
			fresh = append(fresh, s)
		}
	}
	sort.Strings(streams)
	sort.Strings(fresh)
	out := &sealed{run: rb.id, part: rb.part, step: v, newStream: fresh, lastInput: b.lastInput}
	nrows := 0
	for _, g := range b.manifest.Groups {
		nrows += g.Size
	}
	out.rows = make([]topics.AdvantageRow, 0, nrows)
	next := make(map[string]*correction.State, len(streams))
	for _, s := range streams {
		prev, err := e.prevState(rb, s, v)
		if err != nil {
			return nil, err
		}
		prevTotal := prev.TotalPairs()
		// The engine keeps only the newest state of a stream (older ones are read for Redis
		// writes, never advanced), so prev hands its buffers on.
		rows, st, err := e.corr.CorrectRetire(prev, correction.Step{Run: rb.id, Stream: s, Step: v, Groups: byStream[s]}, sc.rows[:0])
		if err != nil {
			return nil, fmt.Errorf("correct run %s stream %s step %d: %w", rb.id, s, v, err)
		}
		sc.rows = rows
		for i := range rows {
			r := &rows[i]
			out.rows = append(out.rows, stale.apply(toAdvantageRow(r, b.manifest.PolicyVersion), r))
			if r.Stale {
				out.staleRows++
			}
		}
		out.snaps = append(out.snaps, e.snapshot(rb.id, s, v, st, rows))
		if rb.rewrite[s] {
			prevTotal = 0
			delete(rb.rewrite, s)
		}
		out.chunks = append(out.chunks, statestore.WindowChunks(st, prevTotal))
		out.states = append(out.states, st)
		next[s] = st
	}
	topics.SortRows(out.rows)
	rb.states = next
	rb.sealed = v
	delete(rb.steps, v)
	return out, nil
}

// snapshot is the calibration record of stream s of run at step v: st after the step, whose
// output rows are rows.
func (e *engine) snapshot(run, s string, v int64, st *correction.State, rows []correction.Row) topics.CalibrationSnapshot {
	var gate *topics.TrustGate
	if g, ok := st.StepGate(); ok {
		// The gate that decided the step (--trust-gate), on the window before it.
		gate = &topics.TrustGate{Closed: g.Closed, Pairs: g.N, Rho: g.Rho, Lo: g.Lo, Hi: g.Hi}
	}
	pairs, biasRaw, biasCal := anchorBias(rows)
	sum := st.Digest()
	var bx, by []float64
	if v%mapEvery == 0 {
		bx, by = st.ScoreBreakpoints()
	}
	return topics.CalibrationSnapshot{
		RunID: run, Stream: s, Step: v,
		FitVersion: st.FitVersion(), Pairs: st.Pairs(), ConfigHash: e.hash, Settings: e.settings,
		Digest: hex.EncodeToString(sum[:]), State: st.EncodeHead(),
		BreakX: bx, BreakY: by, AnchorWeight: st.AnchorWeight(),
		BiasBefore: biasRaw, BiasAfter: biasCal, StepPairs: pairs,
		Debias: debiasShift(e.corr.DebiasEffect(rows)),
		Gate:   gate,
	}
}

// anchorBias counts the step's anchor rows with both scores and their mean bias (predicted −
// executed) before and after calibration; 0 without pairs.
func anchorBias(rows []correction.Row) (pairs int, before, after float64) {
	for i := range rows {
		r := &rows[i]
		if r.Source == correction.SourceAnchor && r.PredictedOK && r.ExecutedOK {
			pairs++
			before += r.Predicted - r.Executed
			after += r.Calibrated - r.Executed
		}
	}
	if pairs > 0 {
		before /= float64(pairs)
		after /= float64(pairs)
	}
	return pairs, before, after
}

// groups returns the step's groups per stream, their rollouts in sc (the correction core reads
// them only while it runs, so one scratch holds them all).
func (sc *sealScratch) groups(b *stepBuf, stale bool) map[string][]correction.Group {
	byStream := map[string][]correction.Group{}
	total := 0
	for _, g := range b.manifest.Groups {
		total += len(b.pred[g.GroupID].order)
	}
	all := slices.Grow(sc.rollouts[:0], total)
	for _, g := range b.manifest.Groups {
		p := b.pred[g.GroupID]
		at := len(all)
		all = all[:at+len(p.order)]
		grp := correction.Group{ID: g.GroupID, Anchor: g.Anchor, Rollouts: all[at : at : at+len(p.order)]}
		for _, rid := range p.order {
			pr := p.byID[rid]
			r := correction.Rollout{ID: rid, Predicted: correction.Reward{Score: pr.score, OK: pr.ok}, Stale: stale}
			if g.Anchor {
				x := b.exec[g.GroupID].byID[rid]
				r.Executed = correction.Reward{Score: x.score, OK: x.ok}
			}
			grp.Rollouts = append(grp.Rollouts, r)
		}
		byStream[g.Stream] = append(byStream[g.Stream], grp)
	}
	sc.rollouts = all
	return byStream
}

// prevState returns the state stream is sealed at before step v; for a stream first seen at v, an
// empty state fast-forwarded through empty steps 0..v−1, which is deterministic.
func (e *engine) prevState(rb *runBuf, stream string, v int64) (*correction.State, error) {
	if st := rb.states[stream]; st != nil {
		return st, nil
	}
	st := e.corr.NewState(rb.id, stream)
	for i := int64(0); i < v; i++ {
		if _, err := e.corr.Advance(st, correction.Step{Run: rb.id, Stream: stream, Step: i}, nil); err != nil {
			return nil, fmt.Errorf("fast-forward run %s stream %s to step %d: %w", rb.id, stream, v-1, err)
		}
	}
	return st, nil
}

func toAdvantageRow(r *correction.Row, policy string) topics.AdvantageRow {
	a := topics.AdvantageRow{
		RunID: r.Run, Stream: r.Stream, Step: r.Step, GroupID: r.GroupID, RolloutID: r.RolloutID,
		PolicyVersion: policy,
		PredictedOK:   r.PredictedOK, Calibrated: r.Calibrated, ExecutedOK: r.ExecutedOK,
		Used: r.Used, Advantage: r.Advantage, Weight: r.Weight, Mask: r.Mask,
		CalibrationVersion: r.CalibrationVersion,
	}
	if r.PredictedOK {
		a.Predicted = r.Predicted
	}
	if r.ExecutedOK {
		a.Executed = r.Executed
	}
	switch r.Source {
	case correction.SourceAnchor:
		a.Source = topics.SourceAnchor
	case correction.SourceWorldModel:
		a.Source = topics.SourceWorldModel
	}
	return a
}
