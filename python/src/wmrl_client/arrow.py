"""Advantage batches as Arrow IPC streams (topics/arrow.go), read and written with pyarrow.

Reading is as strict as Go's ``topics.DecodeAdvantages``: the schema metadata must carry
``wmrl-schema=wmrl.advantages.v1`` or ``wmrl.advantages.v2`` (else SchemaVersionError), the
columns must match ADVANTAGE_SCHEMA or ADVANTAGE_SCHEMA_V2 (v1 plus ``staleness`` and
``mask_reason``) by name, order and type (a non-nullable column may be declared nullable, as
pyarrow does by default, but must hold no nulls), the stream holds at least one batch and nothing
after its end, and every row must validate. Row validation is vectorised; the first bad row is
then re-checked with the scalar rules so the error names the same field and value Go would.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from . import contract as c
from .digest import rows_from_table
from .errors import (
    CONFLICT,
    MALFORMED,
    FieldError,
    HeaderError,
    MalformedError,
    SchemaVersionError,
    TooLargeError,
    WmrlError,
)

ADVANTAGE_SCHEMA: pa.Schema = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("stream", pa.string(), nullable=False),
        pa.field("step", pa.int64(), nullable=False),
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("rollout_id", pa.string(), nullable=False),
        pa.field("policy_version", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("predicted", pa.float64(), nullable=True),
        pa.field("calibrated", pa.float64(), nullable=False),
        pa.field("executed", pa.float64(), nullable=True),
        pa.field("used", pa.float64(), nullable=False),
        pa.field("advantage", pa.float64(), nullable=False),
        pa.field("weight", pa.float64(), nullable=False),
        pa.field("mask", pa.bool_(), nullable=False),
        pa.field("calibration_version", pa.uint64(), nullable=False),
    ],
    metadata={c.ARROW_SCHEMA_KEY: c.SCHEMA_ADVANTAGES},
)

# v1 plus staleness (null when unknown) and mask_reason ("" for none): topics.AdvantageSchemaV2.
ADVANTAGE_SCHEMA_V2: pa.Schema = pa.schema(
    [
        *ADVANTAGE_SCHEMA,
        pa.field("staleness", pa.int64(), nullable=True),
        pa.field("mask_reason", pa.string(), nullable=False),
    ],
    metadata={c.ARROW_SCHEMA_KEY: c.SCHEMA_ADVANTAGES_V2},
)


def schema_for(schema_id: str) -> pa.Schema:
    """The Arrow schema of an advantage schema id."""
    return ADVANTAGE_SCHEMA_V2 if schema_id == c.SCHEMA_ADVANTAGES_V2 else ADVANTAGE_SCHEMA


def check_schema(schema: pa.Schema, where: str = "") -> pa.Schema:
    """Refuse a batch schema that is not v1 or v2 with exactly its columns; return the wmrl schema."""
    md = schema.metadata or {}
    got = md.get(c.ARROW_SCHEMA_KEY.encode())
    if got is None:
        raise SchemaVersionError(
            "advantages",
            None,
            c.SCHEMA_ADVANTAGES,
            f"Arrow schema metadata has no {c.ARROW_SCHEMA_KEY!r} key" + (f"; {where}" if where else ""),
        )
    got_s = got.decode("utf-8", "replace")
    if got_s not in c.ADVANTAGE_SCHEMAS:
        raise SchemaVersionError(
            "advantages", got_s, " or ".join(c.ADVANTAGE_SCHEMAS), where or "Arrow schema metadata"
        )
    wmrl = schema_for(got_s)
    if len(schema) != len(wmrl):
        raise MalformedError("arrow", f"advantages: {len(schema)} columns, want {len(wmrl)} for {got_s}")
    for i, (have, want) in enumerate(zip(schema, wmrl, strict=True)):
        if have.name != want.name:
            raise MalformedError("arrow", f"advantages: column {i} is {have.name!r}, want {want.name!r}")
        if not have.type.equals(want.type):
            raise FieldError("advantages", want.name, str(have.type), f"wrong Arrow type, want {want.type}", MALFORMED)
        if want.nullable and not have.nullable:
            raise FieldError("advantages", want.name, None, "column must be nullable", MALFORMED)
    return wmrl


def advantage_arrow(value: bytes, content_type: str | None, where: str = "advantages") -> bytes:
    """The Arrow IPC stream of an advantages record's value, chosen by its content-type as Go's
    ``topics.Names.AdvantageArrow`` does: the value itself (``application/vnd.apache.arrow.stream``
    or no content-type), or the ``arrow_ipc`` of the ``wmrl.v1.AdvantageBatch`` it holds, bare
    (``application/x-protobuf``) or behind a Confluent frame (``…; framing=confluent``: magic byte
    0, a 4-byte schema id, the message-index list, which must be [0]). The schema id is not
    checked: that is a registry's job, and the message behind the frame is complete. Parsing the
    wrapper needs the ``protobuf`` package (``pip install 'wmrl-client[protobuf]'``).
    """
    check_advantage_content_type(content_type, where)
    if content_type is None or content_type == c.CONTENT_TYPE_ARROW:
        return value
    if content_type == c.CONTENT_TYPE_PROTOBUF_CONFLUENT:
        index, value = _skip_confluent_frame(value, where)
        if index != [0]:
            raise MalformedError("protobuf", f"{where}: message index {index}, want [0] (wmrl.v1.AdvantageBatch)")
    if len(value) > c.MAX_ADVANTAGE_BYTES + 1024:
        raise TooLargeError(f"{where}: {len(value)} bytes exceeds the {c.MAX_ADVANTAGE_BYTES} byte limit")
    try:
        from google.protobuf.message import DecodeError

        from .wirepb import advantages_pb2
    except ImportError as e:
        raise ImportError(
            f"{where}: a Protobuf advantages record needs the protobuf package: pip install 'wmrl-client[protobuf]'"
        ) from e
    m = advantages_pb2.AdvantageBatch()
    try:
        m.ParseFromString(bytes(value))
    except DecodeError as e:
        raise MalformedError("protobuf", f"{where}: wmrl.v1.AdvantageBatch: {e}") from None
    if m.schema not in c.ADVANTAGE_SCHEMAS:
        want = " or ".join(c.ADVANTAGE_SCHEMAS)
        raise SchemaVersionError("advantages", m.schema, want, f"{where}: AdvantageBatch.schema")
    return m.arrow_ipc


_ADVANTAGE_CONTENT_TYPES = (c.CONTENT_TYPE_ARROW, c.CONTENT_TYPE_PROTOBUF, c.CONTENT_TYPE_PROTOBUF_CONFLUENT)


def check_advantage_content_type(content_type: str | None, where: str = "advantages") -> None:
    """HeaderError unless content_type is absent or one advantage_arrow reads."""
    if content_type is not None and content_type not in _ADVANTAGE_CONTENT_TYPES:
        want = ", ".join(repr(t) for t in _ADVANTAGE_CONTENT_TYPES)
        raise HeaderError(f"{where}: {c.HEADER_CONTENT_TYPE} {content_type!r}, want one of {want}")


def _skip_confluent_frame(b: bytes, where: str) -> tuple[list[int], bytes]:
    """The message-index list ([0] for the shorthand of a count 0) and the message behind a
    Confluent Protobuf frame: magic byte 0, 4-byte schema id, zig-zag varints (count, indexes)."""
    if len(b) < 5 or b[0] != 0:
        raise MalformedError("protobuf", f"{where}: not a Confluent frame (want magic byte 0 and a 4-byte schema id)")
    pos = 5

    def varint() -> int:
        nonlocal pos
        u = 0
        for i in range(10):
            if pos >= len(b):
                break
            byte = b[pos]
            pos += 1
            u |= (byte & 0x7F) << (7 * i)
            if byte < 0x80:
                return (u >> 1) ^ -(u & 1)
        raise MalformedError("protobuf", f"{where}: Confluent frame: truncated message index")

    count = varint()
    if count < 0 or count > 8:
        raise MalformedError("protobuf", f"{where}: Confluent frame: message-index count {count}")
    index = [varint() for _ in range(count)]
    return index or [0], b[pos:]


def decode_advantages(payload: bytes | bytearray | memoryview | pa.Buffer, *, validate: bool = True) -> pa.Table:
    """Strictly decode one Arrow IPC stream of advantage rows into a Table of its schema (v1 or v2).

    Every failure is a WmrlError: pyarrow's own errors on hostile bytes (UnicodeDecodeError from a
    field name that is not UTF-8, ValueError, IndexError, ...) are wrapped as MalformedError, so a
    caller that skips malformed records (``on_invalid="skip"``) skips them all.
    """
    try:
        return _decode_advantages(payload, validate)
    except WmrlError:
        raise
    except (UnicodeError, ValueError, TypeError, KeyError, IndexError, OverflowError, pa.ArrowException, OSError) as e:
        raise MalformedError("arrow", f"advantages: {type(e).__name__}: {e}") from None


def _decode_advantages(payload: bytes | bytearray | memoryview | pa.Buffer, validate: bool) -> pa.Table:
    size = payload.size if isinstance(payload, pa.Buffer) else len(payload)
    if size > c.MAX_ADVANTAGE_BYTES:
        raise TooLargeError(f"advantages: {size} bytes exceeds the {c.MAX_ADVANTAGE_BYTES} byte limit")
    src = pa.BufferReader(payload if isinstance(payload, pa.Buffer) else pa.py_buffer(payload))
    try:
        reader = ipc.open_stream(src)
    except (pa.ArrowException, OSError) as e:
        raise MalformedError("arrow", f"advantages: {e}") from None
    wmrl = check_schema(reader.schema)
    try:
        batches = list(reader)
    except (pa.ArrowException, OSError) as e:
        raise MalformedError("arrow", f"advantages: {e}") from None
    if not batches:
        raise MalformedError("arrow", "advantages: stream holds no record batch")
    end = src.tell()
    if end < size:
        raise MalformedError("arrow", f"advantages: {size - end} bytes after the end of the stream")
    for b in batches:
        if b.num_columns != len(wmrl):
            raise MalformedError("arrow", f"advantages: batch has {b.num_columns} columns")
        try:
            b.validate(full=True)
        except pa.ArrowException as e:
            raise MalformedError("arrow", f"advantages: {e}") from None
    table = pa.Table.from_batches(batches)
    for f in wmrl:
        col = table.column(f.name)
        if not f.nullable and col.null_count > 0:
            raise FieldError("advantages", f.name, None, f"{col.null_count} nulls in a non-nullable column", MALFORMED)
    table = pa.Table.from_arrays(table.columns, schema=wmrl)
    if validate:
        validate_table(table)
    return table


_ID_BYTE = np.zeros(256, dtype=bool)
for _ch in b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-:@+":
    _ID_BYTE[_ch] = True


def _string_bytes(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A utf8 column's value bytes and its n+1 offsets into them, without copying strings."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    _, off_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(off_buf, dtype=np.int32)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return data, offsets


def _count_per_row(flags: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """How many flagged bytes each string [offsets[i], offsets[i+1]) holds."""
    cs = np.concatenate(([0], np.cumsum(flags, dtype=np.int64)))
    return np.asarray(cs[offsets[1:]] - cs[offsets[:-1]])


def _bad_ids(col: pa.ChunkedArray) -> np.ndarray:
    data, off = _string_bytes(col)
    n = np.diff(off)
    return np.asarray((n == 0) | (n > c.MAX_ID_LEN) | (_count_per_row(~_ID_BYTE[data], off) > 0))


def _bad_label(col: pa.ChunkedArray) -> np.ndarray:
    """Longer than MAX_LABEL_LEN bytes or holding a control character (C0, DEL, or C1 as 0xC2 0x80-0x9F)."""
    data, off = _string_bytes(col)
    ctl = (data < 0x20) | (data == 0x7F)
    c1 = np.zeros_like(ctl)
    if data.size > 1:
        c1[:-1] = (data[:-1] == 0xC2) & (data[1:] >= 0x80) & (data[1:] <= 0x9F)
    return (np.diff(off) > c.MAX_LABEL_LEN) | (_count_per_row(ctl | c1, off) > 0)


def _valid(col: pa.ChunkedArray) -> np.ndarray:
    """Validity (not null) per row, from the bitmaps (pyarrow.compute calls cost more at this size)."""
    parts = []
    for arr in col.chunks:
        if arr.null_count == 0:
            parts.append(np.ones(len(arr), dtype=bool))
            continue
        bits = np.unpackbits(np.frombuffer(arr.buffers()[0], dtype=np.uint8), bitorder="little")
        parts.append(bits[arr.offset : arr.offset + len(arr)].astype(bool))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def _bad_rows(t: pa.Table) -> np.ndarray:
    """Boolean array: rows that break some rule of AdvantageRow.validate (vectorised)."""

    def np_col(name: str) -> np.ndarray:
        # Nulls (only in predicted/executed) come out as NaN; every use is masked by the validity.
        return np.asarray(t.column(name).to_numpy())

    bad = _bad_ids(t.column("run_id"))
    for name in ("stream", "group_id", "rollout_id"):
        bad |= _bad_ids(t.column(name))
    bad |= _bad_label(t.column("policy_version"))
    mask = np_col("mask").astype(bool)
    src = np_col("source")
    is_anchor = src == c.SOURCE_ANCHOR
    is_wm = src == c.SOURCE_WORLD_MODEL
    is_empty = src == ""
    bad |= ~(is_anchor | is_wm | (is_empty & ~mask))
    bad |= np_col("step") < 0

    def score_bad(v: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return np.asarray(~(np.isfinite(v) & (v >= c.SCORE_MIN) & (v <= c.SCORE_MAX)))

    p_ok = _valid(t.column("predicted"))
    e_ok = _valid(t.column("executed"))
    bad |= p_ok & score_bad(np_col("predicted"))
    bad |= e_ok & score_bad(np_col("executed"))
    bad |= score_bad(np_col("calibrated"))
    bad |= score_bad(np_col("used"))
    adv = np_col("advantage")
    bad |= ~np.isfinite(adv)
    w = np_col("weight")
    with np.errstate(invalid="ignore"):
        bad |= ~(np.isfinite(w) & (w >= 0))
    bad |= ~mask & (adv != 0)
    bad |= mask & is_anchor & ~e_ok
    bad |= mask & is_wm & ~p_ok
    if "staleness" in t.schema.names:
        s_ok = _valid(t.column("staleness"))
        with np.errstate(invalid="ignore"):
            bad |= s_ok & (np.nan_to_num(np_col("staleness").astype(float), nan=0.0) < 0)
        reason = np_col("mask_reason")
        is_stale = reason == c.MASK_STALE
        bad |= ~((reason == "") | is_stale)
        bad |= is_stale & (mask | ~s_ok)
    return bad


def validate_table(t: pa.Table) -> None:
    """Every row valid and no rollout twice (topics.ValidateAdvantages), for a Table of ADVANTAGE_SCHEMA."""
    if t.num_rows == 0:
        return
    bad = np.flatnonzero(_bad_rows(t))
    if bad.size:
        i = int(bad[0])
        row = rows_from_table(t.slice(i, 1))[0]
        try:
            row.validate()
        except FieldError as e:
            raise FieldError(e.record, e.field, e.value, f"{e.why} (advantages row {i})", e.cause) from None
        raise AssertionError(f"advantages row {i}: vectorised and scalar row rules disagree")
    keys = list(
        zip(
            t.column("run_id").to_pylist(),
            t.column("step").to_pylist(),
            t.column("group_id").to_pylist(),
            t.column("rollout_id").to_pylist(),
            strict=True,
        )
    )
    if len(set(keys)) != len(keys):
        seen: dict[tuple[str, int, str, str], int] = {}
        for i, k in enumerate(keys):
            if k in seen:
                raise FieldError(
                    f"advantage run={k[0]} rollout={k[3]}",
                    "rollout_id",
                    k[3],
                    f"duplicate of row {seen[k]} (advantages row {i})",
                    CONFLICT,
                )
            seen[k] = i
