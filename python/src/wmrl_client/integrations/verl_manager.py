"""verl 0.9: a reward manager that groups by verl's own uid, loaded with ``source=importlib``.

verl's per-sample ``compute_score`` never sees the prompt or the uid verl gives each prompt's n
samples, so ``wmrl_client.integrations.verl`` groups by (data_source, ground_truth, extra_info).
This manager receives the sample's ``DataProto`` instead and groups by its ``uid``; the prompt
text (decoded with verl's tokenizer) becomes the rollout's prompt and the task fields its meta::

    reward.reward_manager.source=importlib
    reward.reward_manager.name=WmrlRewardManager
    reward.reward_manager.module.path=pkg://wmrl_client.integrations.verl_manager
    reward.num_workers=1
    # and in the trainer's environment: WMRL_BROKERS, WMRL_RUN, WMRL_TRAINER_GROUP (+ WMRL_TOPIC_PREFIX,
    # WMRL_ANCHOR_FRACTION, WMRL_FLUSH_AFTER, WMRL_START_STEP, the WMRL_* connection variables)

The group size is ``actor_rollout_ref.rollout.n`` and the groups per step
``data.train_batch_size`` from verl's config (WMRL_GROUP_SIZE / WMRL_GROUPS_PER_STEP override
them). Each sample's ``reward_score`` is ``SampleResult.reward`` and its ``reward_extra_info`` the
``wmrl_*`` fields, as for ``compute_score``. This module imports verl: load it only inside verl.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from verl import DataProto
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from wmrl_client.integrations._grouper import DEFAULT_FLUSH_AFTER, Grouper
from wmrl_client.integrations.verl import sample_meta, sample_reply
from wmrl_client.options import KafkaOptions
from wmrl_client.reward import RewardClient

_grouper: Grouper | None = None


def _cfg(config: Any, *path: str) -> Any:
    node = config
    for p in path:
        if node is None:
            return None
        node = node.get(p) if hasattr(node, "get") else getattr(node, p, None)
    return node


def grouper_from(config: Any, env: Mapping[str, str] | None = None) -> Grouper:
    """The process's Grouper, configured by the WMRL_* environment and verl's config."""
    global _grouper
    if _grouper is not None:
        return _grouper
    e = os.environ if env is None else env
    missing = [k for k in ("WMRL_RUN", "WMRL_TRAINER_GROUP") if not e.get(k)]
    if missing:
        raise RuntimeError(f"WmrlRewardManager: set {' and '.join(missing)} (the run id and the trainer's group)")
    size = e.get("WMRL_GROUP_SIZE") or _cfg(config, "actor_rollout_ref", "rollout", "n")
    if not size:
        raise RuntimeError("WmrlRewardManager: no group size (actor_rollout_ref.rollout.n or WMRL_GROUP_SIZE)")
    per_step = e.get("WMRL_GROUPS_PER_STEP") or _cfg(config, "data", "train_batch_size")
    client = RewardClient(None, e["WMRL_RUN"], e["WMRL_TRAINER_GROUP"], kafka=KafkaOptions.from_env(e),
                          anchor_fraction=float(e.get("WMRL_ANCHOR_FRACTION", "0.25")))  # fmt: skip
    _grouper = Grouper(
        client, group_size=int(size), groups_per_step=int(per_step) if per_step else None,
        flush_after=float(e.get("WMRL_FLUSH_AFTER", DEFAULT_FLUSH_AFTER)),
        start_step=int(e.get("WMRL_START_STEP", "0")),
    )  # fmt: skip
    return _grouper


class WmrlRewardManager(RewardManagerBase):  # type: ignore[misc]
    """verl reward manager: each sample's reward from wmrl, grouped by verl's uid."""

    def __init__(self, config: Any, tokenizer: Any, compute_score: Any = None, reward_router_address: Any = None,
                 reward_model_tokenizer: Any = None, **_: Any) -> None:  # fmt: skip
        super().__init__(config, tokenizer, compute_score)
        self.grouper = grouper_from(config)

    async def run_single(self, data: DataProto) -> dict[str, Any]:
        item = data[-1:][0]
        prompt_ids = item.batch["prompts"]
        response_ids = item.batch["responses"]
        n_prompt = prompt_ids.shape[-1]
        mask = item.batch["attention_mask"]
        valid_prompt = prompt_ids[-int(mask[:n_prompt].sum()) :] if int(mask[:n_prompt].sum()) else prompt_ids[:0]
        valid_response = response_ids[: int(mask[n_prompt:].sum())]
        nt = item.non_tensor_batch
        uid = nt.get("uid")
        if uid is None:
            raise KeyError("WmrlRewardManager: the sample has no uid (verl sets one per prompt before rollout)")
        rm = nt.get("reward_model") or {}
        ground_truth = rm.get("ground_truth") if hasattr(rm, "get") else None
        extra = nt.get("extra_info") or {}
        decode = self.tokenizer.decode
        prompt, response = await self.loop.run_in_executor(
            None,
            lambda: (decode(valid_prompt, skip_special_tokens=True), decode(valid_response, skip_special_tokens=True)),
        )
        r = await self.grouper.asubmit(
            str(uid), response, prompt=prompt, meta=sample_meta(nt.get("data_source"), ground_truth, extra)
        )
        out = sample_reply(r)
        return {"reward_score": out.pop("score"), "reward_extra_info": out}
