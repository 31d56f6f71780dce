"""Strict JSON decoding and Go-identical JSON encoding of wmrl records.

Decoding follows Go's ``topics.decodeJSON`` step by step (size, syntax, depth, schema first, then
exact field names, duplicate keys and JSON types in document order, then a string's content: RFC 3339
times, base64), so both languages refuse the same documents with the same reason. Invalid UTF-8 in a
string (raw bytes or a lone surrogate escape) is a fault of its field on both sides, ``meta.task`` (a
key's fault names the key, its bad bytes shown as U+FFFD), never rewritten; the encoder refuses a
string holding a lone surrogate the same way (``check_utf8``). Encoding
reproduces ``encoding/json`` with HTML escaping off byte for byte (field order, ``omitempty``, float
and time formatting), which ``topics/python_contract_test.go`` checks by re-encoding what Python wrote.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from . import contract as c
from .errors import INVALID, MALFORMED, FieldError, MalformedError, SchemaVersionError, TooLargeError

# Field kinds, named after the Go types they stand for.
STR = "string"
INT = "int64"
UINT = "uint64"
FLOAT = "float64"
BOOL = "bool"
TIME = "time"
BYTES = "bytes"
OPT_FLOAT = "*float64"
OPT_INT = "*int64"
STR_MAP = "map[string]string"
FLOAT_LIST = "[]float64"
STRUCT_LIST = "[]struct"

_TYPE_NAMES = {
    STR: "string",
    INT: "integer in range of int64",
    UINT: "integer in range of uint64",
    FLOAT: "finite number",
    BOOL: "boolean",
    TIME: "RFC 3339 time string",
    BYTES: "base64 string",
    OPT_FLOAT: "finite number",
    OPT_INT: "integer in range of int64",
    STR_MAP: "object",
    FLOAT_LIST: "array",
    STRUCT_LIST: "array",
}

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1


@dataclass(frozen=True)
class Field:
    """One JSON field of a record: name, Go kind, omitempty, and the struct spec of list elements."""

    name: str
    kind: str
    omitempty: bool = False
    elem: Spec | None = None


@dataclass(frozen=True)
class Spec:
    """A record type's JSON layout in Go struct order (the Python form of Go's struct tags), and the
    dataclass a decoded value becomes (keyword arguments named as the fields)."""

    kind: str
    fields: tuple[Field, ...]
    cls: type

    def by_name(self) -> dict[str, Field]:
        return {f.name: f for f in self.fields}


# ---- decoding -------------------------------------------------------------------------------


class _Num(str):
    """A JSON number kept as its literal, so integer fields can refuse 3.0 and 1e2 as Go does."""


class _Obj(list):  # type: ignore[type-arg]
    """A JSON object as its (key, value) pairs in document order, duplicates kept."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"invalid literal {name}")


_INT_RE = re.compile(r"-?(?:0|[1-9][0-9]*)\Z")


_SURROGATE = re.compile("[\ud800-\udfff]")
"""A lone surrogate: from an invalid byte (decoded with surrogateescape) or a \\ud800-style escape."""


def _parse(b: bytes, kind: str) -> Any:
    text = b.decode("utf-8", "surrogateescape")  # invalid bytes stay visible to _Scan as surrogates
    try:
        return json.loads(
            text,
            object_pairs_hook=_Obj,
            parse_int=_Num,
            parse_float=_Num,
            parse_constant=_no_constant,
        )
    except (ValueError, RecursionError) as e:
        raise MalformedError("json", f"{kind} record: {e}") from None


def _fix_str(s: str) -> str:
    """Lone surrogates become U+FFFD, as Go's encoder makes invalid UTF-8 (go_string quotes for messages)."""
    return _SURROGATE.sub("\ufffd", s)


def _describe(v: Any) -> str:
    if isinstance(v, _Obj):
        return "object"
    if isinstance(v, list):
        return "array"
    if isinstance(v, _Num):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, bool):
        return "boolean"
    return "null"


def _fits(v: Any, kind: str) -> bool:
    """Go's json v2 types plus rejectNull: can the JSON value decode into the Go type without loss?"""
    if v is None:
        return kind in (OPT_FLOAT, OPT_INT, STR_MAP, FLOAT_LIST, STRUCT_LIST, BYTES)
    if isinstance(v, _Num):
        if kind in (INT, OPT_INT):
            return bool(_INT_RE.match(v)) and INT64_MIN <= int(v) <= INT64_MAX
        if kind == UINT:
            return bool(_INT_RE.match(v)) and not v.startswith("-") and int(v) <= UINT64_MAX
        if kind in (FLOAT, OPT_FLOAT):
            return not math.isinf(float(v))
        return False
    if isinstance(v, str):
        return kind in (STR, TIME, BYTES)
    if isinstance(v, bool):
        return kind == BOOL
    if isinstance(v, _Obj):
        return kind in ("struct", STR_MAP)
    if isinstance(v, list):
        return kind in (FLOAT_LIST, STRUCT_LIST)
    return False


class _Scan:
    """Walks a parsed document against a Spec, finding the first fault as Go's decodeJSON does."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.key_err: FieldError | None = None
        self.schema: str | None = None
        self.schema_seen = False
        self.schema_mistyped = False

    def key_fail(self, path: str, why: str, cause: str = INVALID) -> None:
        if self.key_err is None:
            self.key_err = FieldError(self.kind, path, None, why, cause)

    def depth(self, v: Any, depth: int, path: str) -> None:
        """Any object or array nested deeper than MAX_JSON_DEPTH makes the document malformed."""
        if isinstance(v, list):
            if depth > c.MAX_JSON_DEPTH:
                raise MalformedError("json", f"{self.kind} record: nesting deeper than {c.MAX_JSON_DEPTH} at {path}")
            items = [x for _, x in v] if isinstance(v, _Obj) else v
            for x in items:
                self.depth(x, depth + 1, path)

    def value(self, v: Any, kind: str | None, path: str, elem: Spec | None) -> None:
        if isinstance(v, str) and not isinstance(v, _Num) and _SURROGATE.search(v):
            self.key_fail(path, "not valid UTF-8", MALFORMED)  # Go's tokenizer sees it before the type
            return
        if kind is not None and not _fits(v, kind):
            if self.key_err is None:
                self.key_err = FieldError(
                    self.kind,
                    path,
                    None,
                    f"wrong type: got {_describe(v)}, want {_TYPE_NAMES.get(kind, 'object')}",
                    MALFORMED,
                )
            kind = None
        if isinstance(v, _Obj):
            if kind == "struct" and elem is not None:
                self.obj(v, elem, path, top=False)
            elif kind == STR_MAP:
                self.obj(v, None, path, top=False, elem_kind=STR)
            else:
                self.obj(v, None, path, top=False)
        elif isinstance(v, list):
            ek: str | None = None
            if kind == FLOAT_LIST:
                ek = FLOAT
            elif kind == STRUCT_LIST:
                ek = "struct"
            for i, x in enumerate(v):
                self.value(x, ek, f"{path}[{i}]", elem)

    def obj(self, pairs: _Obj, spec: Spec | None, path: str, top: bool, elem_kind: str | None = None) -> None:
        fields = spec.by_name() if spec is not None else None
        seen: set[str] = set()
        for key, v in pairs:
            kpath = f"{path}.{key}" if path else key
            if _SURROGATE.search(key):
                self.key_fail(_SURROGATE.sub("\ufffd", kpath), "key not valid UTF-8", MALFORMED)
            if key in seen:
                self.key_fail(kpath, "duplicate key")
            seen.add(key)
            kind, sub = elem_kind, None
            if fields is not None:
                f = fields.get(key)
                if f is None:
                    self.key_fail(kpath, "unknown field")
                    kind = None
                else:
                    kind, sub = f.kind, f.elem
            if top and key == "schema":
                if isinstance(v, str) and not isinstance(v, _Num):
                    self.schema, self.schema_seen = v, True
                else:
                    self.schema_mistyped = True
            self.value(v, kind, kpath, sub)


_RFC3339 = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})\Z")

ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)


def parse_time(s: str) -> datetime:
    """Parse an RFC 3339 time as Go's time.Time.UnmarshalJSON does; precision below 1 µs is dropped."""
    m = _RFC3339.match(s)
    if not m:
        raise ValueError("not an RFC 3339 time")
    y, mo, d, h, mi, sec = (int(x) for x in m.groups()[:6])
    frac = (m.group(7) or "").ljust(6, "0")[:6]
    z = m.group(8)
    if z == "Z":
        tz = UTC
    else:
        oh, om = int(z[1:3]), int(z[4:6])
        if oh > 23 or om > 59:
            raise ValueError("time zone offset out of range")
        off = timedelta(hours=oh, minutes=om)
        tz = timezone(-off if z[0] == "-" else off)
    return datetime(y, mo, d, h, mi, sec, int(frac), tzinfo=tz)


def _convert(v: Any, f: Field, record: str) -> Any:
    """Turn a scanned JSON value (already type-checked) into the Python value of the field."""
    k = f.kind
    if k == STR:
        return v
    if k in (INT, UINT):
        return int(v)
    if k == FLOAT:
        return float(v)
    if k == OPT_FLOAT:
        return None if v is None else float(v)
    if k == OPT_INT:
        return None if v is None else int(v)
    if k == BOOL:
        return bool(v)
    if k == TIME:
        try:
            return parse_time(v)
        except ValueError:
            raise FieldError(record, f.name, v, "not an RFC 3339 time", MALFORMED) from None
    if k == BYTES:
        if v is None:
            return None
        try:
            return base64.b64decode(v.replace("\r", "").replace("\n", ""), validate=True)
        except (binascii.Error, ValueError) as e:
            raise FieldError(record, f.name, None, f"not valid base64: {e}", MALFORMED) from None
    if k == STR_MAP:
        return {} if v is None else {key: x for key, x in v}
    if k == FLOAT_LIST:
        return [] if v is None else [float(x) for x in v]
    if k == STRUCT_LIST:
        assert f.elem is not None
        return [] if v is None else [_build(x, f.elem, record) for x in v]
    raise AssertionError(f"unknown field kind {k}")


def _zero(f: Field) -> Any:
    return {
        STR: "",
        INT: 0,
        UINT: 0,
        FLOAT: 0.0,
        BOOL: False,
        TIME: ZERO_TIME,
        BYTES: None,
        OPT_FLOAT: None,
        OPT_INT: None,
        STR_MAP: {},
        FLOAT_LIST: [],
        STRUCT_LIST: [],
    }[f.kind]


def _build(pairs: _Obj, spec: Spec, record: str) -> Any:
    values = {f.name: _zero(f) for f in spec.fields}
    fields = spec.by_name()
    for key, v in pairs:
        values[key] = _convert(v, fields[key], record)
    return spec.cls(**values)


def decode(b: bytes, spec: Spec, want_schema: str) -> Any:
    """Strictly decode one JSON record into spec's type (validation is left to the caller)."""
    if len(b) > c.MAX_RECORD_BYTES:
        raise TooLargeError(f"{spec.kind} record: {len(b)} bytes exceeds the {c.MAX_RECORD_BYTES} byte limit")
    doc = _parse(b, spec.kind)
    if not isinstance(doc, _Obj):
        raise MalformedError("json", f"{spec.kind} record: want a JSON object, got {_describe(doc)}")
    sc = _Scan(spec.kind)
    sc.depth(doc, 1, "")
    sc.obj(doc, spec, "", top=True)
    if sc.schema_mistyped or not sc.schema_seen:
        raise SchemaVersionError(spec.kind, None, want_schema)
    if sc.schema != want_schema:
        raise SchemaVersionError(spec.kind, sc.schema, want_schema)
    if sc.key_err is not None:
        raise sc.key_err
    return _build(doc, spec, spec.kind)


# ---- encoding -------------------------------------------------------------------------------


def go_float(f: float) -> str:
    """Format a float64 exactly as Go's encoding/json does (shortest digits, 'e' only at extremes)."""
    if math.isnan(f) or math.isinf(f):
        raise ValueError(f"unsupported float value {f}")
    a = abs(f)
    if a != 0 and (a < 1e-6 or a >= 1e21):
        s = repr(f)
        m = re.match(r"(.*e-)0(\d)\Z", s)
        return m.group(1) + m.group(2) if m else s
    return format(Decimal(repr(f)).normalize(), "f")


def go_string(s: str) -> str:
    """Quote a string as Go's encoder with SetEscapeHTML(false) does."""
    out = json.dumps(_fix_str(s), ensure_ascii=False)
    return out.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def go_time(t: datetime) -> str:
    """RFC 3339 with trailing-zero-free fractional seconds and Z for a zero offset (RFC3339Nano)."""
    off = t.utcoffset()
    if off is None:
        raise ValueError("naive datetime: created_at needs a time zone (use datetime.now(timezone.utc))")
    s = t.strftime("%Y-%m-%dT%H:%M:%S")
    if len(s) < 19:  # strftime does not zero-pad years below 1000 on every platform
        s = f"{t.year:04d}" + s[s.index("-") :]
    if t.microsecond:
        s += "." + f"{t.microsecond:06d}".rstrip("0")
    if off == timedelta(0):
        return s + "Z"
    sign = "-" if off < timedelta(0) else "+"
    mins = abs(int(off.total_seconds())) // 60
    return f"{s}{sign}{mins // 60:02d}:{mins % 60:02d}"


def _empty(v: Any, kind: str) -> bool:
    if kind in (OPT_FLOAT, OPT_INT):
        return v is None
    if kind == TIME:
        return False
    if v is None:
        return True
    if isinstance(v, (str, bytes, list, dict)):
        return len(v) == 0
    return not v


def _enc_value(v: Any, f: Field) -> str:
    k = f.kind
    if k == STR:
        return go_string(v)
    if k in (INT, UINT):
        return str(int(v))
    if k == FLOAT:
        return go_float(float(v))
    if k == OPT_FLOAT:
        return "null" if v is None else go_float(float(v))
    if k == OPT_INT:
        return "null" if v is None else str(int(v))
    if k == BOOL:
        return "true" if v else "false"
    if k == TIME:
        return go_string(go_time(v))
    if k == BYTES:
        return "null" if v is None else '"' + base64.b64encode(bytes(v)).decode("ascii") + '"'
    if k == STR_MAP:
        if not v:
            return "null"
        return "{" + ",".join(f"{go_string(key)}:{go_string(v[key])}" for key in sorted(v)) + "}"
    if k == FLOAT_LIST:
        return "null" if not v else "[" + ",".join(go_float(float(x)) for x in v) + "]"
    if k == STRUCT_LIST:
        assert f.elem is not None
        return "null" if not v else "[" + ",".join(encode_obj(x, f.elem) for x in v) + "]"
    raise AssertionError(f"unknown field kind {k}")


def encode_obj(values: Any, spec: Spec) -> str:
    """Encode a record (an object with one attribute per JSON field) as Go would."""
    parts = []
    for f in spec.fields:
        v = getattr(values, f.name)
        if f.omitempty and _empty(v, f.kind):
            continue
        parts.append(f"{go_string(f.name)}:{_enc_value(v, f)}")
    return "{" + ",".join(parts) + "}"


def check_utf8(values: Any, spec: Spec, prefix: str = "") -> str | None:
    """The path of the first string field (``meta.task``; ``meta`` for a key) holding a lone
    surrogate, which has no UTF-8 encoding, or None. Go would write it as U+FFFD: refused instead."""
    for f in spec.fields:
        v, p = getattr(values, f.name), prefix + f.name
        if f.kind == STR and _SURROGATE.search(v):
            return p
        if f.kind == STR_MAP and v:
            for key in v:
                if _SURROGATE.search(key):
                    return p
                if _SURROGATE.search(v[key]):
                    return f"{p}.{key}"
        if f.kind == STRUCT_LIST and v:
            assert f.elem is not None
            for i, x in enumerate(v):
                if (bad := check_utf8(x, f.elem, f"{p}[{i}].")) is not None:
                    return bad
    return None


def encode(values: Any, spec: Spec, kind: str) -> bytes:
    """Encode and apply the record size limit (Go: MaxRecordBytes → ErrTooLarge); a string that is
    not valid UTF-8 is a FieldError naming it."""
    if (bad := check_utf8(values, spec)) is not None:
        raise FieldError(f"encode {kind}", _fix_str(bad), None, "not valid UTF-8 (a lone surrogate)", MALFORMED)
    b = encode_obj(values, spec).encode("utf-8")
    if len(b) > c.MAX_RECORD_BYTES:
        raise TooLargeError(f"encode {kind}: {len(b)} bytes exceeds the {c.MAX_RECORD_BYTES} byte record limit")
    return b
