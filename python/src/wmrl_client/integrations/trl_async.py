"""A picklable reward function for TRL's ``AsyncGRPOTrainer`` (``trl.experimental.async_grpo``).

The async trainer (experimental in TRL 1.16) pickles its ``reward_funcs`` into a rollout process
it starts with multiprocessing *spawn*, and there calls each one once per **group** (the
``num_generations`` completions of one prompt), as ``reward_func(completions=..., prompts=...,
completion_ids=..., **dataset_columns)``, from ``_AsyncRolloutLoop._score_group`` (in a thread
through ``asyncio.to_thread``). ``AsyncRewardFunc`` is built from settings only: its Kafka
connections (a ``RewardClient``) and its ``Grouper`` are opened on the first call, in the process
that makes it, dropped from the pickled state and closed with the object (``close()``, garbage
collection or the process's exit)::

    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer
    from wmrl_client.integrations.trl_async import AsyncRewardFunc

    reward = AsyncRewardFunc("run-0042", "trl-0042", num_generations=8, brokers="kafka:9092")
    trainer = AsyncGRPOTrainer(model=..., reward_funcs=[reward], args=AsyncGRPOConfig(num_generations=8, ...))

**Steps.** Each call files its completions with a ``Grouper`` (the one verl's per-sample function
uses): a step is published when ``groups_per_step`` groups are complete, else after
``flush_after`` seconds without a new group. TRL 1.16's rollout process scores groups **one after
another** (``_score_loop`` awaits each ``_score_group`` before taking the next group), so a call
never overlaps the next one and no step can hold more than the one group of the call: keep
``groups_per_step=1`` (the default) there, and every group is its own wmrl step. A larger
``groups_per_step`` only pays off for a caller that scores groups concurrently (several threads or
tasks calling at once); with TRL 1.16 it makes every call wait ``flush_after`` seconds before its
lone group is published (measured by the test in tests/test_trainers_trl_async.py).

**Scale.** The async trainer computes its own advantage from the returned rewards as ``(r -
mean) / (std + 1e-8)`` over the group's scored rows with numpy's **population** std, not
``GRPOTrainer``'s sample std. With ``wmrl correct --ddof 0`` (the default) and ``value="used"``
that is wmrl's advantage up to the epsilon (wmrl adds 1e-4 to the std); ``--ddof 1`` (the advice
for ``GRPOTrainer``) makes the async trainer's advantages ``sqrt(n / (n - 1))`` times wmrl's,
1.155× for groups of 4. ``value="advantage"`` returns wmrl's advantage, which the trainer
re-normalises to population std 1: again wmrl's advantage under ``--ddof 0``.

Rows without a graded reward return None: the trainer makes them NaN, gives them advantage 0 and
leaves them out of their group's mean and std — wmrl's own treatment (mask False). The IVD weights
cannot travel through a reward and the async trainer has no hook that scales advantages: it trains
on corrected rewards with weight 1 (use ``GRPOTrainer`` with ``trl_trainer.WeightedGRPOTrainer``
for weights). The trainer itself needs a GPU and a vLLM server; wmrl's tests replay its scoring
code on CPU (see the test module).
"""

from __future__ import annotations

import itertools
import os
import threading
from multiprocessing import util as mp_util
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, Literal

from ..options import KafkaOptions
from ..reward import RewardClient
from ._batch import task_meta, text_of
from ._grouper import DEFAULT_FLUSH_AFTER, Grouper, SampleResult

_SETTINGS = ("run_id", "group_id", "num_generations", "brokers", "kafka", "anchor_fraction", "groups_per_step",
             "flush_after", "start_step", "timeout", "value", "meta_columns")  # fmt: skip


def _close(grouper: Grouper, client: RewardClient) -> None:
    try:
        grouper.close()
    finally:
        client.close()


class AsyncRewardFunc:
    """``reward_funcs=[AsyncRewardFunc(run_id, group_id, num_generations=G, ...)]``, picklable.

    ``run_id``/``group_id`` are the wmrl run and this trainer's consumer group; ``brokers`` and
    ``kafka`` (a ``KafkaOptions``; default ``KafkaOptions.from_env()`` in the calling process,
    ``topic_prefix`` overriding its prefix) say where. ``num_generations`` is TRL's. ``value`` is
    "used" (the corrected reward) or "advantage"; ``meta_columns`` names dataset columns that go
    into each rollout's ``meta`` (as for ``trl.RewardFunc``). ``groups_per_step``/``flush_after``/
    ``start_step``/``timeout`` are the Grouper's (see the module doc for why 1 group per step).
    ``last`` is the SampleResults of the last call, in the order of its completions.
    """

    __name__ = "wmrl"  # TRL names reward functions by __name__ in its logs

    def __init__(
        self,
        run_id: str,
        group_id: str,
        *,
        num_generations: int,
        brokers: str | Sequence[str] | None = None,
        topic_prefix: str | None = None,
        kafka: KafkaOptions | None = None,
        anchor_fraction: float = 0.25,
        groups_per_step: int = 1,
        flush_after: float = DEFAULT_FLUSH_AFTER,
        start_step: int = 0,
        timeout: float | None = 600.0,
        value: Literal["used", "advantage"] = "used",
        meta_columns: Sequence[str] = (),
    ) -> None:
        if value not in ("used", "advantage"):
            raise ValueError(f"value {value!r}: want 'used' or 'advantage'")
        if num_generations < 1:
            raise ValueError(f"num_generations {num_generations}: want at least 1")
        if kafka is None and topic_prefix is not None:
            kafka = KafkaOptions.from_env(topic_prefix=topic_prefix)
        elif kafka is not None and topic_prefix is not None:
            kafka.topic_prefix = topic_prefix
        self.run_id, self.group_id, self.num_generations = run_id, group_id, num_generations
        self.brokers, self.kafka, self.anchor_fraction = brokers, kafka, anchor_fraction
        self.groups_per_step, self.flush_after, self.start_step = groups_per_step, flush_after, start_step
        self.timeout, self.value, self.meta_columns = timeout, value, tuple(meta_columns)
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._grouper: Grouper | None = None
        self._pid = 0
        self._calls = itertools.count()
        self._finalizer: mp_util.Finalize | None = None
        self.last: list[SampleResult] = []

    # ---- pickling: settings only, never a connection

    def __getstate__(self) -> dict[str, Any]:
        state = {k: getattr(self, k) for k in _SETTINGS}
        if self._grouper is not None:  # a resumed copy goes on from the next step
            state["start_step"] = self._grouper.next_step
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k in _SETTINGS:
            setattr(self, k, state[k])
        self._reset()

    # ---- the connection, opened lazily in the calling process

    @property
    def grouper(self) -> Grouper:
        """This process's Grouper (and RewardClient), opened on first use."""
        with self._lock:
            if self._grouper is None or self._pid != os.getpid():  # a forked copy opens its own
                kafka = self.kafka if self.kafka is not None else KafkaOptions.from_env()
                client = RewardClient(self.brokers, self.run_id, self.group_id, kafka=kafka,
                                      anchor_fraction=self.anchor_fraction)  # fmt: skip
                try:
                    g = Grouper(client, group_size=self.num_generations, groups_per_step=self.groups_per_step,
                                flush_after=self.flush_after, start_step=self.start_step, timeout=self.timeout)  # fmt: skip
                except BaseException:
                    client.close()
                    raise
                self._grouper, self._pid = g, os.getpid()
                # Closed when the object goes, or when the process exits — also a multiprocessing child,
                # which skips atexit (multiprocessing runs its own Finalize hooks there).
                self._finalizer = mp_util.Finalize(self, _close, args=(g, client), exitpriority=10)
            return self._grouper

    @property
    def opened(self) -> bool:
        """Whether this process has opened the connection."""
        return self._grouper is not None and self._pid == os.getpid()

    def close(self) -> None:
        """Close the Grouper and the Kafka connections (a no-op when never opened); the next call reopens."""
        with self._lock:
            fin, self._finalizer, self._grouper = self._finalizer, None, None
        if fin is not None:
            fin()

    # ---- the reward call

    def __call__(
        self,
        completions: Sequence[Any] | None = None,
        prompts: Sequence[Any] | None = None,
        completion_ids: Sequence[Any] | None = None,
        **columns: Any,
    ) -> list[float | None]:
        if completions is None:
            raise TypeError("AsyncRewardFunc needs completions= (TRL passes completions= and prompts=)")
        n = len(completions)
        if n % self.num_generations:
            raise ValueError(f"{n} completions: not whole groups of num_generations {self.num_generations}")
        for k in ("log_extra", "log_metric", "trainer_state"):  # GRPOTrainer's; the async trainer passes none
            columns.pop(k, None)
        missing = [c for c in self.meta_columns if c not in columns]
        if missing:
            raise KeyError(f"meta_columns {missing} are not dataset columns (TRL passed {sorted(columns)})")
        prompts = list(prompts) if prompts is not None else [""] * n
        g = self.grouper
        call = next(self._calls)
        futs: list[Future[SampleResult]] = []
        try:
            for i in range(n):
                meta = task_meta({c: columns[c][i] for c in self.meta_columns}, what="TRL dataset column")
                # The call's own key: a prompt drawn again by a later call forms a group of its own.
                key = (os.getpid(), call, text_of(prompts[i]))
                futs.append(g.submit(key, completions[i], prompt=prompts[i], meta=meta))
            wait = None if self.timeout is None else self.timeout + 30
            results = [f.result(timeout=wait) for f in futs]
        except BaseException:
            g.withdraw(futs)
            raise
        self.last = results
        return [(r.used if self.value == "used" else r.advantage) if r.mask else None for r in results]
