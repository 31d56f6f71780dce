"""A reward function for TRL's ``GRPOTrainer(reward_funcs=...)``.

TRL calls every custom reward function once per generation batch, on each process's slice, as
``reward_func(prompts=..., completions=..., completion_ids=..., trainer_state=..., **columns)``
where ``columns`` are the dataset's other columns repeated per completion, and expects a list
with one float (or None: "not applicable") per completion. ``RewardFunc`` publishes the slice as
one wmrl step — the completions of one prompt form a group (TRL samples ``num_generations`` per
prompt) — and returns wmrl's corrected rewards in TRL's order.

TRL then computes its own group-relative advantages from these rewards, so three things follow:

* TRL's default ``scale_rewards="group"`` divides by the group's *sample* std (Bessel's
  correction), wmrl's ``correct`` by default by the population std: run ``wmrl correct --ddof 1``
  and TRL's advantage, computed from the returned ``used`` rewards, is exactly wmrl's advantage
  (both add 1e-4 to the std).
* ``value="advantage"`` returns wmrl's advantage as the reward; with
  ``GRPOConfig(scale_rewards="none")`` TRL's advantage, reward minus the group mean, is then
  exactly wmrl's advantage (any ``--ddof``), whose group mean is 0.
* The IVD weights cannot travel through a reward: ``trl_trainer.WeightedGRPOTrainer`` (TRL
  1.16) multiplies TRL's advantages by them; ``RewardFunc.last`` holds the last step's
  ``StepResult`` (``weight``, ``advantage``, ``mask`` in batch order). Without it TRL trains on
  corrected (debiased) rewards with weight 1.

TRL calls reward functions once per *generation batch*: with ``steps_per_generation`` (default:
``gradient_accumulation_steps``) above 1, one wmrl step covers several optimizer steps.

Rows without a graded reward return None (TRL turns it into NaN and leaves the row out of the
sum over reward functions). Use it with one process, or give each process's slice whole groups
(per-device generation batch a multiple of ``num_generations``) and a run of its own; evaluation
batches would become training steps, so evaluate with a different reward function.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from ..reward import RewardClient, StepResult
from ._batch import BatchScorer, task_meta


class RewardFunc:
    """``reward_funcs=[RewardFunc(client, num_generations=G)]``: wmrl's corrected rewards.

    ``num_generations`` (TRL's, optional) checks that every group is whole. ``start_step`` is the
    wmrl step of the first call (see BatchScorer); ``value`` is "used" (the corrected reward,
    default) or "advantage". ``meta_columns`` names dataset columns (a code task's test id, a math
    answer) that go into each rollout's ``meta``, where the sandbox's grade step (``{meta.KEY}``,
    ``{dir}/rollout.json``; private unless ``--input-meta`` names the key) and the world model's
    prompt template (``.Meta``) see them; values must
    be scalars (strings, numbers, booleans; None is left out).

    TRL passes ``log_extra``/``log_metric``: each completion's wmrl ``source``, ``weight`` and
    ``advantage`` go to TRL's completions table (``wmrl_source``, ...), and the step, the anchor
    and masked fractions and the mean weight to its metrics (``wmrl/...``).
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
        meta_columns: Sequence[str] = (),
    ) -> None:
        if value not in ("used", "advantage"):
            raise ValueError(f"value {value!r}: want 'used' or 'advantage'")
        self.scorer = BatchScorer(client, group_size=num_generations, start_step=start_step, timeout=timeout)
        self.value = value
        self.meta_columns = tuple(meta_columns)

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
        log_extra = columns.pop("log_extra", None)
        log_metric = columns.pop("log_metric", None)
        missing = [c for c in self.meta_columns if c not in columns]
        if missing:
            raise KeyError(f"meta_columns {missing} are not dataset columns (TRL passed {sorted(columns)})")
        meta = [
            task_meta({c: columns[c][i] for c in self.meta_columns}, what="TRL dataset column")
            for i in range(len(completions))
        ]
        keys = list(prompts) if prompts is not None else list(range(len(completions)))
        res = self.scorer.score(completions, keys, prompts, meta=meta)
        vals = res.used if self.value == "used" else res.advantage
        if log_extra is not None:  # TRL's completions table: one value per completion
            log_extra("wmrl_source", list(res.source))
            log_extra("wmrl_weight", [float(w) for w in res.weight])
            log_extra("wmrl_advantage", [float(a) for a in res.advantage])
        if log_metric is not None:  # averaged over TRL's logging step
            n = max(len(res), 1)
            log_metric("wmrl/step", float(res.step))
            log_metric("wmrl/anchor_fraction", sum(s == "anchor" for s in res.source) / n)
            log_metric("wmrl/masked_fraction", float((~res.mask).sum()) / n)
            log_metric("wmrl/weight_mean", float(res.weight.mean()) if len(res) else 0.0)
        return [float(v) if m else None for v, m in zip(vals, res.mask, strict=True)]
