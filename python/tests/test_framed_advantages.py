"""Advantages records as `wmrl correct` writes them with a schema registry: the Arrow IPC bytes in a
``wmrl.v1.AdvantageBatch``, Confluent-framed (magic byte 0, 4-byte schema id, message-index list),
content-type ``application/x-protobuf; framing=confluent``. The stream reads them as it reads bare
Arrow (tests/test_e2e.py reads ones Go wrote, through Kafka)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from conftest import FakeConsumer
from test_stream import Log, open_stream, step_rows

from wmrl_client import HeaderError, MalformedError, SchemaVersionError, digest_rows
from wmrl_client import contract as c
from wmrl_client.arrow import advantage_arrow
from wmrl_client.wirepb import advantages_pb2

SCHEMA_ID = 0x0102_0304


def wrap(arrow: bytes, schema: str = "wmrl.advantages.v1") -> bytes:
    return advantages_pb2.AdvantageBatch(schema=schema, arrow_ipc=arrow).SerializeToString()


def frame(payload: bytes, index: bytes = b"\x00", schema_id: int = SCHEMA_ID) -> bytes:
    """The Confluent frame; index is the encoded message-index list (b"\\x00": the shorthand for
    [0]; b"\\x02\\x00": count 1, index 0, zig-zag varints)."""
    return b"\x00" + schema_id.to_bytes(4, "big") + index + payload


def reframe(log: Log, content_type: str, index: bytes = b"\x00") -> None:
    """Rewrites every record of log as Go's Names.AdvantageRecords does with a registry."""
    for m in log.msgs:
        schema = dict(m._h)[c.HEADER_SCHEMA].decode()
        v = wrap(m._v, schema)
        m._v = frame(v, index) if content_type == c.CONTENT_TYPE_PROTOBUF_CONFLUENT else v
        m._h = [(k, content_type.encode() if k == c.HEADER_CONTENT_TYPE else h) for k, h in m._h]


@pytest.mark.parametrize(
    ("content_type", "index"),
    [
        (c.CONTENT_TYPE_PROTOBUF_CONFLUENT, b"\x00"),
        (c.CONTENT_TYPE_PROTOBUF_CONFLUENT, b"\x02\x00"),
        (c.CONTENT_TYPE_PROTOBUF, b""),
    ],
)
def test_stream_reads_protobuf_chunks(
    fake_consumer: Callable[..., FakeConsumer], content_type: str, index: bytes
) -> None:
    log = Log()
    rows0, rows1 = step_rows("r1", 0), step_rows("r1", 1, 12)
    log.step("other", 0, step_rows("other", 0))
    log.step("r1", 0, rows0, chunks=3)
    log.step("r1", 1, rows1, chunks=1)
    reframe(log, content_type, index)
    assert all(m._v[:1] == b"\x00" for m in log.msgs) == (content_type == c.CONTENT_TYPE_PROTOBUF_CONFLUENT)
    s, _ = open_stream(fake_consumer, log)
    steps = list(s)
    assert [(x.step, x.num_rows, x.chunks) for x in steps] == [(0, 8, 3), (1, 12, 1)]
    assert steps[0].rows() == rows0
    assert digest_rows(steps[1]) == digest_rows(rows1)
    assert s.stats.skipped_other_runs == 2


def test_advantage_arrow_by_content_type() -> None:
    from client_codecs import encode_advantages

    arrow = encode_advantages(step_rows("r1", 0, 4))
    assert advantage_arrow(arrow, None) == arrow
    assert advantage_arrow(arrow, c.CONTENT_TYPE_ARROW) == arrow
    assert advantage_arrow(wrap(arrow), c.CONTENT_TYPE_PROTOBUF) == arrow
    for index in (b"\x00", b"\x02\x00"):
        assert advantage_arrow(frame(wrap(arrow), index), c.CONTENT_TYPE_PROTOBUF_CONFLUENT) == arrow
    # A schema id of any size: the reader does not check it (a registry's job).
    assert advantage_arrow(frame(wrap(arrow), schema_id=0xFFFF_FFFF), c.CONTENT_TYPE_PROTOBUF_CONFLUENT) == arrow


@pytest.mark.parametrize(
    ("value", "content_type", "err", "match"),
    [
        (b"\x01\x00\x00\x00\x01\x00", c.CONTENT_TYPE_PROTOBUF_CONFLUENT, MalformedError, "not a Confluent frame"),
        (b"\x00\x00\x00", c.CONTENT_TYPE_PROTOBUF_CONFLUENT, MalformedError, "not a Confluent frame"),
        (frame(b"", b"\x02\x02"), c.CONTENT_TYPE_PROTOBUF_CONFLUENT, MalformedError, r"message index \[1\]"),
        (frame(b"", b"\x04\x00\x02"), c.CONTENT_TYPE_PROTOBUF_CONFLUENT, MalformedError, r"message index \[0, 1\]"),
        (frame(b"", b"\x02\x80"), c.CONTENT_TYPE_PROTOBUF_CONFLUENT, MalformedError, "truncated message index"),
        (frame(b"", b"\x20"), c.CONTENT_TYPE_PROTOBUF_CONFLUENT, MalformedError, "message-index count 16"),
        (frame(b"\xff\xff"), c.CONTENT_TYPE_PROTOBUF_CONFLUENT, MalformedError, "AdvantageBatch"),
        (b"\x0a\x03abc", c.CONTENT_TYPE_PROTOBUF, SchemaVersionError, "AdvantageBatch.schema"),
        (b"", "application/json", HeaderError, "content-type"),
    ],
)
def test_bad_protobuf_advantages_refused(value: bytes, content_type: str, err: type, match: str) -> None:
    with pytest.raises(err, match=match):
        advantage_arrow(value, content_type)


def test_framed_record_with_another_message_index_raises(fake_consumer: Callable[..., FakeConsumer]) -> None:
    log = Log()
    log.step("r1", 0, step_rows("r1", 0, 4), chunks=1)
    reframe(log, c.CONTENT_TYPE_PROTOBUF_CONFLUENT, b"\x02\x02")
    s, _ = open_stream(fake_consumer, log)
    with pytest.raises(MalformedError, match="message index") as ei:
        list(s)
    assert any("wmrl.advantages.v1[0]@0" in n for n in getattr(ei.value, "__notes__", []))
