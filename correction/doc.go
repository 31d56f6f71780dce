// Package correction is wmrl's reward-correction core: Online Debiasing
// (monotone recalibration of world-model scores on a sliding window of
// anchor pairs), Inverse-Variance Denoising (anchor-row weights) and
// group-relative advantages. It is pure, deterministic Go math with no I/O,
// so the correction consumer, the demo, replays and simulations all share
// one implementation and reproduce each other bit for bit.
//
// # Step semantics (DESIGN §4)
//
// Correct(prev, step v) computes every row of step v from the state sealed
// after step v−1 (calibration map, anchor weight, fit version). Only then are
// step v's anchor pairs — (raw predicted, executed), both OK — appended to
// the FIFO window in canonical order (group id, then rollout id, byte-wise),
// the noise estimator updated per anchor group in the same order, and the map
// refitted if due, giving state v. Rows come back in canonical order, so
// neither rows nor state depend on the order in which rollouts arrived.
//
// A State is per (run, stream). NewState has sealed step −1, so the first
// step of a stream is step 0. Its Encode is a versioned, fixed-width binary
// encoding (Digest is its SHA-256); DecodeState rejects anything Encode could
// not have written. Arithmetic that could be fused into FMA instructions is
// written with explicit float64 conversions, so digests agree across
// architectures.
//
// Correct leaves prev untouched (the window is a copy-on-write chunked
// FIFO; only the sorted view is rebuilt per step), so sealed states can be
// kept and shared read-only. Advance is the in-place variant for simulation
// loops that discard old states; both produce identical rows and states.
//
// # Rows
//
// Anchor groups use the executed reward, world-model groups the calibrated
// prediction. A rollout without a usable reward (OK=false) is excluded from
// its group's statistics and gets Mask=false, Advantage 0, Used 0 and Weight
// 0; a group with fewer than 2 usable rewards is masked whole. Unmasked
// anchor rows carry the anchor weight in force, world-model rows weight 1.
// Scores are expected in [0,1] but not clipped: the exact isotonic map works
// on any range, and only the reference bins clamp x into [0,1]. Scores must
// be finite with |score| ≤ 1e12 (so window sums cannot overflow).
//
// # Reference mode (ReferenceConfig) — the authors' public code, DESIGN §2
//
//   - Window: FIFO of the last 5000 pairs; identity map until 200 pairs;
//     refit when at least 64 pairs arrived since the previous fit (counted
//     from the start, so the first fit happens as soon as 200 pairs exist).
//   - Fit: pairs binned by world-model score into 10 equal-width bins on
//     [0,1] (bin min(⌊x·10⌋, 9) of x clamped to [0,1]); weighted PAV over the
//     means of the non-empty bins with weights = bin counts; evaluation by
//     linear interpolation between bin centres (k+0.5)/10, flat beyond the
//     first and last non-empty centre. Empty bins are skipped.
//   - Denoise: per anchor group, over rollouts with both scores, with d the
//     calibrated scores (under the map the rows used) and s the executed
//     ones, s² = mean(((d−d̄)−(s−s̄))²)/var(s), population variances; groups
//     with var(s) < 1e-9 (or fewer than 2 pairs) are skipped. s̄² is an EWMA
//     with α = 1 − 2^(−1/64), initialised by the first group. Once 32 groups
//     entered it, c = 1/s̄² is frozen (weight 2 at that moment); before that
//     c = 0 (weight 1). Anchor weight w = clip(1 + c·s̄², 1, 4).
//   - Advantage: (r − mean)/(std + 1e-4), population std.
//
// DESIGN §2 does not pin down the bin-edge rule, empty bins, the EWMA's
// initial value, the weight before the freeze or the refit counter's start;
// the choices above are ours, and bench/reference_bench.py (the numpy
// baseline, cross-checked row by row in TestReferenceMatchesNumpy) makes the
// same ones.
//
// # Default mode (DefaultConfig) — where and why it differs
//
//   - Fit: exact weighted isotonic regression on the raw window with
//     scikit-learn IsotonicRegression(increasing=True, out_of_bounds="clip")
//     semantics (FitIsotonic), instead of 10 bins. Binning throws away the
//     within-bin ordering, biases the map towards bin centres and cannot
//     follow a world model whose scores cluster in one bin; the exact fit
//     is the least-squares monotone map and costs O(W) per refit because the
//     window is kept sorted incrementally.
//   - Cadence: refit at every sealed step that added pairs (RefitEvery 0),
//     not every 64 pairs: a refit costs tens of microseconds, and a map that
//     lags the window by up to 63 pairs has no benefit.
//   - Weight: w = clip(1 + s̄², 1, WeightCap) with c = 1 (FreezeAfter 0),
//     the inverse-variance ratio w_anchor/w_wm = 1 + σ²_ξ/σ²_true itself. The
//     reference's frozen c = 1/s̄² rescales the ratio so the weight is 2 at
//     group 32 whatever the actual noise, which is a heuristic, not an
//     inverse-variance weight. The cap (default 4, as the reference clip)
//     bounds the influence of a few anchor rows while s̄² is still noisy.
//   - Calibration per (run, stream): both modes keep one State per (run,
//     stream); with a single stream reference mode equals the authors'
//     global calibration.
//   - Advantages: GRPO with configurable eps and ddof, or Dr.GRPO (mean only).
//   - Failed executions are masked, not scored 0 (the sandbox stage decides;
//     its policy "zero" reproduces the reference).
//
// Debias=false keeps the identity map (the window is still maintained);
// Denoise=false fixes the anchor weight at 1 — the ablations of the paper.
package correction
