"""verl: a batch ``compute_score`` for verl's ``batch`` reward manager.

verl's ``BatchRewardManager`` decodes each response and calls the configured function once per
batch as ``compute_score(data_sources=..., solution_strs=..., ground_truths=...,
extra_infos=..., **reward_kwargs)``, expecting one score per sample — a float, or a dict with
``"score"`` whose other keys become ``reward_extra_info`` columns — and writes the score at the
response's last token (the token-level reward). Configure it with::

    reward_model.reward_manager=batch
    custom_reward_function.path=<site-packages>/wmrl_client/integrations/verl.py
    custom_reward_function.name=compute_score
    +custom_reward_function.reward_kwargs.brokers=kafka:9092
    +custom_reward_function.reward_kwargs.run_id=run-0042
    +custom_reward_function.reward_kwargs.group_id=verl-0042
    +custom_reward_function.reward_kwargs.group_size=8        # actor_rollout_ref.rollout.n

``compute_score`` builds one RewardClient per process from these keyword arguments (or the
WMRL_* environment) on first use. A group is the samples with the same prompt identity (data
source, ground truth, extra info; verl repeats each prompt n times and may reorder the batch to
balance sequence lengths), cut into ``group_size`` samples; rows come back in batch order.
Each sample's dict carries ``score`` (the corrected reward;
a masked-out row gets its group's mean over graded rows, so it adds nothing to verl's GRPO
advantage) and ``wmrl_advantage``, ``wmrl_weight``, ``wmrl_mask``, ``wmrl_anchor`` for the
weighted-loss path and logging.

verl recomputes advantages from the token-level rewards; to train on wmrl's advantages and IVD
weights use them from ``reward_extra_info`` in your advantage estimator.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from wmrl_client.integrations._batch import BatchScorer, fill_masked
from wmrl_client.options import KafkaOptions
from wmrl_client.reward import RewardClient

_scorers: dict[tuple[Any, ...], Any] = {}
_lock = threading.Lock()


def scores_from(scorer: BatchScorer, solution_strs: Sequence[str], keys: Sequence[Any]) -> list[dict[str, float]]:
    """Score one batch through wmrl; one dict per sample, in batch order."""
    res = scorer.score(solution_strs, keys)
    used = fill_masked(res)
    return [
        {
            "score": float(u),
            "wmrl_advantage": float(a),
            "wmrl_weight": float(w),
            "wmrl_mask": float(m),
            "wmrl_anchor": float(s == "anchor"),
        }  # fmt: skip
        for u, a, w, m, s in zip(used, res.advantage, res.weight, res.mask, res.source, strict=True)
    ]


def make_compute_score(client: RewardClient, *, group_size: int | None = None, start_step: int = 0,
                       timeout: float | None = 600.0) -> Any:  # fmt: skip
    """A batch compute_score bound to an existing RewardClient (for programmatic set-ups)."""
    scorer = BatchScorer(client, group_size=group_size, start_step=start_step, timeout=timeout)

    def compute_score(data_sources: Sequence[Any], solution_strs: Sequence[str], ground_truths: Sequence[Any],
                      extra_infos: Sequence[Any] | None = None, **_: Any) -> list[dict[str, float]]:  # fmt: skip
        extras = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
        keys = [(ds, gt, ex) for ds, gt, ex in zip(data_sources, ground_truths, extras, strict=True)]
        return scores_from(scorer, solution_strs, keys)

    compute_score.scorer = scorer  # type: ignore[attr-defined]
    return compute_score


def compute_score(
    data_sources: Sequence[Any],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Any] | None = None,
    *,
    run_id: str,
    group_id: str,
    brokers: str | None = None,
    topic_prefix: str | None = None,
    anchor_fraction: float = 0.25,
    group_size: int | None = None,
    start_step: int = 0,
    timeout: float | None = 600.0,
    **_: Any,
) -> list[dict[str, float]]:
    """verl's batch compute_score: the corrected rewards of one batch (see the module doc)."""
    cfg = (run_id, group_id, brokers, topic_prefix, anchor_fraction, group_size)
    with _lock:
        fn = _scorers.get(cfg)
        if fn is None:
            opts = KafkaOptions.from_env()
            if topic_prefix is not None:
                opts.topic_prefix = topic_prefix
            client = RewardClient(brokers, run_id, group_id, kafka=opts, anchor_fraction=anchor_fraction)
            fn = _scorers[cfg] = make_compute_score(client, group_size=group_size, start_step=start_step,
                                                    timeout=timeout)  # fmt: skip
    return fn(data_sources, solution_strs, ground_truths, extra_infos)  # type: ignore[no-any-return]
