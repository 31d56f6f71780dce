package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/wmrl/wmrl/sim"
)

// progressLegend defines every column of the demo's progress, printed once under the header.
const progressLegend = `  step: steps applied by the arm's trainer; score: expected true score on held-out problems;
  execs: real executions so far; exec s: their wall time (+ simulated overhead);
  raw err / debiased err: mean |world-model score − executed| over the step's anchor rollouts,
  raw and after the calibration map in force (— without anchors); ivd-w: anchor row weight in
  force (world-model rows 1); fit: refits of the map so far`

// progress prints the demo's progress: on a terminal one table with a row per arm, redrawn in
// place; otherwise one plain line per arm and step, each naming its arm.
type progress struct {
	w      io.Writer
	tty    bool
	arms   []string
	steps  int
	last   map[string]sim.StepRecord
	drawn  bool
	start  time.Time
	lastAt time.Time
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func newProgress(w io.Writer, tty bool, arms []sim.Arm, steps int) *progress {
	p := &progress{w: w, tty: tty, steps: steps, last: map[string]sim.StepRecord{}, start: time.Now()}
	for _, a := range arms {
		p.arms = append(p.arms, a.Name)
	}
	if !tty {
		fmt.Fprintln(w, "progress columns:")
		fmt.Fprintln(w, progressLegend)
		fmt.Fprintln(w, progressHeader)
	}
	return p
}

const progressHeader = "arm         step     score  execs   exec s  raw err  debiased err  ivd-w  fit"

func (p *progress) row(arm string, r sim.StepRecord) string {
	raw, deb, ivd := "—", "—", "—"
	if !math.IsNaN(r.RawMAE) {
		raw, deb = fmt.Sprintf("%.3f", r.RawMAE), fmt.Sprintf("%.3f", r.CalibrationMAE)
	}
	if arm != sim.ArmRealGRPO && arm != sim.ArmPureWM {
		ivd = fmt.Sprintf("%.2f", r.AnchorWeight)
	}
	step := fmt.Sprintf("%d/%d", r.Step+1, p.steps)
	return fmt.Sprintf("%-10s  %7s  %6.3f  %5d  %7.2f  %7s  %12s  %5s  %3d",
		arm, step, r.Score, r.Executions, (r.ExecCompute + r.ExecOverhead).Seconds(), raw, deb, ivd, r.FitVersion)
}

func (p *progress) step(arm string, r sim.StepRecord) {
	p.last[arm] = r
	if !p.tty {
		fmt.Fprintf(p.w, "%s  (%s)\n", p.row(arm, r), time.Since(p.start).Round(100*time.Millisecond))
		return
	}
	if time.Since(p.lastAt) < 100*time.Millisecond && r.Step+1 < p.steps {
		return
	}
	p.lastAt = time.Now()
	p.draw()
}

// draw redraws the table in place: cursor up over the previous drawing, then every line cleared
// and rewritten.
func (p *progress) draw() {
	legend := strings.Split(progressLegend, "\n")
	height := 2 + len(p.arms) + len(legend)
	if p.drawn {
		fmt.Fprintf(p.w, "\x1b[%dA", height)
	}
	p.drawn = true
	fmt.Fprintf(p.w, "\x1b[2K%s elapsed\n", time.Since(p.start).Round(100*time.Millisecond))
	fmt.Fprintf(p.w, "\x1b[2K%s\n", progressHeader)
	for _, a := range p.arms {
		if r, ok := p.last[a]; ok {
			fmt.Fprintf(p.w, "\x1b[2K%s\n", p.row(a, r))
		} else {
			fmt.Fprintf(p.w, "\x1b[2K%-10s  waiting for step 1\n", a)
		}
	}
	for _, l := range legend {
		fmt.Fprintf(p.w, "\x1b[2K%s\n", l)
	}
}

func (p *progress) finish() {
	if p.tty && len(p.last) > 0 {
		p.draw()
	}
}
