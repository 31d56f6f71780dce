"""End to end against the real broker (WMRL_TEST_KAFKA) and Redis (WMRL_TEST_REDIS).

* The whole Go pipeline (`wmrl demo --external`: generator, world model, sandbox, the correction
  consumer `wmrl correct`'s stage, trainer) runs a short run on the real broker; Python reads the
  wmrl arm's advantages, and the row count and digest must equal `wmrl digest --topic`.
* tests/gohelper writes advantages with the topics builders in the shapes the pipeline does not
  produce on demand (chunks forced by a small --chunk-bytes, an aborted transaction holding a
  bogus copy of step 0, another run interleaved); Python must read exactly the committed rows,
  compared with `wmrl digest --topic --run` and with the digest the helper computed.
* Commit semantics against the broker, the GRPO example on the stream, and rollouts published from
  Python checked by the strict Go decoders.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import subprocess
import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import PY_ROOT

from wmrl_client import (
    AdvantageStream,
    GroupManifest,
    RewardClient,
    Rollout,
    RolloutProducer,
    Step,
    StepManifest,
    is_anchor,
)
from wmrl_client.digest import digest_and_count

pytestmark = pytest.mark.e2e

Helper = Callable[..., dict[str, Any]]


def read_steps(
    kafka: str, prefix: str, run: str, group: str, want: int, ack: Callable[[Step], bool] = lambda s: True
) -> list[Step]:
    steps: list[Step] = []
    with AdvantageStream(kafka, run, group, topic_prefix=prefix, idle_timeout=30) as stream:
        for st in stream:
            steps.append(st)
            if ack(st):
                st.ack()
            if len(steps) == want:
                break
    return steps


def produce(gohelper: Helper, kafka: str, prefix: str, run: str, steps: int, **flags: Any) -> dict[str, Any]:
    args = ["produce", "--brokers", kafka, "--prefix", prefix, "--run", run, "--steps", str(steps)]
    for k, v in flags.items():
        # A Go bool flag takes its value only as --name=value ("--abort false" would set it and
        # end the flags at the positional "false").
        name = k.replace("_", "-")
        args += [f"--{name}={str(v).lower()}"] if isinstance(v, bool) else [f"--{name}", str(v)]
    return gohelper(*args)


def wmrl_digest(wmrl_cli: Path, kafka: str, topic: str, run: str = "") -> tuple[str, int, int]:
    """`wmrl digest --topic` → (digest, rows, steps)."""
    args = [str(wmrl_cli), "--brokers", kafka, "digest", "--topic", topic, "--timeout", "60s"]
    if run:
        args += ["--run", run]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    m = re.search(r"digest ([0-9a-f]{64}) rows (\d+) steps (\d+)", p.stdout)
    assert m, p.stdout
    return m.group(1), int(m.group(2)), int(m.group(3))


def topic_runs(kafka: str, topic: str) -> list[str]:
    """The runs (wmrl-run headers) on a one-partition topic, read to its end without a group commit."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": kafka, "group.id": f"probe-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": True})  # fmt: skip
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        runs: list[str] = []
        while True:
            m = c.poll(10)
            assert m is not None, f"no end of {topic} within 10s"
            if m.error():
                break
            run = dict(m.headers() or [])["wmrl-run"].decode()
            if run not in runs:
                runs.append(run)
        return runs
    finally:
        c.close()


def topic_content_types(kafka: str, topic: str) -> set[str]:
    """The content-type headers of partition 0 of topic, read to its end."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": kafka, "group.id": f"probe-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": True})  # fmt: skip
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        cts: set[str] = set()
        while True:
            m = c.poll(10)
            assert m is not None, f"no end of {topic} within 10s"
            if m.error():
                return cts
            cts.add(dict(m.headers() or [])["content-type"].decode())
    finally:
        c.close()


def delete_prefix(kafka: str, prefix: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": kafka})
    names = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix)]
    for f in admin.delete_topics(names).values() if names else ():
        f.result(30)


def test_python_reads_what_the_go_pipeline_produced(kafka: str, redis_url: str, wmrl_cli: Path) -> None:
    prefix = f"pytest-{uuid.uuid4().hex[:10]}."
    try:
        p = subprocess.run(
            [str(wmrl_cli), "--brokers", kafka, "--redis", redis_url, "--topic-prefix", prefix, "demo", "--external",
             "--steps", "4", "--groups", "4", "--group-size", "4", "--eval-problems", "1", "--out", ""],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert p.returncode == 0, p.stdout + p.stderr
        from confluent_kafka.admin import AdminClient

        topics = AdminClient({"bootstrap.servers": kafka}).list_topics(timeout=10).topics
        (topic,) = [t for t in topics if t.startswith(prefix) and t.endswith(".wmrl.advantages.v1")]
        go_digest, go_rows, go_steps = wmrl_digest(wmrl_cli, kafka, topic)
        (run,) = topic_runs(kafka, topic)
        # The hand-off: the demo names the run and the prefix, and its snippet runs as printed.
        m = re.search(r"run id (\S+); the wmrl arm's topic prefix is (\S+) \(advantages: (\S+)\)", p.stdout)
        assert m, p.stdout
        assert (m.group(1), m.group(3)) == (run, topic) and topic == m.group(2) + "advantages.v1"
        snippet = textwrap.dedent(p.stdout.split("read them from Python (pip install ./python):\n", 1)[1])
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(snippet, "demo-snippet", "exec"), {})  # noqa: S102 (the demo's own output)
        assert [int(line.split()[0]) for line in printed.getvalue().splitlines()] == list(range(go_steps))
        with AdvantageStream(kafka, run, f"g-{uuid.uuid4().hex[:8]}", topic=topic, idle_timeout=30) as stream:
            steps = []
            for st in stream:
                steps.append(st)
                st.ack()
                if len(steps) == go_steps:
                    break
        assert [s.step for s in steps] == sorted(s.step for s in steps)
        digest, rows = digest_and_count(pa.concat_tables([s.table for s in steps]))
        assert (digest, rows, len(steps)) == (go_digest, go_rows, go_steps)
        assert rows == 4 * 4 * 4
    finally:
        delete_prefix(kafka, prefix)


@pytest.mark.parametrize("framed", [False, True], ids=["arrow", "framed"])
def test_python_reads_exactly_the_rows_go_committed(
    kafka: str, gohelper: Helper, prefix: str, wmrl_cli: Path, framed: bool
) -> None:
    """framed: Go writes the advantages as `wmrl correct` does with a schema registry (a
    Confluent-framed wmrl.v1.AdvantageBatch); the stream and `wmrl digest` read them the same."""
    run = "e2e-run"
    flags = {"framed": True} if framed else {}
    go = produce(gohelper, kafka, prefix, run, 6, chunk_bytes=4096, other_run="e2e-other", partitions=3, **flags)
    if framed:
        assert topic_content_types(kafka, f"{prefix}advantages.v1") == {"application/x-protobuf; framing=confluent"}
    assert go["chunks"] > go["steps"], "chunk-bytes should force several chunks per step"
    assert go["aborted_rows"] > 0 and go["other_run_rows"] > 0
    assert wmrl_digest(wmrl_cli, kafka, f"{prefix}advantages.v1", run) == (go["digest"], go["rows"], go["steps"])

    steps = read_steps(kafka, prefix, run, f"g-{uuid.uuid4().hex[:8]}", go["steps"])
    assert [s.step for s in steps] == list(range(go["steps"]))
    assert all(s.chunks > 1 for s in steps)
    digest, rows = digest_and_count(pa.concat_tables([s.table for s in steps]))
    assert rows == go["rows"]
    assert digest == go["digest"]


def test_offsets_committed_only_on_ack(kafka: str, gohelper: Helper, prefix: str) -> None:
    run = "e2e-commit"
    go = produce(gohelper, kafka, prefix, run, 6, chunk_bytes=4096, partitions=1, abort=False)
    group = f"g-{uuid.uuid4().hex[:8]}"
    # Ack steps 0, 1, 2 and 4, not 3 and 5: the commit must stop below step 3.
    first = read_steps(kafka, prefix, run, group, 6, ack=lambda s: s.step in (0, 1, 2, 4))
    assert [s.step for s in first] == [0, 1, 2, 3, 4, 5]
    again = read_steps(kafka, prefix, run, group, 3)
    assert [s.step for s in again] == [3, 4, 5]
    assert [s.digest() for s in again] == [s.digest() for s in first[3:]]
    # Everything is acknowledged now: a third reader of the group gets nothing.
    with AdvantageStream(kafka, run, group, topic_prefix=prefix, idle_timeout=8) as stream:
        assert list(stream) == []
    assert go["steps"] == 6


def test_grpo_example_trains_on_the_stream(kafka: str, gohelper: Helper, prefix: str) -> None:
    run = "e2e-example"
    produce(gohelper, kafka, prefix, run, 3, partitions=1)
    spec = importlib.util.spec_from_file_location("grpo_loop", PY_ROOT / "examples" / "grpo_loop.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = io.StringIO()
    losses = mod.main(
        ["--bootstrap", kafka, "--run", run, "--group", f"g-{uuid.uuid4().hex[:8]}", "--topic-prefix", prefix,
         "--max-steps", "3", "--idle-timeout", "30", "--numpy"],
        out=out,
    )  # fmt: skip
    assert sorted(losses) == ["0", "1", "2"], out.getvalue()
    assert "trained 3 steps with numpy" in out.getvalue()


def test_rollouts_from_python_pass_the_go_decoders(kafka: str, gohelper: Helper, prefix: str) -> None:
    run = "e2e-rollouts"
    produce(gohelper, kafka, prefix, run, 0, partitions=2)  # creates the topics

    def generate() -> Any:
        for step in range(3):
            manifest = StepManifest(run_id=run, step=step, policy_version=f"ckpt-{step}")
            for g in range(4):
                gid = f"s{step}-g{g}"
                anchor = is_anchor(run, gid, 0.25)
                manifest.groups.append(GroupManifest(group_id=gid, stream="mle", size=8, anchor=anchor))
                for i in range(8):
                    yield Rollout(
                        run_id=run, step=step, group_id=gid, rollout_id=f"{gid}-r{i}", stream="mle",
                        policy_version=f"ckpt-{step}", anchor=anchor, index=i, prompt="fit <data> & report",
                        artifact=f'{{"model":"ridge","alpha":{i / 10}}}', meta={"task": f"t{g}"},
                    )  # fmt: skip
            yield manifest

    with RolloutProducer(kafka, topic_prefix=prefix) as producer:
        stats = producer.publish(generate())
    assert (stats.rollouts, stats.steps) == (96, 3)
    res = gohelper(
        "verify-rollouts",
        "--brokers",
        kafka,
        "--prefix",
        prefix,
        "--run",
        run,
        "--rollouts",
        "96",
        "--steps",
        "3",
        "--timeout",
        "60s",
    )
    assert res == {"rollouts": 96, "steps": 3, "errors": []}


def test_a_runs_records_land_where_go_puts_them(kafka: str, gohelper: Helper, prefix: str) -> None:
    """librdkafka's default CRC32 partitioner would split a run from the Go stages' outputs."""
    from confluent_kafka import Consumer, TopicPartition

    n = 4
    runs = [f"part-run-{i}" for i in range(12)]
    produce(gohelper, kafka, prefix, "part-setup", 0, partitions=n)  # creates the topics
    want = gohelper("partitions", "--n", str(n), *runs)
    assert len(set(want.values())) > 1
    with RolloutProducer(kafka, topic_prefix=prefix) as producer:
        producer.publish(
            Rollout(run_id=r, step=0, group_id="g", rollout_id="g-r0", stream="mle", artifact="a") for r in runs
        )
    c = Consumer({"bootstrap.servers": kafka, "group.id": f"p-{uuid.uuid4().hex[:8]}", "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(f"{prefix}rollouts.v1", p, 0) for p in range(n)])
        got: dict[str, int] = {}
        eofs = 0
        while eofs < n:
            m = c.poll(10)
            assert m is not None, "no end of the rollouts topic within 10s"
            if m.error():
                eofs += 1
                continue
            got[m.key().decode()] = m.partition()
    finally:
        c.close()
    assert got == want


def test_close_run_end_passes_the_go_decoder(kafka: str, gohelper: Helper, prefix: str) -> None:
    """RewardClient's end-of-run record, as Go reads it: an end-of-run manifest naming the last
    step published, keyed and placed like the run's manifests, byte for byte Go's encoding."""
    run = "e2e-close-run"
    produce(gohelper, kafka, prefix, run, 0, partitions=3)  # creates the topics
    with RewardClient(kafka, run, f"g-{uuid.uuid4().hex[:8]}", topic_prefix=prefix) as client:
        for step in range(3):
            client.publish(step, [["a", "b"], ["c", "d"]])
    assert client.end_record is not None and client.end_record.step == 2
    res = gohelper("verify-rollouts", "--brokers", kafka, "--prefix", prefix, "--run", run,
                   "--rollouts", "12", "--steps", "3", "--end-of-run", "--timeout", "60s")  # fmt: skip
    assert res == {"rollouts": 12, "steps": 3, "end_of_run": 2, "errors": []}
