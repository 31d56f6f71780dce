"""slime v0.3.1's reward and advantage seams replayed against the real stages (`make test-trainers`).

slime is not on PyPI and needs Megatron, SGLang and GPUs, so this test replays, as of slime v0.3.1
(THUDM/slime tag v0.3.1, commit a6272da0d4f3d0a08520c99a2f3b4f6c887960dc), the three calls that
reach wmrl, with slime's argument names and data layout:

1. ``--group-rm``: ``batched_async_rm`` awaits ``group_rm(args, samples)`` once per prompt's group,
   the groups concurrently (slime/rollout/sglang_rollout.py), and sets each ``sample.reward``;
2. ``RolloutManager._convert_samples_to_train_data`` (slime/ray/rollout.py) calls the
   ``--custom-reward-post-process-path`` function on the flattened samples for
   ``(raw_rewards, rewards)``, and ``_split_train_data_by_dp`` ships each data-parallel rank its
   partition of ``rewards`` (floats), ``response_lengths`` and ``loss_masks``;
3. ``compute_advantages_and_returns`` (slime/backends/megatron_utils/loss.py) computes ``kl`` (one
   tensor per sample, zeros when ``kl_coef`` is 0), then calls the
   ``--custom-advantage-function-path`` function as ``fn(args, rollout_data)`` and reads
   ``rollout_data["advantages"]`` and ``["returns"]``.

Two rollouts (two wmrl steps: the second's anchor rows carry IVD weights fitted on the first's
anchor pairs). Each sample's advantage, on every response token, must be wmrl's ``advantage ×
weight`` of its own rollout as the correction consumer wrote it; anchor rows must carry the
sandbox's grade.
"""

from __future__ import annotations

import asyncio
import importlib
import time
import uuid
from argparse import Namespace
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from test_reward_e2e import Stages
from trainerkit import grade, judge, mixed_run, start_stages

from wmrl_client import AdvantageStream, RewardClient, is_anchor
from wmrl_client.integrations import slime
from wmrl_client.integrations._grouper import Grouper
from wmrl_client.integrations.slime_advantage import POST_PROCESS_PATH

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.trainers, pytest.mark.e2e]

SLIME_VERSION = "0.3.1"
N, PROMPTS, ANCHOR, DP, STEPS = 4, 2, 0.5, 2, 2
judge_url = pytest.fixture(judge)


@dataclass
class Sample:
    """The fields of slime's Sample (slime/utils/types.py) that the seams read."""

    index: int
    prompt: str
    response: str
    label: str
    response_length: int
    reward: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def get_reward_value(self, args: Namespace) -> float:
        return self.reward if not args.reward_key else self.reward[args.reward_key]  # type: ignore[no-any-return]


def load_function(path: str) -> Any:
    """slime.utils.misc.load_function: ``module.attr``."""
    module, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def slime_args(**kw: Any) -> Namespace:
    base = dict(
        group_rm=True, custom_rm_path="wmrl_client.integrations.slime.group_rm",
        custom_reward_post_process_path=POST_PROCESS_PATH,
        custom_advantage_function_path="wmrl_client.integrations.slime_advantage.advantages",
        advantage_estimator="grpo", rewards_normalization=True, grpo_std_normalization=True,
        normalize_advantages=False, reward_key=None, kl_coef=0.0, use_opd=False,
        n_samples_per_prompt=N, rollout_batch_size=PROMPTS,
    )  # fmt: skip
    base.update(kw)
    return Namespace(**base)


def rollout(args: Namespace, groups: list[list[Sample]]) -> list[dict[str, Any]]:
    """Steps 1–3 above for one rollout: the per-rank rollout_data after the advantage function."""

    async def rm_all() -> list[list[float]]:
        rm = load_function(args.custom_rm_path)
        return await asyncio.gather(*(rm(args, g) for g in groups))

    for g, rewards in zip(groups, asyncio.run(rm_all()), strict=True):
        for s, r in zip(g, rewards, strict=True):
            s.reward = r
    samples = [s for g in groups for s in g]  # slime flattens list[list[Sample]]
    raw, rewards = load_function(args.custom_reward_post_process_path)(args, samples)
    assert len(raw) == len(rewards) == len(samples)
    ranks = []
    for r in range(DP):
        part = list(range(r, len(samples), DP))
        rd: dict[str, Any] = {
            "partition": part,
            "rewards": [rewards[j] for j in part],
            "response_lengths": [samples[j].response_length for j in part],
            "loss_masks": [torch.ones(samples[j].response_length, dtype=torch.int) for j in part],
            "sample_indices": [samples[j].index for j in part],
            "raw_reward": raw,
        }
        rd["kl"] = [torch.zeros(n, dtype=torch.float32) for n in rd["response_lengths"]]  # kl_coef 0
        load_function(args.custom_advantage_function_path)(args, rd)
        ranks.append(rd)
    return ranks


def plain_rollout_time(groups: list[list[Sample]]) -> float:
    """The same rollout with a plain group reward (no wmrl) and slime v0.3.1's own GRPO path:
    ``_post_process_rewards``' group mean/std normalisation and ``get_grpo_returns``."""
    t0 = time.perf_counter()

    async def rm(samples: list[Sample]) -> list[float]:
        return [len(s.response) / 10 for s in samples]

    async def rm_all() -> list[list[float]]:
        return await asyncio.gather(*(rm(g) for g in groups))

    for g, rewards in zip(groups, asyncio.run(rm_all()), strict=True):
        for s, r in zip(g, rewards, strict=True):
            s.reward = r
    samples = [s for g in groups for s in g]
    r = torch.tensor([s.reward for s in samples], dtype=torch.float).reshape(-1, N)
    r = r - r.mean(dim=-1, keepdim=True)
    r = (r / (r.std(dim=-1, keepdim=True) + 1e-6)).flatten().tolist()
    [torch.ones(s.response_length) * x for s, x in zip(samples, r, strict=True)]
    return time.perf_counter() - t0


def two_step_run(prefix: str) -> str:
    """A run mixing anchor and world-model groups with an anchor group in every step: step 1's anchor
    rows carry the IVD weight fitted on step 0's anchor pairs, which differs from 1."""
    while True:
        run = mixed_run(prefix, [f"s{v}-g{j}" for v in range(STEPS) for j in range(PROMPTS)], ANCHOR)
        if all(any(is_anchor(run, f"s{v}-g{j}", ANCHOR) for j in range(PROMPTS)) for v in range(STEPS)):
            return run


def groups_of(v: int) -> list[list[Sample]]:
    """One rollout's samples: PROMPTS prompts × N responses."""
    return [
        [Sample(index=(v * PROMPTS + j) * N + i, prompt=f"what is {j} + {j + 3}?",
                response=f"it is {'7' * (i + v + 1)} ({i}{j}{v})", label=str(2 * j + 3), response_length=3 + i + j)
         for i in range(N)]  # fmt: skip
        for j in range(PROMPTS)
    ]


def test_slime_advantages_through_the_real_stages(
    kafka: str, redis_url: str, wmrl_cli: Path, prefix: str, judge_url: str, tmp_path: Path
) -> None:
    run = two_step_run("slime")
    st = Stages(wmrl_cli, kafka, redis_url, prefix)
    st.run("topics", "create", "--partitions", "1")
    rollouts = [groups_of(v) for v in range(STEPS)]
    args = slime_args()
    ranks_of, took = [], []
    try:
        start_stages(st, judge_url, "label", tmp_path)
        with RewardClient(kafka, run, f"{st.unique}-slime", anchor_fraction=ANCHOR, topic_prefix=prefix) as client:
            grouper = Grouper(client, group_size=N, groups_per_step=PROMPTS, timeout=90)
            slime.configure(grouper)
            try:
                for groups in rollouts:
                    t0 = time.perf_counter()
                    ranks_of.append(rollout(args, groups))
                    took.append(time.perf_counter() - t0)
            finally:
                slime.configure(None)
                grouper.close()
        rows = {}
        with AdvantageStream(kafka, run, f"check-{uuid.uuid4().hex[:6]}", topic_prefix=prefix) as s:
            for v in range(STEPS):
                step = s.next_step(timeout=30)
                assert step is not None and step.step == v
                rows.update({r.rollout_id: r for r in step.rows()})
        st.check_alive()
    finally:
        codes = st.stop()
    assert all(code == 0 for _, code in codes), codes
    plain = plain_rollout_time(groups_of(STEPS))
    print(f"slime: wmrl steps of {PROMPTS}x{N} through group_rm + the two hooks: "
          + ", ".join(f"{t:.3f}s" for t in took) + f"; a plain group reward + slime's GRPO: {plain * 1e3:.2f} ms")  # fmt: skip

    anchors, weighted = 0, 0
    for groups, ranks in zip(rollouts, ranks_of, strict=True):
        samples = [s for g in groups for s in g]
        assert sorted(j for rd in ranks for j in rd["partition"]) == list(range(len(samples)))
        for rd in ranks:
            assert len(rd["advantages"]) == len(rd["returns"]) == len(rd["partition"])
            for k, j in enumerate(rd["partition"]):
                s = samples[j]
                row = rows[s.metadata[slime.ROW_KEY]["rollout_id"]]
                want = row.advantage * row.weight
                adv, ret = rd["advantages"][k], rd["returns"][k]
                assert adv.shape == (s.response_length,) and adv.dtype == torch.float32
                assert torch.allclose(adv, torch.full_like(adv, want), atol=1e-6), (j, adv, want)
                assert torch.equal(adv, ret)
                assert s.reward == pytest.approx(row.used, abs=1e-12) and row.mask
                assert rd["raw_reward"][j] == s.reward
                if row.source == "anchor":
                    anchors += 1
                    assert row.used == pytest.approx(grade(s.response, int(s.label)), abs=1e-12)
                    assert row.weight >= 1
                else:
                    assert row.weight == 1
                if row.weight != 1.0 and row.advantage != 0.0:
                    weighted += 1
    assert 0 < anchors < STEPS * PROMPTS * N
    assert weighted > 0, "no row where the IVD weight changes the advantage: the test would not see it dropped"


def test_slime_advantages_refuse_a_broken_setup() -> None:
    rd = {"rewards": [0.5], "kl": [torch.zeros(2)]}
    fn = load_function("wmrl_client.integrations.slime_advantage.advantages")
    with pytest.raises(RuntimeError, match="custom-reward-post-process-path"):
        fn(slime_args(custom_reward_post_process_path=None), dict(rd))
    with pytest.raises(RuntimeError, match="normalize-advantages"):
        fn(slime_args(normalize_advantages=True), dict(rd))
    post = load_function(POST_PROCESS_PATH)
    s = Sample(index=7, prompt="p", response="r", label="1", response_length=1, reward=1.0)
    with pytest.raises(RuntimeError, match="slime sample 7: no wmrl row"):
        post(slime_args(), [s])
