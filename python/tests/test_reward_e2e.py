"""RewardClient.score through the real stages, on the real broker and Redis.

`wmrl worldmodel` (against an OpenAI-compatible fake that answers the score written in the
artifact), `wmrl sandbox` (cmd/wmrl/testdata/e2e/score.sh, which reports the artifact's "exec"
value) and `wmrl correct` run as processes built from ./cmd/wmrl. The test plays the trainer:
for each of 24 steps it scores three groups with RewardClient.score, checks every returned row
against the scores it wrote (aligned to its own rollout order) and the GRPO formula, and at the
end requires the digest of all rows it received to equal `wmrl digest --topic --run`. Leaving
the client's ``with`` block ends the run (close_run): a later step of it is dead-lettered by
`wmrl correct` with reason run_ended.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import REPO
from test_e2e import wmrl_digest
from trainerkit import ChatEndpoint, serve

from wmrl_client import (
    Group,
    RewardClient,
    RunEndedError,
    StepTimeoutError,
    UnknownRunError,
    UnknownTopicError,
    is_anchor,
)
from wmrl_client.digest import digest_and_count

pytestmark = pytest.mark.e2e

STEPS = 24
GROUPS = 3
SIZE = 4
ANCHOR = 0.5
SCORE_SH = REPO / "cmd" / "wmrl" / "testdata" / "e2e" / "score.sh"
WM_RE = re.compile(r'"wm":\s*([0-9][0-9.]*)')


class WorldModel(ChatEndpoint):
    """An OpenAI-compatible chat endpoint whose score is the "wm" value found in the prompt."""

    def answer(self, content: str) -> str:
        m = WM_RE.search(content)
        return json.dumps({"score": float(m.group(1))}) if m else "I cannot tell."


@pytest.fixture
def world_model() -> Iterator[str]:
    yield from serve(WorldModel)


def scores(step: int, j: int, i: int) -> tuple[float, float]:
    """The world model's and the sandbox's score of rollout i of group j at step (fixed, distinct)."""
    k = (step * GROUPS + j) * SIZE + i
    return ((k * 7) % 19) / 20, ((k * 11 + 3) % 17) / 20


def step_groups(step: int) -> list[Group]:
    out = []
    for j in range(GROUPS):
        comps = []
        for i in range(SIZE):
            wm, ex = scores(step, j, i)
            comps.append(json.dumps({"rollout": f"{step}-{j}-{i}", "wm": wm, "exec": ex}))
        out.append(Group(completions=comps, prompt=f"task {step}/{j}"))
    return out


def grpo(r: np.ndarray) -> np.ndarray:
    return (r - r.mean()) / (r.std() + 1e-4)


class Stages:
    def __init__(self, cli: Path, kafka: str, redis_url: str, prefix: str) -> None:
        self.cli, self.procs = cli, []
        self.glob = ["--brokers", kafka, "--redis", redis_url, "--topic-prefix", prefix]
        self.unique = prefix.rstrip(".")

    def run(self, *args: str) -> str:
        p = subprocess.run([str(self.cli), *self.glob, *args], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        return p.stdout

    def start(self, name: str, *args: str, log_dir: Path) -> None:
        f = open(log_dir / f"{name}.log", "w")  # noqa: SIM115 (closed in stop)
        p = subprocess.Popen([str(self.cli), *self.glob, *args, "--metrics-addr", "127.0.0.1:0",
                              "--group", f"{self.unique}-{name}"], stdout=f, stderr=subprocess.STDOUT)  # fmt: skip
        self.procs.append((name, p, f))

    def check_alive(self) -> None:
        for name, p, f in self.procs:
            if p.poll() is not None:
                f.flush()
                raise AssertionError(f"wmrl {name} exited with {p.returncode}:\n{Path(f.name).read_text()[-3000:]}")

    def stop(self) -> list[tuple[str, int]]:
        codes = []
        for name, p, f in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            codes.append((name, p.returncode))
            f.close()
        return codes


def expected(run: str, step: int, gid: str, artifact: str) -> float:
    a = json.loads(artifact)
    return float(a["exec"] if is_anchor(run, gid, ANCHOR) else a["wm"])


def run_adapters(client: RewardClient, kafka: str, prefix: str, run: str, unique: str) -> list[pa.Table]:
    """Steps STEPS, STEPS+1, STEPS+2 through the TRL, verl and OpenRLHF adapters, called as the
    frameworks call them (see test_integrations.py), on the real stages."""
    from test_integrations import openrlhf_request, trl_calculate_rewards, verl_batch_reward_manager

    from wmrl_client.integrations import openrlhf, trl, verl
    from wmrl_client.integrations._batch import BatchScorer

    def batch(step: int) -> tuple[list[str], list[str]]:
        groups = step_groups(step)
        return [g.prompt for g in groups for _ in g.completions], [c for g in groups for c in g.completions]

    tables = []
    # TRL: the completions of one prompt are next to each other.
    prompts, comps = batch(STEPS)
    fn = trl.RewardFunc(client, num_generations=SIZE, start_step=STEPS)
    r = trl_calculate_rewards([fn], [{"prompt": p, "task": "t"} for p in prompts], prompts, comps, [[1]] * len(comps))
    assert fn.last is not None
    want = [expected(run, STEPS, gid, a) for gid, a in zip(fn.last.group_ids, comps, strict=True)]
    np.testing.assert_allclose(r[:, 0], want, atol=1e-6)
    tables.append(fn.last.table)

    # verl: the module-level compute_score, configured by keyword arguments; the batch interleaved.
    prompts, comps = batch(STEPS + 1)
    order = [k for i in range(SIZE) for k in range(i, len(comps), SIZE)]
    prompts, comps = [prompts[k] for k in order], [comps[k] for k in order]
    kw = {"brokers": kafka, "run_id": run, "group_id": f"{unique}-verl", "topic_prefix": prefix,
          "anchor_fraction": ANCHOR, "group_size": SIZE, "start_step": STEPS + 1}  # fmt: skip
    rewards, extra = verl_batch_reward_manager(
        lambda **a: verl.compute_score(**a, **kw), comps, ["wmrl"] * len(comps), prompts, [None] * len(comps)
    )
    (scorer,) = [f.scorer for f in verl._scorers.values() if f.scorer.client.group_id == f"{unique}-verl"]
    assert scorer.last is not None and scorer.last.step == STEPS + 1
    want = [expected(run, STEPS + 1, gid, a) for gid, a in zip(scorer.last.group_ids, comps, strict=True)]
    np.testing.assert_allclose(rewards, want, atol=1e-12)
    np.testing.assert_allclose(extra["wmrl_advantage"], scorer.last.advantage)
    tables.append(scorer.last.table)
    scorer.client.close()

    # OpenRLHF: a --remote_rm_url request to the server.
    prompts, comps = batch(STEPS + 2)
    ors = BatchScorer(client, group_size=SIZE, start_step=STEPS + 2)
    srv = openrlhf.make_server(ors, "127.0.0.1", 0)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        out = openrlhf_request(f"http://127.0.0.1:{srv.server_address[1]}/get_reward",
                               {"query": [p + c for p, c in zip(prompts, comps, strict=True)], "prompts": prompts,
                                "labels": [""] * len(comps)})  # fmt: skip
    finally:
        srv.shutdown()
        srv.server_close()
    assert ors.last is not None
    want = [expected(run, STEPS + 2, gid, a) for gid, a in zip(ors.last.group_ids, comps, strict=True)]
    np.testing.assert_allclose(out["rewards"], want, atol=1e-12)
    tables.append(ors.last.table)
    return tables


def dead_letters(kafka: str, prefix: str, run: str, reason: str, timeout: float = 60) -> list[tuple[str, int]]:
    """(source topic, step) of the run's dead letters with reason, read once some arrived (all of
    them that are there a few seconds after the first)."""
    from confluent_kafka import Consumer

    cons = Consumer({"bootstrap.servers": kafka, "group.id": f"dlq-{uuid.uuid4().hex[:8]}",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    cons.subscribe([f"{prefix}dlq.v1"])
    out: list[tuple[str, int]] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            m = cons.poll(1.0)
            if m is None or m.error():
                continue
            hs = {k: (v or b"").decode() for k, v in m.headers() or []}
            if m.key() == run.encode() and hs.get("wmrl-dlq-reason") == reason:
                out.append((hs["wmrl-dlq-source-topic"], int(hs["wmrl-step"])))
                deadline = min(deadline, time.monotonic() + 5)
    finally:
        cons.close()
    return out


def test_score_through_the_real_stages(
    kafka: str, redis_url: str, wmrl_cli: Path, prefix: str, world_model: str, tmp_path: Path
) -> None:
    run = f"score-{uuid.uuid4().hex[:6]}"
    st = Stages(wmrl_cli, kafka, redis_url, prefix)
    st.run("topics", "create", "--partitions", "2")
    try:
        st.start("worldmodel", "worldmodel", "--base-url", world_model, "--model", "m", "--concurrency", "4",
                 log_dir=tmp_path)  # fmt: skip
        st.start("sandbox", "sandbox", "--single-step-no-private",
                 "--argv", json.dumps(["/bin/sh", str(SCORE_SH), "{artifact}"]), "--slots", "2", "--timeout", "30s",
                 log_dir=tmp_path)  # fmt: skip
        # --min-pairs above the run's anchor pairs keeps the calibration the identity, so the
        # expected rewards are the scores the test wrote (how many pairs accrue depends on the
        # anchor hash of the random run id).
        st.start("correct", "correct", "--transactional-id", f"{st.unique}-txn", "--redis-prefix", st.unique,
                 "--min-pairs", "5000", log_dir=tmp_path)  # fmt: skip

        tables = []
        anchors = 0
        with RewardClient(kafka, run, f"{st.unique}-trainer", anchor_fraction=ANCHOR, topic_prefix=prefix) as client:
            for step in range(STEPS):
                groups = step_groups(step)
                try:
                    res = client.score(step, groups, timeout=90)
                except StepTimeoutError:
                    st.check_alive()
                    raise
                assert res.step == step and len(res) == GROUPS * SIZE
                assert res.rollout_ids == [f"s{step}-g{j}-r{i}" for j in range(GROUPS) for i in range(SIZE)]
                for j, (used, adv, w, mask) in enumerate(
                    zip(
                        res.grouped("used"),
                        res.grouped("advantage"),
                        res.grouped("weight"),
                        res.grouped("mask"),
                        strict=True,
                    )
                ):
                    anchor = is_anchor(run, f"s{step}-g{j}", ANCHOR)
                    anchors += anchor
                    want = np.array([scores(step, j, i)[1 if anchor else 0] for i in range(SIZE)])
                    # Identity calibration (--min-pairs): a world-model row's used reward is its
                    # prediction, an anchor row's its execution.
                    np.testing.assert_allclose(used, want, rtol=0, atol=1e-12)
                    np.testing.assert_allclose(adv, grpo(want), rtol=1e-9, atol=1e-12)
                    assert mask.all()
                    assert (w >= 1).all() if anchor else (w == 1).all()
                    src = res.source[j * SIZE : (j + 1) * SIZE]
                    assert src == ["anchor" if anchor else "world_model"] * SIZE
                tables.append(res.table)
            assert 0 < anchors < STEPS * GROUPS
            tables += run_adapters(client, kafka, prefix, run, st.unique)
        # The clean exit ended the run after the last step the client published (the adapters'
        # STEPS + 2); a trainer going on under the run id is refused: by this client at once,
        # by `wmrl correct` for another client's step (run_ended), and its rows never come.
        assert client.end_record is not None and client.end_record.step == STEPS + 2
        late_step = STEPS + 3
        with pytest.raises(RunEndedError, match=f"ended after step {STEPS + 2}"):
            client.publish(late_step, step_groups(late_step))
        late = RewardClient(kafka, run, f"{st.unique}-late", anchor_fraction=ANCHOR, topic_prefix=prefix,
                            end_run_on_exit=False)  # fmt: skip
        with late:
            late.publish(late_step, step_groups(late_step))
        ended = dead_letters(kafka, prefix, run, "run_ended")
        assert (f"{prefix}steps.v1", late_step) in ended, ended
        assert {step for _, step in ended} == {late_step}, ended

        # A run nobody published: the wait names the runs that are there.
        with RewardClient(kafka, "no-such-run", f"{st.unique}-probe", topic_prefix=prefix) as probe:
            with pytest.raises(UnknownRunError, match=run):
                probe.wait(0, timeout=8)

        # A wrong topic prefix: the error names the prefixes that do exist, the client picks none.
        with pytest.raises(UnknownTopicError, match=re.escape(repr(prefix))):
            RewardClient(kafka, run, f"{st.unique}-probe", topic_prefix=prefix + "typo.")

        digest, rows = digest_and_count(pa.concat_tables(tables))
        assert (digest, rows, STEPS + 3) == wmrl_digest(wmrl_cli, kafka, f"{prefix}advantages.v1", run)
        assert rows == (STEPS + 3) * GROUPS * SIZE
        assert WorldModel.requests >= rows
    finally:
        codes = st.stop()
    assert all(code == 0 for _, code in codes), codes


def test_generator_waits_for_a_python_trainer(
    kafka: str, redis_url: str, wmrl_cli: Path, prefix: str, world_model: str, tmp_path: Path
) -> None:
    """`wmrl generate --max-steps-ahead 2` paces itself by a Python AdvantageStream's acks."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KTP

    from wmrl_client import AdvantageStream

    run, steps, ahead = f"pace-{uuid.uuid4().hex[:6]}", 6, 2
    st = Stages(wmrl_cli, kafka, redis_url, prefix)
    st.run("topics", "create", "--partitions", "1")
    lines = []
    for s in range(steps):
        for j in range(2):
            for i in range(2):
                wm, ex = scores(s, j, i)
                art = json.dumps({"rollout": f"{s}-{j}-{i}", "wm": wm, "exec": ex})
                lines.append(json.dumps({"step": s, "group_id": f"{s}-g{j}", "prompt": "p", "artifact": art}))
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    trainer = f"{st.unique}-trainer"
    probe = Consumer({"bootstrap.servers": kafka, "group.id": f"{st.unique}-probe"})

    def manifests() -> int:
        _, high = probe.get_watermark_offsets(KTP(f"{prefix}steps.v1", 0), timeout=10)
        return int(high)

    try:
        st.start("worldmodel", "worldmodel", "--base-url", world_model, "--model", "m", log_dir=tmp_path)
        st.start("sandbox", "sandbox", "--single-step-no-private",
                 "--argv", json.dumps(["/bin/sh", str(SCORE_SH), "{artifact}"]), "--timeout", "30s",
                 log_dir=tmp_path)  # fmt: skip
        st.start("correct", "correct", "--transactional-id", f"{st.unique}-txn", "--redis-prefix", st.unique,
                 log_dir=tmp_path)  # fmt: skip
        gen_log = open(tmp_path / "generate.log", "w")  # noqa: SIM115
        gen = subprocess.Popen(
            [str(wmrl_cli), *st.glob, "generate", "--backend", "jsonl", "--input", str(tmp_path / "in.jsonl"),
             "--run", run, "--anchor-fraction", "0.5", "--max-steps-ahead", str(ahead), "--trainer-group", trainer,
             "--end-run=false"],  # manifests() counts steps-topic records: no end-of-run record
            stdout=gen_log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        held = []
        with AdvantageStream(kafka, run, trainer, topic_prefix=prefix, idle_timeout=60) as stream:
            for step in stream:
                # Holding step v unacknowledged (trained: steps < v), the generator may have
                # published steps up to v + ahead - 1 and not one more.
                time.sleep(2.0)
                held.append((step.step, manifests()))
                step.ack()
                if step.step == steps - 1:
                    break
        assert gen.wait(60) == 0
        gen_log.close()
        log = (tmp_path / "generate.log").read_text()
        assert [v for v, _ in held] == list(range(steps))
        assert all(n <= min(v + ahead, steps) for v, n in held), held
        assert any(n == v + ahead for v, n in held), held  # and it did run ahead as far as allowed
        assert "generation paused" in log and "generation resumed" in log, log
    finally:
        probe.close()
        codes = st.stop()
    assert all(code == 0 for _, code in codes), codes
