"""The TRL, verl and OpenRLHF adapters, called exactly as each framework calls its reward hook.

The frameworks themselves need PyTorch and GPUs-sized installs, so the calls are reproduced from
their source: TRL's GRPOTrainer._calculate_rewards, verl's BatchRewardManager.verify/__call__,
OpenRLHF's remote_rm_fn/request_api_wrapper. Behind the adapters runs a real RewardClient on a
fake Kafka that plays the pipeline: when a step manifest is produced it answers with advantage
rows computed from the published rollouts (the reward is the number in the artifact, GRPO
advantages, anchors weighted 2, a rollout whose artifact says "fail" masked out).
test_reward_e2e.py runs the same adapters through the real stages.
"""

from __future__ import annotations

import json
import math
import threading
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from client_codecs import decode_record, encode_advantages
from conftest import FakeConsumer, FakeMessage, FakeProducer

from wmrl_client import AdvantageRow, RewardClient
from wmrl_client.integrations import fill_masked, group_indices
from wmrl_client.integrations import openrlhf as orl
from wmrl_client.integrations import trl as trl_adapter
from wmrl_client.integrations import verl as verl_adapter
from wmrl_client.integrations._batch import BatchScorer
from wmrl_client.integrations._grouper import Grouper
from wmrl_client.producer import record_headers

RUN = "fw-run"


class Pipeline:
    """A fake producer/consumer pair that answers each published step with its advantage rows."""

    def __init__(self) -> None:
        self.consumer: FakeConsumer | None = None
        self.rollouts: dict[int, list[Any]] = defaultdict(list)
        self.offset = 0
        self.steps: list[int] = []

    def producer(self, conf: dict[str, object]) -> FakeProducer:
        pipe = self

        class P(FakeProducer):
            def produce(self, topic: str, value: bytes, key: bytes, headers: Any, on_delivery: Any) -> None:
                super().produce(topic, value, key, headers, on_delivery)
                if topic.endswith("rollouts.v1"):
                    r = decode_record("wmrl.rollout.v1", value)
                    pipe.rollouts[r.step].append(r)
                else:
                    pipe.answer(decode_record("wmrl.step.v1", value))

        return P(conf)

    def consumer_factory(self, conf: dict[str, object]) -> FakeConsumer:
        self.consumer = FakeConsumer(conf)
        return self.consumer

    def answer(self, manifest: Any) -> None:
        rows: list[AdvantageRow] = []
        by_group: dict[str, list[Any]] = defaultdict(list)
        for r in self.rollouts[manifest.step]:
            by_group[r.group_id].append(r)
        for g in manifest.groups:
            rs = by_group[g.group_id]
            ok = ["fail" not in r.artifact for r in rs]
            used = np.array([reward_in(r.artifact) for r in rs])
            graded = used[np.array(ok)]
            enough = len(graded) >= 2
            adv = (used - graded.mean()) / (graded.std() + 1e-4) if enough else np.zeros(len(rs))
            for r, u, a, k in zip(rs, used, adv, ok, strict=True):
                m = bool(k and enough)
                rows.append(AdvantageRow(
                    run_id=RUN, stream=r.stream, step=manifest.step, group_id=g.group_id, rollout_id=r.rollout_id,
                    policy_version=r.policy_version, source=("anchor" if g.anchor else "world_model") if k else "",
                    predicted=float(u) if k else 0.0, predicted_ok=k, calibrated=float(u) if k else 0.0,
                    executed=float(u) if g.anchor and k else 0.0, executed_ok=g.anchor and k,
                    used=float(u) if k else 0.0, advantage=float(a) if m else 0.0,
                    weight=2.0 if g.anchor else 1.0, mask=m, calibration_version=0,
                ))  # fmt: skip
        hs = record_headers("wmrl.advantages.v1", RUN, manifest.step)
        hs += [("wmrl-chunk", b"0/1"), ("wmrl-rows", str(len(rows)).encode())]
        assert self.consumer is not None
        self.consumer.queue.append(FakeMessage(encode_advantages(rows), hs, self.offset))
        self.offset += 2  # the commit marker takes an offset
        self.steps.append(manifest.step)


def reward_in(artifact: str) -> float:
    """The reward the fake pipeline reads from an artifact: the number after 'score='."""
    return float(artifact.split("score=")[1].split()[0]) if "score=" in artifact else 0.5


@pytest.fixture
def pipe() -> Iterator[tuple[Pipeline, RewardClient]]:
    p = Pipeline()
    client = RewardClient("b:1", RUN, "trainer", anchor_fraction=0.5, producer_factory=p.producer,
                          consumer_factory=p.consumer_factory, poll_timeout=0)  # fmt: skip
    yield p, client
    client.close()


def test_group_indices() -> None:
    assert group_indices(["a", "b", "a", "b"]) == [[0, 2], [1, 3]]
    assert group_indices(["a"] * 4 + ["b"] * 2, group_size=2) == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(ValueError, match="3 samples share the prompt 'a'.*not a multiple of group_size 2"):
        group_indices(["a", "a", "a", "b", "b", "b"], group_size=2)


# ---- TRL -------------------------------------------------------------------------------------


def trl_calculate_rewards(reward_funcs: list[Any], inputs: list[dict[str, Any]], prompts: list[Any],
                          completions: list[Any], completion_ids_list: list[list[int]]) -> np.ndarray:  # fmt: skip
    """TRL GRPOTrainer._calculate_rewards for custom (non-module) reward functions, torch → numpy."""
    rewards_per_func = np.zeros((len(prompts), len(reward_funcs)), dtype=np.float32)
    keys = [key for key in inputs[0] if key not in ["prompt", "completion", "completion_ids"]]
    reward_kwargs = {key: [example[key] for example in inputs] for key in keys}
    reward_kwargs["trainer_state"] = SimpleNamespace(global_step=7, epoch=0.5)
    for i, reward_func in enumerate(reward_funcs):
        assert isinstance(reward_func.__name__, str)  # TRL's profiling and logs use it
        output_reward_func = reward_func(
            prompts=prompts, completions=completions, completion_ids=completion_ids_list, **reward_kwargs
        )
        output_reward_func = [reward if reward is not None else math.nan for reward in output_reward_func]
        rewards_per_func[:, i] = np.asarray(output_reward_func, dtype=np.float32)
    return rewards_per_func


def trl_batch(conversational: bool, n: int = 4) -> tuple[list[dict[str, Any]], list[Any], list[Any], list[list[int]]]:
    """Two prompts × n generations, laid out as TRL's RepeatSampler does (each prompt n times)."""
    inputs, prompts, completions, ids = [], [], [], []
    for p in range(2):
        for i in range(n):
            text = f"answer {p}.{i} score={(p * n + i) / 10:.1f}" + (" fail" if (p, i) == (1, 2) else "")
            prompt: Any = f"question {p}"
            comp: Any = text
            if conversational:
                prompt = [{"role": "user", "content": f"question {p}"}]
                comp = [{"role": "assistant", "content": text}]
            inputs.append({"prompt": prompt, "answer": f"gt{p}", "completion_ids": [1, 2]})
            prompts.append(prompt)
            completions.append(comp)
            ids.append([1, 2, 3])
    return inputs, prompts, completions, ids


@pytest.mark.parametrize("conversational", [False, True])
def test_trl_reward_func_as_grpo_trainer_calls_it(pipe: Any, conversational: bool) -> None:
    p, client = pipe
    fn = trl_adapter.RewardFunc(client, num_generations=4, start_step=0)
    inputs, prompts, completions, ids = trl_batch(conversational)
    r = trl_calculate_rewards([fn], inputs, prompts, completions, ids)
    want = [(k / 10) for k in range(8)]
    np.testing.assert_allclose(np.delete(r[:, 0], 6), np.delete(want, 6), rtol=1e-6)
    assert math.isnan(r[6, 0])  # the failed rollout: None → NaN, left out by TRL's nansum
    assert fn.last is not None and list(fn.last.weight) == [fn.last.weight[0]] * 4 + [fn.last.weight[4]] * 4
    rollouts = p.rollouts[0]
    assert [r.artifact for r in rollouts][:2] == ["answer 0.0 score=0.0", "answer 0.1 score=0.1"]
    assert rollouts[0].prompt == "question 0"
    # The next call is the next wmrl step; value="advantage" returns wmrl's advantages.
    fa = trl_adapter.RewardFunc(client, start_step=1, value="advantage")
    a = trl_calculate_rewards([fa], inputs, prompts, completions, ids)[:, 0]
    np.testing.assert_allclose(a[:4], fa.last.advantage[:4], rtol=1e-6)  # type: ignore[union-attr]
    assert abs(float(np.nansum(a[:4]))) < 1e-5 and p.steps == [0, 1]


def test_trl_partial_group_is_refused(pipe: Any) -> None:
    _, client = pipe
    fn = trl_adapter.RewardFunc(client, num_generations=4)
    inputs, prompts, completions, ids = trl_batch(False)
    with pytest.raises(ValueError, match="not a multiple of group_size 4"):
        trl_calculate_rewards([fn], inputs[:6], prompts[:6], completions[:6], ids[:6])


# ---- verl ------------------------------------------------------------------------------------


def verl_batch_reward_manager(
    compute_score: Any, responses: list[str], data_sources: list[str], ground_truths: list[Any], extras: list[Any]
) -> tuple[list[float], dict[str, list[Any]]]:
    """verl's BatchRewardManager.verify + the score loop of __call__ (token placement aside)."""
    scores = compute_score(data_sources=data_sources, solution_strs=responses, ground_truths=ground_truths,
                           extra_infos=extras)  # fmt: skip
    rewards: list[float] = []
    reward_extra_info: dict[str, list[Any]] = defaultdict(list)
    for i in range(len(responses)):
        score = scores[i]
        if isinstance(score, dict):
            reward = score["score"]
            for key, value in score.items():
                reward_extra_info[key].append(value)
        else:
            reward = score
        rewards.append(reward)
    return rewards, reward_extra_info


def test_verl_compute_score_as_the_batch_reward_manager_calls_it(pipe: Any) -> None:
    p, client = pipe
    fn = verl_adapter.make_compute_score(client, group_size=3)
    # verl repeats each prompt n=3 times, then may reorder the batch (balance_batch): interleave.
    order = [0, 3, 1, 4, 2, 5]
    base = [(f"resp {g}.{i} score={0.1 * (3 * g + i):.1f}" + (" fail" if (g, i) == (0, 1) else ""), g)
            for g in range(2) for i in range(3)]  # fmt: skip
    batch = [base[k] for k in order]
    rewards, extra = verl_batch_reward_manager(
        fn, [b[0] for b in batch], ["math"] * 6, [f"gt{b[1]}" for b in batch], [{"index": b[1]} for b in batch]
    )
    want = [reward_in(b[0]) for b in batch]
    # Row 2 is (0, 1), masked: its score is its group's mean over graded rows (0.0 and 0.2).
    want[2] = 0.1
    np.testing.assert_allclose(rewards, want, atol=1e-12)
    assert extra["wmrl_mask"] == [1.0, 1.0, 0.0, 1.0, 1.0, 1.0]
    assert set(extra) == {"score", "wmrl_advantage", "wmrl_weight", "wmrl_mask", "wmrl_anchor"}
    assert all(len(v) == 6 for v in extra.values())  # verl turns each key into a per-sample column
    groups = {r.group_id: [x.artifact for x in p.rollouts[0] if x.group_id == r.group_id] for r in p.rollouts[0]}
    assert sorted(groups.values()) == [[base[0][0], base[1][0], base[2][0]], [base[3][0], base[4][0], base[5][0]]]


def test_fill_masked_gives_masked_rows_their_group_mean(pipe: Any) -> None:
    _, client = pipe
    res = BatchScorer(client).score(["score=0.2", "score=0.9 fail", "score=0.6", "score=0.9"], ["a", "a", "a", "b"])
    np.testing.assert_allclose(fill_masked(res), [0.2, 0.4, 0.6, 0.9])
    assert list(res.mask) == [True, False, True, False]  # b: a group of one, too small
    assert list(res.graded) == [True, False, True, True]


# ---- OpenRLHF --------------------------------------------------------------------------------


def openrlhf_request(url: str, data: dict[str, Any], score_key: str = "rewards") -> Any:
    """OpenRLHF's request_api_wrapper: POST JSON, raise on HTTP errors, read score_key."""
    req = urllib.request.Request(url, data=json.dumps(data).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        response = json.loads(resp.read())
    assert score_key in response, f"{score_key} not in {response}"
    return response


@pytest.fixture
def rm_server(pipe: Any) -> Iterator[tuple[str, Pipeline]]:
    p, client = pipe
    srv = orl.make_server(BatchScorer(client, group_size=2), "127.0.0.1", 0)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/get_reward", p
    srv.shutdown()
    srv.server_close()


def test_openrlhf_remote_rm_request_and_reply(rm_server: tuple[str, Pipeline]) -> None:
    url, p = rm_server
    prompts = ["<user>q0</user>", "<user>q0</user>", "<user>q1</user>", "<user>q1</user>"]
    queries = [pr + f" a{i} score=0.{i + 1}" for i, pr in enumerate(prompts)]
    out = openrlhf_request(url, {"query": queries, "prompts": prompts, "labels": ["x"] * 4})
    np.testing.assert_allclose(out["rewards"], [0.1, 0.2, 0.3, 0.4])
    assert out["scores"] == out["rewards"]
    assert set(out["extra_logs"]) == {"wmrl_advantage", "wmrl_weight", "wmrl_mask", "wmrl_anchor"}
    assert all(len(v) == 4 for v in out["extra_logs"].values())
    assert [r.artifact for r in p.rollouts[0]][0] == " a0 score=0.1"  # the response, without its prompt
    with pytest.raises(urllib.error.HTTPError) as ei:
        openrlhf_request(url, {"query": queries[:3], "prompts": prompts[:3], "labels": ["x"] * 3})
    assert ei.value.code == 400 and "group_size 2" in json.loads(ei.value.read())["error"]
    with pytest.raises(urllib.error.HTTPError) as ei:
        openrlhf_request(url, {"prompts": prompts})
    assert ei.value.code == 400
    assert p.steps == [0]


# ---- loading by file path, as verl and OpenRLHF do --------------------------------------------


def load_by_path(name: str, path: str) -> Any:
    """verl's get_custom_reward_fn / OpenRLHF's reward-file loading: spec_from_file_location."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_adapter_files_load_by_path(pipe: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _, client = pipe
    mod = load_by_path("custom_module", verl_adapter.__file__)
    fn = mod.make_compute_score(client, group_size=2)
    # verl wraps the function to pass custom_reward_function.reward_kwargs as keywords.
    rewards, extra = verl_batch_reward_manager(
        lambda **kw: fn(**kw, unused_option=1), ["score=0.1", "score=0.3"], ["d", "d"], ["g", "g"], [None, None]
    )
    np.testing.assert_allclose(rewards, [0.1, 0.3])
    rm = load_by_path("reward_func", orl.__file__)
    with pytest.raises(RuntimeError, match="set WMRL_RUN and WMRL_TRAINER_GROUP and WMRL_GROUP_SIZE"):
        rm.grouper_from_env({})
    rm.configure(Grouper(client, group_size=2, start_step=1, flush_after=0.05))  # the run's next step
    try:
        assert rm.answer_samples(rm._grouper, {"query": ["p score=0.2", "p score=0.4"], "prompts": ["p", "p"]})[
            "rewards"] == [pytest.approx(0.2), pytest.approx(0.4)]  # fmt: skip
    finally:
        rm._grouper.close()
