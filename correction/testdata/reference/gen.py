#!/usr/bin/env python3
"""Generate the reference-mode goldens by running the authors' CorrectionLoop.

The authors' code (github.com/xiyuanyang45/WMRL, package ``wmrl``: loop.py,
debias.py, denoise.py, advantage.py, anchor.py, scorer.py) is NOT part of this
repository. Give the directory that contains their ``wmrl`` package:

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install numpy
    /tmp/venv/bin/python correction/testdata/reference/gen.py --wmrl /path/to/WMRL

It writes one JSON file per case next to this script (``<case>.json``). Every
step of a case is fed to ``CorrectionLoop.step`` unchanged, with the loop's own
``AnchorScheduler`` choosing the anchor groups; the two scorers only look the
pre-drawn scores up. What the loop returned (calibrated world-model rewards,
advantages with the anchor weight already applied, the anchor weight) and what
its pieces hold after the step (refit count, pairs in the buffer, smoothed
disagreement) are recorded. correction/reference_golden_test.go replays the
same steps through ReferenceConfig() and compares row for row.

Inputs are drawn with Python's ``random`` from a fixed seed per case and are
stored in the goldens, so the Go side needs no generator of its own. Scores are
rounded to 6 decimals (short files) except for the deliberate float edges.
Group ids are chosen so that their byte order differs from the manifest order
(the loop processes groups in list order); rollout ids are zero-padded so that
their byte order is the trajectory order.
"""

import argparse
import json
import math
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# Scores on or next to the bin edges of 10 (and 7) equal-width bins. np.linspace
# puts the 4th edge of 10 bins at 0.30000000000000004, so 0.3 itself falls in
# bin 2 under np.digitize, while floor(0.3*10) would say bin 3.
EDGES10 = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
           0.30000000000000004, math.nextafter(0.3, 0.0), 0.6000000000000001,
           0.7000000000000001, math.nextafter(0.1, 1.0), math.nextafter(1.0, 0.0),
           5e-324, 0.1 * 3, 0.1 * 7]
EDGES7 = [i * (1.0 / 7) for i in range(8)] + [2 / 7, 3 / 7, math.nextafter(4 / 7, 0.0), 5.0 / 7.0]


class Lookup:
    """A scorer that returns one field of the pre-drawn trajectory.

    Trajectories are (pred, exec) tuples; None means the scorer could not
    score it (the authors' contract for missing rewards). Calls are counted so
    that refits can be attributed to the group being processed.
    """

    def __init__(self, kind, field, counter):
        self.name, self.kind, self.field, self.counter = "lookup-" + kind, kind, field, counter

    def score(self, trajectories):
        if self.kind == "cheap":
            self.counter["group"] += 1
        return [t[self.field] for t in trajectories]


def r6(v):
    return round(v, 6)


def clip01(v):
    return min(1.0, max(0.0, v))


def draw_paper(rng, v):
    """8 groups of 8, the authors' 4B setting; the world model sees t^2 + noise."""
    groups = []
    for _ in range(8):
        a = rng.random()
        g = []
        for _ in range(8):
            t = r6(clip01(0.3 * a + 0.7 * rng.random()))
            p = r6(clip01(t * t + 0.25 * (rng.random() + rng.random() + rng.random() - 1.5)))
            g.append((None if rng.random() < 0.03 else p, None if rng.random() < 0.05 else t))
        groups.append(g)
    return groups, 0


def draw_evict(rng, v):
    """6 groups of 6, a growing noise level so the weight rises into its cap."""
    sigma = 0.05 + 0.03 * v
    groups = []
    for _ in range(6):
        g = []
        for _ in range(6):
            t = r6(rng.random())
            p = r6(clip01(0.2 + 0.6 * t + rng.gauss(0.0, sigma)))
            g.append((None if rng.random() < 0.05 else p, None if rng.random() < 0.05 else t))
        groups.append(g)
    return groups, 0


def draw_edges(rng, v):
    """Scores on bin edges, ties, constant and degenerate groups, missing scores."""
    groups = []
    for k in range(5):
        n = [5, 5, 2, 1, 5][(k + v) % 5]
        kind = (k * 3 + v) % 7
        g = []
        for i in range(n):
            if v < 4:
                # One populated bin only: refits are due but fit_calibration
                # returns None until a second bin appears.
                p = rng.choice([0.3, math.nextafter(0.3, 0.0), 0.25, 0.2])
            else:
                p = rng.choice(EDGES10)
            t = rng.choice([0.0, 0.5, 1.0, 0.3, p])
            if kind == 0:
                t = 0.5  # constant truth: disagreement skipped, advantages 0
            elif kind == 1:
                p = 0.7  # constant prediction
            elif kind == 2 and i % 2 == 0:
                p = None
            elif kind == 3 and i != 1:
                t = None  # at most one pair
            elif kind == 4:
                p, t = (None if i % 3 == 0 else p), (None if i % 3 == 1 else t)
            g.append((p, t))
        groups.append(g)
    if v == 9:
        groups[1] = [(None, 0.4)] * 4  # every prediction missing
    return groups, 0


def draw_odd(rng, v):
    """7 bins, varying group counts and sizes, scores slightly outside [0, 1],
    steps whose anchors are capped to zero by in-flight sandbox work."""
    groups = []
    for _ in range(1 + (v * 5) % 9):
        n = rng.choice([1, 2, 3, 7, 8, 9, 12])
        g = []
        for _ in range(n):
            t = r6(rng.random())
            if rng.random() < 0.25:
                p = rng.choice(EDGES7)
            else:
                p = r6(1.1 * math.sqrt(t) - 0.05 + rng.gauss(0.0, 0.08))
            g.append((None if rng.random() < 0.08 else p, None if rng.random() < 0.08 else t))
        groups.append(g)
    in_flight = 3 if v % 6 == 5 else (1 if v % 4 == 1 else 0)
    return groups, in_flight


CASES = [
    {
        "name": "paper",
        "about": "wmrl_4b.yaml: min_pairs 200, refit 64, 10 bins, buffer 5000, half-life 64, "
                 "warmup 32, w_max 4, target 2; 2 anchor groups of 8 per step",
        "seed": 41, "steps": 30, "draw": draw_paper,
        "loop": {"anchor_fraction": 0.25, "min_anchor_groups": 2, "anchor_concurrency": 24, "seed": 4},
        "debias": {"min_pairs": 200, "refit_every": 64, "bins": 10, "cap": 5000},
        "weight": {"half_life": 64.0, "warmup": 32, "w_max": 4.0, "target_weight": 2.0},
    },
    {
        "name": "evict",
        "about": "buffer of 48 pairs (evicts every step), refit every 10 pairs (several refits "
                 "per step, some inside a group), weight driven into its cap",
        "seed": 42, "steps": 30, "draw": draw_evict,
        "loop": {"anchor_fraction": 0.5, "min_anchor_groups": 1, "anchor_concurrency": None, "seed": 5},
        "debias": {"min_pairs": 16, "refit_every": 10, "bins": 10, "cap": 48},
        "weight": {"half_life": 6.0, "warmup": 5, "w_max": 4.0, "target_weight": 2.0},
    },
    {
        "name": "edges",
        "about": "scores on bin edges (0.3 and its neighbours, 0, 1, 5e-324), ties, constant "
                 "groups, groups of 1 and 2, missing predicted/executed scores, fits that fail "
                 "on a single populated bin, half-life below 1",
        "seed": 43, "steps": 26, "draw": draw_edges,
        "loop": {"anchor_fraction": 0.4, "min_anchor_groups": 1, "anchor_concurrency": None, "seed": 6},
        "debias": {"min_pairs": 8, "refit_every": 5, "bins": 10, "cap": 60},
        "weight": {"half_life": 0.5, "warmup": 3, "w_max": 4.0, "target_weight": 2.0},
    },
    {
        "name": "odd",
        "about": "7 bins, 1 to 9 groups of 1 to 12 rollouts, scores slightly outside [0, 1], "
                 "anchor selection capped by in-flight work (some steps without anchors)",
        "seed": 44, "steps": 26, "draw": draw_odd,
        "loop": {"anchor_fraction": 0.3, "min_anchor_groups": 1, "anchor_concurrency": 3, "seed": 7},
        "debias": {"min_pairs": 12, "refit_every": 9, "bins": 7, "cap": 90},
        "weight": {"half_life": 3.5, "warmup": 6, "w_max": 2.5, "target_weight": 2.0},
    },
]


def group_ids(rng, v, n):
    """Ids whose byte order is not the manifest order."""
    ids = set()
    while len(ids) < n:
        ids.add("g%d-%x" % (v, rng.randrange(1 << 20)))
    out = sorted(ids)
    rng.shuffle(out)
    return out


def run_case(case, wmrl):
    from wmrl.debias import OnlineDebiaser
    from wmrl.denoise import InverseVarianceWeighter
    from wmrl.loop import CorrectionLoop
    from wmrl.scorer import ScorerPair

    counter = {"group": -1}
    refits = []

    class Debiaser(OnlineDebiaser):
        """The authors' debiaser; refit is wrapped only to log which group refit."""

        def refit(self):
            ok = OnlineDebiaser.refit(self)
            if ok:
                refits.append(counter["group"])
            return ok

    rng = random.Random(case["seed"])
    loop = CorrectionLoop(
        ScorerPair(cheap=Lookup("cheap", 0, counter), trusted=Lookup("trusted", 1, counter)),
        debiaser=Debiaser(**case["debias"]),
        weighter=InverseVarianceWeighter(**case["weight"]),
        **case["loop"],
    )
    steps = []
    for v in range(case["steps"]):
        groups, in_flight = case["draw"](rng, v)
        ids = group_ids(rng, v, len(groups))
        counter["group"], refits[:] = -1, []
        res = loop.step(groups, in_flight=in_flight)
        anchors = set(res.anchor_ids)
        out = []
        for k, (gid, g, rg) in enumerate(zip(ids, groups, res.groups)):
            e = {"id": gid, "pred": [t[0] for t in g]}
            if k in anchors:
                e["anchor"] = True
                e["exec"] = [t[1] for t in g]
                assert rg.rewards == e["exec"]
            else:
                e["used"] = rg.rewards
            e["adv"] = rg.advantages
            out.append(e)
        w = loop.weighter
        steps.append({
            "in_flight": in_flight,
            "groups": out,
            "anchor_weight": res.anchor_weight,
            "fits": loop.debias.n_fits,
            "refit_in_group": list(refits),
            "pairs": len(loop.debias),
            "disagreement": w.disagreement,
            "c": w.c,
        })
    cfg = {k: case[k] for k in ("loop", "debias", "weight")}
    return {
        "generator": "correction/testdata/reference/gen.py",
        "source": "xiyuanyang45/WMRL wmrl.loop.CorrectionLoop (run with numpy %s)" % wmrl["numpy"],
        "case": case["name"],
        "about": case["about"],
        "config": cfg,
        "steps": steps,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wmrl", required=True, help="directory holding the authors' wmrl package")
    ap.add_argument("--out", default=HERE, help="where to write <case>.json (default: beside this script)")
    a = ap.parse_args()
    if not os.path.isfile(os.path.join(a.wmrl, "wmrl", "loop.py")):
        sys.exit("gen.py: %s has no wmrl/loop.py" % a.wmrl)
    sys.path.insert(0, os.path.abspath(a.wmrl))
    import numpy

    for case in CASES:
        doc = run_case(case, {"numpy": numpy.__version__})
        path = os.path.join(a.out, case["name"] + ".json")
        with open(path, "w") as f:
            json.dump(doc, f, separators=(",", ":"), allow_nan=False)
            f.write("\n")
        rows = sum(len(g["pred"]) for s in doc["steps"] for g in s["groups"])
        print("%s: %d steps, %d rows, %d bytes" % (path, len(doc["steps"]), rows, os.path.getsize(path)))


if __name__ == "__main__":
    main()
