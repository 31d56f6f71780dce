"""Per-sample frameworks through the Grouper, against the fake pipeline of test_integrations:
OpenRLHF 0.11's one-sample requests (concurrent, interleaved), verl 0.9's per-sample
compute_score (sync and async), task context in the rollouts' meta, the server's hostile edges."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from test_integrations import Pipeline, openrlhf_request, pipe, reward_in  # noqa: F401 (pipe: a fixture)

from wmrl_client import FieldError
from wmrl_client.integrations import openrlhf as orl
from wmrl_client.integrations import verl as verl_adapter
from wmrl_client.integrations._batch import task_meta
from wmrl_client.integrations._grouper import Grouper


@pytest.fixture
def server(pipe: Any) -> Iterator[tuple[str, Pipeline, Grouper]]:  # noqa: F811
    p, client = pipe
    g = Grouper(client, group_size=4, groups_per_step=2, flush_after=0.2)
    srv = orl.make_server(g, "127.0.0.1", 0, timeout=10, max_body=4096, token="s3cret")
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/get_reward?token=s3cret", p, g
    srv.shutdown()
    srv.server_close()
    g.close()


def one_sample(url: str, prompt: str, response: str, label: Any) -> Any:
    """SingleTurnAgentExecutor's request for one sample (OpenRLHF 0.11.2)."""
    return openrlhf_request(url, {"query": [prompt + response], "prompts": [prompt], "labels": [label]})


def test_openrlhf_one_sample_requests_each_get_their_own_reward(server: tuple[str, Pipeline, Grouper]) -> None:
    """Two prompts × 4 samples, group size 4, eight concurrent one-sample requests in interleaved
    order: one wmrl step of two whole groups, each request answered with its sample's reward."""
    url, p, g = server
    samples = [(f"<q{j}>", f" answer {j}.{i} score=0.{j * 4 + i + 1}", f"gt{j}") for i in range(4) for j in range(2)]
    with ThreadPoolExecutor(8) as ex:
        outs = list(ex.map(lambda s: one_sample(url, *s), samples))
    for (_, resp, _), out in zip(samples, outs, strict=True):
        assert out["rewards"] == [pytest.approx(reward_in(resp))] and out["scores"] == out["rewards"]
        assert set(out["extra_logs"]) == {"wmrl_advantage", "wmrl_weight", "wmrl_mask", "wmrl_anchor", "wmrl_step",
                                          "wmrl_failed"}
        assert out["extra_logs"]["wmrl_step"] == [0.0]
    assert p.steps == [0]
    by_group: dict[str, list[Any]] = {}
    for r in p.rollouts[0]:
        by_group.setdefault(r.group_id, []).append(r)
    assert len(by_group) == 2
    for rs in by_group.values():
        assert len(rs) == 4 and len({r.prompt for r in rs}) == 1
        j = int(rs[0].prompt[2])
        assert all(r.meta == {"label": f"gt{j}"} for r in rs)  # the label reaches the sandbox
        assert all(r.artifact.startswith(f" answer {j}.") for r in rs)


def test_openrlhf_ungraded_group_is_a_flagged_failure_not_a_silent_zero(server: tuple[str, Pipeline, Grouper]) -> None:
    """Default (--on-failure reward): 200 with the failure reward 0.0 for every sample of the group and
    wmrl_failed 1 (OpenRLHF 0.11 crashes on an error answer, see test_trainers_openrlhf_executor)."""
    url, p, _ = server
    samples = [("<q>", f" a{i} score=0.5 fail", "x") for i in range(4)] + [("<r>", f" b{i} score=0.{i}", "y")
                                                                           for i in range(4)]  # fmt: skip
    with ThreadPoolExecutor(8) as ex:
        futs = [ex.submit(one_sample, url, *s) for s in samples]
    for k, f in enumerate(futs):
        out = f.result()
        if k < 4:
            assert out["rewards"] == [0.0] and out["scores"] == [0.0]
            assert out["extra_logs"]["wmrl_failed"] == [1.0] and out["extra_logs"]["wmrl_mask"] == [0.0]
        else:
            assert out["rewards"] == [pytest.approx(0.1 * (k - 4))] and out["extra_logs"]["wmrl_failed"] == [0.0]


def test_openrlhf_ungraded_group_is_422_with_on_failure_error(pipe: Any) -> None:  # noqa: F811
    p, client = pipe
    g = Grouper(client, group_size=4, groups_per_step=1, flush_after=0.2)
    srv = orl.make_server(g, "127.0.0.1", 0, timeout=10, failure=orl.Failure("error"))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/get_reward"
    try:
        with ThreadPoolExecutor(4) as ex:
            futs = [ex.submit(one_sample, url, "<q>", f" a{i} score=0.5 fail", "x") for i in range(4)]
        for f in futs:
            with pytest.raises(urllib.error.HTTPError) as ei:
                f.result()
            assert ei.value.code == 422 and "no graded reward" in json.loads(ei.value.read())["error"]
    finally:
        srv.shutdown()
        srv.server_close()
        g.close()


def test_openrlhf_special_tokens_are_stripped_unless_switched_off() -> None:
    req = {"query": ["<|im_start|>user\nq<|im_end|>\nprint(40) # try 0<eos><pad>"],
           "prompts": ["<|im_start|>user\nq<|im_end|>\n"], "labels": [None]}  # fmt: skip
    assert orl.parse_request(req, orl.DEFAULT_STRIP)[0] == ["print(40) # try 0"]
    assert orl.parse_request(req)[0] == ["print(40) # try 0<eos><pad>"]  # strip=(): the off-switch
    assert orl.strip_special("a<|im_end|>b<|im_end|>", ["<|im_end|>", "<|im"]) == "ab"  # longest first
    assert orl.strip_from_env({}) == orl.DEFAULT_STRIP
    assert orl.strip_from_env({"WMRL_STRIP": ""}) == ()
    assert orl.strip_from_env({"WMRL_STRIP": "<eos> </s>"}) == ("<eos>", "</s>")
    with pytest.raises(ValueError, match="NaN"):
        orl.Failure(reward=float("nan"))


def test_openrlhf_server_refuses_big_bodies_and_wrong_tokens(server: tuple[str, Pipeline, Grouper]) -> None:
    url, p, _ = server
    bare = url.split("?")[0]

    def post(u: str, body: bytes, headers: dict[str, str] | None = None) -> int:
        req = urllib.request.Request(u, data=body, headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)

    small = json.dumps({"query": ["q a score=0.1"], "prompts": ["q"], "labels": ["l"]}).encode()
    assert post(bare, small) == 401
    assert post(bare + "?token=wrong", small) == 401
    assert post(bare, small, {"Authorization": "Bearer wrong"}) == 401
    assert post(url, b"x" * 5000) == 413  # over max_body: refused before it is read
    assert post(bare, b"{}", {"Authorization": "Bearer s3cret"}) == 400
    assert p.steps == []


def test_grouper_publishes_after_quiet_time_and_never_a_partial_group(pipe: Any) -> None:  # noqa: F811
    p, client = pipe
    g = Grouper(client, group_size=2, groups_per_step=None, flush_after=0.1)
    try:
        a = [g.submit("k1", f"x score=0.{i}") for i in (1, 2)]
        lone = g.submit("k2", "y score=0.9")
        assert [f.result(timeout=5).reward for f in a] == [pytest.approx(0.1), pytest.approx(0.2)]
        time.sleep(0.3)
        assert not lone.done() and p.steps == [0]  # k2 has 1 of 2 samples: never published
        assert g.pending == {"open_samples": 1, "complete_groups": 0}
    finally:
        g.close()
    with pytest.raises(RuntimeError, match="closed"):
        lone.result(timeout=1)


def verl_run_single_calls(fn: Any, batch: list[dict[str, Any]], asynchronous: bool) -> list[dict[str, Any]]:
    """NaiveRewardManager.run_single's call, once per sample from asyncio tasks (verl 0.9.1): awaited
    when async, in the loop's default executor otherwise."""

    async def one(item: dict[str, Any]) -> Any:
        kw = {"data_source": item["data_source"], "solution_str": item["response"],
              "ground_truth": item["reward_model"]["ground_truth"], "extra_info": dict(item["extra_info"])}  # fmt: skip
        kw["extra_info"].update(num_turns=None, rollout_reward_scores={})  # verl adds these itself
        if asynchronous:
            return await fn(**kw)
        return await asyncio.get_running_loop().run_in_executor(None, lambda: fn(**kw))

    async def run_all() -> list[Any]:
        return list(await asyncio.gather(*(asyncio.create_task(one(x)) for x in batch)))

    return asyncio.run(run_all())


@pytest.mark.parametrize("asynchronous", [False, True])
def test_verl_per_sample_compute_score(pipe: Any, monkeypatch: pytest.MonkeyPatch, asynchronous: bool) -> None:  # noqa: F811
    p, client = pipe
    g = Grouper(client, group_size=3, groups_per_step=2, flush_after=5)
    monkeypatch.setattr(verl_adapter, "grouper_for", lambda *a, **kw: g)
    batch = [{"data_source": "math", "response": f"r{j}.{i} score=0.{3 * j + i}",
              "reward_model": {"ground_truth": f"{j}"},
              "extra_info": {"index": j, "split": "train", "tests": ["not", "scalar"]}}
             for i in range(3) for j in range(2)]  # fmt: skip
    fn = verl_adapter.compute_score_async if asynchronous else verl_adapter.compute_score
    kw = {"run_id": "r", "group_id": "g", "group_size": 3}
    try:
        out = verl_run_single_calls(lambda **a: fn(**a, **kw), batch, asynchronous)
    finally:
        g.close()
    np.testing.assert_allclose([o["score"] for o in out], [reward_in(b["response"]) for b in batch], atol=1e-12)
    assert all(o["wmrl_step"] == 0 for o in out) and p.steps == [0]
    metas = {r.meta["ground_truth"]: r.meta for r in p.rollouts[0]}
    assert metas["1"] == {"data_source": "math", "ground_truth": "1", "index": "1", "split": "train"}


def test_task_meta_bounds() -> None:
    assert task_meta({"a": "x", "n": 3, "f": 0.5, "b": True, "none": None}) == {"a": "x", "n": "3", "f": "0.5",
                                                                                "b": "true"}  # fmt: skip
    assert task_meta({"n": np.int64(7)}) == {"n": "7"}
    with pytest.raises(FieldError, match="not a scalar"):
        task_meta({"tests": ["a"]})
    with pytest.raises(FieldError, match="longer than 4096 bytes"):
        task_meta({"label": "x" * 5000})
    with pytest.raises(FieldError, match="more than 64 entries"):
        task_meta({f"k{i}": "v" for i in range(65)})


def test_slime_group_rm_as_batched_async_rm_calls_it(pipe: Any) -> None:  # noqa: F811
    """slime's --group-rm: batched_async_rm awaits fn(args, samples) once per prompt's group, groups
    concurrently (slime.rollout.rm_hub); samples carry prompt, response, label and metadata."""
    from types import SimpleNamespace

    from wmrl_client.integrations import slime

    p, client = pipe
    g = Grouper(client, group_size=4, groups_per_step=2, flush_after=5)
    slime.configure(g)
    groups = [[SimpleNamespace(prompt=f"q{j}", response=f"r{j}.{i} score=0.{4 * j + i}", label=str(j + 3),
                               metadata={"rm_type": "wmrl", "difficulty": j, "tests": ["x"]}, index=i)
               for i in range(4)] for j in range(2)]  # fmt: skip
    args = SimpleNamespace(rollout_batch_size=2, custom_rm_path="wmrl_client.integrations.slime.group_rm")

    async def rollout() -> list[list[float]]:
        return list(await asyncio.gather(*(slime.group_rm(args, grp) for grp in groups)))

    try:
        out = asyncio.run(rollout())
    finally:
        slime.configure(None)
        g.close()
    for grp, rewards in zip(groups, out, strict=True):
        assert rewards == [pytest.approx(reward_in(s.response)) for s in grp]
    assert p.steps == [0]
    metas = {r.meta["label"]: r.meta for r in p.rollouts[0]}
    assert metas["4"] == {"label": "4", "rm_type": "wmrl", "difficulty": "1"}


@pytest.mark.parametrize("asynchronous", [False, True])
def test_verl_reward_workers_share_one_server(pipe: Any, asynchronous: bool) -> None:  # noqa: F811
    """verl's reward.num_workers > 1 splits a batch across processes (here: two threads, each with
    its own event loop, the batch cut inside a group); with server_url every worker's samples are
    grouped by the one wmrl server."""
    p, client = pipe
    g = Grouper(client, group_size=3, groups_per_step=2, flush_after=5)
    srv = orl.make_server(g, "127.0.0.1", 0, timeout=10, token="tk")
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/"
    batch = [{"data_source": "math", "response": f"r{j}.{i} score=0.{3 * j + i}",
              "reward_model": {"ground_truth": f"{j}"}, "extra_info": {"index": j}}
             for j in range(2) for i in range(3)]  # fmt: skip
    fn = verl_adapter.compute_score_async if asynchronous else verl_adapter.compute_score
    kw = {"server_url": url, "token": "tk", "timeout": 10}
    try:
        with ThreadPoolExecutor(2) as ex:  # worker 0 gets samples 0-3, worker 1 samples 4-5
            parts = list(ex.map(lambda part: verl_run_single_calls(lambda **a: fn(**a, **kw), part, asynchronous),
                                [batch[:4], batch[4:]]))  # fmt: skip
    finally:
        srv.shutdown()
        srv.server_close()
        g.close()
    out = parts[0] + parts[1]
    np.testing.assert_allclose([o["score"] for o in out], [reward_in(b["response"]) for b in batch], atol=1e-12)
    assert p.steps == [0] and all(o["wmrl_step"] == 0 for o in out)
    assert {r.meta["ground_truth"]: r.meta for r in p.rollouts[0]}["1"] == {
        "data_source": "math", "ground_truth": "1", "index": "1"}  # fmt: skip


@pytest.mark.parametrize("mode", ["reward", "error"])
def test_openrlhf_lone_sample_times_out(pipe: Any, mode: str) -> None:  # noqa: F811
    """A sample whose group never completes is answered within the server's timeout — the failure
    reward (default) or 504 (--on-failure error); its incomplete group is never published."""
    p, client = pipe
    g = Grouper(client, group_size=4, groups_per_step=1, flush_after=0.05)
    srv = orl.make_server(g, "127.0.0.1", 0, timeout=0.5, failure=orl.Failure(mode, -1.0))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/get_reward"
    try:
        t0 = time.monotonic()
        if mode == "reward":
            out = one_sample(url, "<q>", " a score=0.5", "1")
            assert out["rewards"] == [-1.0] and out["extra_logs"]["wmrl_failed"] == [1.0]
        else:
            with pytest.raises(urllib.error.HTTPError) as ei:
                one_sample(url, "<q>", " a score=0.5", "1")
            assert ei.value.code == 504 and "no wmrl reward within 0.5s" in json.loads(ei.value.read())["error"]
        assert time.monotonic() - t0 < 5 and p.steps == []
        # The timed-out sample left its group: OpenRLHF's retry starts it afresh, not as a second copy.
        assert g.pending == {"open_samples": 0, "complete_groups": 0}
    finally:
        srv.shutdown()
        srv.server_close()
        g.close()


def test_grouper_steady_trickle_cannot_hold_a_complete_group(pipe: Any) -> None:  # noqa: F811
    """Samples every 50 ms leave no 0.2 s quiet time; max_wait publishes the complete group anyway."""
    p, client = pipe
    g = Grouper(client, group_size=2, groups_per_step=4, flush_after=0.2, max_wait=0.5)
    try:
        done = [g.submit("a", f"x score=0.{i}") for i in (1, 2)]
        t0 = time.monotonic()
        k = 0
        while not done[0].done() and time.monotonic() - t0 < 5:
            g.submit(f"other-{k}", "y score=0.5")  # groups of one sample of two: never complete
            k += 1
            time.sleep(0.05)
        assert done[0].result(timeout=1).reward == pytest.approx(0.1)
        assert 0.4 < time.monotonic() - t0 < 2 and p.steps == [0]
    finally:
        g.close()
    with pytest.raises(ValueError, match="max_wait"):
        Grouper(client, group_size=2, flush_after=1, max_wait=0.5)
