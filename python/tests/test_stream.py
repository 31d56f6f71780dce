"""AdvantageStream against a fake consumer: reassembly, checks, commit semantics, conversions."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from client_codecs import encode_advantages
from conftest import FakeConsumer, FakeMessage
from test_arrow import row

from wmrl_client import (
    AdvantageRow,
    AdvantageStream,
    ConflictError,
    HeaderError,
    KafkaOptions,
    MalformedError,
    MaskedStepError,
    SchemaVersionError,
    WmrlError,
    digest_rows,
)
from wmrl_client.producer import record_headers
from wmrl_client.stream import DELIVERED_MEMORY, ChunkMismatchError, StaleStepError, parse_chunk

TOPIC = "wmrl.advantages.v1"


def step_rows(run: str, step: int, n: int = 8) -> list[AdvantageRow]:
    return [replace(row(i), run_id=run, step=step) for i in range(n)]


class Log:
    """Builds a partition's records the way Go's topics.Names.AdvantageRecords frames them."""

    def __init__(self) -> None:
        self.msgs: list[FakeMessage] = []
        self.next: dict[int, int] = {}

    def add(self, value: bytes, headers: list[tuple[str, bytes]], partition: int = 0) -> int:
        off = self.next.get(partition, 0)
        self.msgs.append(FakeMessage(value, headers, off, partition=partition, topic=TOPIC))
        self.next[partition] = off + 1
        return off

    def marker(self, partition: int = 0) -> None:
        """A transaction marker takes an offset but is never delivered."""
        self.next[partition] = self.next.get(partition, 0) + 1

    def step(
        self, run: str, step: int, rows: list[AdvantageRow], chunks: int = 2, partition: int = 0, **hdr: str
    ) -> list[int]:
        size = -(-len(rows) // chunks)
        parts = [rows[i * size : (i + 1) * size] for i in range(chunks)]
        offs = []
        for i, part in enumerate(parts):
            schema = "wmrl.advantages.v2" if any(r.uses_v2() for r in rows) else "wmrl.advantages.v1"
            hs = record_headers(schema, run, step)
            hs += [("wmrl-chunk", f"{i}/{chunks}".encode()), ("wmrl-rows", str(len(part)).encode())]
            for k, v in hdr.items():
                hs.append((k.replace("_", "-"), v.encode()))
            offs.append(self.add(encode_advantages(part), hs, partition))
        self.marker(partition)
        return offs


def open_stream(factory: Callable[..., FakeConsumer], log: Log, **kw: Any) -> tuple[AdvantageStream, FakeConsumer]:
    s = AdvantageStream("127.0.0.1:1", "r1", "trainer", consumer_factory=factory, idle_timeout=0, poll_timeout=0, **kw)
    consumer = factory.made[-1]  # type: ignore[attr-defined]
    consumer.queue = list(log.msgs)
    return s, consumer


def test_consumer_config_has_the_contract_settings(fake_consumer: Callable[..., FakeConsumer]) -> None:
    s = AdvantageStream(
        "a:1,b:2",
        "r1",
        "trainer",
        consumer_factory=fake_consumer,
        sasl_mechanism="scram-sha-512",
        sasl_user="u",
        sasl_password="p",
        tls=True,
    )
    conf = s.config
    assert conf["bootstrap.servers"] == "a:1,b:2"
    assert conf["enable.auto.commit"] is False
    assert conf["isolation.level"] == "read_committed"
    assert conf["group.id"] == "trainer"
    assert conf["security.protocol"] == "SASL_SSL"
    assert conf["sasl.mechanism"] == "SCRAM-SHA-512"
    assert fake_consumer.made[-1].topics == ["wmrl.advantages.v1"]  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="commit semantics"):
        AdvantageStream("a:1", "r1", "g", consumer_factory=fake_consumer, consumer_config={"enable.auto.commit": True})
    with pytest.raises(ValueError, match="run_id"):
        AdvantageStream("a:1", "r/1", "g", consumer_factory=fake_consumer)
    with pytest.raises(ValueError, match="group_id"):
        AdvantageStream("a:1", "r1", "", consumer_factory=fake_consumer)
    s2 = AdvantageStream(
        None, "r1", "g", kafka=KafkaOptions(brokers=["k:9"], topic_prefix="lab."), consumer_factory=fake_consumer
    )
    assert s2.topic == "lab.advantages.v1" and s2.config["bootstrap.servers"] == "k:9"


def test_steps_reassembled_from_chunks_and_other_runs_skipped(fake_consumer: Callable[..., FakeConsumer]) -> None:
    log = Log()
    rows0, rows1 = step_rows("r1", 0), step_rows("r1", 1, 12)
    log.step("other", 0, step_rows("other", 0))
    log.step("r1", 0, rows0, chunks=3)
    log.step("r1", 1, rows1, chunks=1)
    s, _ = open_stream(fake_consumer, log)
    steps = list(s)
    assert [(x.step, x.num_rows, x.chunks) for x in steps] == [(0, 8, 3), (1, 12, 1)]
    assert steps[0].rows() == rows0
    assert digest_rows(steps[1]) == digest_rows(rows1) == steps[1].digest()
    assert s.stats.skipped_other_runs == 2 and s.stats.steps == 2 and s.stats.rows == 20


def test_interleaved_steps_across_partitions(fake_consumer: Callable[..., FakeConsumer]) -> None:
    log = Log()
    a, b = step_rows("r1", 0), step_rows("r1", 1)

    def h(st: int, i: int, n: int, k: int) -> list[tuple[str, bytes]]:
        hs = record_headers("wmrl.advantages.v1", "r1", st)
        return hs + [("wmrl-chunk", f"{i}/{n}".encode()), ("wmrl-rows", str(k).encode())]

    log.add(encode_advantages(a[:4]), h(0, 0, 2, 4), partition=0)
    log.add(encode_advantages(b[:4]), h(1, 0, 2, 4), partition=1)
    log.add(encode_advantages(b[4:]), h(1, 1, 2, 4), partition=1)
    log.add(encode_advantages(a[4:]), h(0, 1, 2, 4), partition=0)
    s, _ = open_stream(fake_consumer, log)
    got = list(s)
    assert [x.step for x in got] == [0, 1]  # step order, though step 1 completed first
    assert got[0].rows() == a and got[1].rows() == b


def test_ack_commits_below_lowest_unacked(fake_consumer: Callable[..., FakeConsumer]) -> None:
    log = Log()
    log.add(b"", [("wmrl-schema", b"wmrl.advantages.v1"), ("wmrl-run", b"other")])  # offset 0, another run
    o0 = log.step("r1", 0, step_rows("r1", 0))  # 1, 2 (+ marker 3)
    o1 = log.step("r1", 1, step_rows("r1", 1))  # 4, 5 (+ marker 6)
    o2 = log.step("r1", 2, step_rows("r1", 2))  # 7, 8
    assert (o0, o1, o2) == ([1, 2], [4, 5], [7, 8])
    s, consumer = open_stream(fake_consumer, log)
    steps = list(s)
    assert consumer.commits == []  # nothing is committed before an ack
    steps[1].ack()
    assert consumer.asynchronous is False
    assert consumer.committed_offsets() == {(TOPIC, 0): 1}  # step 0 still holds offset 1
    steps[1].ack()  # idempotent
    assert len(consumer.commits) == 1
    steps[0].ack()
    assert consumer.committed_offsets() == {(TOPIC, 0): 7}  # step 2 holds 7
    steps[2].ack()
    assert consumer.committed_offsets() == {(TOPIC, 0): 9}
    assert all(x.acked for x in steps)
    assert s.pending == {"incomplete": [], "waiting": [], "unacked": []}


def test_async_commit(fake_consumer: Callable[..., FakeConsumer]) -> None:
    log = Log()
    log.step("r1", 0, step_rows("r1", 0))
    s, consumer = open_stream(fake_consumer, log, async_commit=True)
    (st,) = list(s)
    st.ack()
    assert consumer.asynchronous is True and consumer.committed_offsets() == {(TOPIC, 0): 2}
    assert callable(s.config["on_commit"])


def test_incomplete_step_holds_commit_and_later_steps(fake_consumer: Callable[..., FakeConsumer]) -> None:
    log = Log()
    rows = step_rows("r1", 0)
    h = record_headers("wmrl.advantages.v1", "r1", 0) + [("wmrl-chunk", b"0/2"), ("wmrl-rows", b"4")]
    log.add(encode_advantages(rows[:4]), h)  # 0: chunk 0/2 of step 0, chunk 1 not yet written
    log.step("r1", 1, step_rows("r1", 1))  # 1, 2
    s, consumer = open_stream(fake_consumer, log)
    assert list(s) == []  # step 1 is complete but waits for step 0, as Go's Assembler does
    assert s.pending == {"incomplete": [0], "waiting": [1], "unacked": []}
    consumer.queue = [
        FakeMessage(encode_advantages(rows[4:]), h[:4] + [("wmrl-chunk", b"1/2"), ("wmrl-rows", b"4")], 4, topic=TOPIC)
    ]
    st0, st1 = list(s)
    assert (st0.step, st1.step) == (0, 1) and st0.rows() == rows
    st1.ack()
    assert consumer.committed_offsets() == {(TOPIC, 0): 0}  # offset 0 is still needed by step 0
    st0.ack()
    assert consumer.committed_offsets() == {(TOPIC, 0): 5}


def test_max_buffered_steps_abandons_the_blocking_step(fake_consumer: Callable[..., FakeConsumer]) -> None:
    log = Log()
    h = record_headers("wmrl.advantages.v1", "r1", 0) + [("wmrl-chunk", b"0/2"), ("wmrl-rows", b"4")]
    log.add(encode_advantages(step_rows("r1", 0)[:4]), h)  # step 0 never completes
    for i in range(1, 4):
        log.step("r1", i, step_rows("r1", i))
    s, consumer = open_stream(fake_consumer, log, max_buffered_steps=2)
    got = list(s)
    assert [x.step for x in got] == [1, 2, 3]  # the third waiting step gives up on step 0
    assert s.stats.abandoned_steps == 1 and s.pending["incomplete"] == []
    for x in got:
        x.ack()
    assert consumer.committed_offsets() == {(TOPIC, 0): log.next[0] - 1}  # past the last record (not its marker)


def test_done_steps_memory_is_bounded(fake_consumer: Callable[..., FakeConsumer]) -> None:
    log = Log()
    for i in range(DELIVERED_MEMORY + 3):
        log.step("r1", i, step_rows("r1", i, 1), chunks=1)
    log.step("r1", DELIVERED_MEMORY + 2, step_rows("r1", DELIVERED_MEMORY + 2, 1), chunks=1)  # recent: duplicate
    log.step("r1", 0, step_rows("r1", 0, 1), chunks=1)  # forgotten: stale
    s, _ = open_stream(fake_consumer, log)
    it = iter(s)
    got = [next(it).step for _ in range(DELIVERED_MEMORY + 3)]
    assert got == list(range(DELIVERED_MEMORY + 3))
    assert len(s._sums) == DELIVERED_MEMORY
    with pytest.raises(StaleStepError, match="already delivered"):
        next(it)
    assert s.stats.duplicate_chunks == 1


def test_break_keeps_unread_backlog(fake_consumer: Callable[..., FakeConsumer]) -> None:
    log = Log()
    for i in range(3):
        log.step("r1", i, step_rows("r1", i))
    s, _ = open_stream(fake_consumer, log, batch_size=100)
    for st in s:
        first = st
        break
    rest = list(s)
    assert first.step == 0 and [x.step for x in rest] == [1, 2]


def test_duplicate_step_and_chunk_skipped(fake_consumer: Callable[..., FakeConsumer]) -> None:
    log = Log()
    log.step("r1", 0, step_rows("r1", 0))
    log.step("r1", 0, step_rows("r1", 0))
    s, _ = open_stream(fake_consumer, log)
    assert [x.step for x in s] == [0]
    assert s.stats.duplicate_chunks == 2


def _mutated(rows: list[AdvantageRow]) -> list[AdvantageRow]:
    return [replace(rows[0], advantage=rows[0].advantage + 0.5), *rows[1:]]


@pytest.mark.parametrize("delivered", [True, False])
def test_differing_copy_of_a_chunk_is_a_mismatch(fake_consumer: Callable[..., FakeConsumer], delivered: bool) -> None:
    """Go's ErrChunkMismatch: a copy is a duplicate only if its bytes are the same."""
    rows = step_rows("r1", 0)
    log = Log()
    base = record_headers("wmrl.advantages.v1", "r1", 0)
    log.add(encode_advantages(rows[:4]), base + [("wmrl-chunk", b"0/2"), ("wmrl-rows", b"4")])
    if delivered:
        log.add(encode_advantages(rows[4:]), base + [("wmrl-chunk", b"1/2"), ("wmrl-rows", b"4")])
    log.add(encode_advantages(_mutated(rows[:4])), base + [("wmrl-chunk", b"0/2"), ("wmrl-rows", b"4")])
    s, _ = open_stream(fake_consumer, log)
    it = iter(s)
    if delivered:
        assert next(it).step == 0
    with pytest.raises(ChunkMismatchError, match="differs from"):
        next(it)
    assert s.stats.duplicate_chunks == 0


@pytest.mark.parametrize(
    "mutate,err,match",
    [
        (lambda h: [x for x in h if x[0] != "wmrl-schema"], HeaderError, "no wmrl-schema"),
        (lambda h: h + [("wmrl-schema", b"wmrl.advantages.v3")], SchemaVersionError, "wmrl.advantages.v3"),
        (lambda h: [x for x in h if x[0] != "wmrl-run"], HeaderError, "no wmrl-run"),
        (lambda h: [x for x in h if x[0] != "wmrl-chunk"], HeaderError, "no wmrl-chunk"),
        (lambda h: h + [("wmrl-chunk", b"01/2")], HeaderError, "leading zero"),
        (lambda h: h + [("wmrl-chunk", b"2/2")], HeaderError, "below the count"),
        (lambda h: h + [("wmrl-step", b"+1")], HeaderError, "non-digit"),
        (lambda h: h + [("wmrl-rows", b"3")], ConflictError, "wmrl-rows says 3"),
        (lambda h: h + [("wmrl-step", b"7")], ConflictError, "another run or step"),
        (lambda h: h + [("content-type", b"application/json")], HeaderError, "content-type"),
    ],
)
def test_bad_records_raise(
    fake_consumer: Callable[..., FakeConsumer], mutate: Callable[[list[Any]], list[Any]], err: type, match: str
) -> None:
    log = Log()
    log.step("r1", 0, step_rows("r1", 0, 4), chunks=1)
    log.msgs[0]._h = mutate(log.msgs[0]._h)
    s, _ = open_stream(fake_consumer, log)
    with pytest.raises(err, match=match) as ei:
        list(s)
    assert any("wmrl.advantages.v1[0]@0" in n for n in getattr(ei.value, "__notes__", []))


def test_arrow_schema_version_mismatch_is_clear(fake_consumer: Callable[..., FakeConsumer]) -> None:
    import pyarrow as pa
    import pyarrow.ipc as ipc
    from client_codecs import table_from_rows

    t = table_from_rows(step_rows("r1", 0, 2)).replace_schema_metadata({"wmrl-schema": "wmrl.advantages.v9"})
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    log = Log()
    log.add(
        sink.getvalue().to_pybytes(),
        record_headers("wmrl.advantages.v1", "r1", 0) + [("wmrl-chunk", b"0/1"), ("wmrl-rows", b"2")],
    )
    s, _ = open_stream(fake_consumer, log)
    with pytest.raises(SchemaVersionError, match="wmrl.advantages.v9") as ei:
        list(s)
    assert ei.value.want == "wmrl.advantages.v1 or wmrl.advantages.v2"


def test_chunk_count_conflict(fake_consumer: Callable[..., FakeConsumer]) -> None:
    log = Log()
    rows = step_rows("r1", 0, 4)
    base = record_headers("wmrl.advantages.v1", "r1", 0)
    log.add(encode_advantages(rows[:2]), base + [("wmrl-chunk", b"0/2"), ("wmrl-rows", b"2")])
    log.add(encode_advantages(rows[2:]), base + [("wmrl-chunk", b"1/3"), ("wmrl-rows", b"2")])
    s, _ = open_stream(fake_consumer, log)
    with pytest.raises(ConflictError, match="earlier chunks said 2"):
        list(s)


def test_invalid_rows_across_chunks_raise(fake_consumer: Callable[..., FakeConsumer]) -> None:
    rows = step_rows("r1", 0, 4)
    rows[3] = replace(rows[3], rollout_id=rows[0].rollout_id)  # the same rollout in two chunks
    log = Log()
    log.step("r1", 0, rows, chunks=2)
    s, _ = open_stream(fake_consumer, log)
    with pytest.raises(Exception, match="duplicate of row 0"):
        list(s)


def test_poison_record_is_never_committed_past(fake_consumer: Callable[..., FakeConsumer]) -> None:
    log = Log()
    log.step("r1", 0, step_rows("r1", 0, 4), chunks=1)  # 0
    log.add(
        b"garbage", record_headers("wmrl.advantages.v1", "r1", 1) + [("wmrl-chunk", b"0/1"), ("wmrl-rows", b"1")]
    )  # 2
    log.step("r1", 2, step_rows("r1", 2, 4), chunks=1)  # 3
    s, consumer = open_stream(fake_consumer, log)
    it = iter(s)
    first = next(it)
    with pytest.raises(Exception, match="malformed arrow"):
        next(it)
    rest = list(s)
    assert [x.step for x in rest] == [2]
    first.ack()
    rest[0].ack()
    assert consumer.committed_offsets() == {(TOPIC, 0): 2}


def test_on_invalid_skip(fake_consumer: Callable[..., FakeConsumer]) -> None:
    log = Log()
    log.add(b"garbage", record_headers("wmrl.advantages.v1", "r1", 1) + [("wmrl-chunk", b"0/1"), ("wmrl-rows", b"1")])
    log.step("r1", 2, step_rows("r1", 2, 4), chunks=1)
    s, consumer = open_stream(fake_consumer, log, on_invalid="skip")
    (st,) = list(s)
    assert s.stats.skipped_invalid == 1
    st.ack()
    assert consumer.committed_offsets() == {(TOPIC, 0): 2}  # past the skipped record and step 2


def test_on_invalid_skip_skips_hostile_arrow(fake_consumer: Callable[..., FakeConsumer]) -> None:
    """Payloads pyarrow itself chokes on (a field name that is not UTF-8, a truncated stream) are
    MalformedError: skipped in skip mode, raised as such by default."""
    good = encode_advantages(step_rows("r1", 1, 4))
    i = good.find(b"rollout_id")
    hostile = [
        good[:i] + b"\xff\xfe" + good[i + 2 :],  # UnicodeDecodeError inside pyarrow
        good[: len(good) // 2],
    ]
    hs = record_headers("wmrl.advantages.v1", "r1", 1) + [("wmrl-chunk", b"0/1"), ("wmrl-rows", b"4")]
    for bad in hostile:
        log = Log()
        log.add(bad, hs)
        log.step("r1", 2, step_rows("r1", 2, 4), chunks=1)
        s, _ = open_stream(fake_consumer, log, on_invalid="skip")
        assert [st.step for st in s] == [2]
        assert s.stats.skipped_invalid == 1
        s, _ = open_stream(fake_consumer, log)
        with pytest.raises(WmrlError):
            list(s)
    log = Log()
    log.add(hostile[0], hs)
    s, _ = open_stream(fake_consumer, log)
    with pytest.raises(MalformedError, match="UnicodeDecodeError"):
        list(s)


def test_wait_returns_as_soon_as_a_record_is_there(fake_consumer: Callable[..., FakeConsumer]) -> None:
    """The stream waits for one record, then drains the fetched queue without blocking: librdkafka's
    consume(N, t) would return only at N records or after t."""
    log = Log()
    log.step("r1", 0, step_rows("r1", 0, 4), chunks=2)
    s = AdvantageStream("127.0.0.1:1", "r1", "trainer", consumer_factory=fake_consumer, poll_timeout=5)
    consumer = fake_consumer.made[-1]  # type: ignore[attr-defined]
    consumer.queue = list(log.msgs)
    st = s.next_step(timeout=5)
    assert st is not None and st.step == 0
    assert consumer.consume_calls[0][0] == 1 and consumer.consume_calls[0][1] > 4
    assert consumer.consume_calls[1] == (s._batch_size - 1, 0)


def test_revoke_drops_state_and_late_ack_commits_nothing(fake_consumer: Callable[..., FakeConsumer]) -> None:
    log = Log()
    log.step("r1", 0, step_rows("r1", 0, 4), chunks=1)
    s, consumer = open_stream(fake_consumer, log)
    (st,) = list(s)

    class P:
        topic, partition = TOPIC, 0

    consumer.callbacks["on_revoke"](consumer, [P()])
    assert consumer.committed_offsets() == {(TOPIC, 0): 0}  # the unacked step held offset 0
    st.ack()
    assert len(consumer.commits) == 1
    assert s.pending == {"incomplete": [], "waiting": [], "unacked": []}


def test_to_numpy_and_to_torch_without_torch(
    fake_consumer: Callable[..., FakeConsumer], monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = step_rows("r1", 0, 4)
    rows[1] = replace(rows[1], predicted_ok=False, predicted=0.0, source="world_model", mask=False, advantage=0.0)
    log = Log()
    log.step("r1", 0, rows, chunks=1)
    s, _ = open_stream(fake_consumer, log)
    (st,) = list(s)
    a = st.to_numpy()
    assert a["advantage"].dtype == np.float64 and a["advantage"].shape == (4,)
    assert a["mask"].dtype == np.bool_ and list(a["mask"]) == [True, False, True, True]
    assert np.isnan(a["predicted"][1]) and list(a["predicted_ok"]) == [True, False, True, True]
    assert a["rollout_id"].dtype == object
    assert set(st.to_numpy(["weight"])) == {"weight"}
    with pytest.raises(KeyError):
        st.to_numpy(["nope"])
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match=r"pip install 'wmrl-client\[torch\]'"):
        st.to_torch()


@pytest.mark.torch
def test_to_torch_when_installed(fake_consumer: Callable[..., FakeConsumer]) -> None:
    torch = pytest.importorskip("torch")
    log = Log()
    log.step("r1", 0, step_rows("r1", 0, 4), chunks=1)
    s, _ = open_stream(fake_consumer, log)
    (st,) = list(s)
    t = st.to_torch(float_dtype=torch.float32)
    assert t["advantage"].dtype == torch.float32 and t["mask"].dtype == torch.bool
    assert t["calibration_version"].dtype == torch.int64
    with pytest.raises(TypeError):
        st.to_torch(["rollout_id"])


def test_parse_chunk() -> None:
    assert parse_chunk("0/1") == (0, 1)
    assert parse_chunk("3/4") == (3, 4)
    for bad in ("4/4", "01/2", "-1/2", "1/0", "x", "1/", "/1", " 1/2", "999999999999999999/1000000000000000000"):
        with pytest.raises(HeaderError):
            parse_chunk(bad)


def masked_rows(run: str, step: int, n: int, masked: int) -> list[AdvantageRow]:
    """Rows of a step whose first `masked` rows have no usable reward (the world model failed)."""
    rows = step_rows(run, step, n)
    for k in range(masked):
        rows[k] = replace(
            rows[k], predicted_ok=False, predicted=0.0, calibrated=0.0, used=0.0, source="",
            mask=False, advantage=0.0, weight=0.0,
        )  # fmt: skip
    return rows


@pytest.mark.parametrize(
    ("on_masked", "masked", "raises", "warnings"),
    [
        ("warn", 0, False, 0),
        ("warn", 3, False, 1),
        ("warn", 8, False, 1),
        ("raise", 3, False, 1),
        ("raise", 8, True, 1),
    ],
)
def test_masked_rows_warned_and_fully_masked_step_can_raise(
    fake_consumer: Callable[..., FakeConsumer],
    caplog: pytest.LogCaptureFixture,
    on_masked: str,
    masked: int,
    raises: bool,
    warnings: int,
) -> None:
    log = Log()
    log.step("r1", 0, masked_rows("r1", 0, 8, masked))
    s, _ = open_stream(fake_consumer, log, on_masked=on_masked)
    with caplog.at_level("WARNING", logger="wmrl_client"):
        if raises:
            with pytest.raises(MaskedStepError) as ei:
                list(s)
            assert ei.value.step.step == 0 and ei.value.reason == "masked-step"
            ei.value.step.ack()
        else:
            assert [st.step for st in s] == [0]
    got = [r.getMessage() for r in caplog.records if "rows masked" in r.getMessage()]
    assert len(got) == warnings
    if warnings:
        assert f"step 0: {masked} of 8 rows masked" in got[0]
    assert s.stats.masked_rows == masked


def test_on_masked_checked(fake_consumer: Callable[..., FakeConsumer]) -> None:
    with pytest.raises(ValueError, match="on_masked"):
        AdvantageStream("a:1", "r1", "g", consumer_factory=fake_consumer, on_masked="ignore")  # type: ignore[arg-type]
