"""OpenRLHF 0.11.2's reward requests replayed against the wmrl server on the real stages.

OpenRLHF cannot be installed without CUDA (it pins flash-attn, an sdist that builds against
CUDA), so this test mirrors its exact request shape and concurrency, as of version 0.11.2:
``SingleTurnAgentExecutor`` posts one sample per request right after its generation, from
concurrent rollout actors, as ``{"query": [prompt + response], "prompts": [prompt], "labels":
[label]}``, waiting up to 180 s. Two prompts × 4 samples (n_samples_per_prompt 4), all eight
requests concurrent and interleaved: each must come back with its own sample's reward — the
sandbox's grade of the response against the request's label (anchor groups, graded from
{dir}/rollout.json) or the world model's score — from one wmrl step of two whole groups.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from test_reward_e2e import Stages
from trainerkit import grade, judge, judge_score, mixed_run, start_stages

from wmrl_client import RewardClient
from wmrl_client.integrations import openrlhf as orl
from wmrl_client.integrations._grouper import Grouper

pytestmark = [pytest.mark.trainers, pytest.mark.e2e]

OPENRLHF_VERSION = "0.11.2"
N, PROMPTS, ANCHOR = 4, 2, 0.5
judge_url = pytest.fixture(judge)


def request_api(url: str, query: str, prompt: str, label: str) -> dict[str, Any]:
    """OpenRLHF 0.11.2's remote reward call for one sample (request_api_wrapper: POST JSON, 180 s)."""
    body = json.dumps({"query": [query], "prompts": [prompt], "labels": [label]}).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=180) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


def test_openrlhf_concurrent_one_sample_requests(
    kafka: str, redis_url: str, wmrl_cli: Path, prefix: str, judge_url: str, tmp_path: Path
) -> None:
    run = mixed_run("orl", [f"s0-g{j}" for j in range(PROMPTS)], ANCHOR)
    st = Stages(wmrl_cli, kafka, redis_url, prefix)
    st.run("topics", "create", "--partitions", "1")
    chat = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
    samples = []  # (prompt, response, label), in the order the generations finish: interleaved
    for i in range(N):
        for j in range(PROMPTS):
            samples.append(
                (chat.format(f"what is {j} + {j + 3}?"), f"it is {'7' * (i + 1)} because {i}{j}", str(2 * j + 3))
            )
    try:
        start_stages(st, judge_url, "label", tmp_path)
        with RewardClient(kafka, run, f"{st.unique}-orl", anchor_fraction=ANCHOR, topic_prefix=prefix) as client:
            grouper = Grouper(client, group_size=N, groups_per_step=PROMPTS, timeout=90)
            srv = orl.make_server(grouper, "127.0.0.1", 0, token="t0ken")
            threading.Thread(target=srv.serve_forever, daemon=True).start()
            url = f"http://127.0.0.1:{srv.server_address[1]}/get_reward?token=t0ken"
            try:
                with ThreadPoolExecutor(len(samples)) as ex:
                    replies = list(ex.map(lambda s: request_api(url, s[0] + s[1], s[0], s[2]), samples))
            finally:
                srv.shutdown()
                srv.server_close()
                grouper.close()
        st.check_alive()
    finally:
        codes = st.stop()
    assert all(code == 0 for _, code in codes), codes

    anchors = 0
    for (_, response, label), out in zip(samples, replies, strict=True):
        (reward,) = out["rewards"]
        logs = {k: v[0] for k, v in out["extra_logs"].items()}
        assert logs["wmrl_step"] == 0 and logs["wmrl_mask"] == 1.0
        if logs["wmrl_anchor"]:
            anchors += 1
            assert reward == pytest.approx(grade(response, int(label)), abs=1e-12), (response, label)
            assert logs["wmrl_weight"] >= 1
        else:
            assert reward == pytest.approx(judge_score(response), abs=1e-12), response
    assert 0 < anchors < len(samples)
