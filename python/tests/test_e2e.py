"""End to end against the real broker (WMRL_TEST_KAFKA): the Go side writes a run's advantages,
Python reads exactly those rows; Python publishes rollouts, the strict Go decoders accept them.

The advantages are written by tests/gohelper with the topics builders (one transaction per step,
chunked Arrow payloads, an aborted transaction holding a bogus copy of step 0, and another run's
steps interleaved). The row count and digest Python computes must equal the digest Go computed
over the committed rows; `wmrl correct` and `wmrl digest --topic` will take over these parts.
"""

from __future__ import annotations

import importlib.util
import io
import uuid
from typing import Any, Callable

import pyarrow as pa
import pytest

from conftest import PY_ROOT
from wmrl_client import (
    AdvantageStream,
    GroupManifest,
    Rollout,
    RolloutProducer,
    Step,
    StepManifest,
    digest_and_count,
    is_anchor,
)

pytestmark = pytest.mark.e2e

Helper = Callable[..., dict[str, Any]]


def read_steps(kafka: str, prefix: str, run: str, group: str, want: int, ack: Callable[[Step], bool] = lambda s: True) -> list[Step]:
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
        args += [f"--{k.replace('_', '-')}", str(v)]
    return gohelper(*args)


def test_python_reads_exactly_the_rows_go_committed(kafka: str, gohelper: Helper, prefix: str) -> None:
    run = "e2e-run"
    go = produce(gohelper, kafka, prefix, run, 6, chunk_bytes=4096, other_run="e2e-other", partitions=3)
    assert go["chunks"] > go["steps"], "chunk-bytes should force several chunks per step"
    assert go["aborted_rows"] > 0 and go["other_run_rows"] > 0

    steps = read_steps(kafka, prefix, run, f"g-{uuid.uuid4().hex[:8]}", go["steps"])
    assert [s.step for s in steps] == list(range(go["steps"]))
    assert all(s.chunks > 1 for s in steps)
    digest, rows = digest_and_count(pa.concat_tables([s.table for s in steps]))
    assert rows == go["rows"]
    assert digest == go["digest"]


def test_offsets_committed_only_on_ack(kafka: str, gohelper: Helper, prefix: str) -> None:
    run = "e2e-commit"
    go = produce(gohelper, kafka, prefix, run, 6, chunk_bytes=4096, partitions=1, abort="false")
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
    res = gohelper("verify-rollouts", "--brokers", kafka, "--prefix", prefix, "--run", run, "--rollouts", "96", "--steps", "3", "--timeout", "60s")
    assert res == {"rollouts": 96, "steps": 3, "errors": []}

