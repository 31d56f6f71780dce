"""RewardClient against a fake producer and consumer: records, alignment, acks and errors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from client_codecs import decode_record
from conftest import FakeConsumer, FakeProducer
from test_arrow import row
from test_stream import Log

from wmrl_client import (
    AdvantageRow,
    BrokerUnavailableError,
    ConflictError,
    FieldError,
    Group,
    RewardClient,
    StepTimeoutError,
    UnknownRunError,
    UnknownTopicError,
    is_anchor,
)

RUN = "r1"


@pytest.fixture
def fakes() -> tuple[list[FakeProducer], list[FakeConsumer], Callable[..., RewardClient]]:
    producers: list[FakeProducer] = []
    consumers: list[FakeConsumer] = []

    def pf(conf: dict[str, object]) -> FakeProducer:
        producers.append(FakeProducer(conf))
        return producers[-1]

    def cf(conf: dict[str, object]) -> FakeConsumer:
        consumers.append(FakeConsumer(conf))
        return consumers[-1]

    def make(**kw: Any) -> RewardClient:
        return RewardClient("b:1", RUN, "trainer", producer_factory=pf, consumer_factory=cf, poll_timeout=0, **kw)

    return producers, consumers, make


def rows_for(step: int, gids: list[str], size: int, order: list[int] | None = None) -> list[AdvantageRow]:
    out = []
    for j, gid in enumerate(gids):
        for i in range(size):
            out.append(replace(row(0), run_id=RUN, step=step, group_id=gid, rollout_id=f"{gid}-r{i}",
                               used=0.1 * i + 0.5 * j, advantage=float(i - 1), weight=1.0 + j))  # fmt: skip
    if order is not None:
        out = [out[k] for k in order]
    return out


def test_publish_writes_rollouts_then_the_manifest_with_the_shared_anchor_hash(fakes: Any) -> None:
    producers, _, make = fakes
    client = make(anchor_fraction=0.5, policy_version="ckpt-9", stream="mle")
    manifest = client.publish(4, [["a", "b"], Group(completions=["c"], group_id="named", prompt="p", stream="s2")])
    sent = producers[-1].produced
    assert [m["topic"] for m in sent] == ["wmrl.rollouts.v1"] * 3 + ["wmrl.steps.v1"]
    assert all(m["key"] == RUN.encode() for m in sent)
    rollouts = [decode_record("wmrl.rollout.v1", m["value"]) for m in sent[:3]]
    assert [(r.group_id, r.rollout_id, r.index, r.artifact) for r in rollouts] == [
        ("s4-g0", "s4-g0-r0", 0, "a"), ("s4-g0", "s4-g0-r1", 1, "b"), ("named", "named-r0", 0, "c")]  # fmt: skip
    assert [r.anchor for r in rollouts] == [is_anchor(RUN, g, 0.5) for g in ("s4-g0", "s4-g0", "named")]
    assert rollouts[2].stream == "s2" and rollouts[0].stream == "mle" and rollouts[0].policy_version == "ckpt-9"
    got = decode_record("wmrl.step.v1", sent[3]["value"])
    assert [(g.group_id, g.size, g.anchor, g.stream) for g in got.groups] == [
        (g.group_id, g.size, g.anchor, g.stream) for g in manifest.groups]  # fmt: skip
    # Publishing again gives the same records but for created_at: the correction consumer
    # counts them as duplicates.
    client.publish(4, [["a", "b"], Group(completions=["c"], group_id="named", prompt="p", stream="s2")])
    again = [decode_record("wmrl.rollout.v1", m["value"]) for m in producers[-1].produced[4:7]]
    assert [replace(r, created_at=None) for r in again] == [replace(r, created_at=None) for r in rollouts]


@pytest.mark.parametrize(
    "groups,err,match",
    [
        ([], ValueError, "at least one group"),
        (["abc"], TypeError, "not a string"),
        ([Group(completions=["a"], group_id="x"), Group(completions=["b"], group_id="x")], ValueError, "twice"),
        ([Group(completions=["a"], group_id="bad id")], FieldError, "group_id"),
        ([[]], FieldError, "size"),
    ],
)
def test_publish_refuses_bad_groups_before_sending(fakes: Any, groups: Any, err: type, match: str) -> None:
    producers, _, make = fakes
    client = make()
    with pytest.raises(err, match=match):
        client.publish(0, groups)
    assert producers[-1].produced == []


def test_wait_aligns_rows_to_the_publish_order_and_acks_earlier_steps(fakes: Any) -> None:
    _, consumers, make = fakes
    client = make()
    client.publish(0, [["a", "b", "c"], ["d", "e", "f"]])
    client.publish(1, [["g", "h", "i"], ["j", "k", "l"]])
    log = Log()
    log.step(RUN, 0, rows_for(0, ["s0-g0", "s0-g1"], 3, order=[5, 3, 0, 4, 1, 2]))
    log.step(RUN, 1, rows_for(1, ["s1-g0", "s1-g1"], 3, order=[1, 0, 2, 3, 4, 5]))
    consumers[-1].queue = list(log.msgs)
    r0 = client.wait(0, timeout=1)
    assert r0.rollout_ids == [f"s0-g{j}-r{i}" for j in range(2) for i in range(3)]
    np.testing.assert_allclose(r0.used, [0.0, 0.1, 0.2, 0.5, 0.6, 0.7])
    np.testing.assert_allclose(r0.weight, [1, 1, 1, 2, 2, 2])
    assert [list(a) for a in r0.grouped("advantage")] == [[-1.0, 0.0, 1.0]] * 2
    assert consumers[-1].commits == []  # nothing acknowledged yet
    r1 = client.wait(1, timeout=1)
    assert consumers[-1].commits, "waiting for step 1 commits step 0"
    assert r1.step == 1 and r1.rollout_ids[0] == "s1-g0-r0"
    r1.ack()
    assert len(consumers[-1].commits) == 2


def test_wait_errors_say_what_happened(fakes: Any) -> None:
    _, consumers, make = fakes
    client = make()
    client.publish(0, [["a", "b"]])
    with pytest.raises(StepTimeoutError, match="step 0 of run r1 not complete .* `wmrl correct`"):
        client.wait(0, timeout=0.05)
    log = Log()
    log.step("other-run", 0, [replace(r, run_id="other-run") for r in rows_for(0, ["s0-g0"], 2)])
    consumers[-1].queue = list(log.msgs)
    with pytest.raises(UnknownRunError, match="runs seen: other-run") as ei:
        client.wait(0, timeout=0.05)
    assert ei.value.runs_seen == ["other-run"]
    log.step(RUN, 0, rows_for(0, ["s0-g0"], 1))  # a row set that is not what was published
    consumers[-1].queue = list(log.msgs[2:])
    with pytest.raises(ConflictError, match="do not match the published rollouts"):
        client.wait(0, timeout=1)


def test_a_later_step_instead_of_the_awaited_one_is_a_clear_error(fakes: Any) -> None:
    _, consumers, make = fakes
    client = make()
    log = Log()
    log.step(RUN, 5, rows_for(5, ["s5-g0"], 2))
    consumers[-1].queue = list(log.msgs)
    with pytest.raises(ConflictError, match="already committed step 3"):
        client.wait(3, timeout=1)
    assert client.wait(5, timeout=1).step == 5  # the later step was kept


def test_missing_topics_and_dead_broker(fakes: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, make = fakes
    monkeypatch.setattr(FakeConsumer, "missing_topics", {"wmrl.steps.v1"})
    with pytest.raises(UnknownTopicError, match="'wmrl.steps.v1' does not exist"):
        make()
    # A real client against a port nobody listens on: an exception within the timeout, no retry loop.
    with pytest.raises(BrokerUnavailableError, match="no Kafka broker at 127.0.0.1:9 answered within 1s"):
        RewardClient("127.0.0.1:9", RUN, "g", connect_timeout=1)


def test_policy_step_and_staleness_columns(fakes: Any) -> None:
    producers, consumers, make = fakes
    client = make()
    client.publish(0, [["a", "b"]])
    manifest = client.publish(3, [["c", "d"], ["e", "f"]], policy_step=1)
    assert manifest.policy_step == 1
    assert decode_record("wmrl.step.v1", producers[-1].produced[-1]["value"]).policy_step == 1
    with pytest.raises(FieldError, match="policy_step"):
        client.publish(4, [["g"]], policy_step=5)
    log = Log()
    log.step(RUN, 0, rows_for(0, ["s0-g0"], 2), chunks=1)
    stale = [replace(r, staleness=2, staleness_ok=True) for r in rows_for(3, ["s3-g0", "s3-g1"], 2)]
    for k in (2, 3):  # the second group masked by --max-staleness 1
        stale[k] = replace(stale[k], mask=False, advantage=0.0, used=0.0, weight=0.0, mask_reason="stale")
    log.step(RUN, 3, stale)
    consumers[-1].queue = list(log.msgs)
    r0 = client.wait(0, timeout=1)
    assert np.isnan(r0.staleness).all() and r0.mask_reason == ["", ""]
    r3 = client.wait(3, timeout=1)
    np.testing.assert_array_equal(r3.staleness, [2, 2, 2, 2])
    assert r3.mask_reason == ["", "", "stale", "stale"]
    assert list(r3.mask) == [True, True, False, False]


def test_client_joins_at_construction_and_passes_configs_through(fakes: Any) -> None:
    """The group join and the producer's metadata happen when the client is built, not inside the
    first wait; consumer_config and producer_config reach librdkafka (with the stream's guards)."""
    producers, consumers, make = fakes
    make(consumer_config={"fetch.wait.max.ms": 20}, producer_config={"linger.ms": 1})
    assert consumers[-1].assigned
    assert consumers[-1].conf["fetch.wait.max.ms"] == 20
    assert producers[-1].conf["linger.ms"] == 1
    with pytest.raises(ValueError, match="isolation.level"):
        make(consumer_config={"isolation.level": "read_uncommitted"})
    with pytest.raises(ValueError, match="idempot"):
        make(producer_config={"enable.idempotence": False})
