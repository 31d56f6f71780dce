"""verl 0.9.1's reward loop with the sync ``compute_score`` against ``compute_score_async``, measured.

The README's advice rests on this: verl's ``NaiveRewardManager.run_single`` runs a sync
compute_score in the event loop's default thread pool (min(32, CPUs + 4) threads), where it
blocks its thread until its group's step is corrected — and the same pool decodes every sample's
response first. With fewer threads than samples in a batch, the blocked threads hold back the
rest of the batch, groups complete a few at a time and are published by quiet time
(``flush_after``): many small steps, each after a ``flush_after`` pause. ``compute_score_async``
holds no thread: the 8 × 4 batch is one step. Both run through verl's own ``RewardLoopWorker``
on the real stages, timed from the batch's first sample to its last score (the worker's start-up
excluded); the numbers go to the test artifacts (verl-sync-vs-async.json).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from test_reward_e2e import Stages
from test_trainers_verl import N, RewardLoopWorker, batch, verl_config
from trainerkit import judge, mixed_run, start_stages, tiny_model

pytest.importorskip("verl")
pytestmark = [pytest.mark.trainers, pytest.mark.e2e]

PROMPTS = 8
judge_url = pytest.fixture(judge)


def scored(config: Any, data: Any) -> tuple[list[dict[str, Any]], float]:
    """RewardLoopWorker.compute_score_batch (as in run_reward_loop), timed without the worker's start-up."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        worker = RewardLoopWorker(config)
        t0 = time.monotonic()
        outputs = loop.run_until_complete(worker.compute_score_batch(data))
        return outputs, time.monotonic() - t0
    finally:
        loop.close()
        asyncio.set_event_loop(None)


def test_verl_sync_compute_score_against_async(
    kafka: str, redis_url: str, wmrl_cli: Path, prefix: str, judge_url: str, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    model_dir = tiny_model(tmp_path / "tiny")
    tok = AutoTokenizer.from_pretrained(model_dir)
    st = Stages(wmrl_cli, kafka, redis_url, prefix)
    st.run("topics", "create", "--partitions", "1")
    measured: dict[str, dict[str, float]] = {}
    try:
        start_stages(st, judge_url, "ground_truth", tmp_path)
        for k, name in enumerate(("compute_score_async", "compute_score")):
            run = mixed_run(f"verl-{k}", [f"s0-g{j}" for j in range(PROMPTS)], 0.5)
            kwargs = {"brokers": kafka, "topic_prefix": prefix, "run_id": run, "group_id": f"{st.unique}-{k}",
                      "anchor_fraction": 0.5, "group_size": N, "groups_per_step": PROMPTS, "timeout": 90}  # fmt: skip
            cfg = verl_config(model_dir, {"custom_reward_function": {
                "path": "pkg://wmrl_client.integrations.verl", "name": name, "reward_kwargs": kwargs}})  # fmt: skip
            data, _ = batch(tok, 10 + k, PROMPTS)
            out, secs = scored(cfg, data)
            steps = sorted({o["reward_extra_info"]["wmrl_step"] for o in out})
            assert len(out) == PROMPTS * N and all(o["reward_extra_info"]["wmrl_mask"] == 1.0 for o in out)
            measured[name] = {"seconds": round(secs, 2), "steps": len(steps)}
        st.check_alive()
    finally:
        codes = st.stop()
    assert all(code == 0 for _, code in codes), codes
    threads = min(32, (os.cpu_count() or 1) + 4)
    measured["batch"] = {"prompts": PROMPTS, "n": N, "default_executor_threads": threads}
    print("verl 0.9.1 reward loop, 8 x 4 batch:", json.dumps(measured))
    art = os.environ.get("WMRL_TEST_ARTIFACTS")
    if art:
        Path(art).mkdir(parents=True, exist_ok=True)
        (Path(art) / "verl-sync-vs-async.json").write_text(json.dumps(measured) + "\n")

    assert measured["compute_score_async"]["steps"] == 1  # the whole batch, one step
    if threads < PROMPTS * N:  # the README's statement: sync splits the batch when threads are fewer
        assert measured["compute_score"]["steps"] > 1, measured
        assert measured["compute_score"]["seconds"] > measured["compute_score_async"]["seconds"], measured
    else:
        assert measured["compute_score"]["steps"] == 1, measured
