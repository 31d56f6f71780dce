package task

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// benchSolutions is a fixed draw from the uniform policy, i.e. the mix of
// configurations an untrained agent produces.
func benchSolutions() []Solution {
	s, _ := NewPolicy().Sample(rand.New(rand.NewPCG(77, 78)), 64)
	return s
}

func BenchmarkExecute(b *testing.B) {
	ctx := context.Background()
	p := NewProblem(1, Regression)
	sols := benchSolutions()
	i := 0
	for b.Loop() {
		if _, err := Execute(ctx, p, sols[i%len(sols)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkWorldModel(b *testing.B) {
	ctx := context.Background()
	tv := NewProblem(1, Regression).Train()
	wm := NewWorldModel(WorldModelConfig{})
	sols := benchSolutions()
	i := 0
	for b.Loop() {
		if _, err := wm.Predict(ctx, tv, sols[i%len(sols)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkCostRatio times Execute and Predict over the same solutions and
// reports execute-ms, wm-ms and their ratio per solution.
func BenchmarkCostRatio(b *testing.B) {
	ctx := context.Background()
	for _, kind := range []Kind{Regression, Classification} {
		b.Run(kind.String(), func(b *testing.B) {
			p := NewProblem(1, kind)
			wm := NewWorldModel(WorldModelConfig{})
			sols := benchSolutions()
			var te, tw time.Duration
			for b.Loop() {
				for _, s := range sols {
					t0 := time.Now()
					if _, err := Execute(ctx, p, s); err != nil {
						b.Fatal(err)
					}
					t1 := time.Now()
					if _, err := wm.Predict(ctx, p.Train(), s); err != nil {
						b.Fatal(err)
					}
					te += t1.Sub(t0)
					tw += time.Since(t1)
				}
			}
			n := float64(b.N * len(sols))
			b.ReportMetric(float64(te)/1e6/n, "execute-ms/op")
			b.ReportMetric(float64(tw)/1e6/n, "wm-ms/op")
			b.ReportMetric(float64(te)/float64(tw), "exec/wm")
		})
	}
}
