"""prime-rl: wmrl's group credit as a registered ``Algorithm`` (``score_group``).

prime-rl assigns credit in its orchestrator: one ``Algorithm`` instance per environment, built by
``build_algorithm`` from ``ALGORITHM_CLASSES[config.type]``; the pipeline awaits
``finalize_group(episodes)`` → ``score_group(episodes)`` as each example's cohort of rollouts
completes, and the hook writes per-token credit onto the traces with ``assign_advantages``. Its
default ``grpo`` credit is mean-only (reward minus the group mean, no std division), so whatever
scale the reward has reaches the gradient in full. ``WmrlAlgorithm.score_group`` instead files the
group's trainable traces with a ``Grouper`` (one wmrl group per call, whole steps published as in
the OpenRLHF server), awaits the step and assigns each trace

* ``credit="advantage"`` (default): wmrl's fused advantage, ``advantage × weight`` — wmrl's
  group normalisation (``wmrl correct --ddof``) with the IVD weight applied;
* ``credit="centred"``: prime-rl's GRPO credit on wmrl's corrected reward, ``(reward − group
  mean) × weight``, for runs tuned on prime-rl's mean-only scale.

Registration, the way prime-rl registers its own algorithms (there is no config hook for user
code: a new ``algo.type`` needs a config class in prime-rl's discriminated union)::

    from wmrl_client.integrations import prime_rl as wmrl_prime
    wmrl_prime.register()              # ALGORITHM_CLASSES["grpo"] = WmrlAlgorithm: [orchestrator.algo] type = "grpo"
    # in the orchestrator's environment: WMRL_BROKERS, WMRL_RUN, WMRL_TRAINER_GROUP (+ WMRL_TOPIC_PREFIX,
    # WMRL_ANCHOR_FRACTION, WMRL_GROUPS_PER_STEP = the batch's examples, WMRL_FLUSH_AFTER, WMRL_START_STEP,
    # WMRL_PRIME_CREDIT = advantage | centred)

What goes to wmrl per trace: the text of its sampled message nodes (the artifact), the text of the
last unsampled node before the first sampled one (the prompt), and the scalar fields of its task
data (``trace.task.data``: ``idx``, ``answer``, … as rollout meta, what the sandbox grades against).
Traces prime-rl does not train on (``iter_trainable_traces``: errors, untrainable agents, no
sampled token) are not sent and get no credit, as with prime-rl's GRPO.

Written against PrimeIntellect-ai/prime-rl commit 559b44772e471d1538537b8805cc77f3824a5e64
(src/prime_rl/orchestrator/algo/base.py, routing.py, grpo.py, __init__.py; last changed in
13553dd8). prime-rl is not on the package registry reachable here (it installs from its repository,
with verifiers from git), so the tests replay that contract — ``Algorithm(config, policy_pool)``,
``finalize_group``/``score_group``, ``iter_trainable_traces``, ``assign_advantages``,
``ALGORITHM_CLASSES``/``build_algorithm`` — and drive this class through the real wmrl stages.
This module imports prime-rl: import it only where prime-rl is installed.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

try:
    import prime_rl.orchestrator.algo as _algo
    from prime_rl.orchestrator.algo.base import Algorithm, iter_trainable_traces
    from prime_rl.orchestrator.algo.routing import assign_advantages
except ImportError as e:  # pragma: no cover - depends on the install
    raise ImportError(
        "wmrl_client.integrations.prime_rl subclasses prime-rl's Algorithm: install prime-rl (from its repository) "
        f"in this environment ({e})"
    ) from e

from ._batch import task_meta
from ._grouper import Grouper, Groupers, SampleResult

CREDITS = ("advantage", "centred")

_groupers = Groupers("wmrl prime-rl algorithm", "prime-rl group of {n} traces")


def configure(grouper: Grouper | None) -> None:
    """Use this grouper instead of one built from the environment (None: back to the environment)."""
    _groupers.configure(grouper)


def grouper_for(group_size: int, env: Mapping[str, str] | None = None) -> Grouper:
    """The process's Grouper for groups of group_size traces (built from WMRL_* on first use)."""
    return _groupers.get(group_size, env)


def _content(node: Any) -> str:
    c = getattr(getattr(node, "message", None), "content", None)
    if c is None:
        return ""
    return c if isinstance(c, str) else json.dumps(c, sort_keys=True, default=str)


def completion_of(trace: Any) -> str:
    """The artifact: the text of the trace's sampled message nodes, in order."""
    return "\n".join(_content(n) for n in trace.nodes if any(n.mask))


def prompt_of(trace: Any) -> str:
    """The prompt: the last unsampled node before the first sampled one."""
    prompt = ""
    for n in trace.nodes:
        if any(n.mask):
            break
        prompt = _content(n)
    return prompt


def meta_of(trace: Any) -> dict[str, str]:
    """The scalar fields of the trace's task data, as rollout meta."""
    data = getattr(getattr(trace, "task", None), "data", None)
    fields = data.model_dump() if hasattr(data, "model_dump") else dict(vars(data)) if data is not None else {}
    scalars = {str(k): v for k, v in fields.items() if isinstance(v, str | int | float | bool)}
    return task_meta(scalars, what="prime-rl task data")


def credit(results: Sequence[SampleResult], mode: str) -> list[float]:
    """Each trace's credit from its group's wmrl rows (see the module doc for the modes)."""
    if mode == "advantage":
        return [r.advantage * r.weight for r in results]
    if mode == "centred":
        mean = sum(r.reward for r in results) / len(results)
        return [(r.reward - mean) * r.weight for r in results]
    raise ValueError(f"wmrl prime-rl credit {mode!r}: want one of {', '.join(CREDITS)}")


class WmrlAlgorithm(Algorithm):  # type: ignore[misc]
    """prime-rl ``Algorithm`` whose group credit is wmrl's (see the module doc)."""

    action_loss_type = "rl"

    def __init__(self, config: Any, policy_pool: Any, *, credit: str | None = None,
                 timeout: float | None = None) -> None:  # fmt: skip
        super().__init__(config, policy_pool)
        self.credit = credit or os.environ.get("WMRL_PRIME_CREDIT", "advantage")
        if self.credit not in CREDITS:
            raise ValueError(f"wmrl prime-rl credit {self.credit!r}: want one of {', '.join(CREDITS)}")
        self.timeout = timeout
        self.rows: dict[str, SampleResult] = {}
        """The wmrl row of each trace scored in the latest wmrl step, by trace id (for logs and checks)."""

    async def score_group(self, episodes: list[Any]) -> None:
        traces = [trace for _, trace in iter_trainable_traces(episodes)]
        if not traces:
            return
        g = grouper_for(len(traces))
        key = ("prime-rl", id(episodes))  # one wmrl group per call
        wait = self.timeout if self.timeout is not None else (None if g.timeout is None else g.timeout + 30)
        results = await asyncio.gather(
            *(g.asubmit(key, completion_of(t), prompt=prompt_of(t), meta=meta_of(t), timeout=wait) for t in traces)
        )
        for t, c in zip(traces, credit(results, self.credit), strict=True):
            assign_advantages(t, c)
        if self.rows and next(iter(self.rows.values())).step != results[0].step:
            self.rows = {}
        self.rows.update({str(getattr(t, "id", i)): r for i, (t, r) in enumerate(zip(traces, results, strict=True))})


def register(name: str = "grpo") -> None:
    """Put WmrlAlgorithm in prime-rl's ``ALGORITHM_CLASSES`` under name (default: replace ``grpo``,
    whose config class — ``action_loss_type`` "rl" — then builds it)."""
    _algo.ALGORITHM_CLASSES[name] = WmrlAlgorithm
