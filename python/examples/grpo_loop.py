"""A minimal GRPO-style training loop on wmrl's fused advantages.

    python examples/grpo_loop.py --bootstrap 127.0.0.1:9092 --run sim-1 \
        --topic-prefix wmrl.demo.<id>.wmrl. --group trainer-1

(`wmrl demo --external` prints the run id and the topic prefix of its wmrl arm.)

Each complete step arrives as a ``Step`` (a pyarrow Table). Three of its columns enter the loss:

* ``advantage`` — the group-relative advantage computed from the corrected reward,
* ``weight``    — the inverse-variance (IVD) weight: anchor rows (real executions) count more,
* ``mask``      — the loss mask: False rows (no graded reward, or a group too small) add nothing.

    loss = - Σ_i mask_i · weight_i · advantage_i · log π(a_i | x_i)  /  Σ_i mask_i

A real trainer joins the rows with its own rollouts by ``rollout_id`` to get the log-probabilities
of the sampled completions; this example uses a tiny logistic policy over features derived from
the rollout id so that it runs anywhere. It uses PyTorch when it is installed and numpy otherwise,
and acknowledges each step only after the update, so a crash re-delivers the untrained steps.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

DIM = 16


def features(rollout_ids: Iterable[str]) -> np.ndarray:
    """Stand-in for the policy's view of each sampled completion: a fixed vector per rollout."""
    rows = []
    for rid in rollout_ids:
        seed = int.from_bytes(hashlib.sha256(str(rid).encode()).digest()[:8], "big")
        rows.append(np.random.default_rng(seed).standard_normal(DIM))
    return np.asarray(rows, dtype=np.float64).reshape(-1, DIM)


def pg_loss_numpy(
    theta: np.ndarray, x: np.ndarray, adv: np.ndarray, weight: np.ndarray, mask: np.ndarray
) -> tuple[float, np.ndarray]:
    """Weighted policy-gradient loss and its gradient for a logistic policy, log π = log σ(θ·x)."""
    m = mask.astype(np.float64)
    n = max(m.sum(), 1.0)
    z = x @ theta
    logp = -np.logaddexp(0.0, -z)  # log σ(z), stable
    coef = m * weight * adv  # <- where the advantages and the IVD weights enter
    loss = float(-(coef * logp).sum() / n)
    dlogp = 1.0 - 1.0 / (1.0 + np.exp(-z))  # d log σ(z) / dz = 1 − σ(z)
    grad = -(x * (coef * dlogp)[:, None]).sum(axis=0) / n
    return loss, grad


def pg_loss_torch(theta: Any, x: Any, adv: Any, weight: Any, mask: Any) -> Any:
    """The same loss with autograd."""
    import torch

    m = mask.to(x.dtype)
    logp = torch.nn.functional.logsigmoid(x @ theta)
    return -(m * weight * adv * logp).sum() / m.sum().clamp(min=1.0)


class Trainer:
    """Holds the policy parameters and applies one update per step."""

    def __init__(self, lr: float = 0.5, use_torch: bool | None = None) -> None:
        self.lr = lr
        if use_torch is None:
            try:
                import torch  # noqa: F401

                use_torch = True
            except ImportError:
                use_torch = False
        self.use_torch = use_torch
        if use_torch:
            import torch

            self.theta = torch.zeros(DIM, dtype=torch.float64, requires_grad=True)
            self.opt = torch.optim.SGD([self.theta], lr=lr)
        else:
            self.theta_np = np.zeros(DIM)

    def update(self, step: Any) -> float:
        """One gradient step on a wmrl Step; returns the loss before the update."""
        x = features(step.to_numpy(["rollout_id"])["rollout_id"])
        if self.use_torch:
            import torch

            t = step.to_torch(["advantage", "weight", "mask"])
            loss = pg_loss_torch(self.theta, torch.from_numpy(x), t["advantage"], t["weight"], t["mask"])
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            return float(loss.detach())
        a = step.to_numpy(["advantage", "weight", "mask"])
        loss, grad = pg_loss_numpy(self.theta_np, x, a["advantage"], a["weight"], a["mask"])
        self.theta_np -= self.lr * grad
        return loss


def main(argv: list[str] | None = None, out: Any = sys.stdout, connect_timeout: float = 10.0) -> Mapping[str, float]:
    from wmrl_client import AdvantageStream, KafkaOptions

    # allow_abbrev=False: `--topic` must not silently mean `--topic-prefix`.
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    ap.add_argument("--bootstrap", default=None, help="seed brokers (default: WMRL_BROKERS or 127.0.0.1:9092)")
    ap.add_argument("--run", required=True, help="run id whose advantages to train on")
    ap.add_argument("--group", default="grpo-example", help="consumer group (offsets are committed per group)")
    ap.add_argument(
        "--topic-prefix", default=None, help="prefix of the wmrl topics (default: WMRL_TOPIC_PREFIX or wmrl.)"
    )
    ap.add_argument("--topic", default=None, help="the advantages topic's full name (instead of --topic-prefix)")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: no limit)")
    ap.add_argument("--idle-timeout", type=float, default=30.0, help="stop after this many seconds without data")
    ap.add_argument("--numpy", action="store_true", help="use the numpy path even if torch is installed")
    args = ap.parse_args(argv)

    opts = KafkaOptions.from_env()
    if args.topic_prefix is not None:
        opts.topic_prefix = args.topic_prefix
    trainer = Trainer(use_torch=False if args.numpy else None)
    losses: dict[str, float] = {}
    with AdvantageStream(
        args.bootstrap,
        args.run,
        args.group,
        kafka=opts,
        topic=args.topic,
        idle_timeout=args.idle_timeout,
        connect_timeout=connect_timeout,
    ) as stream:
        for step in stream:
            loss = trainer.update(step)
            step.ack()  # only after the update: a crash before this line re-delivers the step
            losses[str(step.step)] = loss
            kept = int(step.to_numpy(["mask"])["mask"].sum())
            print(f"step {step.step}: {step.num_rows} rows ({kept} in the loss), loss {loss:+.5f}", file=out)
            if args.max_steps and len(losses) >= args.max_steps:
                break
    print(f"trained {len(losses)} steps with {'torch' if trainer.use_torch else 'numpy'}", file=out)
    return losses


if __name__ == "__main__":
    from wmrl_client import WmrlError

    try:
        main()
    except WmrlError as e:  # a dead broker, a missing topic, an unknown run: say so, exit non-zero
        sys.exit(f"grpo_loop: {e}")
