"""A trainer that cannot get its run's records says so (issue 40): the group watch of
AdvantageStream against the real broker, and its rules without one."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pytest

from wmrl_client import AdvantageStream
from wmrl_client.membership import Member, group_problems, run_group, run_of_client_id, run_partition, trainer_client_id

Helper = Callable[..., dict[str, Any]]


def test_client_id_names_the_run() -> None:
    assert trainer_client_id("r1") == "wmrl-trainer/r1"
    assert run_of_client_id("wmrl-trainer/r1") == ("r1", True)
    assert run_of_client_id("wmrl-trainer") == ("", True)
    assert run_of_client_id("wmrl-python")[1] is False
    assert run_of_client_id("wmrl-trainer/")[1] is False


def test_run_group_follows_the_topic_prefix() -> None:
    assert run_group("r1") == "wmrl-trainer-r1"
    assert run_group("r1", "wmrl.") == "wmrl-trainer-r1"
    assert run_group("r1", "lab.") == "lab.wmrl-trainer-r1"


def test_group_problems() -> None:
    me = Member("m1", "wmrl-trainer/a", "h1", (0,))
    same = Member("m2", "wmrl-trainer/a", "h2", (1,))
    other = Member("m3", "wmrl-trainer/b", "h3", (1,))
    custom = Member("m4", "my-app", "h4", (1,))
    fix = "wmrl-trainer-a"
    assert group_problems("g", "m1", "t", "a", 1, [me, same], fix) == []  # a trainer of the same run holds it
    got = group_problems("g", "m1", "t", "a", 1, [me, other], fix)
    assert len(got) == 2
    assert "run a's records sit on partition t/1, which group g gave to member wmrl-trainer/b on h3" in got[0]
    assert "group_id='wmrl-trainer-a'" in got[0]
    assert "group g is shared with consumers of other runs: wmrl-trainer/b on h3 (a trainer of run b)" in got[1]
    got = group_problems("g", "m1", "t", "a", 0, [me, custom], fix)  # holds its partition, shares the group
    assert len(got) == 1 and "its run is unknown" in got[0]


@pytest.mark.e2e
def test_shared_group_is_named_within_seconds(
    kafka: str, gohelper: Helper, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    runs = [(f"watch-a{i}", f"watch-b{i}") for i in range(50)]
    run_a, run_b = next((a, b) for a, b in runs if run_partition(a, 2) != run_partition(b, 2))
    want = gohelper("partitions", "--n", "2", run_a, run_b)
    assert want == {run_a: run_partition(run_a, 2), run_b: run_partition(run_b, 2)}  # murmur2 as Go's
    gohelper("produce", "--brokers", kafka, "--prefix", prefix, "--run", run_a, "--steps", "2",
             "--other-run", run_b, "--partitions", "2")  # fmt: skip
    group = f"{prefix}shared"
    topic = f"{prefix}advantages.v1"
    caplog.set_level(logging.WARNING, logger="wmrl_client")
    streams = [AdvantageStream(kafka, r, group, topic_prefix=prefix) for r in (run_a, run_b)]
    got: dict[str, list[int]] = {run_a: [], run_b: []}
    try:
        start = time.monotonic()
        while True:
            for s in streams:
                st = s.next_step(timeout=0.1)
                if st is not None:
                    got[s.run_id].append(st.step)
                    st.ack()
            named = [s for s in streams if s._watch and any("is shared with consumers" in p for p in s._watch.problems)]
            if len(named) == 2:
                break
            assert time.monotonic() - start < 30, f"no shared-group warning within 30 s: {[s._watch.problems for s in streams if s._watch]}"  # noqa: E501
        elapsed = time.monotonic() - start
        for s, other in zip(streams, (run_b, run_a), strict=True):
            assert s._watch is not None
            text = "\n".join(s._watch.problems)
            assert f"wmrl-trainer/{other}" in text
            assert f"group_id={run_group(s.run_id, prefix)!r}" in text
        # Which stream holds which partition is the group's choice: one that holds its run's
        # partition gets its steps, one that does not is told the partition and its holder.
        for s, other in zip(streams, (run_b, run_a), strict=True):
            assert s._watch is not None
            mine = run_partition(s.run_id, 2)
            held = {tp.partition for tp in s._consumer.assignment()}
            while True:
                st = s.next_step(timeout=0.1)
                if st is not None:
                    got[s.run_id].append(st.step)
                    st.ack()
                text = "\n".join(s._watch.problems)
                if mine in held and len(got[s.run_id]) == 2:
                    break
                if mine not in held and f"records sit on partition {topic}/{mine}" in text:
                    assert f"member wmrl-trainer/{other}" in text, text
                    break
                assert time.monotonic() - start < 60, (s.run_id, held, got, text)
            print(f"run {s.run_id}: holds {sorted(held)}, its records on {mine}, steps {got[s.run_id]}")
        warned = [r.getMessage() for r in caplog.records if "is shared with consumers of other runs" in r.getMessage()]
        assert len(warned) >= 2, warned
        print(f"both trainers named the shared group {elapsed:.1f}s after start")
    finally:
        for s in streams:
            s.close()
