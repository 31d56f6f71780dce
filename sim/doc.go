// Package sim is the WMRL training loop without Kafka: the built-in task's policy samples GRPO
// groups, the task's world model scores every rollout, anchor groups (topics.IsAnchor, as the
// generator decides them) are executed for real, the correction core turns each complete step
// into rows and the policy is updated from advantage × weight. It exists for sweeps (`wmrl
// simulate`): many arms × seeds in one process, deterministic in everything but wall time.
//
// # Compute accounting
//
// The primary compute measure is the number of real executions (sandbox runs). It is
// deterministic, independent of machine load and of how many sweep jobs share the CPU, and it is
// what the paper's GPU-hours scale with. Measured wall time of the executions (and of the world
// model's predictions) is recorded alongside as a secondary measure, and a configurable simulated
// sandbox start-up overhead per execution is accounted (never slept) and reported separately.
//
// # Score and target
//
// The score of a policy is its exact expected true score over a fixed set of held-out problems
// (task.EvalSet over problems with negative seeds, which training never draws; training problems
// are fresh per group with seeds derived from (seed, step, group)). The target of a seed is a
// fraction (default 0.9) of the real-GRPO arm's final score in the same seed; an arm's
// compute-to-target is the compute spent until the end of the first step after which its score
// reaches the target.
//
// # Common random numbers
//
// Within a seed every arm uses the same run id (so the same groups are anchors), the same
// training problem per (step, group) and the same sampler seed, so differences between arms come
// from the arms, not from luck of the draw.
package sim
