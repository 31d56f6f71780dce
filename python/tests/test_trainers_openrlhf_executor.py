"""OpenRLHF 0.11.2's own rollout code against the wmrl reward server, on the real stages.

OpenRLHF itself cannot be installed with its dependencies without CUDA (it pins flash-attn, an
sdist that builds against CUDA); the trainer venv installs it with ``--no-deps``. Run here, as
OpenRLHF ships it: ``SingleTurnAgentExecutor.execute`` (tokenise, generate, decode prompt +
response with special tokens kept, POST to ``--remote_rm_url`` with its retries, read the reply),
``SamplesGenerator._process_response_into_experience`` (the executor's output → an
``Experience``) and ``Experience.concat_experiences`` (the batch merge). Replayed rather than
run: the vLLM engine (``FakeEngine`` answers ``generate`` with fixed token ids ending in the EOS
id) and the ``vllm`` package, which ``samples_generator`` imports for a type only (a stub module
when vllm is not installed).

Checked: responses that end in the EOS text are graded without it (the server strips the
tokenizer's special tokens); then, measured, what each way of answering a failed reward does to
OpenRLHF's code — HTTP errors are retried 5 times and the sample's reward None crashes the batch
merge; ``null`` crashes the Experience; NaN makes the group's advantage NaN; wmrl's default
answer (200, failure reward, ``wmrl_failed``) is posted once and merges.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import sys
import threading
import time
import types
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from test_reward_e2e import Stages
from trainerkit import Server, grade, judge, judge_score, mixed_run, start_stages, tiny_model

from wmrl_client import RewardClient
from wmrl_client.integrations import openrlhf as orl
from wmrl_client.integrations._grouper import Grouper

pytestmark = [pytest.mark.trainers, pytest.mark.e2e]

torch = pytest.importorskip("torch")
agent = pytest.importorskip("openrlhf.utils.agent")
OPENRLHF_VERSION = "0.11.2"
N, PROMPTS, ANCHOR = 4, 2, 0.5
judge_url = pytest.fixture(judge)


def _samples_generator() -> Any:
    """openrlhf.trainer.ppo_utils.samples_generator, importing with a stub ``vllm`` when vllm is absent
    (the module imports ``SamplingParams`` and the engine module; the code used here needs neither)."""
    stubbed = False
    try:
        import vllm  # noqa: F401
    except ImportError:
        stubbed = True
        stub = types.ModuleType("vllm")
        stub.SamplingParams = type("SamplingParams", (), {})  # type: ignore[attr-defined]
        stub.__version__ = "0.0.0"  # type: ignore[attr-defined]
        inputs, utils = types.ModuleType("vllm.inputs"), types.ModuleType("vllm.utils")
        inputs.TokensPrompt = dict  # type: ignore[attr-defined]
        utils.random_uuid = lambda: "0"  # type: ignore[attr-defined]
        stub.inputs, stub.utils = inputs, utils  # type: ignore[attr-defined]
        sys.modules.update({"vllm": stub, "vllm.inputs": inputs, "vllm.utils": utils})
    try:
        from openrlhf.trainer.ppo_utils import samples_generator
    finally:  # never leave the stub behind: find_spec("vllm") on it raises (TRL and transformers ask)
        if stubbed:
            for name in ("vllm", "vllm.inputs", "vllm.utils"):
                sys.modules.pop(name, None)
    return samples_generator


class Params:
    """The fields of vLLM's SamplingParams the executor reads."""

    def __init__(self, max_tokens: int = 32) -> None:
        self.max_tokens, self.logprobs = max_tokens, None


class FakeEngine:
    """vLLM's engine for SingleTurnAgentExecutor: ``generate`` answers the next scripted response
    for the prompt (its token ids, then the EOS id)."""

    def __init__(self, tok: Any, responses: dict[str, list[str]]) -> None:
        self.tok, self.left = tok, {p: list(r) for p, r in responses.items()}

    async def generate(self, prompt_ids: list[int], params: Any, multi_modal_data: Any = None) -> Any:
        await asyncio.sleep(0.01 * (len(self.left) % 3))  # generations finish out of order
        prompt = self.tok.decode(prompt_ids)
        text = self.left[prompt].pop(0)
        ids = self.tok(text, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
        out = types.SimpleNamespace(token_ids=ids, text=text, finish_reason="stop", logprobs=None)
        return types.SimpleNamespace(outputs=[out])


def run_executor(url: str, tok: Any, items: list[tuple[str, str, str]]) -> tuple[list[dict[str, Any]], float]:
    """OpenRLHF's executor for (prompt, label, response) items, all concurrent; (outputs, seconds)."""
    responses: dict[str, list[str]] = {}
    for p, _, r in items:
        responses.setdefault(p, []).append(r)
    engine = FakeEngine(tok, responses)
    ex = agent.SingleTurnAgentExecutor(remote_rm_url=url)

    async def go() -> list[dict[str, Any]]:
        return await asyncio.gather(*[ex.execute(p, lb, Params(), 256, tok, engine) for p, lb, _ in items])

    t0 = time.monotonic()
    out = asyncio.run(go())
    return out, time.monotonic() - t0


def merge(outputs: list[dict[str, Any]]) -> Any:
    """OpenRLHF's own path from executor outputs to one batch: Experience per output, then concat."""
    sg = _samples_generator()
    exps = [sg.SamplesGenerator._process_response_into_experience(None, o, max_len=256) for o in outputs]
    from openrlhf.trainer.ppo_utils.experience import Experience

    return Experience.concat_experiences(exps, 0)


@pytest.fixture
def tok(tmp_path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model(tmp_path / "tiny"))


def test_openrlhf_executor_artifacts_without_eos_and_failures_that_neither_retry_nor_crash(
    kafka: str, redis_url: str, wmrl_cli: Path, prefix: str, judge_url: str, tmp_path: Path, tok: Any
) -> None:
    run = mixed_run("orx", [f"s0-g{j}" for j in range(PROMPTS)], ANCHOR)
    st = Stages(wmrl_cli, kafka, redis_url, prefix)
    st.run("topics", "create", "--partitions", "1")
    items = [(f"what is {j} plus {j + 3}", str(2 * j + 3), f"the result is {'7' * (i + 1)}")
             for i in range(N) for j in range(PROMPTS)]  # fmt: skip
    try:
        start_stages(st, judge_url, "label", tmp_path)
        with RewardClient(kafka, run, f"{st.unique}-orx", anchor_fraction=ANCHOR, topic_prefix=prefix) as client:
            grouper = Grouper(client, group_size=N, groups_per_step=PROMPTS, timeout=90)
            strip = orl.tokenizer_specials(str(tmp_path / "tiny"))
            with serving(orl.make_server(grouper, "127.0.0.1", 0, timeout=90, strip=strip)) as url:
                outs, _ = run_executor(url, tok, items)
            # A lone sample (its group never completes) against each failure answer of the real server.
            lone = [("a lone prompt", "1", "a lone answer")]
            measured = {}
            for mode in ("reward", "error"):
                g = Grouper(client, group_size=N, groups_per_step=1, timeout=1.0)
                srv = orl.make_server(g, "127.0.0.1", 0, timeout=0.5, failure=orl.Failure(mode))
                with serving(srv) as url:
                    measured[f"wmrl --on-failure {mode}"] = outcome(url, tok, outs[:1], lone)
                g.close()
            grouper.close()
        st.check_alive()
    finally:
        codes = st.stop()
    assert all(code == 0 for _, code in codes), codes

    anchors = 0
    for (prompt, label, response), o in zip(items, outs, strict=True):
        query = tok.decode(o["observation_tokens"], skip_special_tokens=False)
        assert query.endswith(response + tok.eos_token), "OpenRLHF's query ends in the EOS text"
        (reward,) = o["reward"]
        logs = {k: v[0] for k, v in o["extra_logs"].items()}
        assert logs["wmrl_failed"] == 0.0 and logs["wmrl_mask"] == 1.0
        if logs["wmrl_anchor"]:
            anchors += 1
            assert reward == pytest.approx(grade(response, int(label)), abs=1e-12), response
        else:
            assert reward == pytest.approx(judge_score(response), abs=1e-12), response
    assert 0 < anchors < len(items)
    batch = merge(outs)
    assert batch.rewards.shape[0] == len(items)

    # The other possible answers, from a stand-in server that answers each way at once.
    for name, status, body in (("HTTP 504", 504, {"error": "x"}), ("HTTP 422", 422, {"error": "x"}),
                               ("200 rewards null", 200, {"rewards": [None], "scores": [None]}),
                               ("200 rewards NaN", 200, {"rewards": [math.nan], "scores": [math.nan]})):  # fmt: skip
        with serving(None, answer=(status, body)) as url:
            measured[name] = outcome(url, tok, outs[:1], [("p", "1", "r")])
    print("OpenRLHF 0.11.2 executor, one failing sample merged with a good one:", json.dumps(measured, indent=1))
    art = os.environ.get("WMRL_TEST_ARTIFACTS")
    if art:
        Path(art).mkdir(parents=True, exist_ok=True)
        (Path(art) / "openrlhf-failure-answers.json").write_text(json.dumps(measured, indent=1) + "\n")

    ok = measured["wmrl --on-failure reward"]
    assert ok["posts"] == 1 and ok["merge"] == "ok" and ok["reward"] == 0.0 and ok["advantage_finite"]
    for name in ("wmrl --on-failure error", "HTTP 504", "HTTP 422"):
        m = measured[name]
        assert m["posts"] == 5 and m["reward"] is None, (name, m)  # retried 5 times, then no reward
        assert m["merge"].startswith("AttributeError") and "size" in m["merge"], (name, m)
    assert measured["200 rewards null"]["merge"].startswith(("TypeError", "RuntimeError", "ValueError"))
    assert measured["200 rewards NaN"]["posts"] == 1 and not measured["200 rewards NaN"]["advantage_finite"]


_posts = {"n": 0}  # POSTs the server under test received


class _StandIn(BaseHTTPRequestHandler):
    """A reward server that answers every POST with ``answer`` (status, JSON body)."""

    answer: tuple[int, dict[str, Any]] = (200, {})

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        _posts["n"] += 1
        status, body = self.answer
        out = json.dumps(body).encode()  # NaN goes out as the NaN token, which aiohttp's json() reads
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serving(srv: Any, *, answer: tuple[int, dict[str, Any]] | None = None) -> Iterator[str]:
    """Serves a wmrl RewardServer (its POSTs counted in _posts) or, with srv None, a stand-in
    answering ``answer``; yields the URL for --remote_rm_url."""
    if srv is None:
        http = Server(("127.0.0.1", 0), type("H", (_StandIn,), {"answer": answer}))
        threading.Thread(target=http.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{http.server_address[1]}/get_reward"
        finally:
            http.shutdown()
            http.server_close()
        return
    inner = srv._handle

    async def counted(request: Any) -> Any:
        _posts["n"] += 1
        return await inner(request)

    srv._handle = counted
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/get_reward"
    finally:
        srv.shutdown()
        srv.server_close()


def outcome(url: str, tok: Any, good: list[dict[str, Any]], failing: list[tuple[str, str, str]]) -> dict[str, Any]:
    """One failing sample through OpenRLHF's executor, then merged after a good sample's output as
    OpenRLHF merges a batch: the POSTs it made, its seconds, its reward, the merge's outcome and
    whether a group-normalised advantage (OpenRLHF's group_norm) over (good, failing) is finite."""
    _posts["n"] = 0
    outs, secs = run_executor(url, tok, failing)
    o = outs[0]
    try:
        batch = merge([*good, o])
        merged = "ok"
        r = batch.rewards.reshape(-1).float()
        adv = (r - r.mean()) / (r.std() + 1e-9)  # experience_maker.py's group_norm over one group
        finite = bool(torch.isfinite(adv).all())
    except Exception as e:  # what OpenRLHF's batch merge raises
        merged, finite = f"{type(e).__name__}: {e}"[:200], False
    reward = o["reward"]
    return {"posts": _posts["n"], "seconds": round(secs, 2), "merge": merged, "advantage_finite": finite,
            "reward": None if reward is None else (reward[0] if isinstance(reward, list) else reward)}  # fmt: skip
