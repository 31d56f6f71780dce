// Package task is wmrl's built-in task: a real, CPU-sized stand-in for
// AutoResearch, used by `wmrl demo` and `wmrl simulate`.
//
// A Problem is a seeded synthetic regression or binary classification
// problem (gonum-generated): 10 features with scales spanning three decades,
// some irrelevant, and a hidden target mixing linear, interaction,
// quadratic, periodic and step effects plus noise; 600 training rows and 400
// held-out validation rows. A rollout is a Solution — model family (ridge,
// gradient-descent linear/logistic, k-NN, random ReLU network, boosted
// stumps), feature transform (raw, standardize, poly2, random Fourier),
// regularization, learning rate, iterations and capacity — sampled from a
// factorized softmax Policy that stands in for the agent LLM.
//
// Execute is the real experiment: it fits the solution on the training rows
// and scores it on the validation rows (R² clipped to [0,1], or balanced
// accuracy rescaled so chance is 0). It costs real CPU (≈2–5 ms on average
// for an untrained policy's mix, up to ≈20 ms) and is bit-for-bit
// deterministic, so replays reproduce it. Executor adds an optional, separately
// reported start-up overhead standing in for sandbox provisioning.
//
// WorldModel is the cheap proxy (≈15–30× cheaper). It only receives a
// TrainView, which has no validation rows, and never sees a real score. It
// runs the same learners at low fidelity — a 48-row subsample, a tenth of the
// iterations, a quarter of the capacity — scores the fit half on 48 other
// training rows and half in-sample, and reads the result through a monotone
// compressing map. Its errors are therefore real consequences of those
// shortcuts rather than noise added to a known answer: the subsample draw
// makes it noisy, the in-sample half makes it optimistic for configurations
// that overfit (1-NN, unregularized wide networks), truncated training
// misjudges slow learners and misses late divergence, and the read-out
// compresses the range. Turning every fidelity knob up makes it converge to
// the truth (see TestProxyErrorsComeFromShortcuts).
//
// Policy.Update is the GRPO step WMRL feeds: for every unmasked rollout,
// lr · advantage · weight · ∇log π(choice), averaged over the rollouts.
// EvalSet makes a policy's expected true score an exact finite sum for
// learning curves.
package task
