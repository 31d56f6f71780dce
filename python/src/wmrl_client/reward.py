"""RewardClient: hand wmrl a step's rollouts, get back their corrected rewards and advantages.

For trainers whose framework owns generation (TRL, verl, OpenRLHF, your own loop): ``publish``
writes the step's rollouts and its manifest exactly as the Go generator does (same records, keys,
headers, anchor flags from the shared hash), ``wait`` reads the step's advantage rows from the
correction consumer and returns them aligned to the caller's rollout order, ``score`` is both.

Ids are deterministic: group j of step v is ``s<v>-g<j>`` unless the caller names it, rollout i
of a group is ``<group>-r<i>``. Publishing a step again (a retry, a restarted trainer) produces
the same ids, manifest and anchor flags; the correction consumer counts identical copies as
duplicates, so the step's output does not change.

Acknowledgement: ``wait(v)`` commits the steps below v that it returned before (the trainer has
trained on them once it asks for the next one); ``StepResult.ack()`` commits one explicitly.

One client per trainer job, one consumer group per client. With several ranks, one rank (rank 0)
calls ``score`` and broadcasts the result (see ``python/README.md``).

End of run: ``close_run()`` publishes the run's end-of-run record (its last step is the largest
step this client published), after which ``wmrl correct`` retires the run once that step is
sealed. Used as a context manager, the client ends the run when the ``with`` block exits cleanly,
and only then: an exception in training usually means a restart from a checkpoint under the same
run id, which an end would refuse (``run_ended``). ``end_run_on_exit=False`` leaves that to the
caller (several clients publishing one run, a job that stops to resume later).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from . import contract as c
from .anchor import is_anchor
from .cluster import DEFAULT_CONNECT_TIMEOUT, LIBRDKAFKA_LOGGER
from .digest import digest_rows
from .errors import ConflictError, RunEndedError, StepTimeoutError, WmrlError
from .ids import check_id
from .options import KafkaOptions, client_options
from .producer import RolloutProducer
from .records import GroupManifest, Rollout, StepManifest
from .stream import AdvantageStream, Step

log = logging.getLogger("wmrl_client")

DEFAULT_STREAM = "main"
"""The Go generator's default stream (``wmrl generate --stream``)."""


@dataclass
class Group:
    """One group of G rollouts sampled for the same prompt.

    ``completions`` become the rollouts' artifacts (what the world model reads and the sandbox
    runs). ``group_id`` defaults to ``s<step>-g<j>``; ``stream`` to the client's stream.
    """

    completions: Sequence[str]
    prompt: str = ""
    group_id: str | None = None
    stream: str | None = None
    meta: Mapping[str, str] = field(default_factory=dict)


@dataclass
class StepResult:
    """The advantage rows of one step, aligned to the order the rollouts were published in.

    Flat numpy arrays, one entry per rollout (group 0's rollouts first): ``used`` is the corrected
    reward, ``advantage`` the group-relative advantage, ``weight`` the IVD weight, ``mask`` the
    loss mask (False: no graded reward or a group too small; advantage is then 0), ``source``
    ``anchor`` or ``world_model``. ``graded`` says the row has the score its source needs (it may
    still be masked, in a group with fewer than two graded rows). ``staleness`` is the number of
    steps between the policy that generated each rollout and this step (NaN when the step was
    published without ``policy_step``); ``mask_reason`` is "stale" for rows the consumer masked
    under ``--max-staleness``, else "". ``table`` is the step's rows as the correction consumer
    wrote them.
    """

    run_id: str
    step: int
    rollout_ids: list[str]
    group_ids: list[str]
    used: np.ndarray
    advantage: np.ndarray
    weight: np.ndarray
    mask: np.ndarray
    source: list[str]
    table: pa.Table
    graded: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    staleness: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float64))
    mask_reason: list[str] = field(default_factory=list)
    _step: Step | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.rollout_ids)

    def digest(self) -> str:
        """Go's topics.DigestRows of the step's rows (equal to `wmrl digest` over this step)."""
        return digest_rows(self.table)

    def ack(self) -> None:
        """Commit the step's offsets for the client's consumer group (idempotent)."""
        if self._step is not None:
            self._step.ack()

    def group_indices(self) -> list[list[int]]:
        """Row positions of each group, groups in order of first appearance."""
        by: dict[str, list[int]] = {}
        for k, gid in enumerate(self.group_ids):
            by.setdefault(gid, []).append(k)
        return list(by.values())

    def grouped(self, column: str) -> list[np.ndarray]:
        """One array per group, groups in order of first appearance (e.g. ``grouped("advantage")``)."""
        values = np.asarray(getattr(self, column), dtype=object if column == "source" else None)
        return [values[idx] for idx in self.group_indices()]


def align(table: pa.Table, rollout_ids: Sequence[str], group_ids: Sequence[str], run_id: str, step: int) -> StepResult:
    """Order a step's rows by the caller's rollout ids; every id must have exactly one row."""
    ids = table.column("rollout_id").to_pylist()
    pos = {rid: i for i, rid in enumerate(ids)}
    if len(pos) != len(ids):
        raise ConflictError(f"step {step} of run {run_id}: duplicate rollout ids in the advantage rows")
    missing = [rid for rid in rollout_ids if rid not in pos]
    extra = sorted(set(ids) - set(rollout_ids))
    if missing or extra:
        raise ConflictError(
            f"step {step} of run {run_id}: the advantage rows do not match the published rollouts "
            f"(missing {missing[:5]}{'…' if len(missing) > 5 else ''}, not published {extra[:5]}"
            f"{'…' if len(extra) > 5 else ''}); was this step published with other groups before?"
        )
    order = np.fromiter((pos[rid] for rid in rollout_ids), dtype=np.int64, count=len(rollout_ids))
    aligned = table.take(pa.array(order)) if len(order) else table
    source = aligned.column("source").to_pylist()
    pok = aligned.column("predicted").is_valid().to_numpy(zero_copy_only=False)
    eok = aligned.column("executed").is_valid().to_numpy(zero_copy_only=False)
    graded = np.array([(e if s == c.SOURCE_ANCHOR else p if s == c.SOURCE_WORLD_MODEL else False)
                       for s, p, e in zip(source, pok, eok, strict=True)], dtype=bool)  # fmt: skip
    n = aligned.num_rows
    if "staleness" in aligned.schema.names:
        staleness = np.array([np.nan if v is None else float(v) for v in aligned.column("staleness").to_pylist()])
        mask_reason = aligned.column("mask_reason").to_pylist()
    else:
        staleness, mask_reason = np.full(n, np.nan), [""] * n
    return StepResult(
        run_id=run_id,
        step=step,
        rollout_ids=list(rollout_ids),
        group_ids=list(group_ids),
        used=aligned.column("used").to_numpy(),
        advantage=aligned.column("advantage").to_numpy(),
        weight=aligned.column("weight").to_numpy(),
        mask=np.asarray(aligned.column("mask").to_numpy(zero_copy_only=False), dtype=bool),
        source=source,
        table=table,
        graded=graded,
        staleness=staleness.reshape(n),
        mask_reason=mask_reason,
    )


class RewardClient:
    """Publish a step's rollout groups and wait for their corrected rewards and advantages.

    ``run_id`` names the training run (its calibration state lives under it). ``group_id`` is the
    consumer group the client reads advantages with: one per trainer job. ``anchor_fraction`` is
    the share of groups executed for real, decided per group by the shared stable hash (Go's
    topics.IsAnchor). Connection options are those of AdvantageStream (``topic_prefix``, SASL,
    TLS, or ``kafka=KafkaOptions``); ``consumer_config``/``producer_config`` pass other librdkafka
    settings to the advantage consumer and the rollout producer (with the same guards as
    AdvantageStream and RolloutProducer). At construction the client checks that a broker answers
    within ``connect_timeout`` seconds and that the rollouts, steps and advantages topics exist
    (BrokerUnavailableError, UnknownTopicError), joins the consumer group and fetches the producer's
    topic metadata, so the first step is as fast as the others; ``None`` skips all of that.

    ``end_run_on_exit``: leaving a ``with`` block without an exception calls ``close_run()`` (when
    this client published a step), so the run ends; an exception never ends it.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str] | None,
        run_id: str,
        group_id: str,
        *,
        anchor_fraction: float = 0.25,
        stream: str = DEFAULT_STREAM,
        policy_version: str = "",
        kafka: KafkaOptions | None = None,
        connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
        producer_factory: Any = None,
        consumer_factory: Any = None,
        poll_timeout: float = 0.2,
        consumer_config: Mapping[str, object] | None = None,
        producer_config: Mapping[str, object] | None = None,
        end_run_on_exit: bool = True,
        **kafka_options: Any,
    ) -> None:
        msg = check_id(run_id)
        if msg:
            raise ValueError(f"run_id {run_id!r}: {msg}")
        if not 0.0 <= anchor_fraction <= 1.0:
            raise ValueError(f"anchor_fraction {anchor_fraction}: want a value in [0, 1]")
        opts = client_options(bootstrap, kafka, kafka_options)
        self.run_id = run_id
        self.group_id = group_id
        self.anchor_fraction = anchor_fraction
        self.stream_name = stream
        self.policy_version = policy_version
        self.kafka = opts
        self.end_run_on_exit = end_run_on_exit
        # The largest step published (the run's last step for close_run) and the end record sent.
        self.last_step: int | None = None
        self.end_record: StepManifest | None = None
        # The stream checks the broker and the advantages topic; the producer's topics are
        # checked with the stream's consumer before anything is written.
        self._stream = AdvantageStream(
            None, run_id, group_id, kafka=opts, consumer_factory=consumer_factory,
            connect_timeout=connect_timeout, poll_timeout=poll_timeout, consumer_config=consumer_config,
        )  # fmt: skip
        try:
            if connect_timeout is not None:
                self._stream.check_topics(
                    [
                        c.topic_name(c.SUFFIX_ROLLOUTS, opts.topic_prefix),
                        c.topic_name(c.SUFFIX_STEPS, opts.topic_prefix),
                    ],
                    connect_timeout,
                )
            self._producer = RolloutProducer(
                None, kafka=opts, producer_factory=producer_factory,
                producer_config={"logger": LIBRDKAFKA_LOGGER, **(producer_config or {})},
            )  # fmt: skip
            # librdkafka connects lazily: join the group and fetch the producer's topic metadata
            # now, so the first step does not pay for a group join (0.3–1.5 s) inside its wait.
            if connect_timeout is not None:
                self._warm_up(connect_timeout)
        except BaseException:
            self._stream.close()
            raise
        self._layouts: dict[int, tuple[list[str], list[str]]] = {}
        self._held: dict[int, Step] = {}
        self._returned: dict[int, StepResult] = {}
        self._closed = False

    def _warm_up(self, timeout: float) -> None:
        for suffix in (c.SUFFIX_ROLLOUTS, c.SUFFIX_STEPS):
            topic = c.topic_name(suffix, self.kafka.topic_prefix)
            try:
                self._producer.fetch_metadata(topic, timeout)
            except Exception as e:  # a slow metadata answer only costs the first publish its latency
                log.info("wmrl_client: producer metadata for %s not fetched at start: %s", topic, e)
        if not self._stream.join(timeout):
            log.warning(
                "wmrl_client: consumer group %s was not assigned partitions of %s within %gs; the first wait "
                "joins it", self.group_id, self._stream.topic, timeout,
            )  # fmt: skip

    # ---- lifecycle

    def __enter__(self) -> RewardClient:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        # Only a clean exit ends the run: after an exception the trainer is likely to restart from
        # a checkpoint with the same run id, and steps after an end are dead-lettered (run_ended).
        try:
            if exc_type is None and self.end_run_on_exit and not self._closed:
                if self.last_step is not None:
                    self.close_run()
                else:
                    log.info("wmrl_client: run %s: no step published, so no end-of-run record", self.run_id)
        finally:
            self.close()

    def close_run(self, last_step: int | None = None) -> StepManifest:
        """End the run: publish its end-of-run record and wait until the broker has it.

        The record is a step manifest with ``end_of_run`` set whose step is the run's last step:
        ``last_step``, or by default the largest step this client published. It goes to the
        run-control topic (``<prefix>runs.v1``) keyed by the run id, after the run's manifests
        were acknowledged; ``wmrl correct`` relays it onto the run's steps partition, so it falls
        after them and a replay sees the end where the live consumer did. The client's principal
        needs Write on the run-control topic (docs/security.md: only trainers and operators may
        end runs). ``wmrl correct`` retires the run once that step
        is sealed and dead-letters records of later steps (reason ``run_ended``); the run does not
        resume, and a run that must go on needs a new run id.

        Calling it again is a no-op that returns the record already sent. Afterwards ``publish``
        raises RunEndedError; ``wait`` still returns the steps up to the last one. ``close()`` does
        not end the run (the ``with`` block's clean exit does). Raises ValueError when no step was
        published and none is named, DeliveryError when the broker refused the record.
        """
        if self.end_record is not None:
            return self.end_record
        self._check_open()
        if last_step is None:
            last_step = self.last_step
        if last_step is None:
            raise ValueError(
                f"run {self.run_id}: this client published no step, so the run's last step is unknown; "
                "name it: close_run(last_step=N)"
            )
        if last_step < 0:
            raise ValueError(f"last_step {last_step}: want a step >= 0")
        if self.last_step is not None and last_step < self.last_step:
            raise ValueError(
                f"run {self.run_id}: last_step {last_step} is before step {self.last_step}, which this client "
                "published; wmrl correct would dead-letter such an end as a conflict"
            )
        record = StepManifest(run_id=self.run_id, step=last_step, end_of_run=True)
        record.validate()
        self._producer.publish([record])
        self.end_record = record
        log.info("wmrl_client: run %s ended after step %d", self.run_id, last_step)
        return record

    def close(self) -> None:
        """Flush the producer and leave the consumer group (unacknowledged steps stay uncommitted).

        It does not end the run: see close_run()."""
        if self._closed:
            return
        self._closed = True
        try:
            self._producer.close()
        finally:
            self._stream.close()

    # ---- publish

    def layout(
        self, step: int, groups: Sequence[Group | Sequence[str]], *, policy_step: int | None = None
    ) -> tuple[list[Rollout], StepManifest]:
        """The records publish() writes for a step (deterministic ids, anchor flags and manifest)."""
        if step < 0:
            raise ValueError(f"step {step}: want step >= 0")
        if not groups:
            raise ValueError(f"step {step}: at least one group is needed")
        manifest = StepManifest(
            run_id=self.run_id, step=step, policy_version=self.policy_version, policy_step=policy_step
        )
        rollouts: list[Rollout] = []
        seen: set[str] = set()
        for j, g in enumerate(groups):
            if isinstance(g, str) or (isinstance(g, Group) and isinstance(g.completions, str)):
                raise TypeError(f"group {j} of step {step}: completions must be a sequence of strings, not a string")
            grp = g if isinstance(g, Group) else Group(completions=list(g))
            gid = grp.group_id if grp.group_id is not None else f"s{step}-g{j}"
            if gid in seen:
                raise ValueError(f"step {step}: group id {gid!r} appears twice")
            seen.add(gid)
            stream = grp.stream or self.stream_name
            anchor = is_anchor(self.run_id, gid, self.anchor_fraction)
            manifest.groups.append(GroupManifest(group_id=gid, stream=stream, size=len(grp.completions), anchor=anchor))
            for i, text in enumerate(grp.completions):
                rollouts.append(
                    Rollout(
                        run_id=self.run_id,
                        step=step,
                        group_id=gid,
                        rollout_id=f"{gid}-r{i}",
                        stream=stream,
                        policy_version=self.policy_version,
                        anchor=anchor,
                        index=i,
                        prompt=grp.prompt,
                        artifact=text,
                        meta=dict(grp.meta),
                    )  # fmt: skip
                )
        return rollouts, manifest

    def publish(
        self, step: int, groups: Sequence[Group | Sequence[str]], *, policy_step: int | None = None
    ) -> StepManifest:
        """Publish the step's rollouts, then its manifest, and wait until the broker has them.

        ``groups`` are Group objects or plain sequences of completion strings. ``policy_step`` is
        the training step of the checkpoint that sampled them (in [0, step]); with it the rows
        carry their staleness and `wmrl correct --max-staleness` can mask them. Raises FieldError
        (before anything is sent) for an invalid record, DeliveryError when the broker refused one.
        """
        if self.end_record is not None:  # before the closed check: the end is the reason that matters
            raise RunEndedError(
                f"run {self.run_id} ended after step {self.end_record.step} (close_run): wmrl correct dead-letters "
                f"later steps (run_ended), so step {step} is not published; a run that goes on needs a new run id",
                self.run_id,
                self.end_record.step,
            )
        self._check_open()
        rollouts, manifest = self.layout(step, groups, policy_step=policy_step)
        for r in rollouts:
            r.validate()
        manifest.validate()
        self._producer.publish([*rollouts, manifest])
        self.last_step = step if self.last_step is None else max(self.last_step, step)
        self._layouts[step] = ([r.rollout_id for r in rollouts], [r.group_id for r in rollouts])
        return manifest

    # ---- wait

    def wait(
        self, step: int, timeout: float | None = 300.0, order: tuple[Sequence[str], Sequence[str]] | None = None
    ) -> StepResult:
        """The step's advantage rows, aligned to the published rollout order.

        Steps below ``step`` that this client returned are acknowledged first. A step published by
        another process comes back in the correction consumer's row order. Raises StepTimeoutError
        after ``timeout`` seconds (None: wait for ever), UnknownRunError when the topic holds other
        runs but none of this one, and ConflictError when the step was already committed by this
        consumer group (a later step arrived instead: use a new group_id to read it again).
        ``order`` = (rollout ids, group ids) returns the rows in that order instead.
        """
        self._check_open()
        for v in [v for v in self._returned if v < step]:
            self._returned.pop(v).ack()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            st = self._held.pop(step, None)
            if st is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    self._timeout(step, timeout)
                st = self._stream.next_step(timeout=None if left is None else min(left, 1.0))
                if st is None:
                    continue
                if st.step < step:
                    # Re-delivered after a restart, from before this trainer's checkpoint.
                    log.info(
                        "wmrl_client: step %d of run %s precedes step %d: acknowledging it", st.step, self.run_id, step
                    )
                    st.ack()
                    continue
                if st.step > step:
                    self._held[st.step] = st
                    raise ConflictError(
                        f"step {st.step} of run {self.run_id} arrived while waiting for step {step}: steps arrive in "
                        f"order, so consumer group {self.group_id!r} has already committed step {step} (read it with "
                        "a new group_id) or it was never sealed"
                    )
            result = self._result(st, order)
            self._returned[step] = result
            return result

    def score(self, step: int, groups: Sequence[Group | Sequence[str]], timeout: float | None = 300.0) -> StepResult:
        """publish() then wait(): the corrected rewards and advantages of the step's rollouts."""
        self.publish(step, groups)
        return self.wait(step, timeout)

    def _result(self, st: Step, order: tuple[Sequence[str], Sequence[str]] | None = None) -> StepResult:
        layout = self._layouts.pop(st.step, None)
        if order is not None:
            layout = (list(order[0]), list(order[1]))
        if layout is None:
            ids = st.table.column("rollout_id").to_pylist()
            gids = st.table.column("group_id").to_pylist()
            layout = (ids, gids)
        res = align(st.table, layout[0], layout[1], self.run_id, st.step)
        res._step = st
        return res

    def _timeout(self, step: int, timeout: float | None) -> None:
        self._stream.check_run_seen()
        s = self._stream.stats
        pending = self._stream.pending
        raise StepTimeoutError(
            f"step {step} of run {self.run_id} not complete on {self._stream.topic} after {timeout:g}s: read "
            f"{s.records} records ({s.skipped_other_runs} of other runs), steps incomplete {pending['incomplete']}; "
            "are `wmrl worldmodel`, `wmrl sandbox` and `wmrl correct` running on this topic prefix?"
        )

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("RewardClient is closed")


__all__ = ["DEFAULT_STREAM", "Group", "RewardClient", "StepResult", "WmrlError", "align"]
