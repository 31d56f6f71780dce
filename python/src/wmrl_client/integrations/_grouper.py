"""Grouper: per-sample reward calls → whole groups → wmrl steps.

verl 0.9 (``NaiveRewardManager.run_single``) and OpenRLHF 0.11 (``SingleTurnAgentExecutor``) ask
for one sample's reward at a time, concurrently, while wmrl corrects whole groups (the n samples
of one prompt) in steps. The grouper sits between them:

* ``submit(key, completion)`` files the sample under its group key (the prompt, or verl's uid)
  and returns a ``concurrent.futures.Future``; ``asubmit`` is the same for ``async def`` callers.
  The k-th ``group_size`` samples of a key form one group, in arrival order.
* A group is complete when its ``group_size`` samples are in. Incomplete groups are never
  published: a group of fewer samples would be another group than the one the framework
  normalises over. A sample whose group never completes fails at its caller's timeout.
* A step is the complete groups in order of completion, published by one thread, one step at a
  time: when ``groups_per_step`` groups are complete (the expected groups of a batch: the
  normal path), or, for the rest, when no sample arrived for ``flush_after`` seconds (a batch
  whose size the grouper was not told, the last batch of an epoch, a dropped sample) — and at
  the latest ``max_wait`` seconds after the oldest complete group completed, so a steady trickle
  of samples cannot hold a group back. Groups that complete while a step is in flight go into the
  next step.

Why replay stays exact: flushing decides only *which* complete groups share a step. That
decision is written down — the step's manifest and its rollouts are on the topics before wmrl
corrects anything — and wmrl's correction and replay read only those records, never the
trainer's timing. Re-running `wmrl replay` (or a rebuilt `correct`) on the topics gives the same
rows whatever the flush timing was; the grouper's ids are deterministic (``s<step>-g<j>``).

Each future resolves to the sample's ``SampleResult``: wmrl's row, plus ``reward``, the value a
framework that recomputes group-relative advantages should train on (see ``SampleResult``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Hashable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ..errors import WmrlError
from ..options import KafkaOptions
from ..reward import Group, RewardClient, StepResult
from ._batch import fill_masked, key_of, text_of

log = logging.getLogger("wmrl_client.grouper")

DEFAULT_FLUSH_AFTER = 2.0
"""Seconds without a new sample after which complete groups are published even though fewer
than ``groups_per_step`` are in."""

MAX_WAIT_FACTOR = 10
"""Default ``max_wait`` in units of ``flush_after``: under a steady trickle of samples there is
no quiet time, so a complete group is published at the latest this long after it completed."""


@dataclass
class SampleResult:
    """One sample's corrected reward from its wmrl step.

    ``used``/``advantage``/``weight``/``mask``/``source`` are wmrl's row (see StepResult).
    ``reward`` is what to hand a framework that recomputes group-relative advantages from the
    rewards: ``used`` for a graded row; for a row without a graded reward (mask False) its group's
    mean over graded rows, so it adds nothing to the group's centred advantage; and 0.0 for every
    row of a group with no graded row at all (``group_graded`` False) — a constant group, whose
    GRPO advantage is 0 for every row. Callers that can report an error instead (the OpenRLHF
    server) do so for such groups.
    """

    step: int
    group_id: str
    rollout_id: str
    reward: float
    used: float
    advantage: float
    weight: float
    mask: bool
    source: str
    graded: bool
    group_graded: bool

    @property
    def anchor(self) -> bool:
        return self.source == "anchor"

    def extra(self) -> dict[str, float]:
        """wmrl's row as floats, for a framework's per-sample logs (``wmrl_*`` keys)."""
        return {
            "wmrl_advantage": self.advantage,
            "wmrl_weight": self.weight,
            "wmrl_mask": float(self.mask),
            "wmrl_anchor": float(self.anchor),
            "wmrl_step": float(self.step),
        }


@dataclass
class _Sample:
    completion: str
    future: Future[SampleResult]
    prompt: str
    meta: Mapping[str, str]


@dataclass
class _Group:
    key: Hashable
    samples: list[_Sample] = field(default_factory=list)
    completed_at: float = 0.0


def results_of(res: StepResult, n_groups: int) -> list[list[SampleResult]]:
    """Per group (publish order), per sample: the SampleResults of one step."""
    filled = fill_masked(res)
    idx = res.group_indices()
    if len(idx) != n_groups:
        raise WmrlError(f"step {res.step}: {len(idx)} groups came back, {n_groups} were published")
    out = []
    for rows in idx:
        any_graded = bool(res.graded[rows].any())
        out.append(
            [
                SampleResult(
                    step=res.step,
                    group_id=res.group_ids[k],
                    rollout_id=res.rollout_ids[k],
                    reward=float(filled[k]) if any_graded else 0.0,
                    used=float(res.used[k]),
                    advantage=float(res.advantage[k]),
                    weight=float(res.weight[k]),
                    mask=bool(res.mask[k]),
                    source=res.source[k],
                    graded=bool(res.graded[k]),
                    group_graded=any_graded,
                )  # fmt: skip
                for k in rows
            ]
        )
    return out


class Grouper:
    """Collects per-sample calls into whole groups and scores them as consecutive wmrl steps.

    ``group_size`` is the framework's samples per prompt (verl's ``rollout.n``, OpenRLHF's
    ``n_samples_per_prompt``). ``groups_per_step`` (prompts per batch) publishes a step as soon as
    that many groups are complete; None publishes on quiet time alone. ``flush_after`` bounds the
    quiet time; ``max_wait`` (default 10 × ``flush_after``) bounds how long a complete group waits
    when samples keep arriving without a pause. ``start_step`` is the first step's number
    (resume: persist ``next_step``). ``timeout`` bounds each step's wait for wmrl. The publishing
    thread starts with the first sample; ``close()`` stops it and fails what is still pending.
    """

    def __init__(
        self,
        client: RewardClient,
        *,
        group_size: int,
        groups_per_step: int | None = None,
        flush_after: float = DEFAULT_FLUSH_AFTER,
        start_step: int = 0,
        timeout: float | None = 600.0,
        max_wait: float | None = None,
    ) -> None:
        if group_size < 1:
            raise ValueError(f"group_size {group_size}: want at least 1")
        if groups_per_step is not None and groups_per_step < 1:
            raise ValueError(f"groups_per_step {groups_per_step}: want at least 1 (or None)")
        if flush_after <= 0:
            raise ValueError(f"flush_after {flush_after}: want a positive number of seconds")
        self.client = client
        self.group_size = group_size
        self.groups_per_step = groups_per_step
        self.flush_after = flush_after
        self.max_wait = max_wait if max_wait is not None else MAX_WAIT_FACTOR * flush_after
        if self.max_wait < flush_after:
            raise ValueError(f"max_wait {self.max_wait}: want at least flush_after ({flush_after})")
        self.timeout = timeout
        self.next_step = start_step
        self.last: StepResult | None = None
        self._open: dict[Hashable, _Group] = {}
        self._complete: deque[_Group] = deque()
        self._last_arrival = time.monotonic()
        self._cv = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    # ---- callers

    def submit(
        self, key: Any, completion: Any, *, prompt: Any = "", meta: Mapping[str, str] | None = None
    ) -> Future[SampleResult]:
        """File one sample under its group key; the future resolves when its step is corrected."""
        fut: Future[SampleResult] = Future()
        s = _Sample(text_of(completion), fut, text_of(prompt) if prompt is not None else "", dict(meta or {}))
        k = key_of(key)
        with self._cv:
            if self._closed:
                raise RuntimeError("Grouper is closed")
            g = self._open.get(k)
            if g is None:
                g = self._open[k] = _Group(k)
            g.samples.append(s)
            if len(g.samples) == self.group_size:
                del self._open[k]
                g.completed_at = time.monotonic()
                self._complete.append(g)
            self._last_arrival = time.monotonic()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="wmrl-grouper", daemon=True)
                self._thread.start()
            self._cv.notify_all()
        return fut

    async def asubmit(
        self, key: Any, completion: Any, *, prompt: Any = "", meta: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> SampleResult:  # fmt: skip
        """``submit`` for asyncio callers: awaits the sample's result (``timeout`` seconds at most)."""
        cf = self.submit(key, completion, prompt=prompt, meta=meta)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(cf), timeout)
        except (TimeoutError, asyncio.CancelledError):
            self.withdraw([cf])
            raise

    def withdraw(self, futures: list[Future[SampleResult]]) -> int:
        """Take samples whose caller gave up (a timeout) out of their still incomplete groups, so a
        retried request does not join its own earlier copy; their futures are cancelled. Samples of
        complete groups stay (their group is published; the result is just not read). Returns how
        many were withdrawn."""
        gone = {id(f) for f in futures}
        n = 0
        with self._cv:
            for k in list(self._open):
                g = self._open[k]
                keep = [s for s in g.samples if id(s.future) not in gone]
                n += len(g.samples) - len(keep)
                for s in g.samples:
                    if id(s.future) in gone:
                        s.future.cancel()
                if keep:
                    g.samples = keep
                else:
                    del self._open[k]
        return n

    @property
    def pending(self) -> dict[str, int]:
        """Samples in incomplete groups, and complete groups not yet published."""
        with self._cv:
            return {
                "open_samples": sum(len(g.samples) for g in self._open.values()),
                "complete_groups": len(self._complete),
            }

    def close(self) -> None:
        """Stop publishing; samples not yet in a published step fail with RuntimeError."""
        with self._cv:
            self._closed = True
            left = [s for g in [*self._open.values(), *self._complete] for s in g.samples]
            self._open.clear()
            self._complete.clear()
            self._cv.notify_all()
        for s in left:
            s.future.set_exception(RuntimeError("Grouper closed before this sample's group was scored"))
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    # ---- the publishing thread

    def _take(self) -> list[_Group] | None:
        """Block until a step is due; None when closed."""
        with self._cv:
            while True:
                if self._closed:
                    return None
                n = len(self._complete)
                if n and self.groups_per_step is not None and n >= self.groups_per_step:
                    return [self._complete.popleft() for _ in range(self.groups_per_step)]
                now = time.monotonic()
                quiet = now - self._last_arrival
                age = now - self._complete[0].completed_at if n else 0.0
                if n and (quiet >= self.flush_after or age >= self.max_wait):
                    return [self._complete.popleft() for _ in range(n)]
                left = min(self.flush_after - quiet, self.max_wait - age)
                self._cv.wait(timeout=max(0.001, left) if n else None)

    def _run(self) -> None:
        while True:
            groups = self._take()
            if groups is None:
                return
            step, published = self.next_step, False
            try:
                published = self._publish(step, groups)
                res = self._wait(step, len(groups))
            except Exception as e:  # every sample of the step learns why
                log.error("wmrl grouper: step %d (%d groups) failed: %s", step, len(groups), e)
                for g in groups:
                    for s in g.samples:
                        s.future.set_exception(e)
                if published:  # the manifest is out: its number is taken
                    self.next_step = step + 1
                continue
            for g, rs in zip(groups, res, strict=True):
                for s, r in zip(g.samples, rs, strict=True):
                    s.future.set_result(r)

    def _publish(self, step: int, groups: list[_Group]) -> bool:
        wm_groups = [
            Group(
                completions=[s.completion for s in g.samples], prompt=g.samples[0].prompt, meta=dict(g.samples[0].meta)
            )  # fmt: skip
            for g in groups
        ]
        self.client.publish(step, wm_groups)
        return True

    def _wait(self, step: int, n_groups: int) -> list[list[SampleResult]]:
        res = self.client.wait(step, timeout=self.timeout)
        self.next_step = step + 1
        self.last = res
        return results_of(res, n_groups)


class Groupers:
    """A process's Groupers for one framework hook, one per group size, each built from WMRL_* on first
    use (WMRL_RUN, WMRL_TRAINER_GROUP, the connection variables, WMRL_ANCHOR_FRACTION,
    WMRL_GROUPS_PER_STEP, WMRL_FLUSH_AFTER, WMRL_START_STEP), or the one given to ``configure``.

    ``hook`` names the caller in errors ("wmrl slime group_rm"); ``group`` describes a group of n
    ("slime group of {n} samples")."""

    def __init__(self, hook: str, group: str) -> None:
        self._hook, self._group = hook, group
        self._by_size: dict[int, Grouper] = {}
        self._lock = threading.Lock()
        self._configured: Grouper | None = None

    def configure(self, grouper: Grouper | None) -> None:
        """Use this grouper instead of one built from the environment (None: back to the environment)."""
        self._configured = grouper

    def get(self, group_size: int, env: Mapping[str, str] | None = None, groups_per_step: Any = None) -> Grouper:
        """The Grouper for groups of group_size; groups_per_step counts when WMRL_GROUPS_PER_STEP is unset."""
        if self._configured is not None:
            if self._configured.group_size != group_size:
                raise ValueError(f"{self._group.format(n=group_size)}, the configured grouper takes "
                                 f"{self._configured.group_size}")  # fmt: skip
            return self._configured
        e = os.environ if env is None else env
        with self._lock:
            g = self._by_size.get(group_size)
            if g is not None:
                return g
            missing = [k for k in ("WMRL_RUN", "WMRL_TRAINER_GROUP") if not e.get(k)]
            if missing:
                raise RuntimeError(f"{self._hook}: set {' and '.join(missing)} (the run id and the trainer's group)")
            per_step = e.get("WMRL_GROUPS_PER_STEP") or groups_per_step
            client = RewardClient(None, e["WMRL_RUN"], e["WMRL_TRAINER_GROUP"], kafka=KafkaOptions.from_env(e),
                                  anchor_fraction=float(e.get("WMRL_ANCHOR_FRACTION", "0.25")))  # fmt: skip
            g = self._by_size[group_size] = Grouper(
                client, group_size=group_size, groups_per_step=int(per_step) if per_step else None,
                flush_after=float(e.get("WMRL_FLUSH_AFTER", DEFAULT_FLUSH_AFTER)),
                start_step=int(e.get("WMRL_START_STEP", "0")),
            )  # fmt: skip
            return g
