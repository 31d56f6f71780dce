"""The generic half of ``topics/validate.go``: the checker that keeps the first failure, so each
record type's rules (next to the type, in records.py) read as a list in Go's order, and the
Python-side type guard that runs before them."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from datetime import datetime
from typing import Any

from . import _json as j
from . import contract as c
from .errors import INVALID, FieldError, SchemaVersionError
from .ids import check_id, check_text


class Checker:
    """Keeps the first failure, so the rules read as a list in Go's order."""

    def __init__(self, record: str) -> None:
        self.record = record
        self.err: FieldError | None = None

    def fail(self, fld: str, value: Any, why: str, cause: str = INVALID) -> None:
        if self.err is None:
            self.err = FieldError(self.record, fld, value, why, cause)

    def done(self) -> None:
        if self.err is not None:
            raise self.err

    def id(self, fld: str, v: str) -> None:
        msg = check_id(v)
        if msg:
            self.fail(fld, v or None, msg)

    def text(self, fld: str, v: str, maxlen: int, multiline: bool = False) -> None:
        msg = check_text(v, maxlen, multiline)
        if msg:
            self.fail(fld, v, msg)

    def schema(self, got: str, want: str) -> None:
        if got != want and self.err is None:
            self.err = SchemaVersionError(self.record, got or None, want)

    def step(self, v: int) -> None:
        if v < 0:
            self.fail("step", v, "must be >= 0")

    def rollout_key(self, r: Any, schema: str) -> None:
        """The rules of the fields a rollout and its rewards begin with (records.ROLLOUT_KEY_FIELDS)."""
        self.schema(r.schema, schema)
        self.id("run_id", r.run_id)
        self.step(r.step)
        self.id("group_id", r.group_id)
        self.id("rollout_id", r.rollout_id)
        self.id("stream", r.stream)
        self.text("policy_version", r.policy_version, c.MAX_LABEL_LEN)

    def finite(self, fld: str, v: float) -> bool:
        if math.isnan(v) or math.isinf(v):
            self.fail(fld, v, "not a finite number")
            return False
        return True

    def score(self, fld: str, v: float) -> None:
        if self.finite(fld, v) and (v < c.SCORE_MIN or v > c.SCORE_MAX):
            self.fail(fld, v, f"out of range [{c.SCORE_MIN:g},{c.SCORE_MAX:g}]")

    def non_negative(self, fld: str, v: float) -> None:
        if self.finite(fld, v) and v < 0:
            self.fail(fld, v, "must be >= 0")

    def optional_score(self, fld: str, v: float, ok: bool) -> None:
        if ok:
            self.score(fld, v)
        elif v != 0 or math.copysign(1.0, v) < 0:
            self.fail(fld, v, f"must be 0 when {fld}_ok is false")


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_real(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


_PY_TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    j.STR: (lambda v: isinstance(v, str), "a str"),
    j.INT: (lambda v: _is_int(v) and j.INT64_MIN <= v <= j.INT64_MAX, "an int64"),
    j.UINT: (lambda v: _is_int(v) and 0 <= v <= j.UINT64_MAX, "a uint64"),
    j.FLOAT: (lambda v: _is_real(v), "a float"),
    j.OPT_FLOAT: (lambda v: v is None or _is_real(v), "a float or None"),
    j.OPT_INT: (lambda v: v is None or (_is_int(v) and j.INT64_MIN <= v <= j.INT64_MAX), "an int64 or None"),
    j.BOOL: (lambda v: isinstance(v, bool), "a bool"),
    j.TIME: (lambda v: isinstance(v, datetime) and v.utcoffset() is not None, "a timezone-aware datetime"),
    j.BYTES: (lambda v: v is None or isinstance(v, (bytes, bytearray)), "bytes or None"),
    j.STR_MAP: (
        lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()),
        "a dict[str, str]",
    ),
    j.FLOAT_LIST: (
        lambda v: isinstance(v, list) and all(_is_real(x) for x in v),
        "a list of floats",
    ),
}


def check_types(record: Any, spec: j.Spec, name: str, prefix: str = "") -> None:
    """Python-side guard before Go's rules: each field must hold the Python type of its Go type."""
    for f in spec.fields:
        v = getattr(record, f.name)
        if f.kind == j.STRUCT_LIST:
            if not isinstance(v, list):
                raise FieldError(name, prefix + f.name, None, "must be a list")
            assert f.elem is not None
            for i, x in enumerate(v):
                if not isinstance(x, f.elem.cls):
                    raise FieldError(name, f"{prefix}{f.name}[{i}]", None, f"must be a {f.elem.cls.__name__}")
                check_types(x, f.elem, name, f"{prefix}{f.name}[{i}].")
            continue
        ok, want = _PY_TYPES[f.kind]
        if not ok(v):
            raise FieldError(name, prefix + f.name, None, f"must be {want}, got {type(v).__name__}")
