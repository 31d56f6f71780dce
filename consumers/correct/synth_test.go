package correct

import "github.com/wmrl/wmrl/bench/workload"

// The synthetic workload lives in bench/workload; the tests keep their short names for it.
type (
	SynthConfig = workload.Config
	SynthStep   = workload.Step
)

var Synthesize = workload.Synthesize

// rollouts is how many rollouts, and so advantage rows, wl makes.
func rollouts(wl SynthConfig) int { return wl.Runs * wl.Steps * wl.Groups * wl.GroupSize }
