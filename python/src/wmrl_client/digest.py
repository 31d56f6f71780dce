"""The canonical advantage digest (topics/digest.go), reproduced with struct.pack.

Rows are sorted by (run_id, step, stream, group_id, rollout_id) and each is encoded as: strings as
big-endian uint32 length + UTF-8 bytes, integers as big-endian 64-bit, floats as big-endian
IEEE-754 bits (a value whose OK flag is false as 0.0), booleans as one byte, in AdvantageRow field
order. The v2 fields follow only when set: 0x01 and the staleness as a big-endian int64 when
staleness_ok, then 0x02 and the mask reason as a string when it is not empty, so v1 rows digest
as they always did. Equal digests prove two readers saw exactly the same rows, whatever order
they arrived in.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeAlias

import pyarrow as pa

from .records import AdvantageRow


class HasTable(Protocol):
    """Anything that carries its rows as a pyarrow Table, as a Step does. Typed by shape, so this
    module needs nothing from the stream that delivers steps (no import circle)."""

    @property
    def table(self) -> pa.Table: ...


Rows: TypeAlias = pa.Table | pa.RecordBatch | HasTable | Iterable[AdvantageRow] | Iterable[Mapping[str, Any]]

_STR = struct.Struct(">I")
_NUMS1 = struct.Struct(">d?d")  # predicted, predicted_ok, calibrated
_NUMS2 = struct.Struct(">d?ddd?Q")  # executed, executed_ok, used, advantage, weight, mask, calib. version
_Q = struct.Struct(">q")


def _columns_from_table(t: pa.Table | pa.RecordBatch) -> dict[str, list[Any]]:
    cols = {name: t.column(name).to_pylist() for name in t.schema.names}
    for name in ("predicted", "executed"):
        vals = cols[name]
        cols[name + "_ok"] = [v is not None for v in vals]
        cols[name] = [0.0 if v is None else v for v in vals]
    n = t.num_rows
    vals = cols.get("staleness", [None] * n)
    cols["staleness_ok"] = [v is not None for v in vals]
    cols["staleness"] = [0 if v is None else v for v in vals]
    cols.setdefault("mask_reason", [""] * n)
    return cols


def _columns_from_rows(rows: Iterable[Any]) -> dict[str, list[Any]]:
    names = [
        "run_id", "stream", "step", "group_id", "rollout_id", "policy_version", "source",
        "predicted", "predicted_ok", "calibrated", "executed", "executed_ok", "used",
        "advantage", "weight", "mask", "calibration_version",
    ]  # fmt: skip
    optional = {"staleness": 0, "staleness_ok": False, "mask_reason": ""}
    cols: dict[str, list[Any]] = {n: [] for n in [*names, *optional]}
    for r in rows:
        get = r.__getitem__ if isinstance(r, Mapping) else r.__getattribute__
        for n in names:
            cols[n].append(get(n))
        for n, zero in optional.items():
            cols[n].append(r.get(n, zero) if isinstance(r, Mapping) else getattr(r, n, zero))
    return cols


def _as_columns(rows: Rows) -> dict[str, list[Any]]:
    table = getattr(rows, "table", None)
    if isinstance(table, pa.Table):
        return _columns_from_table(table)
    if isinstance(rows, (pa.Table, pa.RecordBatch)):
        return _columns_from_table(rows)
    return _columns_from_rows(rows)  # type: ignore[arg-type]


def _s(b: bytearray, v: str) -> None:
    raw = v.encode("utf-8")
    b += _STR.pack(len(raw))
    b += raw


def digest_rows(rows: Rows) -> str:
    """Hex SHA-256 of the rows in canonical order, equal to Go's topics.DigestRows.

    ``rows`` is a pyarrow Table or RecordBatch of the advantage schema, a Step, or an iterable of
    AdvantageRow or of mappings with AdvantageRow's field names.
    """
    return digest_and_count(rows)[0]


def digest_and_count(rows: Rows) -> tuple[str, int]:
    """(digest_rows(rows), number of rows)."""
    cols = _as_columns(rows)
    n = len(cols["run_id"])
    keys: Sequence[Any] = list(
        zip(cols["run_id"], cols["step"], cols["stream"], cols["group_id"], cols["rollout_id"], strict=True)
    )
    order = sorted(range(n), key=keys.__getitem__)
    h = hashlib.sha256()
    b = bytearray()
    for i in order:
        b.clear()
        _s(b, cols["run_id"][i])
        _s(b, cols["stream"][i])
        b += _Q.pack(cols["step"][i])
        _s(b, cols["group_id"][i])
        _s(b, cols["rollout_id"][i])
        _s(b, cols["policy_version"][i])
        _s(b, cols["source"][i])
        p_ok, e_ok = bool(cols["predicted_ok"][i]), bool(cols["executed_ok"][i])
        b += _NUMS1.pack(float(cols["predicted"][i]) if p_ok else 0.0, p_ok, float(cols["calibrated"][i]))
        b += _NUMS2.pack(
            float(cols["executed"][i]) if e_ok else 0.0,
            e_ok,
            float(cols["used"][i]),
            float(cols["advantage"][i]),
            float(cols["weight"][i]),
            bool(cols["mask"][i]),
            int(cols["calibration_version"][i]),
        )
        if cols["staleness_ok"][i]:
            b += b"\x01" + _Q.pack(int(cols["staleness"][i]))
        if cols["mask_reason"][i]:
            b += b"\x02"
            _s(b, cols["mask_reason"][i])
        h.update(b)
    return h.hexdigest(), n


def rows_from_table(t: pa.Table | pa.RecordBatch) -> list[AdvantageRow]:
    """The table's rows as AdvantageRow values (nulls become 0 with the OK flag false)."""
    cols = _columns_from_table(t)
    names = list(cols)
    return [AdvantageRow(**{k: cols[k][i] for k in names}) for i in range(t.num_rows)]
