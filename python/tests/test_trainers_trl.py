"""A real TRL run through the real stages (`make test-trainers`): TRL 1.16's GRPOTrainer trains a
tiny Qwen2 for 3 steps with wmrl's RewardFunc, on the real broker and Redis, with `wmrl
worldmodel` (instant fake judge), `wmrl sandbox` (tests/data/grade_task.sh, which grades each
rollout against its task from {dir}/rollout.json) and `wmrl correct --ddof 1`.

Checked per step: the advantages TRL trains on (WeightedGRPOTrainer, default
scale_rewards="group") equal wmrl's advantage × IVD weight; anchor rows' rewards equal the
sandbox's grade of (completion, the task's answer from the dataset column named by
meta_columns); wmrl's source/weight/advantage reach TRL's logs; and the digest of every row TRL
got equals `wmrl digest --topic --run`. Then the same 3 steps with a plain reward function time
wmrl's per-step overhead.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from test_e2e import wmrl_digest
from test_reward_e2e import Stages
from trainerkit import grade, judge, mixed_run, start_stages, tiny_model

from wmrl_client import RewardClient
from wmrl_client.digest import digest_and_count

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

from wmrl_client.integrations.trl import RewardFunc  # noqa: E402
from wmrl_client.integrations.trl_trainer import WeightedGRPOTrainer  # noqa: E402

pytestmark = [pytest.mark.trainers, pytest.mark.e2e]

STEPS, PROMPTS, G, ANCHOR = 3, 2, 4, 0.5

judge_url = pytest.fixture(judge)


class RecordingRewardFunc(RewardFunc):
    """RewardFunc that keeps what TRL passed it (completions, the answer column) per call."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **kw: Any) -> list[float | None]:
        self.seen_logging = kw.get("log_extra") is not None and kw.get("log_metric") is not None
        t0 = time.monotonic()
        out = super().__call__(**kw)
        self.calls.append({"completions": list(kw["completions"]), "answer": list(kw["answer"]), "res": self.last,
                           "returned": out, "seconds": time.monotonic() - t0})  # fmt: skip
        return out


class CheckedTrainer(WeightedGRPOTrainer):  # type: ignore[misc]
    """Keeps the advantages each training batch ends up with."""

    advantages: list[Any] = []

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        self.advantages.append(out["advantages"].detach().clone())
        return out


def dataset() -> Any:
    prompts = [f"task {k}: add {k} and {k + 1}, answer with one digit" for k in range(8)]
    return datasets.Dataset.from_dict({"prompt": prompts, "answer": [str((2 * k + 1) % 10) for k in range(8)]})


def config(out: Path) -> Any:
    return trl.GRPOConfig(output_dir=str(out), num_generations=G, per_device_train_batch_size=PROMPTS * G,
                          max_completion_length=16, max_steps=STEPS, use_cpu=True, report_to="none",
                          save_strategy="no", logging_steps=1, seed=7, dataloader_num_workers=0)  # fmt: skip


def test_trl_grpo_trainer_through_the_real_stages(
    kafka: str, redis_url: str, wmrl_cli: Path, prefix: str, judge_url: str, tmp_path: Path
) -> None:
    model_dir = tiny_model(tmp_path / "tiny")
    # A first plain run warms torch up, so neither timed run below pays for it.
    _plain_run(model_dir, tmp_path / "warm")
    run = mixed_run("trl", [f"s{v}-g{j}" for v in range(STEPS) for j in range(PROMPTS)], ANCHOR)
    st = Stages(wmrl_cli, kafka, redis_url, prefix)
    st.run("topics", "create", "--partitions", "1")
    try:
        # --ddof 1: TRL's scale_rewards="group" divides by the sample std.
        start_stages(st, judge_url, "answer", tmp_path, "--ddof", "1")
        with RewardClient(kafka, run, f"{st.unique}-trl", anchor_fraction=ANCHOR, topic_prefix=prefix) as client:
            reward = RecordingRewardFunc(client, num_generations=G, meta_columns=["answer"], timeout=90)
            trainer = CheckedTrainer(model=str(model_dir), reward_funcs=[reward], args=config(tmp_path / "out"),
                                     train_dataset=dataset(), processing_class=_tokenizer(model_dir))  # fmt: skip
            CheckedTrainer.advantages = []
            t0 = time.monotonic()
            trainer.train()
            wmrl_time = time.monotonic() - t0
        st.check_alive()
        # The same steps with a plain reward function, the stages still up (idle): wmrl's per-step
        # overhead in this run.
        plain_time = _plain_run(model_dir, tmp_path / "plain")
    finally:
        codes = st.stop()
    assert all(code == 0 for _, code in codes), codes

    assert len(reward.calls) == STEPS and len(CheckedTrainer.advantages) == STEPS and reward.seen_logging
    anchors = 0
    for call, adv in zip(reward.calls, CheckedTrainer.advantages, strict=True):
        res = call["res"]
        assert len(res) == PROMPTS * G and res.mask.all()
        # TRL trains on wmrl's advantage × weight (its own advantage from the returned rewards
        # with scale_rewards="group" equals wmrl's under --ddof 1).
        np.testing.assert_allclose(adv.numpy(), res.advantage * res.weight, rtol=1e-4, atol=1e-4)
        assert call["returned"] == pytest.approx(list(res.used))
        for k, src in enumerate(res.source):
            if src == "anchor":
                anchors += 1
                want = grade(call["completions"][k], int(call["answer"][k]))
                assert res.used[k] == pytest.approx(want, abs=1e-12), (k, call["completions"][k])
                assert res.weight[k] >= 1
            else:
                assert res.weight[k] == 1
    assert 0 < anchors < STEPS * PROMPTS * G
    logged = [h for h in trainer.state.log_history if "wmrl/anchor_fraction" in h]
    assert len(logged) == STEPS, trainer.state.log_history
    digest, rows = digest_and_count(pa.concat_tables([c["res"].table for c in reward.calls]))
    assert (digest, rows, STEPS) == wmrl_digest(wmrl_cli, kafka, f"{prefix}advantages.v1", run)

    # The step times are noisy on a shared 2-core machine; the reward call's own time is wmrl's
    # cost per step (publish → stages → sealed → back), the plain function's is microseconds.
    line = json.dumps({"trl_steps": STEPS, "wmrl_s_per_step": round(wmrl_time / STEPS, 3),
                       "plain_s_per_step": round(plain_time / STEPS, 3),
                       "wmrl_reward_call_s": [round(c["seconds"], 3) for c in reward.calls]})  # fmt: skip
    print(f"\ntrl timing: {line}")
    if os.environ.get("WMRL_TEST_ARTIFACTS"):
        out = Path(os.environ["WMRL_TEST_ARTIFACTS"])
        out.mkdir(parents=True, exist_ok=True)
        (out / "trl-timing.json").write_text(line + "\n")


def _plain_run(model_dir: Path, out: Path) -> float:
    plain = trl.GRPOTrainer(model=str(model_dir), reward_funcs=[_plain_reward], args=config(out),
                            train_dataset=dataset(), processing_class=_tokenizer(model_dir))  # fmt: skip
    t0 = time.monotonic()
    plain.train()
    return time.monotonic() - t0


def _plain_reward(completions: list[str], **_: Any) -> list[float]:
    return [len(c) % 10 / 10 for c in completions]


_plain_reward.__name__ = "plain"


def _tokenizer(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)
