"""verl: wmrl's corrected rewards through verl's reward loop.

verl 0.9 computes rewards **one sample at a time**: ``NaiveRewardManager.run_single`` calls the
configured function per sample, from asyncio tasks, as ``compute_score(data_source=...,
solution_str=..., ground_truth=..., extra_info=...)`` — awaited when it is ``async def``, in the
event loop's default thread pool otherwise — and puts the returned ``score`` (a float, or a dict
whose other keys become ``reward_extra_info`` columns) at the response's last token.

``compute_score`` and ``compute_score_async`` here are that per-sample function. Each call files
its sample with a process-wide ``Grouper`` (see ``_grouper``): the ``group_size`` samples of one
prompt form a group, complete groups form wmrl steps, and the call returns its own sample's
corrected reward::

    reward.custom_reward_function.path=pkg://wmrl_client.integrations.verl
    reward.custom_reward_function.name=compute_score_async          # or compute_score (sync)
    +reward.custom_reward_function.reward_kwargs.brokers=kafka:9092
    +reward.custom_reward_function.reward_kwargs.run_id=run-0042
    +reward.custom_reward_function.reward_kwargs.group_id=verl-0042
    +reward.custom_reward_function.reward_kwargs.group_size=8       # actor_rollout_ref.rollout.n
    +reward.custom_reward_function.reward_kwargs.groups_per_step=64 # data.train_batch_size
    reward.num_workers=1

* The group key is (data_source, ground_truth, the scalar extra_info fields): verl does not pass
  the prompt or its uid to compute_score, so give each prompt an ``extra_info.index`` (verl's
  example preprocessors do) or use ``WmrlRewardManager`` (``verl_manager``), which groups by uid.
* The task reaches the sandbox and the world model: ``data_source``, ``ground_truth`` (JSON text
  when not a string) and every scalar ``extra_info`` field become the rollout's ``meta``.
* ``reward.num_workers=1``: each reward-loop worker is its own process and verl splits a batch
  across them (8 workers by default), so a group would be cut in two and never complete in any
  one of them. With more workers, run the wmrl reward server (``python -m
  wmrl_client.integrations.openrlhf --group-size N --groups-per-step B ...``) and add
  ``+reward.custom_reward_function.reward_kwargs.server_url=http://<host>:5000/`` (and ``token``):
  every worker then posts its samples to the one process that groups them.
* Prefer ``compute_score_async``: every sample of a batch is in flight at once. The sync
  ``compute_score`` blocks one of the loop's executor threads (min(32, CPUs + 4)) per sample;
  when a batch has more samples than threads, groups complete a few at a time and steps are
  published by quiet time (``flush_after``), smaller than a batch.
* The returned dict: ``score`` (``SampleResult.reward``: the corrected reward; a masked row its
  group's mean over graded rows; 0.0 for a group without any graded row, which has GRPO advantage
  0 — logged as a warning, never silent) and ``wmrl_advantage``, ``wmrl_weight``, ``wmrl_mask``,
  ``wmrl_anchor``, ``wmrl_step``, which verl collects as ``reward_extra_info``.
* A sample whose step does not complete in ``timeout`` seconds raises StepTimeoutError: verl's
  reward loop fails the training step rather than training on a made-up reward.

``compute_score`` called with verl's older **batch** keywords (``data_sources=...,
solution_strs=..., ground_truths=..., extra_infos=...``, verl < 0.9's ``BatchRewardManager``)
scores the whole batch as one step, as before; ``make_compute_score(client)`` binds a client.

verl recomputes advantages from the token-level rewards; to train on wmrl's advantages and IVD
weights use them from ``reward_extra_info`` in your advantage estimator.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from wmrl_client.integrations._batch import BatchScorer, fill_masked, task_meta
from wmrl_client.integrations._grouper import DEFAULT_FLUSH_AFTER, Grouper, SampleResult
from wmrl_client.options import KafkaOptions
from wmrl_client.reward import RewardClient

log = logging.getLogger("wmrl_client.verl")

_scorers: dict[tuple[Any, ...], Any] = {}
_groupers: dict[tuple[Any, ...], Grouper] = {}
_lock = threading.Lock()

VERL_ADDED_KEYS = ("num_turns", "rollout_reward_scores", "tool_extra_fields")
"""Keys verl's run_single adds to extra_info itself; they are not the task."""


def sample_meta(data_source: Any, ground_truth: Any, extra_info: Mapping[str, Any] | None) -> dict[str, str]:
    """The rollout meta of one verl sample: data_source, ground_truth (JSON text unless a string)
    and the scalar extra_info fields (lists, dicts and verl's own additions left out)."""
    fields: dict[str, Any] = {}
    for k, v in (extra_info or {}).items():
        if k not in VERL_ADDED_KEYS and (v is None or isinstance(v, str | int | float | bool)):
            fields[str(k)] = v
    fields["data_source"] = data_source
    fields["ground_truth"] = ground_truth if ground_truth is None or isinstance(ground_truth, str) else (
        json.dumps(ground_truth, sort_keys=True, default=str))  # fmt: skip
    return task_meta(fields, what="verl sample")


def sample_key(data_source: Any, ground_truth: Any, extra_info: Mapping[str, Any] | None) -> str:
    """The group key of a verl sample: what is equal across a prompt's n samples."""
    extra = {k: v for k, v in (extra_info or {}).items() if k not in VERL_ADDED_KEYS}
    return json.dumps([data_source, ground_truth, extra], sort_keys=True, default=str)


def sample_reply(r: SampleResult) -> dict[str, Any]:
    """The dict verl's run_single takes: ``score``, the ``wmrl_*`` numbers and ``wmrl_rollout_id``
    (verl turns every key into a per-sample ``reward_extra_info`` column; the id joins a sample to
    its wmrl row)."""
    if not r.group_graded:
        log.warning(
            "wmrl: group %s of step %d has no graded reward (world model and sandbox failed every row): "
            "score 0.0 for all its rows, GRPO advantage 0", r.group_id, r.step,
        )  # fmt: skip
    return {"score": r.reward, **r.extra(), "wmrl_rollout_id": r.rollout_id}


def scores_from(scorer: BatchScorer, solution_strs: Sequence[str], keys: Sequence[Any],
                meta: Sequence[dict[str, str]] | None = None) -> list[dict[str, float]]:  # fmt: skip
    """Score one batch through wmrl; one dict per sample, in batch order."""
    res = scorer.score(solution_strs, keys, meta=meta)
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
    """A batch compute_score (verl < 0.9) bound to an existing RewardClient (for programmatic set-ups)."""
    scorer = BatchScorer(client, group_size=group_size, start_step=start_step, timeout=timeout)

    def compute_score(data_sources: Sequence[Any], solution_strs: Sequence[str], ground_truths: Sequence[Any],
                      extra_infos: Sequence[Any] | None = None, **_: Any) -> list[dict[str, float]]:  # fmt: skip
        extras = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
        keys = [sample_key(ds, gt, ex) for ds, gt, ex in zip(data_sources, ground_truths, extras, strict=True)]
        meta = [sample_meta(ds, gt, ex) for ds, gt, ex in zip(data_sources, ground_truths, extras, strict=True)]
        return scores_from(scorer, solution_strs, keys, meta)

    compute_score.scorer = scorer  # type: ignore[attr-defined]
    return compute_score


def _reward_client(
    run_id: str, group_id: str, brokers: str | None, topic_prefix: str | None, anchor_fraction: float
) -> RewardClient:
    """A RewardClient on the environment's Kafka options, with topic_prefix overriding its prefix."""
    opts = KafkaOptions.from_env()
    if topic_prefix is not None:
        opts.topic_prefix = topic_prefix
    return RewardClient(brokers, run_id, group_id, kafka=opts, anchor_fraction=anchor_fraction)


def grouper_for(
    run_id: str,
    group_id: str,
    group_size: int,
    *,
    brokers: str | None = None,
    topic_prefix: str | None = None,
    anchor_fraction: float = 0.25,
    groups_per_step: int | None = None,
    flush_after: float = DEFAULT_FLUSH_AFTER,
    start_step: int = 0,
    timeout: float | None = 600.0,
) -> Grouper:
    """The process's Grouper for this configuration (built on first use, then shared)."""
    cfg = (run_id, group_id, brokers, topic_prefix, anchor_fraction, group_size, groups_per_step)
    with _lock:
        g = _groupers.get(cfg)
        if g is None:
            client = _reward_client(run_id, group_id, brokers, topic_prefix, anchor_fraction)
            g = _groupers[cfg] = Grouper(client, group_size=group_size, groups_per_step=groups_per_step,
                                         flush_after=flush_after, start_step=start_step, timeout=timeout)  # fmt: skip
        return g


def server_request(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any) -> dict[str, Any]:
    """One sample as a request to the wmrl reward server (``integrations.openrlhf``, sample mode):
    the solution as the query, the group key and the task meta in wmrl's ``keys``/``meta`` fields."""
    return {"query": [solution_str], "prompts": [""], "labels": [None],
            "keys": [sample_key(data_source, ground_truth, extra_info)],
            "meta": [sample_meta(data_source, ground_truth, extra_info)]}  # fmt: skip


def server_reply(out: Mapping[str, Any]) -> dict[str, Any]:
    """verl's dict from a server reply; a failure answer (``wmrl_failed``: the server's default
    ``--on-failure reward``) raises, so verl fails the step as with the in-process grouper."""
    logs = out.get("extra_logs") or {}
    if (logs.get("wmrl_failed") or [0.0])[0]:
        raise RuntimeError("wmrl reward server: no reward for this sample (its group has no graded reward, or its "
                           "step timed out or failed: see the server's log)")  # fmt: skip
    return {"score": float(out["rewards"][0]), **{k: v[0] for k, v in logs.items()}}


def _headers(token: str | None) -> dict[str, str]:
    h = {"Content-Type": "application/json"}
    if token:
        h["Authorization"] = f"Bearer {token}"
    return h


def _post(url: str, body: dict[str, Any], token: str | None, timeout: float) -> dict[str, Any]:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=_headers(token))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())  # type: ignore[no-any-return]
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"wmrl reward server {url}: HTTP {e.code}: {e.read()[:500]!r}") from None


# Posts of compute_score_async wait here, not in the event loop's default executor (min(32, CPUs + 4)
# threads): every sample of a batch waits for its group at once.
_POST_POOL = ThreadPoolExecutor(max_workers=1024, thread_name_prefix="wmrl-verl-post")


async def _apost(url: str, body: dict[str, Any], token: str | None, timeout: float) -> dict[str, Any]:
    return await asyncio.get_running_loop().run_in_executor(_POST_POOL, _post, url, body, token, timeout)


def _grouper_kwargs(kw: dict[str, Any]) -> tuple[Grouper, float | None]:
    try:
        run_id, group_id, group_size = kw.pop("run_id"), kw.pop("group_id"), kw.pop("group_size")
    except KeyError as e:
        raise TypeError(
            f"wmrl compute_score: reward_kwargs.{e.args[0]} is required (run_id, group_id, group_size)"
        ) from None
    kw.pop("server_url", None), kw.pop("token", None)
    known = ("brokers", "topic_prefix", "anchor_fraction", "groups_per_step", "flush_after", "start_step", "timeout")
    opts = {k: kw[k] for k in known if k in kw}
    g = grouper_for(run_id, group_id, int(group_size), **opts)
    return g, g.timeout


def compute_score(
    data_source: Any = None,
    solution_str: str | None = None,
    ground_truth: Any = None,
    extra_info: Mapping[str, Any] | None = None,
    **kw: Any,
) -> dict[str, float] | list[dict[str, float]]:
    """verl's per-sample compute_score (sync): this sample's corrected reward (see the module doc).

    With the batch keywords (``data_sources=``, ``solution_strs=``, ...) it is the older batch
    function instead and returns one dict per sample."""
    if "solution_strs" in kw:
        return compute_score_batch(**kw)
    if solution_str is None:
        raise TypeError("wmrl compute_score: solution_str= is required (verl passes it per sample)")
    if kw.get("server_url"):
        body = server_request(data_source, solution_str, ground_truth, extra_info)
        return server_reply(_post(kw["server_url"], body, kw.get("token"), float(kw.get("timeout") or 600) + 30))
    g, timeout = _grouper_kwargs(dict(kw))
    fut = g.submit(sample_key(data_source, ground_truth, extra_info), solution_str,
                   meta=sample_meta(data_source, ground_truth, extra_info))  # fmt: skip
    try:
        return sample_reply(fut.result(timeout=None if timeout is None else timeout + 30))
    except FutureTimeout:
        g.withdraw([fut])
        raise


async def compute_score_async(
    data_source: Any = None,
    solution_str: str | None = None,
    ground_truth: Any = None,
    extra_info: Mapping[str, Any] | None = None,
    **kw: Any,
) -> dict[str, float]:
    """verl's per-sample compute_score as ``async def``: every sample of a batch waits at once."""
    if solution_str is None:
        raise TypeError("wmrl compute_score_async: solution_str= is required (verl passes it per sample)")
    if kw.get("server_url"):
        body = server_request(data_source, solution_str, ground_truth, extra_info)
        out = await _apost(kw["server_url"], body, kw.get("token"), float(kw.get("timeout") or 600) + 30)
        return server_reply(out)
    g, timeout = _grouper_kwargs(dict(kw))
    r = await g.asubmit(sample_key(data_source, ground_truth, extra_info), solution_str,
                        meta=sample_meta(data_source, ground_truth, extra_info),
                        timeout=None if timeout is None else timeout + 30)  # fmt: skip
    return sample_reply(r)


def compute_score_batch(
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
    """The batch compute_score of verl < 0.9's BatchRewardManager: one batch, one wmrl step."""
    cfg = (run_id, group_id, brokers, topic_prefix, anchor_fraction, group_size)
    with _lock:
        fn = _scorers.get(cfg)
        if fn is None:
            client = _reward_client(run_id, group_id, brokers, topic_prefix, anchor_fraction)
            fn = _scorers[cfg] = make_compute_score(client, group_size=group_size, start_step=start_step,
                                                    timeout=timeout)  # fmt: skip
    return fn(data_sources, solution_strs, ground_truths, extra_infos)  # type: ignore[no-any-return]
