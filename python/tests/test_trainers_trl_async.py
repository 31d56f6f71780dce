"""TRL 1.16's AsyncGRPOTrainer scoring path, run by TRL's own code, with wmrl's AsyncRewardFunc.

The async trainer needs a GPU and a vLLM server to generate, so it cannot run here. Everything
from the reward function's pickling on is TRL's own code, run on CPU against the real stages:
``AsyncRolloutWorker.start()`` (its ``pickle.dumps`` check of the reward functions, a
multiprocessing *spawn* child running ``_child_main``), the child's ``_AsyncRolloutLoop`` with its
``_score_loop`` and ``_score_group`` (the reward call and TRL's advantage), and the ``mp.Queue`` of
scored samples the trainer reads. Replayed rather than run: generation — ``ReplayLoop`` overrides
``_generate_loop`` to queue groups of fixed completions (the dataset's ``completion`` column)
instead of asking vLLM — and the worker's vLLM-installed check (``is_vllm_available``), patched to
True in the parent. ``wmrl correct`` runs with its default ``--ddof 0``.

Checked: the reward function is pickled unopened and opens its connection only in the child;
every group is its own wmrl step (TRL 1.16 scores groups one after another); TRL's advantage is
wmrl's advantage up to the std epsilon (population std both sides); anchor rows' rewards are the
sandbox's grade. A caller that scores groups concurrently gets whole multi-group steps from the
same Grouper, and a sequential caller with groups_per_step > 1 waits ``flush_after`` per call
(why the default is 1). Then the same replay with a plain reward function: wmrl's per-step
overhead.
"""

from __future__ import annotations

import json
import os
import pickle
import queue
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_reward_e2e import Stages
from trainerkit import grade, judge, judge_score, mixed_run, start_stages, tiny_model

from wmrl_client.integrations.trl_async import AsyncRewardFunc

pytestmark = [pytest.mark.trainers, pytest.mark.e2e]

trl = pytest.importorskip("trl")
arw = pytest.importorskip("trl.experimental.async_grpo.async_rollout_worker")
datasets = pytest.importorskip("datasets")

G, GROUPS, ANCHOR = 4, 6, 0.5
judge_url = pytest.fixture(judge)


class ReplayLoop(arw._AsyncRolloutLoop):  # type: ignore[misc,name-defined]
    """TRL's rollout loop with generation replayed: each dataset row's ``completion`` column (G
    texts) becomes one complete group, queued for TRL's own ``_score_loop``. Each scored sample
    also carries the reward function's wmrl row and the call's duration in its metrics."""

    async def _generate_loop(self, stop_event: Any) -> None:
        try:
            for gid, row in enumerate(self.dataset):
                texts, g = row["completion"], self.num_generations
                seqs = [[arw.TrainingSequence([1, 2, 3], [0, 1, 1], [0.0, -0.5, -0.5], f"r{gid}-{i}")] for i in range(g)]
                group = arw.RolloutGroup(
                    prompts=[row["prompt"]] * g,
                    reward_kwargs={k: [row[k]] * g for k in row if k not in {"prompt", "completion", "completion_ids"}},
                    completions=list(texts), completions_ids=[[1, 2]] * g, completions_sequences=seqs,
                    tool_call_counts=[0] * g, tool_failure_counts=[0] * g, model_version=self.model_version,
                    group_id=gid, env_rewards=[], rollout_rewards=[],
                )  # fmt: skip
                group.queued_at = time.monotonic()
                await self._groups_to_score.put(group)
            # Stay up until the parent's stop(), as TRL's own loop does: a child that exits first
            # leaves its stop-watcher thread counted as a sleeper on the stop event, and the
            # parent's Event.set() then waits for it forever (multiprocessing.Condition.notify).
            await stop_event.wait()
        finally:
            await self._groups_to_score.put(None)

    async def _score_group(self, group: Any) -> list[Any]:
        fn = self.reward_funcs[0]
        opened_before = bool(getattr(fn, "opened", False))
        t0 = time.monotonic()
        samples = await super()._score_group(group)
        took = time.monotonic() - t0
        rows = getattr(fn, "last", None) or [None] * len(samples)
        for s, r in zip(samples, rows, strict=True):
            s.metrics["replay/score_s"] = took
            s.metrics["replay/opened_before"] = float(opened_before)
            s.metrics["replay/pid"] = float(os.getpid())
            if r is not None:
                s.metrics.update({"wmrl/step": float(r.step), "wmrl/advantage": r.advantage,
                                  "wmrl/used": r.used, "wmrl/anchor": float(r.anchor), "wmrl/mask": float(r.mask)})  # fmt: skip
        if getattr(fn, "opened", False) and group.group_id == len(self.dataset) - 1:
            fn.close()  # the last group: the child closes its connection before it exits
        return samples


class ReplayWorker(arw.AsyncRolloutWorker):  # type: ignore[misc,name-defined]
    _loop_cls = ReplayLoop


def plain_reward(completions: list[str], answer: list[str], **_: Any) -> list[float]:
    """A plain (picklable, module-level) reward function: the sandbox's grade, computed in place."""
    return [grade(c, int(a)) for c, a in zip(completions, answer, strict=True)]


def dataset() -> Any:
    rows: dict[str, list[Any]] = {"prompt": [], "answer": [], "completion": []}
    for j in range(GROUPS):
        rows["prompt"].append(f"task {j}: add {j} and {j + 1}")
        rows["answer"].append(str((2 * j + 1) % 10))
        rows["completion"].append([f"it is {'7' * (i + 1)} since {j}{i}" for i in range(G)])
    return datasets.Dataset.from_dict(rows)


def replay(reward: Any, model_dir: Path, monkeypatch: pytest.MonkeyPatch, ds: Any = None, g: int = G) -> list[Any]:
    """TRL's worker with the replay loop: start (pickle check + spawn), drain every scored sample, stop.
    ``ds``: rows with ``prompt`` and ``completion`` (g texts) columns (default: dataset())."""
    from accelerate.state import PartialState
    from transformers import AutoTokenizer

    PartialState()  # the trainer's Accelerator has made it by then; the worker logs through it
    ds = dataset() if ds is None else ds
    monkeypatch.setattr(arw, "is_vllm_available", lambda: True)
    from trl import chat_template_utils

    tok = AutoTokenizer.from_pretrained(model_dir)
    # The tiny tokenizer has no chat template TRL knows: set a response template, as TRL asks one to.
    tok.response_template = chat_template_utils.qwen3_5_template
    worker = ReplayWorker(model_name="replay", dataset=ds, reward_funcs=[reward], processing_class=tok,
                          eos_token_ids=[tok.eos_token_id], num_generations=g, child_ready_timeout=180)  # fmt: skip
    worker.start()
    out: list[Any] = []
    try:
        deadline = time.monotonic() + 240
        while len(out) < g * len(ds):
            worker.check_health(stale_after_s=120)
            try:
                out.append(worker.rollout_buffer.get(timeout=1))
            except queue.Empty:
                assert time.monotonic() < deadline, f"{len(out)} of {g * len(ds)} samples scored in 240 s"
    finally:
        worker.stop()
    return out


def test_trl_async_reward_func_pickles_and_scores_in_trls_spawned_rollout_process(
    kafka: str, redis_url: str, wmrl_cli: Path, prefix: str, judge_url: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    model_dir = tiny_model(tmp_path / "tiny")
    run = mixed_run("trla", [f"s{k}-g0" for k in range(GROUPS)], ANCHOR)
    st = Stages(wmrl_cli, kafka, redis_url, prefix)
    st.run("topics", "create", "--partitions", "1")
    reward = AsyncRewardFunc(run, f"{st.unique}-trla", num_generations=G, brokers=kafka, topic_prefix=prefix,
                             anchor_fraction=ANCHOR, meta_columns=["answer"], timeout=90)  # fmt: skip
    pickle.dumps(reward)  # what AsyncRolloutWorker.start() checks first
    try:
        start_stages(st, judge_url, "answer", tmp_path)  # correct's default --ddof 0
        samples = replay(reward, model_dir, monkeypatch)
        plain = replay(plain_reward, model_dir, monkeypatch)
        concurrent = _concurrent_and_sequential(kafka, prefix, st.unique)
        st.check_alive()
    finally:
        codes = st.stop()
    assert all(code == 0 for _, code in codes), codes

    assert not reward.opened, "the parent's reward function must never open a connection"
    by_group: dict[int, list[Any]] = {}
    for s in samples:
        by_group.setdefault(s.group_id, []).append(s)
    assert sorted(by_group) == list(range(GROUPS))
    anchors = 0
    for gid, rows in sorted(by_group.items()):
        m = [r.metrics for r in rows]
        assert {x["replay/pid"] for x in m} != {float(os.getpid())}, "scored in the spawned child"
        assert m[0]["replay/opened_before"] == float(gid > 0), "opened lazily, on the child's first call"
        # TRL 1.16 scores groups one after another: group k is wmrl step k, whole.
        assert {x["wmrl/step"] for x in m} == {float(gid)}
        assert all(x["wmrl/mask"] == 1.0 for x in m)
        used = np.array([x["wmrl/used"] for x in m])
        assert [x["reward"] for x in m] == pytest.approx(list(used), abs=1e-12)
        s = used.std()  # population std: what the async trainer divides by
        want = np.array([x["wmrl/advantage"] for x in m]) * (s + 1e-4) / (s + 1e-8)
        np.testing.assert_allclose([r.advantage for r in rows], want, rtol=1e-6, atol=1e-9)
        for r, x in zip(rows, m, strict=True):
            if x["wmrl/anchor"]:
                anchors += 1
                assert x["reward"] == pytest.approx(grade(r.completion, int(_answer(gid))), abs=1e-12)
            else:
                assert x["reward"] == pytest.approx(judge_score(r.completion), abs=1e-12)
    assert 0 < anchors < len(samples)

    grouped_steps, seq_steps, seq_seconds = concurrent
    assert grouped_steps == [3], grouped_steps  # three concurrent calls: one step of three groups
    assert seq_steps == [1, 1], seq_steps  # sequential calls with groups_per_step=3: one group per step anyway
    assert min(seq_seconds) >= 0.5  # ... each after flush_after of quiet

    wmrl_s = statistics.median(s.metrics["replay/score_s"] for s in samples)
    plain_s = statistics.median(s.metrics["replay/score_s"] for s in plain)
    report = {"groups": GROUPS, "G": G, "wmrl_step_median_s": round(wmrl_s, 4),
              "plain_step_median_s": round(plain_s, 4), "overhead_s": round(wmrl_s - plain_s, 4)}  # fmt: skip
    print("trl-async per-step (= per-group) scoring:", json.dumps(report))
    art = os.environ.get("WMRL_TEST_ARTIFACTS")
    if art:
        Path(art).mkdir(parents=True, exist_ok=True)
        (Path(art) / "trl-async-overhead.json").write_text(json.dumps(report) + "\n")


def _answer(gid: int) -> str:
    return str((2 * gid + 1) % 10)


def _concurrent_and_sequential(kafka: str, prefix: str, unique: str) -> tuple[list[int], list[int], list[float]]:
    """The Grouper under the same function: three groups scored concurrently (another caller than
    TRL 1.16) form one step; then two groups scored one after another with groups_per_step=3 are
    each published alone, after flush_after. Returns (groups per step of the concurrent calls,
    groups per step of the sequential calls, seconds per sequential call)."""
    run = f"trlc-{os.urandom(3).hex()}"
    fn = AsyncRewardFunc(run, f"{unique}-trlc", num_generations=G, brokers=kafka, topic_prefix=prefix,
                         groups_per_step=3, flush_after=0.5, timeout=90, anchor_fraction=0.0)  # fmt: skip

    def call(j: int) -> None:
        out = fn([f"c{j}-{i}" for i in range(G)], [f"p{j}"] * G)
        assert len(out) == G and all(v is not None for v in out)

    try:
        with ThreadPoolExecutor(3) as ex:
            list(ex.map(call, range(3)))
        g = fn.grouper
        assert g.last is not None
        grouped = [len(g.last.group_indices())] * g.next_step
        seq, secs = [], []
        for j in (3, 4):
            t0 = time.monotonic()
            call(j)
            secs.append(time.monotonic() - t0)
            seq.append(len(g.last.group_indices()))
        assert g.next_step == len(grouped) + len(seq)
    finally:
        fn.close()
    return grouped, seq, secs
