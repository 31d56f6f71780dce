"""Arrow decoding strictness, vectorised row validation and the digest."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from client_codecs import encode_advantages, table_from_rows

from wmrl_client import (
    ADVANTAGE_SCHEMA,
    AdvantageRow,
    FieldError,
    MalformedError,
    SchemaVersionError,
    TooLargeError,
    decode_advantages,
    digest_rows,
    reason,
)
from wmrl_client.arrow import validate_table
from wmrl_client.digest import rows_from_table
from wmrl_client.records import validate_advantage_rows


def row(i: int = 0, **kw: object) -> AdvantageRow:
    base = AdvantageRow(
        run_id="r1", stream="mle", step=3, group_id=f"g{i // 4}", rollout_id=f"g{i // 4}-r{i % 4}",
        policy_version="ckpt-3", source="world_model", predicted=0.5, predicted_ok=True, calibrated=0.4,
        used=0.4, advantage=0.25 * (i % 4) - 0.375, weight=1.0, mask=True, calibration_version=2,
    )  # fmt: skip
    return replace(base, **kw)


def stream_bytes(table: pa.Table, schema: pa.Schema | None = None) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, schema or table.schema) as w:
        for b in table.to_batches():
            w.write_batch(b)
    return sink.getvalue().to_pybytes()


def test_roundtrip_and_order_kept() -> None:
    rows = [row(i) for i in range(8)]
    t = decode_advantages(encode_advantages(rows))
    assert rows_from_table(t) == rows
    assert t.schema.equals(ADVANTAGE_SCHEMA, check_metadata=True)


def test_empty_batch_roundtrip() -> None:
    t = decode_advantages(encode_advantages([]))
    assert t.num_rows == 0


def test_pyarrow_default_nullable_schema_accepted() -> None:
    # pyarrow declares every column nullable by default; Go accepts that as long as there are no nulls.
    t = table_from_rows([row(i) for i in range(4)])
    loose = pa.schema([pa.field(f.name, f.type) for f in ADVANTAGE_SCHEMA], metadata=ADVANTAGE_SCHEMA.metadata)
    data = stream_bytes(pa.Table.from_arrays(t.columns, schema=loose))
    assert decode_advantages(data).num_rows == 4


@pytest.mark.parametrize(
    "metadata,got",
    [(None, None), ({"wmrl-schema": "wmrl.advantages.v3"}, "wmrl.advantages.v3"), ({"other": "x"}, None)],
)
def test_schema_metadata_checked(metadata: dict[str, str] | None, got: str | None) -> None:
    t = table_from_rows([row()])
    data = stream_bytes(t.replace_schema_metadata(metadata))
    with pytest.raises(SchemaVersionError) as ei:
        decode_advantages(data)
    assert ei.value.got == got
    assert reason(ei.value) == "unknown-schema"
    assert "wmrl.advantages.v1" in str(ei.value)


def test_column_layout_checked() -> None:
    t = table_from_rows([row()])
    md = ADVANTAGE_SCHEMA.metadata
    wrong_type = t.set_column(2, pa.field("step", pa.int32(), nullable=False), pa.array([3], pa.int32()))
    with pytest.raises(FieldError, match="wrong Arrow type") as ei:
        decode_advantages(stream_bytes(wrong_type.replace_schema_metadata(md)))
    assert ei.value.field == "step"
    with pytest.raises(MalformedError, match="16 columns"):
        decode_advantages(stream_bytes(t.append_column("extra", pa.array([1])).replace_schema_metadata(md)))
    with pytest.raises(MalformedError, match="column 0"):
        decode_advantages(stream_bytes(t.rename_columns(["x", *t.column_names[1:]]).replace_schema_metadata(md)))
    strict = pa.schema([pa.field(f.name, f.type, nullable=False) for f in ADVANTAGE_SCHEMA], metadata=md)
    with pytest.raises(FieldError, match="must be nullable"):
        decode_advantages(stream_bytes(pa.Table.from_arrays(t.columns, schema=strict)))
    loose = pa.schema([pa.field(f.name, f.type) for f in ADVANTAGE_SCHEMA], metadata=md)
    with_null = pa.Table.from_arrays(t.columns, schema=loose).set_column(
        1, loose.field(1), pa.array([None], pa.string())
    )
    with pytest.raises(FieldError, match="nulls in a non-nullable column") as ei:
        decode_advantages(stream_bytes(with_null))
    assert ei.value.field == "stream"


def test_framing_checked() -> None:
    good = encode_advantages([row()])
    for bad, why in [
        (good[: len(good) // 2], "malformed-arrow"),
        (good + b"\x00\x00\x00\x00", "malformed-arrow"),
        (b"not arrow at all", "malformed-arrow"),
        (b"", "malformed-arrow"),
    ]:
        with pytest.raises(MalformedError) as ei:
            decode_advantages(bad)
        assert reason(ei.value) == why
    schema_only = stream_bytes(table_from_rows([]).slice(0, 0), ADVANTAGE_SCHEMA)
    with pytest.raises(MalformedError, match="no record batch"):
        decode_advantages(schema_only)
    with pytest.raises(TooLargeError):
        decode_advantages(b"\x00" * (16 * 1024 * 1024 + 1))


MUTATIONS = [
    ({"run_id": "r/1"}, "run_id"),
    ({"stream": ""}, "stream"),
    ({"group_id": "g" * 129}, "group_id"),
    ({"rollout_id": "a b"}, "rollout_id"),
    ({"policy_version": "p\x7f"}, "policy_version"),
    ({"policy_version": "p" * 257}, "policy_version"),
    ({"policy_version": "p\u0085"}, "policy_version"),
    ({"group_id": "gé"}, "group_id"),
    ({"step": -1}, "step"),
    ({"source": "oracle"}, "source"),
    ({"source": ""}, "source"),
    ({"predicted": 1.5}, "predicted"),
    ({"predicted": float("nan")}, "predicted"),
    ({"calibrated": -0.1}, "calibrated"),
    ({"used": float("inf")}, "used"),
    ({"advantage": float("nan")}, "advantage"),
    ({"weight": -1.0}, "weight"),
    ({"mask": False}, "advantage"),
    ({"source": "anchor"}, "executed_ok"),
    ({"predicted_ok": False, "predicted": 0.0}, "predicted_ok"),
    ({"executed_ok": True, "executed": 2.0}, "executed"),
]


@pytest.mark.parametrize("kw,field", MUTATIONS)
def test_vectorised_validation_reports_what_scalar_rules_report(kw: dict[str, object], field: str) -> None:
    rows = [row(i) for i in range(8)]
    rows[5] = replace(rows[5], **kw)
    with pytest.raises(FieldError) as scalar:
        validate_advantage_rows(rows)
    assert scalar.value.field == field
    with pytest.raises(FieldError) as vector:
        validate_table(table_from_rows(rows))
    assert (vector.value.field, str(vector.value)) == (scalar.value.field, str(scalar.value))
    assert "advantages row 5" in str(vector.value)


def test_masked_row_rules() -> None:
    masked = row(0, mask=False, advantage=0.0, source="", predicted_ok=False, predicted=0.0, weight=0.0)
    validate_table(table_from_rows([masked]))
    with pytest.raises(FieldError) as ei:
        validate_table(table_from_rows([replace(masked, advantage=0.5)]))
    assert ei.value.field == "advantage"


def test_duplicate_rollout_is_conflict() -> None:
    rows = [row(0), row(1), row(0)]
    for check in (validate_advantage_rows, lambda r: validate_table(table_from_rows(r))):
        with pytest.raises(FieldError) as ei:
            check(rows)
        assert reason(ei.value) == "conflict"
        assert "duplicate of row 0" in str(ei.value)


def test_random_rows_vectorised_and_scalar_agree() -> None:
    rng = random.Random(7)
    choices = [m for m, _ in MUTATIONS]
    for _ in range(200):
        rows = [row(i) for i in range(rng.randint(1, 12))]
        for j in range(len(rows)):
            if rng.random() < 0.15:
                rows[j] = replace(rows[j], **rng.choice(choices))
        try:
            validate_advantage_rows(rows)
            scalar = None
        except FieldError as e:
            scalar = (e.field, str(e))
        try:
            validate_table(table_from_rows(rows))
            vector = None
        except FieldError as e:
            vector = (e.field, str(e))
        assert scalar == vector


def test_digest_is_order_independent_and_sensitive() -> None:
    rows = [row(i) for i in range(8)]
    d = digest_rows(rows)
    assert d == digest_rows(list(reversed(rows)))
    assert d == digest_rows(table_from_rows(rows))
    assert d == digest_rows([r.__dict__ for r in rows])
    assert digest_rows([replace(rows[0], weight=1.0000000000000002), *rows[1:]]) != d
    assert digest_rows([replace(rows[0], advantage=-0.0)]) != digest_rows([replace(rows[0], advantage=0.0)])
    # A missing score digests as 0 whatever the value field holds.
    assert digest_rows([replace(rows[0], predicted_ok=False, predicted=0.7)]) == digest_rows(
        [replace(rows[0], predicted_ok=False, predicted=0.0)]
    )


def test_digest_of_empty_input() -> None:
    assert digest_rows([]) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_python_written_golden_decodes(golden: Path) -> None:
    t = decode_advantages((golden / "python" / "advantages.arrows").read_bytes())
    assert t.num_rows == 7
    assert t.column("calibration_version").type == pa.uint64()


def stale_row(i: int = 0, **kw: object) -> AdvantageRow:
    """A row masked as stale by --max-staleness: scores kept, advantage 0."""
    base = row(i, mask=False, advantage=0.0, used=0.0, weight=0.0, staleness=3, staleness_ok=True, mask_reason="stale")
    return replace(base, **kw)


def test_v2_layout_only_when_used() -> None:
    from wmrl_client import ADVANTAGE_SCHEMA_V2

    v1 = decode_advantages(encode_advantages([row(i) for i in range(4)]))
    assert v1.schema.equals(ADVANTAGE_SCHEMA, check_metadata=True)
    rows = [row(0, staleness=1, staleness_ok=True), row(1), stale_row(2)]
    t = decode_advantages(encode_advantages(rows))
    assert t.schema.equals(ADVANTAGE_SCHEMA_V2, check_metadata=True)
    assert t.column("staleness").to_pylist() == [1, None, 3]
    assert t.column("mask_reason").to_pylist() == ["", "", "stale"]
    assert rows_from_table(t) == rows


@pytest.mark.parametrize(
    "r,field",
    [
        (row(staleness=2), "staleness"),
        (row(staleness=-1, staleness_ok=True), "staleness"),
        (stale_row(mask=True, advantage=0.0), "mask_reason"),
        (stale_row(staleness=0, staleness_ok=False), "mask_reason"),
        (stale_row(mask_reason="tired"), "mask_reason"),
    ],
)
def test_v2_row_rules(r: AdvantageRow, field: str) -> None:
    with pytest.raises(FieldError) as ei:
        validate_advantage_rows([r])
    assert ei.value.field == field
    if r.staleness_ok or r.mask_reason:  # the vectorised table rules agree on v2 tables
        with pytest.raises(FieldError) as ei2:
            validate_table(table_from_rows([replace(row(1), staleness_ok=True), r]))
        assert ei2.value.field == field


def test_v2_digest_fields() -> None:
    base = [row(i) for i in range(4)]
    d = digest_rows(base)
    assert digest_rows([replace(base[0], staleness_ok=False), *base[1:]]) == d
    with_staleness = [replace(r, staleness=1, staleness_ok=True) for r in base]
    assert digest_rows(with_staleness) != d
    assert digest_rows(decode_advantages(encode_advantages(with_staleness))) == digest_rows(with_staleness)
    masked = [stale_row(i) for i in range(4)]
    assert digest_rows(masked) != digest_rows([replace(r, mask_reason="") for r in masked])
