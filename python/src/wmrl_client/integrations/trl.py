"""A reward function for TRL's ``GRPOTrainer(reward_funcs=...)``.

TRL calls every custom reward function once per generation batch, on each process's slice, as
``reward_func(prompts=..., completions=..., completion_ids=..., trainer_state=..., **columns)``
where ``columns`` are the dataset's other columns repeated per completion, and expects a list
with one float (or None: "not applicable") per completion. ``RewardFunc`` publishes the slice as
one wmrl step — the completions of one prompt form a group (TRL samples ``num_generations`` per
prompt) — and returns wmrl's corrected rewards in TRL's order.

TRL then computes its own group-relative advantages from these rewards, so two things follow:

* The IVD weights cannot travel through a reward. ``RewardFunc.last`` holds the last step's
  ``StepResult`` (``weight``, ``advantage``, ``mask`` in batch order) for a ``GRPOTrainer``
  subclass whose ``compute_loss`` multiplies each sequence's loss by its weight — the
  weighted-loss path; without it TRL trains on corrected (debiased) rewards with weight 1.
* ``value="advantage"`` returns wmrl's advantage as the reward; with
  ``GRPOConfig(scale_rewards="none")`` (``False`` in older TRL) TRL's advantage, reward minus the
  group mean, is then exactly wmrl's advantage, whose group mean is 0.

Rows without a graded reward return None (TRL turns it into NaN and leaves the row out of the
sum over reward functions). Use it with one process, or give each process's slice whole groups
(per-device generation batch a multiple of ``num_generations``) and a run of its own; evaluation
batches would become training steps, so evaluate with a different reward function.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from ..reward import RewardClient, StepResult
from ._batch import BatchScorer


class RewardFunc:
    """``reward_funcs=[RewardFunc(client, num_generations=G)]``: wmrl's corrected rewards.

    ``num_generations`` (TRL's, optional) checks that every group is whole. ``start_step`` is the
    wmrl step of the first call (see BatchScorer); ``value`` is "used" (the corrected reward,
    default) or "advantage".
    """

    __name__ = "wmrl"  # TRL names reward functions by __name__ in its logs

    def __init__(
        self,
        client: RewardClient,
        *,
        num_generations: int | None = None,
        start_step: int = 0,
        value: Literal["used", "advantage"] = "used",
        timeout: float | None = 600.0,
    ) -> None:
        if value not in ("used", "advantage"):
            raise ValueError(f"value {value!r}: want 'used' or 'advantage'")
        self.scorer = BatchScorer(client, group_size=num_generations, start_step=start_step, timeout=timeout)
        self.value = value

    @property
    def last(self) -> StepResult | None:
        """The StepResult of the last call (weights, advantages, mask in batch order)."""
        return self.scorer.last

    def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] | None = None,
        completion_ids: Sequence[Any] | None = None,
        trainer_state: Any = None,
        **columns: Any,
    ) -> list[float | None]:
        if completions is None:
            raise TypeError("RewardFunc needs completions= (TRL passes prompts= and completions=)")
        keys = list(prompts) if prompts is not None else list(range(len(completions)))
        res = self.scorer.score(completions, keys, prompts)
        vals = res.used if self.value == "used" else res.advantage
        return [float(v) if m else None for v, m in zip(vals, res.mask, strict=True)]
