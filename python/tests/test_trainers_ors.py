"""wmrl's ORS environment driven by Open Reward Standard clients on the real stages.

1. The specification's own requests (its HTTP API reference and protocol overview: ``POST
   /create_session``, ``POST /create`` with ``X-Session-ID`` and a ``task_spec``, ``GET
   /{env}/prompt``, ``GET /{env}/task_tools``, ``POST /{env}/call`` answered as Server-Sent Events
   ``task_id`` → ``chunk``* → ``end`` | ``error``, ``POST /ping``, ``POST /delete``), with the SSE
   parsing and the ``X-API-Key`` header of the reference SDK's client (ors-sdk 0.1.0,
   openrewardstandard/python-sdk commit 34b9c21b298cc525179db3231fbafe6a9e54ccf7:
   ``ors/client/_http.py``), on aiohttp: keep-alive comments, reconnection by ``task_id``, a second
   submit, auth and routing errors.
2. TRL 1.16.0's own ORS client, ``trl.experimental.openreward`` (``OpenRewardSpec`` and the
   per-rollout ``_RolloutEnvironment`` it builds, on the ``openreward`` SDK 0.1.167).

Two prompts × 4 episodes run concurrently, one session each, as parallel rollout workers would:
each episode's reward must be its own completion's wmrl reward — the sandbox's grade against the
task's label for anchor groups, the world model's score otherwise — from one wmrl step of two
whole groups.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from test_reward_e2e import Stages
from trainerkit import grade, judge, judge_score, mixed_run, start_stages

from wmrl_client import RewardClient
from wmrl_client.integrations import ors
from wmrl_client.integrations._grouper import Grouper

pytestmark = [pytest.mark.trainers, pytest.mark.e2e]

N, PROMPTS, ANCHOR, KEY = 4, 2, 0.5, "k3y"
judge_url = pytest.fixture(judge)


async def sse(resp: aiohttp.ClientResponse) -> list[tuple[str, str]]:
    """The stream's events as (event, data), comments as ("", comment): the reference client's parse."""
    out, event, data = [], None, []
    async for raw in resp.content:
        line = raw.decode().rstrip("\r\n")
        if not line:
            if event:
                out.append((event, "\n".join(data)))
            event, data = None, []
        elif line.startswith(":"):
            out.append(("", line[1:].strip()))
        else:
            k, v = line.split(":", 1)
            if k == "event":
                event = v.lstrip()
            elif k == "data":
                data.append(v.lstrip())
    return out


def result_of(events: list[tuple[str, str]]) -> Any:
    """The call's JSON result: chunks up to ``end`` (RuntimeError on ``error``, as the client does)."""
    chunks = []
    for ev, data in events:
        if ev == "error":
            raise RuntimeError(data)
        if ev in ("chunk", "end"):
            chunks.append(data)
        if ev == "end":
            return json.loads("".join(chunks)) if "".join(chunks) else None
    raise AssertionError(f"stream ended without end: {events}")


class Client:
    def __init__(self, http: aiohttp.ClientSession) -> None:
        self.http = http

    async def json(self, method: str, path: str, sid: str | None = None, body: Any = None,
                   status: int = 200) -> Any:  # fmt: skip
        headers = {"X-API-Key": KEY, **({"X-Session-ID": sid} if sid else {})}
        async with self.http.request(method, path, headers=headers, json=body) as r:
            assert r.status == status, (path, r.status, await r.text())
            return await r.json()

    async def call(self, env: str, sid: str, body: dict[str, Any]) -> list[tuple[str, str]]:
        headers = {"X-API-Key": KEY, "X-Session-ID": sid, "Accept": "text/event-stream"}
        async with self.http.post(f"/{env}/call", headers=headers, json=body) as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
            return await sse(r)

    async def episode(self, prompt: str, group: str, label: str, answer: str, *, sse_sid: bool) -> dict[str, Any]:
        if sse_sid:  # the reference SDK's way: the sid arrives as a task_id event
            async with self.http.post("/create_session", headers={"X-API-Key": KEY, "Accept": "text/event-stream"},
                                      json={}) as r:  # fmt: skip
                events = await sse(r)
            assert events[-1] == ("end", "") and events[0][0] == "task_id"
            sid = events[0][1]
        else:  # the specification's example: {"sid": ...}
            sid = (await self.json("POST", "/create_session"))["sid"]
        task = {"prompt": prompt, "group": group, "label": label}
        created = await self.json("POST", "/create", sid, {"env_name": "wmrl", "task_spec": task, "secrets": {}})
        assert created == {"sid": sid}
        assert await self.json("GET", "/wmrl/prompt", sid) == [{"text": prompt, "detail": None, "type": "text"}]
        tools = (await self.json("GET", "/wmrl/task_tools", sid))["tools"]
        assert [t["name"] for t in tools] == ["submit"]
        assert await self.json("POST", "/ping", sid) == {"status": "ok"}
        events = await self.call("wmrl", sid, {"name": "submit", "input": {"answer": answer}})
        res = result_of(events)
        again = result_of(await self.call("wmrl", sid, {"name": "submit", "input": {"answer": answer}}))
        assert again == {"ok": False, "error": "this episode is finished: its completion was already submitted"}
        # Reconnecting with the task_id the stream named gives the same call's result.
        (task_id,) = [d for e, d in events if e == "task_id"]
        assert result_of(await self.call("wmrl", sid, {"name": "submit", "input": {}, "task_id": task_id})) == res
        assert await self.json("POST", "/delete", sid) == {"sid": sid}
        await self.json("GET", "/wmrl/prompt", sid, status=404)
        return {"result": res, "pings": sum(1 for e, _ in events if e == "")}


def test_ors_episodes_through_the_real_stages(
    kafka: str, redis_url: str, wmrl_cli: Path, prefix: str, judge_url: str, tmp_path: Path
) -> None:
    run = mixed_run("ors", [f"s0-g{j}" for j in range(PROMPTS)], ANCHOR)
    st = Stages(wmrl_cli, kafka, redis_url, prefix)
    st.run("topics", "create", "--partitions", "1")
    episodes = [(f"what is {j} + {j + 3}?", f"p{j}", str(2 * j + 3), f"it is {'7' * (i + 1)} ({i}{j})")
                for i in range(N) for j in range(PROMPTS)]  # fmt: skip
    try:
        start_stages(st, judge_url, "label", tmp_path)
        with RewardClient(kafka, run, f"{st.unique}-ors", anchor_fraction=ANCHOR, topic_prefix=prefix) as client:
            grouper = Grouper(client, group_size=N, groups_per_step=PROMPTS, timeout=90)
            # ping well below the step's own floor (its anchor groups go through the sandbox's two
            # jailed steps, ≈ 100 ms or more): at 0.2 s a quiet CI machine corrected a step before
            # the first keep-alive comment was due.
            app = ors.OrsApp(grouper, token=KEY, ping=0.02, timeout=90)
            srv = app.server("127.0.0.1", 0)
            threading.Thread(target=srv.serve_forever, daemon=True).start()
            base = f"http://127.0.0.1:{srv.server_address[1]}"

            async def drive() -> list[dict[str, Any]]:
                async with aiohttp.ClientSession(base_url=base) as http:
                    c = Client(http)
                    assert await c.json("GET", "/health") == {"status": "ok"}
                    assert await c.json("GET", "/list_environments") == ["wmrl"]
                    (tool,) = (await c.json("GET", "/wmrl/tools"))["tools"]
                    assert tool["name"] == "submit" and tool["input_schema"]["required"] == ["answer"]
                    assert (await c.json("POST", "/wmrl/tasks", body={"split": "train"}, status=400))["detail"]
                    await c.json("GET", "/nope/tools", status=404)
                    async with http.get("/list_environments", headers={"X-API-Key": "wrong"}) as r:
                        assert r.status == 401
                    return await asyncio.gather(*(c.episode(*e, sse_sid=k % 2 == 0) for k, e in enumerate(episodes)))

            try:
                t0 = time.perf_counter()
                outs = asyncio.run(drive())
                took = time.perf_counter() - t0
            finally:
                srv.shutdown()
                srv.server_close()
                grouper.close()
        st.check_alive()
    finally:
        codes = st.stop()
    assert all(code == 0 for _, code in codes), codes
    print(f"ors: {PROMPTS}x{N} concurrent episodes, one wmrl step: {took:.3f}s")

    anchors = 0
    for (_, _, label, answer), out in zip(episodes, outs, strict=True):
        res = out["result"]
        assert res["ok"] is True
        o, md = res["output"], res["output"]["metadata"]
        assert o["finished"] is True and md["wmrl_step"] == 0 and md["wmrl_mask"] == 1.0
        if md["wmrl_anchor"]:
            anchors += 1
            assert o["reward"] == pytest.approx(grade(answer, int(label)), abs=1e-12), answer
        else:
            assert o["reward"] == pytest.approx(judge_score(answer), abs=1e-12), answer
    assert 0 < anchors < len(episodes)
    assert any(out["pings"] > 0 for out in outs), "no keep-alive comment while the step was corrected"


def test_ors_task_spec_errors() -> None:
    assert ors.parse_task({"prompt": "p", "label": 3, "x": None}) == ("p", "p", {"label": "3"})
    with pytest.raises(ValueError, match='task_spec.tests": want a scalar'):
        ors.parse_task({"prompt": "p", "tests": [1, 2]})
    with pytest.raises(ValueError, match="task_spec.prompt"):
        ors.parse_task({"prompt": 1})


def test_ors_with_trls_own_client(
    kafka: str, redis_url: str, wmrl_cli: Path, prefix: str, judge_url: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """TRL 1.16's ORS client (``trl.experimental.openreward``, on the ``openreward`` SDK) against the
    server: ``OpenRewardSpec`` lists the task split and discovers the tools through a session, and
    ``_RolloutEnvironment`` (what ``spec.environment_factory`` builds; here one client each, so the
    episodes can run in parallel threads) resets onto a task by index, calls ``submit`` and keeps the
    reward that ``spec.reward_funcs`` hands GRPO. TRL's own tool loop calls tools one rollout at a
    time: a submit whose group cannot complete meanwhile ends at the server's timeout, recorded by
    TRL as a tool error with no reward — checked here with a 1 s timeout.

    The SDK (openreward 0.1.167) sends session requests to ``sessions.<host>`` of the URL it is given
    (openreward.ai's routing) unless ``OPENREWARD_SESSION_URL`` names the server: a self-hosted
    server needs it set to its own URL."""
    openreward_trl = pytest.importorskip("trl.experimental.openreward")
    env_mod = pytest.importorskip("trl.experimental.openreward.environment")
    tasks = [{"prompt": f"what is {j} + {j + 3}?", "label": str(2 * j + 3)} for j in range(PROMPTS)]
    answers = [f"it is {'7' * (i + 1)} ({i})" for i in range(N)]
    run = mixed_run("ors-trl", [f"s0-g{j}" for j in range(PROMPTS)], ANCHOR)
    st = Stages(wmrl_cli, kafka, redis_url, prefix)
    st.run("topics", "create", "--partitions", "1")
    try:
        start_stages(st, judge_url, "label", tmp_path)
        with RewardClient(kafka, run, f"{st.unique}-ors", anchor_fraction=ANCHOR, topic_prefix=prefix) as client:
            grouper = Grouper(client, group_size=N, groups_per_step=PROMPTS, timeout=90)
            srv = ors.OrsApp(grouper, tasks=tasks, timeout=90).server("127.0.0.1", 0)
            short = ors.OrsApp(grouper, tasks=[{"prompt": "alone", "group": "never-complete"}], timeout=1.0)
            srv2 = short.server("127.0.0.1", 0)
            for s in (srv, srv2):
                threading.Thread(target=s.serve_forever, daemon=True).start()
            url = f"http://127.0.0.1:{srv.server_address[1]}"
            monkeypatch.setenv("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
            monkeypatch.setenv("OPENREWARD_SESSION_URL", url)
            monkeypatch.setenv("OPENREWARD_API_URL", url)
            try:
                spec = openreward_trl.OpenRewardSpec(url)
                ds = spec.train_dataset
                assert ds["task_index"] == list(range(PROMPTS)) and ds["label"] == [t["label"] for t in tasks]
                factory = spec.environment_factory
                assert callable(getattr(factory(), "submit", None)), "TRL bound no submit tool"
                # GRPO's batch: N rollouts of each task, consecutive.
                envs = [env_mod._RolloutEnvironment(base_url=url, split="train") for _ in range(PROMPTS * N)]
                prompts: list[str] = [""] * len(envs)

                phase: list[tuple[float, float]] = [(0.0, 0.0)] * len(envs)

                def episode(k: int) -> None:
                    t0 = time.perf_counter()
                    prompts[k] = envs[k].reset(**{k2: v[k // N] for k2, v in ds[:].items()})
                    t1 = time.perf_counter()
                    envs[k].submit(answer=answers[k % N])
                    phase[k] = (t1 - t0, time.perf_counter() - t1)

                t0 = time.perf_counter()
                threads = [threading.Thread(target=episode, args=(k,)) for k in range(len(envs))]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(120)
                took = time.perf_counter() - t0
                rewards = spec.reward_funcs(environments=envs)
                # TRL's sequential tool loop, one rollout of a group alone: the server's timeout, no reward.
                url2 = f"http://127.0.0.1:{srv2.server_address[1]}"
                monkeypatch.setenv("OPENREWARD_SESSION_URL", url2)
                lone = env_mod._RolloutEnvironment(base_url=url2, split="train")
                lone.reset(task_index=0)
                t1 = time.perf_counter()
                out = lone.submit(answer="x")
                lone_took = time.perf_counter() - t1
                for e in [*envs, lone]:
                    e._close()
            finally:
                for s in (srv, srv2):
                    s.shutdown()
                    s.server_close()
                grouper.close()
        st.check_alive()
    finally:
        codes = st.stop()
    assert all(code == 0 for _, code in codes), codes
    print(f"ors via TRL's client: {len(envs)} parallel episodes, one wmrl step: {took:.3f}s (per episode: "
          f"session + prompt {max(p[0] for p in phase):.3f}s, submit {max(p[1] for p in phase):.3f}s at most); "
          f"a lone sequential submit: {lone_took:.2f}s")  # fmt: skip

    assert prompts == [tasks[k // N]["prompt"] for k in range(len(envs))]
    anchors = 0
    for k, (e, r) in enumerate(zip(envs, rewards, strict=True)):
        md = e.metadata[-1]
        assert e.finished and r is not None and md is not None and md["wmrl_step"] == 0, (k, e.last_output)
        label, answer = tasks[k // N]["label"], answers[k % N]
        if md["wmrl_anchor"]:
            anchors += 1
            assert r == pytest.approx(grade(answer, int(label)), abs=1e-12)
        else:
            assert r == pytest.approx(judge_score(answer), abs=1e-12)
    assert 0 < anchors < len(envs)
    assert out.startswith("Error:") and "no wmrl reward within 1s" in out, out
    assert lone.reward is None and 1.0 <= lone_took < 30
