package sim

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// PairKind says which pre-registered rule (docs/anchors.md, "What counts as a win") judges a
// pairing.
type PairKind uint8

const (
	// PairPolicy compares an anchor policy's arm with the same arm under random anchors:
	// win, loss or tie.
	PairPolicy PairKind = iota
	// PairGate compares an arm with the trust gate on with the same arm with it off:
	// help, cost or neutral.
	PairGate
)

// Verdicts of the pre-registered rules.
const (
	VerdictWin     = "win"
	VerdictLoss    = "loss"
	VerdictTie     = "tie"
	VerdictHelp    = "help"
	VerdictCost    = "cost"
	VerdictNeutral = "neutral"
)

// Pairing is one comparison, paired by seed: Arm against its baseline Base.
type Pairing struct {
	Arm, Base string
	Kind      PairKind
}

// PolicyPairings pairs every arm run under a policy other than random with the arm it was derived
// from (WithPolicy names it "<base>-<policy>"), when that arm is among arms too.
func PolicyPairings(arms []Arm) []Pairing {
	names := map[string]bool{}
	for _, a := range arms {
		names[a.Name] = true
	}
	var out []Pairing
	for _, a := range arms {
		if a.Policy == PolicyRandom {
			continue
		}
		if base, ok := strings.CutSuffix(a.Name, "-"+a.Policy.String()); ok && names[base] {
			out = append(out, Pairing{Arm: a.Name, Base: base, Kind: PairPolicy})
		}
	}
	return out
}

// GatePairings pairs every arm run with the trust gate ("<base>-gate", WithTrustGate) with the same
// arm without it, when that arm is among arms too.
func GatePairings(arms []Arm) []Pairing {
	names := map[string]bool{}
	for _, a := range arms {
		names[a.Name] = true
	}
	var out []Pairing
	for _, a := range arms {
		if !a.Correction.TrustGate {
			continue
		}
		if base, ok := strings.CutSuffix(a.Name, ArmGateSuffix); ok && names[base] {
			out = append(out, Pairing{Arm: a.Name, Base: base, Kind: PairGate})
		}
	}
	return out
}

// PairedSide is one arm of a pairing, over the seeds both arms ran.
type PairedSide struct {
	// AnchorFraction is the realised share of groups executed (anchor groups over steps ×
	// groups), mean over seeds.
	AnchorFraction float64
	// MaxWeight is the largest inverse-propensity weight of any step of any seed (0: none).
	MaxWeight float64
	// GateClosed is the fraction of steps with the trust gate closed, mean over seeds; NaN for
	// an arm without the gate.
	GateClosed float64
	Reached    int // seeds that reached the target
	// ExecutionsToTarget is over the seeds that reached the target; ScoreAtEqual is the score at
	// the last step with cumulative executions ≤ E* (PairedComparison), over all seeds.
	ExecutionsToTarget, ScoreAtEqual Estimate
}

// PairedComparison is a pairing's statistics and verdict.
type PairedComparison struct {
	Pairing
	Seeds     int // seeds in which both arms and real-GRPO ran
	Arm, Base PairedSide
	// ExecDiff is executions-to-target of Arm minus Base, per seed in which both reached the
	// target; ScoreDiff the score at equal executions of Arm minus Base, per seed, at
	// E* = the smaller of the two arms' total executions in that seed.
	ExecDiff, ScoreDiff Estimate
	Verdict             string
}

// Paired computes every pairing over results; the target of a seed is targetFraction ×
// real-GRPO's final score in it, and groups is the number of groups per step (for the realised
// anchor fraction). A seed counts only where both arms and real-GRPO ran.
func Paired(results []Result, pairings []Pairing, targetFraction float64, groups int) ([]PairedComparison, error) {
	if groups < 1 {
		return nil, fmt.Errorf("%w: paired analysis: groups %d, want >= 1", ErrConfig, groups)
	}
	type key struct {
		arm  string
		seed int64
	}
	byKey := map[key]Result{}
	var seeds []int64
	seen := map[int64]bool{}
	for _, r := range results {
		byKey[key{r.Arm, r.Seed}] = r
		if !seen[r.Seed] {
			seen[r.Seed] = true
			seeds = append(seeds, r.Seed)
		}
	}
	var out []PairedComparison
	for _, p := range pairings {
		c := PairedComparison{Pairing: p}
		var sides [2]struct{ frac, gate, toExec, atEq []float64 }
		var execDiff, scoreDiff []float64
		for _, seed := range seeds {
			a, okA := byKey[key{p.Arm, seed}]
			b, okB := byKey[key{p.Base, seed}]
			rg, okR := byKey[key{ArmRealGRPO, seed}]
			if !okA || !okB || !okR {
				continue
			}
			c.Seeds++
			target := targetFraction * rg.FinalScore()
			eStar := min(totalExecutions(a), totalExecutions(b))
			var reach [2]ToTarget
			for i, r := range []Result{a, b} {
				s := &sides[i]
				side := &c.Arm
				if i == 1 {
					side = &c.Base
				}
				s.frac = append(s.frac, realisedAnchorFraction(r, groups))
				if g, ok := GateClosedFraction(r); ok {
					s.gate = append(s.gate, g)
				}
				for _, st := range r.Steps {
					side.MaxWeight = max(side.MaxWeight, st.MaxPropensityWeight)
				}
				if reach[i] = FirstReach(r, target); reach[i].Reached {
					side.Reached++
					s.toExec = append(s.toExec, float64(reach[i].Executions))
				}
				s.atEq = append(s.atEq, ScoreAtExecutions(r, eStar))
			}
			if reach[0].Reached && reach[1].Reached {
				execDiff = append(execDiff, float64(reach[0].Executions-reach[1].Executions))
			}
			scoreDiff = append(scoreDiff, sides[0].atEq[len(sides[0].atEq)-1]-sides[1].atEq[len(sides[1].atEq)-1])
		}
		for i, side := range []*PairedSide{&c.Arm, &c.Base} {
			side.AnchorFraction = NewEstimate(sides[i].frac).Mean
			side.GateClosed = NewEstimate(sides[i].gate).Mean
			side.ExecutionsToTarget = NewEstimate(sides[i].toExec)
			side.ScoreAtEqual = NewEstimate(sides[i].atEq)
		}
		c.ExecDiff, c.ScoreDiff = NewEstimate(execDiff), NewEstimate(scoreDiff)
		c.Verdict = verdict(c)
		out = append(out, c)
	}
	return out, nil
}

func totalExecutions(r Result) int {
	if len(r.Steps) == 0 {
		return 0
	}
	return r.Steps[len(r.Steps)-1].Executions
}

// realisedAnchorFraction is the run's anchor groups over its steps × groups.
func realisedAnchorFraction(r Result, groups int) float64 {
	if len(r.Steps) == 0 {
		return math.NaN()
	}
	n := 0
	for _, s := range r.Steps {
		n += s.AnchorGroups
	}
	return float64(n) / float64(len(r.Steps)*groups)
}

// ScoreAtExecutions is r's score after the last step whose cumulative executions are ≤ e; the
// untrained policy's score when no step is (the first step alone already spent more).
func ScoreAtExecutions(r Result, e int) float64 {
	score := r.InitialScore
	for _, s := range r.Steps {
		if s.Executions > e {
			break
		}
		score = s.Score
	}
	return score
}

// upper and lower are the ends of an estimate's 95% interval; NaN when it has none (fewer than
// two values), so no comparison with them holds.
func (e Estimate) upper() float64 { return e.Mean + e.CI }
func (e Estimate) lower() float64 { return e.Mean - e.CI }

// verdict applies the pre-registered rule of c.Kind (docs/anchors.md, "What counts as a win").
// An interval "excludes 0" strictly; an estimate without an interval excludes nothing.
func verdict(c PairedComparison) string {
	if c.Kind == PairGate {
		switch {
		case c.ScoreDiff.lower() > 0:
			return VerdictHelp
		case c.ScoreDiff.upper() < 0:
			return VerdictCost
		}
		return VerdictNeutral
	}
	switch {
	case c.ExecDiff.upper() < 0 && c.Arm.Reached >= c.Base.Reached && !(c.ScoreDiff.upper() < 0):
		return VerdictWin
	case c.ExecDiff.lower() > 0 || c.ScoreDiff.upper() < 0:
		return VerdictLoss
	}
	return VerdictTie
}

// PairedHeader is the header of WritePairedCSV; CIs are 95% half-widths (Student t over seeds).
var PairedHeader = []string{
	"arm", "base", "kind", "seeds", "anchor_fraction", "base_anchor_fraction", "max_weight", "base_max_weight",
	"gate_closed", "base_gate_closed",
	"reached", "base_reached", "executions_to_target_mean", "executions_to_target_ci",
	"base_executions_to_target_mean", "base_executions_to_target_ci", "exec_diff_mean", "exec_diff_ci", "exec_diff_n",
	"score_at_equal_mean", "score_at_equal_ci", "base_score_at_equal_mean", "base_score_at_equal_ci",
	"score_diff_mean", "score_diff_ci", "score_diff_n", "verdict",
}

// PairedRows are the CSV rows of cs, each prefixed by prefix (a grid cell's coordinates).
func PairedRows(cs []PairedComparison, prefix ...string) [][]string {
	f := func(x float64) string {
		if math.IsNaN(x) {
			return ""
		}
		return csvFloat(x)
	}
	var rows [][]string
	for _, c := range cs {
		kind := "policy"
		if c.Kind == PairGate {
			kind = "gate"
		}
		row := append(append([]string(nil), prefix...), c.Pairing.Arm, c.Pairing.Base, kind, strconv.Itoa(c.Seeds),
			f(c.Arm.AnchorFraction), f(c.Base.AnchorFraction), f(c.Arm.MaxWeight), f(c.Base.MaxWeight),
			f(c.Arm.GateClosed), f(c.Base.GateClosed),
			strconv.Itoa(c.Arm.Reached), strconv.Itoa(c.Base.Reached),
			f(c.Arm.ExecutionsToTarget.Mean), f(c.Arm.ExecutionsToTarget.CI),
			f(c.Base.ExecutionsToTarget.Mean), f(c.Base.ExecutionsToTarget.CI),
			f(c.ExecDiff.Mean), f(c.ExecDiff.CI), strconv.Itoa(c.ExecDiff.N),
			f(c.Arm.ScoreAtEqual.Mean), f(c.Arm.ScoreAtEqual.CI), f(c.Base.ScoreAtEqual.Mean), f(c.Base.ScoreAtEqual.CI),
			f(c.ScoreDiff.Mean), f(c.ScoreDiff.CI), strconv.Itoa(c.ScoreDiff.N), c.Verdict)
		rows = append(rows, row)
	}
	return rows
}

// WritePairedCSV writes one row per comparison.
func WritePairedCSV(w io.Writer, cs []PairedComparison) error {
	return writeCSV(w, PairedHeader, PairedRows(cs))
}

// PairedTable writes cs as a Markdown table followed by its legend.
func PairedTable(w io.Writer, cs []PairedComparison, targetFraction float64) error {
	if _, err := fmt.Fprint(w, "| arm vs base | anchor frac | max w | gate closed | reached | execs→tgt arm | execs→tgt base | Δ execs (n) | score@E* arm | score@E* base | Δ score@E* | verdict |\n"+
		"|---|---|---|---|---|---|---|---|---|---|---|---|\n"); err != nil {
		return fmt.Errorf("sim: paired table: %w", err)
	}
	for _, c := range cs {
		fmt.Fprintf(w, "| %s vs %s | %.3f / %.3f | %s | %s | %d / %d of %d | %s | %s | %s (%d) | %s | %s | %s | **%s** |\n",
			c.Pairing.Arm, c.Pairing.Base, c.Arm.AnchorFraction, c.Base.AnchorFraction, formatWeight(c.Arm.MaxWeight), formatGate(c.Arm.GateClosed, c.Base.GateClosed),
			c.Arm.Reached, c.Base.Reached, c.Seeds, c.Arm.ExecutionsToTarget.Format(0), c.Base.ExecutionsToTarget.Format(0),
			signedFormat(c.ExecDiff, 1), c.ExecDiff.N, c.Arm.ScoreAtEqual.Format(3), c.Base.ScoreAtEqual.Format(3),
			signedFormat(c.ScoreDiff, 4), c.Verdict)
	}
	_, err := fmt.Fprintf(w, `
Paired by seed (docs/anchors.md, "Metrics and intervals"); mean ± 95%% t-interval over seeds. Target: %.0f%% of
real-GRPO's final score in the seed. anchor frac: realised share of groups executed (arm / base);
max w: largest inverse-propensity weight; gate closed: share of steps with the trust gate closed
(arm / base); reached: seeds reaching the target (arm / base); Δ execs:
arm − base executions-to-target over the n seeds where both reach it; score@E*: score at the last
step with cumulative executions ≤ E*, the smaller total of the two arms in the seed; verdict by the
pre-registered rule ("What counts as a win": win/loss/tie for a policy vs random,
help/cost/neutral for the gate on vs off).
`, 100*targetFraction)
	if err != nil {
		return fmt.Errorf("sim: paired table: %w", err)
	}
	return nil
}

func formatWeight(w float64) string {
	if w == 0 {
		return "—"
	}
	return strconv.FormatFloat(w, 'f', 2, 64)
}

func formatGate(arm, base float64) string {
	if math.IsNaN(arm) && math.IsNaN(base) {
		return "—"
	}
	f := func(x float64) string {
		if math.IsNaN(x) {
			return "—"
		}
		return strconv.FormatFloat(x, 'f', 3, 64)
	}
	return f(arm) + " / " + f(base)
}

// signedFormat is e.Format with an explicit sign on the mean.
func signedFormat(e Estimate, decimals int) string {
	s := e.Format(decimals)
	if e.N > 0 && e.Mean >= 0 {
		s = "+" + s
	}
	return s
}

// PairedBlock is the comparisons of one grid cell; Values are the cell's coordinates, in the
// order of the keys WritePairedGridCSV is given.
type PairedBlock struct {
	Values      []string
	Comparisons []PairedComparison
}

// WritePairedGridCSV writes the comparisons of several cells, one row each, prefixed by the
// cell's values of keys.
func WritePairedGridCSV(w io.Writer, keys []string, blocks []PairedBlock) error {
	var rows [][]string
	for _, b := range blocks {
		if len(b.Values) != len(keys) {
			return fmt.Errorf("%w: paired cell has %d coordinates for %d keys", ErrConfig, len(b.Values), len(keys))
		}
		rows = append(rows, PairedRows(b.Comparisons, b.Values...)...)
	}
	return writeCSV(w, append(append([]string(nil), keys...), PairedHeader...), rows)
}
