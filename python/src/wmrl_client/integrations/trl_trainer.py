"""``WeightedGRPOTrainer``: TRL's ``GRPOTrainer`` with wmrl's IVD weights in the loss (TRL 1.16).

A reward function can hand TRL a reward, never a weight. This subclass takes the weights of the
wmrl step that ``RewardFunc`` just scored and multiplies TRL's advantages by them, row by row:
GRPO's loss is linear in the advantage, so each sequence's loss is scaled by its weight (anchor
rows, executed for real, count more). With ``wmrl correct --ddof 1`` and TRL's default
``scale_rewards="group"`` the advantage TRL computes from the returned rewards is wmrl's, so the
trained advantage is exactly wmrl's ``advantage × weight``.

It overrides ``GRPOTrainer._generate_and_score_completions``, a private method whose return
value (a dict with this process's ``advantages`` slice) is TRL's internal contract: the class
refuses TRL versions other than the one it was written and tested against (``PINNED_TRL``)
unless ``allow_unpinned_trl=True``. This module imports TRL: import it only where TRL is
installed.
"""

from __future__ import annotations

from typing import Any

import torch
import trl
from trl import GRPOTrainer

from .trl import RewardFunc

PINNED_TRL = "1.16."
"""The TRL release series whose ``_generate_and_score_completions`` this subclass overrides."""


class WeightedGRPOTrainer(GRPOTrainer):  # type: ignore[misc]
    """``GRPOTrainer`` whose advantages are multiplied by wmrl's IVD weights.

    ``reward_funcs`` must contain exactly one ``RewardFunc`` (other reward functions may be added;
    their rewards are summed by TRL as usual, and the weights still come from wmrl's step).
    ``last_weights`` holds the weights applied to the last training batch, in TRL's row order.
    Evaluation batches are left unweighted.
    """

    def __init__(self, *args: Any, allow_unpinned_trl: bool = False, **kwargs: Any) -> None:
        if not trl.__version__.startswith(PINNED_TRL) and not allow_unpinned_trl:
            raise RuntimeError(
                f"WeightedGRPOTrainer overrides GRPOTrainer._generate_and_score_completions of TRL {PINNED_TRL}x; "
                f"TRL {trl.__version__} is installed (pin trl=={PINNED_TRL}*, or pass allow_unpinned_trl=True after "
                "checking that the method still returns this process's 'advantages')"
            )
        super().__init__(*args, **kwargs)
        funcs = [f for f in self.reward_funcs if isinstance(f, RewardFunc)]
        if len(funcs) != 1:
            raise ValueError(f"WeightedGRPOTrainer needs exactly one wmrl RewardFunc in reward_funcs, got {len(funcs)}")
        self.wmrl_reward: RewardFunc = funcs[0]
        self.last_weights: torch.Tensor | None = None

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        before = self.wmrl_reward.scorer.next_step
        out: dict[str, Any] = super()._generate_and_score_completions(inputs)
        if not self.model.training:
            return out
        res = self.wmrl_reward.last
        if res is None or self.wmrl_reward.scorer.next_step != before + 1:
            raise RuntimeError(
                "WeightedGRPOTrainer: the wmrl RewardFunc did not score this batch (steps "
                f"{before} → {self.wmrl_reward.scorer.next_step}); it must be one of reward_funcs"
            )
        adv = out["advantages"]
        if len(res) != adv.shape[0]:
            raise RuntimeError(
                f"WeightedGRPOTrainer: wmrl step {res.step} has {len(res)} rows, TRL's batch {adv.shape[0]}: "
                "RewardFunc scores this process's slice, so the two must match"
            )
        w = torch.tensor(res.weight, dtype=adv.dtype, device=adv.device)
        out["advantages"] = adv * (w if adv.dim() == 1 else w.unsqueeze(1))
        self.last_weights = w
        return out
