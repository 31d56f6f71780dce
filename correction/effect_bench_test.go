package correction

import "testing"

// BenchmarkDebiasEffect8x8 measures what the per-step debias diagnostic adds
// to a sealed step: "seal" is CorrectRetire of one 8×8 step (2 anchor
// groups) on a full window, as the correction consumer calls it; "effect" is
// DebiasEffect on that step's rows. The ratio effect/seal is the cost.
func BenchmarkDebiasEffect8x8(b *testing.B) {
	const warmup, timed = 320, 1680
	steps := simulate("run", "main", warmup+timed, 20260814)
	for _, cfg := range []Config{DefaultConfig(), ZSpaceConfig()} {
		c := mustNew(b, cfg)
		_, warm := run(b, c, steps[:warmup])
		b.Run(cfg.Map.String()+"/seal", func(b *testing.B) { benchAdvance(b, c, warm, steps[warmup:]) })
		b.Run(cfg.Map.String()+"/effect", func(b *testing.B) {
			st := warm.clone()
			all := make([][]Row, 64)
			for i := range all {
				s := steps[warmup+i]
				s.Step = st.SealedStep() + 1
				rows, err := c.Advance(st, s, nil)
				if err != nil {
					b.Fatal(err)
				}
				all[i] = rows
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_ = c.DebiasEffect(all[i%len(all)])
				i++
			}
		})
	}
}
