"""The GRPO example's loss: where advantage, weight and mask enter, and that it trains."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from conftest import PY_ROOT

from wmrl_client import BrokerUnavailableError, Step, decode_advantages

spec = importlib.util.spec_from_file_location("grpo_loop", PY_ROOT / "examples" / "grpo_loop.py")
assert spec and spec.loader
grpo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(grpo)


@pytest.fixture
def step(golden: Path) -> Step:
    t = decode_advantages((golden / "advantages.arrows").read_bytes())
    return Step(None, "r1", 3, t, 1, {})


def test_gradient_matches_finite_differences(step: Step) -> None:
    a = step.to_numpy(["advantage", "weight", "mask", "rollout_id"])
    x = grpo.features(a["rollout_id"])
    theta = np.random.default_rng(1).standard_normal(grpo.DIM) * 0.1
    loss, grad = grpo.pg_loss_numpy(theta, x, a["advantage"], a["weight"], a["mask"])
    eps = 1e-6
    num = np.array([
        (grpo.pg_loss_numpy(theta + eps * e, x, a["advantage"], a["weight"], a["mask"])[0]
         - grpo.pg_loss_numpy(theta - eps * e, x, a["advantage"], a["weight"], a["mask"])[0]) / (2 * eps)
        for e in np.eye(grpo.DIM)
    ])  # fmt: skip
    assert np.isfinite(loss)
    np.testing.assert_allclose(grad, num, rtol=1e-5, atol=1e-8)


def test_masked_and_weighted_rows(step: Step) -> None:
    a = step.to_numpy(["advantage", "weight", "mask", "rollout_id"])
    assert not a["mask"].all(), "the golden step has masked-out rows"
    x = grpo.features(a["rollout_id"])
    theta = np.full(grpo.DIM, 0.05)
    keep = a["mask"]
    full = grpo.pg_loss_numpy(theta, x, a["advantage"] + (~keep) * 5.0, a["weight"], keep)
    only = grpo.pg_loss_numpy(theta, x[keep], a["advantage"][keep], a["weight"][keep], keep[keep])
    assert full[0] == pytest.approx(only[0])  # masked-out rows add nothing, whatever their values
    np.testing.assert_allclose(full[1], only[1])
    doubled = grpo.pg_loss_numpy(theta, x, a["advantage"], 2 * a["weight"], keep)
    base = grpo.pg_loss_numpy(theta, x, a["advantage"], a["weight"], keep)
    assert doubled[0] == pytest.approx(2 * base[0])  # the IVD weight scales each row's term


def test_numpy_trainer_reduces_the_loss(step: Step) -> None:
    tr = grpo.Trainer(lr=0.5, use_torch=False)
    losses = [tr.update(step) for _ in range(20)]
    assert losses[-1] < losses[0]


def test_dead_broker_and_abbreviated_flags_are_errors() -> None:
    with pytest.raises(BrokerUnavailableError, match="127.0.0.1:9"):
        grpo.main(["--bootstrap", "127.0.0.1:9", "--run", "r1"], connect_timeout=1)
    # `--topic` is a flag of its own, and an abbreviation of --topic-prefix is refused.
    with pytest.raises(SystemExit):
        grpo.main(["--bootstrap", "127.0.0.1:9", "--run", "r1", "--topic-p", "x."])
