package sim_test

import (
	"fmt"

	"github.com/wmrl/wmrl/sim"
)

// A 95% confidence interval over five seeds uses Student's t with four degrees of freedom.
func ExampleNewEstimate() {
	e := sim.NewEstimate([]float64{0.61, 0.64, 0.60, 0.66, 0.63})
	fmt.Println(e.Format(3), "over", e.N, "seeds")
	// Output: 0.628 ± 0.030 over 5 seeds
}

func ExampleArmsByName() {
	arms, _ := sim.ArmsByName([]string{"wmrl", "pure-wm"}, 0.25)
	for _, a := range arms {
		fmt.Printf("%-9s anchors %.2f debias %-5v denoise %v\n", a.Name, a.AnchorFraction, a.Correction.Debias, a.Correction.Denoise)
	}
	// Output:
	// real-grpo anchors 1.00 debias false denoise false
	// wmrl      anchors 0.25 debias true  denoise true
	// pure-wm   anchors 0.00 debias false denoise false
}
