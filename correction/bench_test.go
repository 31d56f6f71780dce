package correction

import (
	"slices"
	"testing"
)

// benchWindows returns full 5000-pair windows: "sim" from the simulation
// (world-model scores quantised to 0.05, so ~21 distinct x — the realistic
// case) and "continuous" (distinct x everywhere — the worst case for PAV).
func benchWindows(b *testing.B) map[string]*State {
	b.Helper()
	out := map[string]*State{}
	c := mustNew(b, DefaultConfig())
	_, out["sim"] = run(b, c, simulate("run", "s", 330, 1))
	st := c.NewState("run", "s")
	r := &splitMix64{s: 2}
	ps := make([]pair, 5000)
	for i := range ps {
		x := r.u()
		ps[i] = unitPair(x, x*x+0.3*(r.u()-0.5))
	}
	st.addPairs(ps)
	if err := st.maybeRefit(); err != nil {
		b.Fatal(err)
	}
	out["continuous"] = st
	for name, st := range out {
		if st.Pairs() != 5000 {
			b.Fatalf("%s window has %d pairs", name, st.Pairs())
		}
	}
	return out
}

// BenchmarkRefit compares wmrl's exact refit on the incrementally sorted
// 5000-pair window with the naive baseline (copy, sort, PAV) in the same
// run. merge16 adds the per-step window update of 16 new pairs (2 anchor
// groups × 8) with 16 evictions.
func BenchmarkRefit(b *testing.B) {
	for _, name := range []string{"sim", "continuous"} {
		st := benchWindows(b)[name]
		b.Run(name+"/incremental", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := fitSortedPairs(st.sorted, false); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/incremental_merge16", func(b *testing.B) {
			s := st.clone()
			win := st.win.pairs()
			r := &splitMix64{s: 3}
			add := make([]pair, 16)
			b.ReportAllocs()
			for b.Loop() {
				for i := range add {
					add[i] = win[int(r.next()%5000)] // same distribution as the window
				}
				s.addPairs(add)
				if err := s.maybeRefit(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/naive_sort_then_pav", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := naiveRefit(&st.win); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkPredict(b *testing.B) {
	for name, st := range benchWindows(b) {
		f := &Isotonic{x: st.fitX, y: st.fitY}
		qs := make([]float64, 1024)
		r := &splitMix64{s: 4}
		for i := range qs {
			qs[i] = r.u()*1.2 - 0.1
		}
		b.Run(name, func(b *testing.B) {
			var sink float64
			i := 0
			for b.Loop() {
				sink += f.Predict(qs[i&1023])
				i++
			}
			_ = sink
			b.ReportMetric(float64(len(st.fitX)), "breakpoints")
		})
	}
}

// BenchmarkStep8x8 times one whole step (8 groups × 8 rollouts, 2 anchor
// groups) on a full window — the same simulation, seed and warm-up as
// bench/reference_bench.py, so ns/op compares directly with its µs/step.
// Correct copies the previous state (prev is kept); Advance updates in place.
func BenchmarkStep8x8(b *testing.B) {
	const warmup, timed = 320, 1680
	steps := simulate("run", "main", warmup+timed, 20260814)
	for _, mode := range []struct {
		name string
		cfg  Config
	}{{"default", DefaultConfig()}, {"default-gate", func() Config { c := DefaultConfig(); c.TrustGate = true; return c }()}, {"reference", ReferenceConfig()}} {
		// default-gate: the trust gate's pass over the window per step, against default in the same run.
		c := mustNew(b, mode.cfg)
		_, warm := run(b, c, steps[:warmup])
		b.Run(mode.name+"/Correct", func(b *testing.B) {
			st := warm
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				s := steps[warmup+i%timed]
				s.Step = st.SealedStep() + 1
				_, next, err := c.Correct(st, s)
				if err != nil {
					b.Fatal(err)
				}
				st = next
				i++
			}
		})
		b.Run(mode.name+"/Advance", func(b *testing.B) { benchAdvance(b, c, warm, steps[warmup:]) })
	}
}

// benchAdvance times Advance, in place on a copy of warm, over steps in turn (renumbered to
// follow the state), as the correction consumer seals them.
func benchAdvance(b *testing.B, c *Corrector, warm *State, steps []Step) {
	st := warm.clone()
	var rows []Row
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s := steps[i%len(steps)]
		s.Step = st.SealedStep() + 1
		var err error
		if rows, err = c.Advance(st, s, rows[:0]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkStep8x8NaiveRefit is the default-mode step with the window
// re-sorted at every refit (the baseline the incremental window replaces).
func BenchmarkStep8x8NaiveRefit(b *testing.B) {
	const warmup = 320
	steps := simulate("run", "main", warmup+1680, 20260814)
	c := mustNew(b, DefaultConfig())
	_, st := run(b, c, steps[:warmup])
	st = st.clone()
	var rows []Row
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s := steps[warmup+i%1680]
		s.Step = st.SealedStep() + 1
		var err error
		if rows, err = c.Advance(st, s, rows[:0]); err != nil {
			b.Fatal(err)
		}
		// The incremental fit is already in st; the baseline pays for a
		// full sort-then-PAV on top, which is what a naive refit costs.
		if _, _, err := naiveRefit(&st.win); err != nil {
			b.Fatal(err)
		}
		i++
	}
	_ = slices.Clone(rows)
}

// BenchmarkGate times the trust gate's pass over a full window (5000 pairs), which the default
// mode adds to every step with Config.TrustGate; compare with BenchmarkStep8x8/default/Advance.
func BenchmarkGate(b *testing.B) {
	for _, name := range []string{"sim", "continuous"} {
		st := benchWindows(b)[name]
		b.Run(name, func(b *testing.B) {
			var closed int
			for b.Loop() {
				if st.Gate().Closed {
					closed++
				}
			}
			_ = closed
			b.ReportMetric(float64(st.Pairs()), "pairs")
		})
	}
}
