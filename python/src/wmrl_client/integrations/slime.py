"""slime: a group reward model for ``--custom-rm-path`` with ``--group-rm``.

With ``--group-rm`` slime scores each prompt's samples together as they finish, calling
``batched_async_rm(args, samples)``, which, given ``--custom-rm-path``, awaits the loaded
function as ``await fn(args, samples, **kwargs)`` and expects one reward per sample. slime is
not on PyPI (and needs Megatron and SGLang on GPUs), so this adapter is written and tested
against that documented seam; it reads only ``sample.prompt``, ``sample.response``,
``sample.label`` and ``sample.metadata`` (scalar fields)::

    --group-rm --custom-rm-path wmrl_client.integrations.slime.group_rm
    # and in the environment: WMRL_BROKERS, WMRL_RUN, WMRL_TRAINER_GROUP (+ WMRL_TOPIC_PREFIX,
    # WMRL_ANCHOR_FRACTION, WMRL_GROUPS_PER_STEP, WMRL_FLUSH_AFTER, WMRL_START_STEP)

Each call is one whole group: its samples are filed with a process-wide ``Grouper`` (group size =
the call's sample count) and the call returns their corrected rewards once the step holding the
group is corrected. A step is ``WMRL_GROUPS_PER_STEP`` groups (``--rollout-batch-size``; default:
``args.rollout_batch_size`` when present) or fewer after ``WMRL_FLUSH_AFTER`` quiet seconds. The
label (and the metadata's scalar fields) go into each rollout's ``meta``; a masked row gets its
group's graded mean, a group without any graded row 0.0 on every row (GRPO advantage 0, with a
warning); a step that does not complete in time raises StepTimeoutError.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from wmrl_client.integrations._batch import task_meta
from wmrl_client.integrations._grouper import Grouper, Groupers
from wmrl_client.integrations.verl import sample_reply

ROW_KEY = "wmrl"
"""The key of ``sample.metadata`` where ``group_rm`` leaves the sample's wmrl row (fused advantage,
step, rollout id, weight, mask) for ``post_process_rewards``; see ``slime_advantage``."""

_groupers = Groupers("wmrl slime group_rm", "slime group of {n} samples")


def configure(grouper: Grouper | None) -> None:
    """Use this grouper instead of one built from the environment (None: back to the environment)."""
    _groupers.configure(grouper)


def grouper_for(args: Any, group_size: int, env: Mapping[str, str] | None = None) -> Grouper:
    """The process's Grouper for groups of group_size samples (built from WMRL_* on first use; the groups
    per step default to slime's ``--rollout-batch-size``)."""
    return _groupers.get(group_size, env, getattr(args, "rollout_batch_size", None))


def sample_meta(sample: Any) -> dict[str, str]:
    """A slime sample's task as rollout meta: its label and the scalar metadata fields."""
    md = getattr(sample, "metadata", None)
    fields: dict[str, Any] = {}
    if isinstance(md, Mapping):
        fields.update({str(k): v for k, v in md.items() if v is None or isinstance(v, str | int | float | bool)})
    label = getattr(sample, "label", None)
    if label is not None:
        fields["label"] = label if isinstance(label, str) else json.dumps(label, sort_keys=True, default=str)
    return task_meta(fields, what="slime sample")


async def group_rm(args: Any, samples: Sequence[Any], **_: Any) -> list[float]:
    """slime's ``--group-rm`` custom reward: one whole group in, one corrected reward per sample out."""
    if not samples:
        return []
    g = grouper_for(args, len(samples))
    # The group's identity: one key per call, so two calls for one prompt are two groups.
    key = ("slime", id(samples), getattr(samples[0], "index", None))
    timeout = None if g.timeout is None else g.timeout + 30
    results = await asyncio.gather(
        *(
            g.asubmit(key, s.response, prompt=getattr(s, "prompt", ""), meta=sample_meta(s), timeout=timeout)
            for s in samples
        )  # fmt: skip
    )
    for s, r in zip(samples, results, strict=True):
        md = getattr(s, "metadata", None)
        if isinstance(md, dict):  # read back by post_process_rewards, in this (the rollout) process
            md[ROW_KEY] = {"advantage": r.advantage * r.weight, "step": r.step, "rollout_id": r.rollout_id,
                           "weight": r.weight, "mask": r.mask}  # fmt: skip
    return [float(sample_reply(r)["score"]) for r in results]
