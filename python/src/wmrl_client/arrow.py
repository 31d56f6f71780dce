"""Advantage batches as Arrow IPC streams (topics/arrow.go), read and written with pyarrow.

Reading is as strict as Go's ``topics.DecodeAdvantages``: the schema metadata must carry
``wmrl-schema=wmrl.advantages.v1`` (else SchemaVersionError), the columns must match
ADVANTAGE_SCHEMA by name, order and type (a non-nullable column may be declared nullable, as
pyarrow does by default, but must hold no nulls), the stream holds at least one batch and nothing
after its end, and every row must validate. Row validation is vectorised; the first bad row is
then re-checked with the scalar rules so the error names the same field and value Go would.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from . import contract as c
from .digest import rows_from_table
from .errors import CONFLICT, MALFORMED, FieldError, MalformedError, SchemaVersionError, TooLargeError
from .records import AdvantageRow, validate_advantage_rows

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

_ID_PATTERN = r"^[A-Za-z0-9._\-:@+]{1,128}$"
_CONTROL_PATTERN = r"[\x{00}-\x{1f}\x{7f}-\x{9f}]"


def check_schema(schema: pa.Schema, where: str = "") -> None:
    """Refuse a batch schema that is not wmrl.advantages.v1 with exactly ADVANTAGE_SCHEMA's columns."""
    md = schema.metadata or {}
    got = md.get(c.ARROW_SCHEMA_KEY.encode())
    if got is None:
        raise SchemaVersionError(
            "advantages", None, c.SCHEMA_ADVANTAGES, f"Arrow schema metadata has no {c.ARROW_SCHEMA_KEY!r} key"
            + (f"; {where}" if where else "")
        )
    got_s = got.decode("utf-8", "replace")
    if got_s != c.SCHEMA_ADVANTAGES:
        raise SchemaVersionError("advantages", got_s, c.SCHEMA_ADVANTAGES, where or "Arrow schema metadata")
    if len(schema) != len(ADVANTAGE_SCHEMA):
        raise MalformedError("arrow", f"advantages: {len(schema)} columns, want {len(ADVANTAGE_SCHEMA)}")
    for i, (have, want) in enumerate(zip(schema, ADVANTAGE_SCHEMA)):
        if have.name != want.name:
            raise MalformedError("arrow", f"advantages: column {i} is {have.name!r}, want {want.name!r}")
        if not have.type.equals(want.type):
            raise FieldError(
                "advantages", want.name, str(have.type), f"wrong Arrow type, want {want.type}", MALFORMED
            )
        if want.nullable and not have.nullable:
            raise FieldError("advantages", want.name, None, "column must be nullable", MALFORMED)


def decode_advantages(payload: bytes | bytearray | memoryview | pa.Buffer, *, validate: bool = True) -> pa.Table:
    """Strictly decode one Arrow IPC stream of advantage rows into a Table of ADVANTAGE_SCHEMA."""
    size = payload.size if isinstance(payload, pa.Buffer) else len(payload)
    if size > c.MAX_ADVANTAGE_BYTES:
        raise TooLargeError(f"advantages: {size} bytes exceeds the {c.MAX_ADVANTAGE_BYTES} byte limit")
    src = pa.BufferReader(payload if isinstance(payload, pa.Buffer) else pa.py_buffer(payload))
    try:
        reader = ipc.open_stream(src)
    except (pa.ArrowException, OSError) as e:
        raise MalformedError("arrow", f"advantages: {e}") from None
    check_schema(reader.schema)
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
        if b.num_columns != len(ADVANTAGE_SCHEMA):
            raise MalformedError("arrow", f"advantages: batch has {b.num_columns} columns")
        try:
            b.validate(full=True)
        except pa.ArrowException as e:
            raise MalformedError("arrow", f"advantages: {e}") from None
    table = pa.Table.from_batches(batches)
    for f in ADVANTAGE_SCHEMA:
        col = table.column(f.name)
        if not f.nullable and col.null_count > 0:
            raise FieldError("advantages", f.name, None, f"{col.null_count} nulls in a non-nullable column", MALFORMED)
    table = pa.Table.from_arrays(table.columns, schema=ADVANTAGE_SCHEMA)
    if validate:
        validate_table(table)
    return table


def _bad_rows(t: pa.Table) -> np.ndarray:
    """Boolean array: rows that break some rule of AdvantageRow.validate (vectorised)."""
    n = t.num_rows
    bad = np.zeros(n, dtype=bool)

    def np_col(name: str) -> np.ndarray:
        col = t.column(name)
        if col.null_count:
            col = col.fill_null(0.0)
        return np.asarray(col.to_numpy())

    for name in ("run_id", "stream", "group_id", "rollout_id"):
        bad |= ~np.asarray(pc.match_substring_regex(t.column(name), _ID_PATTERN).to_numpy(zero_copy_only=False))
    pv = t.column("policy_version")
    bad |= np.asarray(pc.binary_length(pv).to_numpy()) > c.MAX_LABEL_LEN
    bad |= np.asarray(pc.match_substring_regex(pv, _CONTROL_PATTERN).to_numpy(zero_copy_only=False))
    mask = np_col("mask").astype(bool)
    src = t.column("source")
    is_anchor = np.asarray(pc.equal(src, c.SOURCE_ANCHOR).to_numpy(zero_copy_only=False))
    is_wm = np.asarray(pc.equal(src, c.SOURCE_WORLD_MODEL).to_numpy(zero_copy_only=False))
    is_empty = np.asarray(pc.equal(src, "").to_numpy(zero_copy_only=False))
    bad |= ~(is_anchor | is_wm | (is_empty & ~mask))
    bad |= np_col("step") < 0

    def score_bad(v: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return ~(np.isfinite(v) & (v >= c.SCORE_MIN) & (v <= c.SCORE_MAX))

    p_ok = np.asarray(t.column("predicted").is_valid().to_numpy(zero_copy_only=False))
    e_ok = np.asarray(t.column("executed").is_valid().to_numpy(zero_copy_only=False))
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
        raise FieldError("advantages", "row", i, "breaks a row rule")  # pragma: no cover - rules agree
    keys = pc.binary_join_element_wise(
        t.column("run_id"),
        pc.cast(t.column("step"), pa.string()),
        t.column("group_id"),
        t.column("rollout_id"),
        "\x00",
    )
    if pc.count_distinct(keys).as_py() != t.num_rows:
        seen: dict[str, int] = {}
        for i, k in enumerate(keys.to_pylist()):
            if k in seen:
                rid = t.column("rollout_id")[i].as_py()
                raise FieldError(
                    f"advantage run={t.column('run_id')[i].as_py()} rollout={rid}",
                    "rollout_id",
                    rid,
                    f"duplicate of row {seen[k]} (advantages row {i})",
                    CONFLICT,
                )
            seen[k] = i


def table_from_rows(rows: Sequence[AdvantageRow]) -> pa.Table:
    """A Table of ADVANTAGE_SCHEMA from rows (predicted/executed are null where the OK flag is false)."""
    cols: dict[str, list[object]] = {f.name: [] for f in ADVANTAGE_SCHEMA}
    for r in rows:
        for name in cols:
            if name == "predicted":
                cols[name].append(r.predicted if r.predicted_ok else None)
            elif name == "executed":
                cols[name].append(r.executed if r.executed_ok else None)
            else:
                cols[name].append(getattr(r, name))
    return pa.Table.from_pydict(cols, schema=ADVANTAGE_SCHEMA)


def encode_advantages(rows: Sequence[AdvantageRow] | pa.Table) -> bytes:
    """Validate rows and encode them, in order, as one Arrow IPC stream with one record batch."""
    if isinstance(rows, pa.Table):
        check_schema(rows.schema)
        table = pa.Table.from_arrays(rows.columns, schema=ADVANTAGE_SCHEMA)
        validate_table(table)
    else:
        validate_advantage_rows(list(rows))
        table = table_from_rows(rows)
    batch = table.combine_chunks().to_batches()
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, ADVANTAGE_SCHEMA) as w:
        if batch:
            w.write_batch(batch[0])
        else:
            w.write_batch(pa.RecordBatch.from_pylist([], schema=ADVANTAGE_SCHEMA))
    return sink.getvalue().to_pybytes()


def iter_rows(t: pa.Table) -> Iterable[AdvantageRow]:
    """Rows of a Table as AdvantageRow values."""
    return iter(rows_from_table(t))
