package correction

import (
	"math"
	"testing"
)

func TestAdvantages(t *testing.T) {
	ok := func(v float64) Reward { return Reward{v, true} }
	miss := Reward{}
	sd0 := math.Sqrt(2.0 / 3) // population std of {0,1,2}
	tests := []struct {
		name     string
		in       []Reward
		kind     AdvantageKind
		eps      float64
		ddof     int
		wantAdv  []float64
		wantMask []bool
	}{
		{"grpo pop", []Reward{ok(0), ok(1), ok(2)}, GRPO, 1e-4, 0,
			[]float64{-1 / (sd0 + 1e-4), 0, 1 / (sd0 + 1e-4)}, []bool{true, true, true}},
		{"grpo sample", []Reward{ok(0), ok(1), ok(2)}, GRPO, 0, 1,
			[]float64{-1, 0, 1}, []bool{true, true, true}},
		{"drgrpo", []Reward{ok(0), ok(1), ok(5)}, DrGRPO, 1e-4, 0,
			[]float64{-2, -1, 3}, []bool{true, true, true}},
		{"missing excluded", []Reward{ok(0), miss, ok(2)}, DrGRPO, 0, 0,
			[]float64{-1, 0, 1}, []bool{true, false, true}},
		{"nan treated missing", []Reward{ok(math.NaN()), ok(3), ok(5)}, DrGRPO, 0, 0,
			[]float64{0, -1, 1}, []bool{false, true, true}},
		{"one usable masks group", []Reward{ok(0.7), miss, miss}, GRPO, 1e-4, 0,
			[]float64{0, 0, 0}, []bool{false, false, false}},
		{"empty", nil, GRPO, 1e-4, 0, []float64{}, []bool{}},
		{"equal rewards eps 0", []Reward{ok(0.5), ok(0.5)}, GRPO, 0, 0,
			[]float64{0, 0}, []bool{true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			adv, mask := Advantages(tt.in, tt.kind, tt.eps, tt.ddof)
			if len(adv) != len(tt.wantAdv) || len(mask) != len(tt.wantMask) {
				t.Fatalf("lengths %d %d", len(adv), len(mask))
			}
			for i := range adv {
				if math.Abs(adv[i]-tt.wantAdv[i]) > 1e-12 || mask[i] != tt.wantMask[i] {
					t.Fatalf("got %v %v, want %v %v", adv, mask, tt.wantAdv, tt.wantMask)
				}
			}
		})
	}
}
