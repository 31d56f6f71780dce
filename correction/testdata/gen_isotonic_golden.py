#!/usr/bin/env python3
"""Generate isotonic_golden.json: scikit-learn IsotonicRegression outputs.

Usage (from the repository root):

    pip install numpy scikit-learn
    python3 correction/testdata/gen_isotonic_golden.py > correction/testdata/isotonic_golden.json

Inputs of the generated cases are not stored: they are re-created from
(kind, n, seed) by a splitmix64 generator that correction/golden_test.go
implements identically, using only correctly rounded IEEE operations
(+, -, *, /, floor), so both languages produce the same bits. A SHA-256 of
the inputs is stored so the Go test proves it rebuilt them exactly. A few
hand-written cases store their inputs inline. For every case we store
sklearn's predictions at the training x's, at query points inside and
outside the fitted range, and its X_thresholds_/y_thresholds_.
"""

import hashlib
import json
import math
import struct
import sys

import numpy as np
import sklearn
from sklearn.isotonic import IsotonicRegression
from splitmix64 import TWO_M53, SplitMix64


def generate(kind, n, seed):
    """Mirror of genCase in golden_test.go. Draw order matters."""
    r = SplitMix64(seed)
    xs, ys, ws = [], [], []
    weighted = kind in ("weighted", "intweights", "alternating", "heavy")
    for i in range(n):
        w = 1.0
        if kind == "uniform":
            x = r.u()
            y = r.u()
        elif kind == "monotone":
            x = r.u()
            a = r.u()
            b = r.u()
            c = r.u()
            y = x + 0.3 * (a + b + c - 1.5)
        elif kind == "ties5":
            x = math.floor(r.u() * 5) / 5
            y = r.u()
        elif kind == "ties20":
            x = math.floor(r.u() * 20) / 20
            y = x + 0.5 * (r.u() - 0.5)
        elif kind == "weighted":
            x = r.u()
            y = x * x + 0.2 * (r.u() - 0.5)
            w = r.u() * 3
            if w < 0.3:
                w = 0.0
        elif kind == "intweights":
            x = math.floor(r.u() * 50) / 50
            y = r.u()
            w = float(math.floor(r.u() * 4))
        elif kind == "decreasing":
            x = r.u()
            y = 1 - x + 0.01 * (r.u() - 0.5)
        elif kind == "identity":
            x = i / n
            y = x
        elif kind == "constx":
            x = 0.25
            y = r.u()
        elif kind == "ulpties":
            x = 0.5 + math.floor(r.u() * 20) * TWO_M53
            y = r.u()
        elif kind == "sawtooth":
            x = float(i)
            y = (i % 7) / 7 + 0.001 * r.u()
        elif kind == "staircase":
            x = float(i)
            y = -float(i // 10) + 0.5 * r.u()
        elif kind == "alternating":
            x = float(i)
            y = float(i % 2)
            w = float(1 + i % 3)
        elif kind == "scaled":
            x = r.u() * 1e6 - 5e5
            y = (x / 1e6 + 0.2 * (r.u() - 0.5)) * 1e-3
        elif kind == "heavy":
            x = r.u()
            y = r.u()
            w = 1e6 if i == n // 2 else 1.0
        else:
            raise ValueError(kind)
        xs.append(x)
        ys.append(y)
        ws.append(w)
    if weighted and n > 0 and all(v == 0 for v in ws):
        ws[0] = 1.0  # keep the case fittable; mirrored in Go
    return xs, ys, (ws if weighted else None)


def input_digest(x, y, w):
    h = hashlib.sha256()
    for arr in (x, y) + ((w,) if w is not None else ()):
        for v in arr:
            h.update(struct.pack("<d", v))
    return h.hexdigest()


def queries(x):
    lo, hi = min(x), max(x)
    span = hi - lo if hi > lo else 1.0
    q = [lo + span * (t / 30.0 * 1.2 - 0.1) for t in range(31)]
    q += sorted(set(x))[:8]  # exact training points
    q += [lo, hi, lo - 1e9, hi + 1e9]
    return q


def case(name, x, y, w, gen=None):
    ir = IsotonicRegression(increasing=True, out_of_bounds="clip")
    ir.fit(np.asarray(x), np.asarray(y), sample_weight=None if w is None else np.asarray(w))
    q = queries(x)
    out = {"name": name}
    if gen is not None:
        out["gen"] = gen
    else:
        out["x"], out["y"], out["w"] = x, y, w
    out["input_sha256"] = input_digest(x, y, w)
    out["queries"] = q
    out["pred_queries"] = [float(v) for v in ir.predict(np.asarray(q))]
    out["pred_train"] = [float(v) for v in ir.predict(np.asarray(x))]
    out["thresholds_x"] = [float(v) for v in ir.X_thresholds_]
    out["thresholds_y"] = [float(v) for v in ir.y_thresholds_]
    return out


GENERATED = [
    ("uniform", [1, 2, 3, 5, 13, 100, 1000, 5000]),
    ("monotone", [2, 8, 50, 500, 5000]),
    ("ties5", [3, 10, 100, 1000]),
    ("ties20", [20, 200, 5000]),
    ("weighted", [1, 4, 50, 1000]),
    ("intweights", [5, 60, 2000]),
    ("decreasing", [2, 30, 1000]),
    ("identity", [1, 7, 500]),
    ("constx", [1, 3, 100]),
    ("ulpties", [10, 300]),
    ("sawtooth", [15, 700]),
    ("staircase", [40, 5000]),
    ("alternating", [9, 400]),
    ("scaled", [25, 800]),
    ("heavy", [11, 1500]),
]

INLINE = [
    ("sklearn_doc_example", list(map(float, range(10))), [5.0, 3, 1, 2, 8, 10, 7, 9, 6, 4], None),
    ("single_point", [0.3], [0.9], None),
    ("two_decreasing", [0.1, 0.9], [1.0, 0.0], None),
    ("two_equal_x", [0.5, 0.5], [0.2, 0.8], [3.0, 1.0]),
    ("zero_weight_dropped", [0.0, 0.5, 1.0], [1.0, 0.0, 0.5], [1.0, 0.0, 1.0]),
    ("negative_y", [3.0, 1.0, 2.0, 2.0], [-1.0, -5.0, -2.0, -7.0], None),
    ("unsorted_ties", [0.7, 0.2, 0.7, 0.2, 0.4], [0.1, 0.9, 0.3, 0.5, 0.2], [1.0, 2.0, 0.5, 1.0, 4.0]),
]


def main():
    cases = []
    seed = 1
    for kind, ns in GENERATED:
        for n in ns:
            x, y, w = generate(kind, n, seed)
            cases.append(case(f"{kind}_n{n}", x, y, w, gen={"kind": kind, "n": n, "seed": seed}))
            seed += 1
    for name, x, y, w in INLINE:
        cases.append(case(name, x, y, w))
    doc = {
        "generator": "correction/testdata/gen_isotonic_golden.py",
        "sklearn_version": sklearn.__version__,
        "numpy_version": np.__version__,
        "cases": cases,
    }
    json.dump(doc, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
