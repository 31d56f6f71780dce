"""verl 0.9.1's own reward loop driving wmrl through the real stages (`make test-trainers`).

verl's ``RewardLoopWorker`` (the class its trainer runs as a Ray actor, instantiated here in
process) loads the reward function or manager from its config exactly as in training —
``reward.custom_reward_function.path=pkg://wmrl_client.integrations.verl`` with
``compute_score_async``, or ``reward.reward_manager.source=importlib`` with
``WmrlRewardManager`` — and scores a batch of two prompts × 4 samples one sample at a time
(``compute_score_batch``: an asyncio task per sample). Each sample's score must be wmrl's
corrected reward of its own rollout; anchor samples' rewards the sandbox's grade of the response
against the task's ground truth, which reached the sandbox through the rollout's meta; the
token-level reward sits at the response's last token (verl's ``assemble_rm_scores``).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_reward_e2e import Stages
from trainerkit import grade, judge, mixed_run, start_stages, tiny_model

from wmrl_client import AdvantageStream

torch = pytest.importorskip("torch")
verl = pytest.importorskip("verl")
omegaconf = pytest.importorskip("omegaconf")

from verl import DataProto  # noqa: E402
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker  # noqa: E402

pytestmark = [pytest.mark.trainers, pytest.mark.e2e]

N, PROMPTS, ANCHOR = 4, 2, 0.5
judge_url = pytest.fixture(judge)


def verl_config(model_dir: Path, reward: dict[str, Any]) -> Any:
    base: dict[str, Any] = {
        "actor_rollout_ref": {"model": {"path": str(model_dir), "tokenizer_path": None}, "rollout": {"n": N}},
        "data": {"train_batch_size": PROMPTS},
        "reward": {
            "num_workers": 1,
            "reward_model": {"enable": False},
            "custom_reward_function": {"path": None, "name": None, "reward_kwargs": {}},
            "reward_manager": {"source": "register", "name": "naive", "module": {"path": None}},
            "sandbox_fusion": None,
        },
    }
    for k, v in reward.items():
        base["reward"][k] = v
    return omegaconf.OmegaConf.create(base)


def batch(tokenizer: Any, seed: int, prompts_n: int = PROMPTS) -> tuple[Any, list[str]]:
    """``prompts_n`` prompts × N responses as verl's rollout leaves them: prompts left-padded, responses
    right-padded, each prompt's samples next to each other with the prompt's uid."""
    rng = np.random.default_rng(seed)
    words = "add the numbers and answer with one digit seven three five nine".split()
    prompts, responses, rows = [], [], []
    for j in range(prompts_n):
        uid = str(uuid.uuid4())
        for _ in range(N):
            prompts.append(f"task {seed}-{j}: add {j} and {j + 2}")
            responses.append(" ".join(rng.choice(words, size=int(rng.integers(2, 8)))))
            rows.append({"uid": uid, "data_source": "toy_math", "reward_model": {"ground_truth": str(2 * j + 2)},
                         "extra_info": {"index": j, "split": "train"}})  # fmt: skip
    tokenizer.padding_side = "left"
    p = tokenizer(prompts, return_tensors="pt", padding=True)
    tokenizer.padding_side = "right"
    r = tokenizer(responses, return_tensors="pt", padding=True)
    data = DataProto.from_dict(
        tensors={"prompts": p["input_ids"], "responses": r["input_ids"],
                 "attention_mask": torch.cat([p["attention_mask"], r["attention_mask"]], dim=1)},
        non_tensors={k: np.array([row[k] for row in rows], dtype=object) for k in rows[0]},
    )  # fmt: skip
    decoded = [tokenizer.decode(ids[: int(m.sum())], skip_special_tokens=True)
               for ids, m in zip(r["input_ids"], r["attention_mask"], strict=True)]  # fmt: skip
    return data, decoded


def run_reward_loop(config: Any, data: Any) -> tuple[list[dict[str, Any]], Any]:
    """RewardLoopWorker.compute_score_batch as RewardLoopManager.compute_rm_score uses it."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        worker = RewardLoopWorker(config)
        outputs = loop.run_until_complete(worker.compute_score_batch(data))
    finally:
        loop.close()
        asyncio.set_event_loop(None)
    rm = type(worker.reward_manager).assemble_rm_scores(data, [o["reward_score"] for o in outputs])
    return outputs, rm


def wmrl_rows(kafka: str, run: str, prefix: str) -> dict[str, Any]:
    with AdvantageStream(kafka, run, f"check-{uuid.uuid4().hex[:6]}", topic_prefix=prefix) as s:
        st = s.next_step(timeout=30)
        assert st is not None and st.step == 0
        return {r.rollout_id: r for r in st.rows()}


def test_verl_reward_loop_through_the_real_stages(
    kafka: str, redis_url: str, wmrl_cli: Path, prefix: str, judge_url: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from transformers import AutoTokenizer

    model_dir = tiny_model(tmp_path / "tiny")
    tok = AutoTokenizer.from_pretrained(model_dir)
    gids = [f"s0-g{j}" for j in range(PROMPTS)]
    st = Stages(wmrl_cli, kafka, redis_url, prefix)
    st.run("topics", "create", "--partitions", "1")
    fn_run, mgr_run = mixed_run("verl-fn", gids, ANCHOR), mixed_run("verl-mgr", gids, ANCHOR)
    try:
        start_stages(st, judge_url, "ground_truth", tmp_path)

        # 1. The per-sample compute_score_async, loaded by verl from custom_reward_function.
        kwargs = {"brokers": kafka, "topic_prefix": prefix, "run_id": fn_run, "group_id": f"{st.unique}-fn",
                  "anchor_fraction": ANCHOR, "group_size": N, "groups_per_step": PROMPTS, "timeout": 90}  # fmt: skip
        cfg = verl_config(model_dir, {"custom_reward_function": {"path": "pkg://wmrl_client.integrations.verl",
                                                                 "name": "compute_score_async",
                                                                 "reward_kwargs": kwargs}})  # fmt: skip
        data, responses = batch(tok, 1)
        fn_out, fn_rm = run_reward_loop(cfg, data)

        # 2. WmrlRewardManager, loaded with source=importlib, grouping by verl's uid.
        env = {"WMRL_BROKERS": kafka, "WMRL_TOPIC_PREFIX": prefix, "WMRL_RUN": mgr_run,
               "WMRL_TRAINER_GROUP": f"{st.unique}-mgr", "WMRL_ANCHOR_FRACTION": str(ANCHOR)}  # fmt: skip
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        module = {"path": "pkg://wmrl_client.integrations.verl_manager"}
        cfg = verl_config(model_dir, {"reward_manager": {"source": "importlib", "name": "WmrlRewardManager",
                                                         "module": module}})  # fmt: skip
        data2, responses2 = batch(tok, 2)
        mgr_out, mgr_rm = run_reward_loop(cfg, data2)
        st.check_alive()
        checks = [(fn_run, data, responses, fn_out, fn_rm), (mgr_run, data2, responses2, mgr_out, mgr_rm)]
        rows_of = {run: wmrl_rows(kafka, run, prefix) for run, *_ in checks}
    finally:
        codes = st.stop()
    assert all(code == 0 for _, code in codes), codes

    for run, d, resp, out, rm in checks:
        rows = rows_of[run]
        assert len(rows) == PROMPTS * N
        anchors = 0
        for k, o in enumerate(out):
            info = o["reward_extra_info"]
            row = rows[info["wmrl_rollout_id"]]
            assert o["reward_score"] == pytest.approx(row.used, abs=1e-12) and row.mask
            assert info["wmrl_advantage"] == pytest.approx(row.advantage) and info["wmrl_weight"] == row.weight
            if row.source == "anchor":
                anchors += 1
                gt = int(d.non_tensor_batch["reward_model"][k]["ground_truth"])
                assert row.used == pytest.approx(grade(resp[k], gt), abs=1e-12), (run, k, resp[k])
        assert 0 < anchors < PROMPTS * N, run
        # verl's token-level reward: each score at its response's last valid token.
        last = d.batch["attention_mask"][:, d.batch["prompts"].shape[1] :].sum(dim=1) - 1
        np.testing.assert_allclose(rm[torch.arange(len(out)), last].numpy(),
                                   [o["reward_score"] for o in out], rtol=1e-6)  # fmt: skip
        assert float(rm.sum()) == pytest.approx(sum(o["reward_score"] for o in out), rel=1e-5)
