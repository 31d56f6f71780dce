// Package correction is wmrl's reward-correction core: Online Debiasing
// (monotone recalibration of world-model scores on a sliding window of
// anchor pairs), Inverse-Variance Denoising (anchor-row weights) and
// group-relative advantages. It is pure, deterministic Go math with no I/O,
// so the correction consumer, the demo, replays and simulations all share
// one implementation and reproduce each other bit for bit.
//
// # Step semantics
//
// Correct(prev, step v) is a pure function of the state sealed after step
// v−1 and of step v's records in canonical order, and returns state v.
//
// In the default mode every row of step v is computed from the state sealed
// after v−1 (calibration map, anchor weight, fit version). Only then are
// step v's anchor pairs — (raw predicted, executed), both OK — appended to
// the FIFO window in canonical order (group id, then rollout id, byte-wise),
// the noise estimator updated per anchor group in the same order, and the
// map refitted if due. Rows come back in canonical order, so neither rows
// nor state depend on the order in which groups or rollouts arrived.
//
// Reference mode follows the authors' sequential loop instead (below): its
// canonical order is the step manifest's group order (Step.Groups as given;
// the correction consumer builds it from the manifest record), then rollout
// id. Rollouts may still arrive in any order; groups must be passed in
// manifest order.
//
// # Rows
//
// Anchor groups use the executed reward, world-model groups the calibrated
// prediction. A rollout without a usable reward (OK=false) is excluded from
// its group's statistics and gets Mask=false, Advantage 0, Used 0 and Weight
// 0; a group with fewer than 2 usable rewards is masked whole. Unmasked
// anchor rows carry the anchor weight (the one in force in the default mode,
// the one after the step in reference mode), world-model rows weight 1.
// An anchor group chosen by a policy with probability π carries
// Group.Weight = 1/π (docs/anchors.md): its pairs enter the isotonic fit
// with that weight (weighted pool-adjacent-violators), its noise ratio
// enters the EWMA as that many groups would, and its rows' anchor weight is
// multiplied by the weight over its mean on the step's anchor rows. Weight 0
// (or 1 everywhere) is today's arithmetic, bit for bit.
// Scores are expected in [0,1] but not clipped: the exact isotonic map works
// on any range, and the reference bins put x outside [0,1] into the outer
// bins. Scores must
// be finite with |score| ≤ 1e12 (so window sums cannot overflow).
//
// # Reference mode (ReferenceConfig) — the authors' CorrectionLoop
//
// Reference mode reproduces CorrectionLoop.step of the authors' public code
// (github.com/xiyuanyang45/WMRL, wmrl/loop.py with debias.py, denoise.py and
// advantage.py; settings of ml_research/configs/wmrl_4b.yaml) row for row:
// TestReferenceMatchesAuthorsLoop replays steps on which their loop was run
// (testdata/reference/gen.py imports their package from a path you give; the
// goldens hold inputs and outputs, never their code) and requires every
// advantage × weight, calibrated reward and anchor weight to agree to 1e-12;
// on the committed goldens all of them agree bit for bit.
//
//   - Order: groups in manifest order. For an anchor group, each pair with
//     both scores is pushed into the FIFO (5000 pairs) on its own, and each
//     push may refit: a refit is due once the window holds MinPairs (200)
//     pairs and RefitEvery (64) pairs were pushed since the last successful
//     fit, so refits happen in the middle of a step, even of a group. The
//     group's calibrated scores and its noise estimate are then taken under
//     the map after its pushes; world-model groups later in the step are
//     calibrated with that map, earlier ones with the map before it (each
//     row's CalibrationVersion says which).
//   - Fit: bins from np.digitize(x, linspace(0, 1, Bins+1)[1:-1]): the inner
//     edges are i·(1/Bins) as rounded, so 0.3 lies below the fourth of ten
//     edges (0.30000000000000004) and falls in bin 2, and x outside [0, 1]
//     joins the outer bins. Each populated bin gives a breakpoint at the mean
//     x of its pairs with their mean y, weighted PAV (weights = counts,
//     merging only strictly decreasing neighbours) pools the y, evaluation
//     is np.interp (flat beyond the outer breakpoints). Fewer than two
//     populated bins give no map; the refit is then retried at every pair.
//   - Denoise: per anchor group, over rollouts with both scores, d the
//     calibrated and s the executed scores, s² = mean(((d−d̄)−(s−s̄))²)/var(s)
//     with population variances; groups with var(s) < 1e-9 (single pairs
//     included) are skipped. s̄² is an EWMA with α = 1 − 2^(−1/max(1,
//     HalfLife)) started at the first group. Once FreezeAfter (32) groups
//     entered it and s̄² > 1e-12, c = 1/s̄² is frozen (the weight is then 2,
//     the authors' target_weight); before, the weight is 1. Anchor weight
//     w = clip(1 + c·s̄², 1, WeightCap).
//   - Weight: every anchor row of a step carries the weight after all of
//     the step's anchor groups were observed. The authors multiply the
//     advantage by it; wmrl keeps Advantage and Weight apart (the product is
//     theirs).
//   - Advantage: (r − mean)/(std + 1e-4), population std, over the graded
//     rollouts; groups with fewer than 2 are masked.
//   - Arithmetic: sums are numpy's pairwise summation, interpolation is
//     np.interp's formula (numpy.go), so results match to the bit, not just
//     to a tolerance.
//
// What reference mode does not reproduce, and why:
//
//   - Which groups are anchors. The authors' AnchorScheduler draws
//     max(min_per_step, round(fraction·groups)) groups per step at random
//     from a seeded numpy generator, capped by sandbox work in flight (the
//     4B/9B configs: 2 of 8 groups per step, cap 24). In wmrl the generator
//     decides per group with a stable hash (topics.IsAnchor), so the count
//     varies per step; the choice reaches correction as an input (manifest
//     and records), and the goldens feed it the authors' choices.
//   - Rollout order inside a group. Their loop pushes a group's pairs in
//     list order; reward records carry no index, so wmrl uses rollout-id
//     order, which is the index order for the generator's ids up to 10
//     rollouts per group ("g-0" … "g-9"). With more, "g-10" sorts before
//     "g-2": the same pairs enter the window in another order, which moves
//     only which pair is evicted first and where a mid-group refit falls.
//   - target_weight is fixed at 2 (both paper configs). Their warmup 0
//     behaves as FreezeAfter 1; FreezeAfter 0 here means c = 1, never frozen.
//   - Failed executions are masked; the authors' sandbox scores a timeout 0
//     (the sandbox stage's --on-timeout=zero reproduces that).
//   - Scores must be finite with |score| ≤ 1e12 (theirs would propagate NaN),
//     and with Eps = 0 a constant group gets advantages 0, not numpy's NaN.
//   - Calibration is per (run, stream); with one stream that is their single
//     global calibration.
//
// # Default mode (DefaultConfig) — where and why it differs
//
//   - Sequencing: all rows of step v use the map and weight sealed after
//     step v−1, and the step's anchor pairs enter only at the seal (Step
//     semantics above). In the reference loop a world-model group's reward depends on
//     where it sits in the manifest (before or after an anchor group that
//     triggers a refit), and an anchor group's noise feeds the weight applied
//     to that same group; neither is a property of the rollout being scored.
//   - Fit: exact weighted isotonic regression on the raw window with
//     scikit-learn IsotonicRegression(increasing=True, out_of_bounds="clip")
//     semantics (FitIsotonic), instead of 10 bins. Binning collapses each
//     bin's pairs to one point, throwing away the ordering within a bin, and
//     cannot follow a world model whose scores cluster in one bin (one
//     populated bin gives no map at all); the exact fit is the least-squares
//     monotone map and costs O(W) per refit because the window is kept
//     sorted incrementally.
//   - Cadence: refit at every sealed step that added pairs (RefitEvery 0),
//     not every 64 pairs: a refit costs tens of microseconds, and a map that
//     lags the window by up to 63 pairs has no benefit.
//   - Weight: w = clip(1 + s̄², 1, WeightCap) with c = 1 (FreezeAfter 0),
//     the inverse-variance ratio w_anchor/w_wm = 1 + σ²_ξ/σ²_true itself. The
//     reference's frozen c = 1/s̄² rescales the ratio so the weight is 2 at
//     group 32 whatever the actual noise, which is a heuristic, not an
//     inverse-variance weight. The cap (default 4, as the reference clip)
//     bounds the influence of a few anchor rows while s̄² is still noisy.
//   - Map shape (option): Map = MapCentred replaces the isotonic step map by
//     centred isotonic regression, strictly increasing between the outermost
//     block centres. An isotonic map is flat wherever the window shows no
//     increasing evidence, which erases the world model's within-group
//     ranking exactly where the policy concentrates; the centred map keeps
//     it. States with it encode as version 2 (one more config byte).
//   - Map shape (option): Map = MapZSpace is the authors' ABANDONED
//     variant (a φ-map kept, unused, in ml_research/grading/grade_store.py of
//     their public repository, push_phi_pairs; written here from its
//     description, none of their code is in this package). Per anchor group,
//     over the rollouts with both scores, predicted and executed scores are
//     standardised within the group, z = (r − mean)/(std + Eps) with the
//     config's DDOF, and the window holds these (z_wm, z_exec) pairs instead
//     of raw ones. φ(z) = E[z_exec | z_wm] is fitted when due (MinPairs 400,
//     RefitEvery as configured): Bins (12) quantile bins of z_wm (numpy's
//     linear quantiles, repeated edges collapsed, np.digitize binning), one
//     breakpoint per bin at its mean z_wm with its mean z_exec, weighted PAV;
//     fewer than 3 distinct edges give no map and the fit is retried at the
//     next step. φ is applied to the advantages of world-model groups, not
//     to their rewards — "so std-normalised GRPO cannot undo it": under GRPO
//     A = φ(A), under Dr.GRPO A = φ(A/d)·d with d = std + Eps of the group.
//     ZSpaceConfig has these settings. Consequences: Calibrated = Predicted
//     for every row (Calibrate is the identity, the map is not a score map),
//     so the snapshot's bias_after equals bias_before and its breakpoints,
//     which live in z-space, are not published; IVD measures the
//     disagreement between raw predictions and executions, so the anchor
//     weight no longer falls when OD removes a bias (with a score map it
//     does, since the noise estimate is taken after the map); masking is
//     unchanged (φ touches only unmasked world-model rows, and a group
//     without spread in its predictions keeps advantage 0), but the
//     advantages of a world-model group need no longer sum to zero, as
//     φ(0) need not be 0. States with it encode as version 2.
//   - Debias effect: Corrector.DebiasEffect compares, for one sealed step,
//     each world-model advantage with the advantage the raw prediction would
//     have had (mean shift, groups whose order or ties changed, groups
//     flattened to zero spread). It is a pure function of the rows, so a
//     replay reproduces it; the correction consumer publishes it in the
//     calibration snapshot and as metrics.
//   - Calibration per (run, stream): both modes keep one State per (run,
//     stream); with a single stream reference mode equals the authors'
//     global calibration.
//   - Advantages: GRPO with configurable eps and ddof, or Dr.GRPO (mean only).
//   - Arithmetic: sequential sums, and an interpolation clamped to each
//     segment so rounding can never break monotonicity; results differ from
//     numpy's in the last bits, and digests agree across architectures.
//   - Failed executions are masked, not scored 0 (the sandbox stage decides;
//     its policy "zero" reproduces the reference).
//
// Debias=false keeps the identity map (the window is still maintained);
// Denoise=false fixes the anchor weight at 1 — the ablations of the paper.
package correction
