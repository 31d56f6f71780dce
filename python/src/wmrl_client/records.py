"""wmrl's record types, their validation and their JSON codecs, mirroring Go package ``topics``.

Validation applies the rules of ``topics/validate.go`` in the same order, so the first bad field
reported is the one Go would report; every error is a ``FieldError`` naming the record, the field
and the value. ``encode_*`` validate and produce the bytes Go's ``Encode*`` would produce;
``decode_*`` are as strict as Go's ``Decode*`` (unknown fields, duplicate keys, wrong JSON types
and unknown schema ids are refused).
"""

from __future__ import annotations

import hashlib
import math
import numbers
import re
import struct
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from . import _json as j
from . import contract as c
from .errors import CONFLICT, INVALID, TOO_LARGE, UNKNOWN_SCHEMA, FieldError, MalformedError, SchemaVersionError


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(kw_only=True)
class Rollout:
    """One sampled trajectory of a group. Key: run_id. Topic: rollouts."""

    schema: str = c.SCHEMA_ROLLOUT
    run_id: str = ""
    step: int = 0
    group_id: str = ""
    rollout_id: str = ""
    stream: str = ""
    policy_version: str = ""
    anchor: bool = False
    index: int = 0
    prompt: str = ""
    artifact: str = ""
    artifact_uri: str = ""
    artifact_sha256: str = ""
    artifact_size: int = 0
    meta: dict[str, str] = field(default_factory=dict)
    created_at: datetime = field(default_factory=_now)

    def validate(self) -> None:
        _validate_rollout(self)


@dataclass(kw_only=True)
class GroupManifest:
    """One group of a step: id, stream, size G and whether it is an anchor group."""

    group_id: str = ""
    stream: str = ""
    size: int = 0
    anchor: bool = False


@dataclass(kw_only=True)
class StepManifest:
    """A training step's groups, so the correction consumer can decide when the step is complete."""

    schema: str = c.SCHEMA_STEP
    run_id: str = ""
    step: int = 0
    policy_version: str = ""
    # Training step of the checkpoint that sampled the step, in [0, step]; None when unknown.
    # The correction consumer reports step - policy_step as each row's staleness.
    policy_step: int | None = None
    groups: list[GroupManifest] = field(default_factory=list)
    created_at: datetime = field(default_factory=_now)

    def validate(self) -> None:
        _validate_step(self)


@dataclass(kw_only=True)
class PredictedReward:
    """The world model's score for one rollout; score is present iff status is ok."""

    schema: str = c.SCHEMA_PREDICTED
    run_id: str = ""
    step: int = 0
    group_id: str = ""
    rollout_id: str = ""
    stream: str = ""
    policy_version: str = ""
    anchor: bool = False
    score: float | None = None
    status: str = ""
    reason: str = ""
    model: str = ""
    attempts: int = 0
    latency_ms: float = 0.0
    created_at: datetime = field(default_factory=_now)

    def validate(self) -> None:
        _validate_predicted(self)


@dataclass(kw_only=True)
class ExecutedReward:
    """The sandbox's real score for one anchor rollout; score iff ok, or imputed with a failure."""

    schema: str = c.SCHEMA_EXECUTED
    run_id: str = ""
    step: int = 0
    group_id: str = ""
    rollout_id: str = ""
    stream: str = ""
    policy_version: str = ""
    score: float | None = None
    imputed: bool = False
    status: str = ""
    reason: str = ""
    exit_code: int = 0
    duration_ms: float = 0.0
    stderr_tail: str = ""
    created_at: datetime = field(default_factory=_now)

    def validate(self) -> None:
        _validate_executed(self)


@dataclass(kw_only=True)
class DebiasShift:
    """What Online Debiasing did to one step's world-model advantages (topics.DebiasShift):
    ``rows`` unmasked world-model rows and ``groups`` groups compared, ``reordered`` groups whose
    order or ties the map changed, ``flattened`` groups it flattened to zero spread, and
    ``mean_shift`` = mean |A(f(r̂)) − A(r̂)| over the rows."""

    rows: int = 0
    groups: int = 0
    reordered: int = 0
    flattened: int = 0
    mean_shift: float = 0.0


@dataclass(kw_only=True)
class CalibrationSnapshot:
    """The correction state of one (run, stream) sealed after step; keyed run_id/stream.

    Written as the binary v2 snapshot (``encode_record``); the JSON v1 form is still read.
    """

    schema: str = c.SCHEMA_CALIBRATION_V2
    run_id: str = ""
    stream: str = ""
    step: int = 0
    fit_version: int = 0
    pairs: int = 0
    config_hash: str = ""
    digest: str = ""
    state: bytes | None = None
    break_x: list[float] = field(default_factory=list)
    break_y: list[float] = field(default_factory=list)
    anchor_weight: float = 0.0
    bias_before: float = 0.0
    bias_after: float = 0.0
    step_pairs: int = 0
    created_at: datetime = field(default_factory=_now)
    # None in a snapshot written before the debias effect existed (binary layout 2, JSON v1).
    debias: DebiasShift | None = None

    def validate(self) -> None:
        _validate_calibration(self)


@dataclass(kw_only=True)
class AdvantageRow:
    """One rollout's fused advantage.

    ``mask`` is the trainer's loss mask: True means the row counts; False means it is masked out
    (no graded reward, its group had fewer than two graded rollouts, or ``mask_reason`` "stale")
    and then has advantage 0. ``staleness`` is the number of steps between the policy that
    generated the rollout and the step it trains, valid when ``staleness_ok`` (the manifest had a
    policy_step; null in Arrow otherwise); both come from wmrl.advantages.v2 batches and keep
    their defaults in v1 batches.
    """

    run_id: str = ""
    stream: str = ""
    step: int = 0
    group_id: str = ""
    rollout_id: str = ""
    policy_version: str = ""
    source: str = ""
    predicted: float = 0.0
    predicted_ok: bool = False
    calibrated: float = 0.0
    executed: float = 0.0
    executed_ok: bool = False
    used: float = 0.0
    advantage: float = 0.0
    weight: float = 0.0
    mask: bool = False
    calibration_version: int = 0
    staleness: int = 0
    staleness_ok: bool = False
    mask_reason: str = ""

    def validate(self) -> None:
        _validate_advantage(self)

    def uses_v2(self) -> bool:
        """Whether the row needs the wmrl.advantages.v2 columns (topics.AdvantageRow.UsesV2)."""
        return self.staleness_ok or self.mask_reason != ""


# ---- JSON layouts (Go struct order and tags) -------------------------------------------------

F = j.Field
_T = TypeVar("_T")


def _builder(cls: Callable[..., _T]) -> Callable[[dict[str, Any]], _T]:
    return lambda values: cls(**values)


GROUP_SPEC = j.Spec(
    "group",
    (F("group_id", j.STR), F("stream", j.STR), F("size", j.INT), F("anchor", j.BOOL)),
    _builder(GroupManifest),
)
ROLLOUT_SPEC = j.Spec(
    "rollout",
    (
        F("schema", j.STR),
        F("run_id", j.STR),
        F("step", j.INT),
        F("group_id", j.STR),
        F("rollout_id", j.STR),
        F("stream", j.STR),
        F("policy_version", j.STR),
        F("anchor", j.BOOL),
        F("index", j.INT),
        F("prompt", j.STR, True),
        F("artifact", j.STR, True),
        F("artifact_uri", j.STR, True),
        F("artifact_sha256", j.STR, True),
        F("artifact_size", j.INT, True),
        F("meta", j.STR_MAP, True),
        F("created_at", j.TIME),
    ),
    _builder(Rollout),
)
STEP_SPEC = j.Spec(
    "step",
    (
        F("schema", j.STR),
        F("run_id", j.STR),
        F("step", j.INT),
        F("policy_version", j.STR),
        F("policy_step", j.OPT_INT, True),
        F("groups", j.STRUCT_LIST, False, GROUP_SPEC),
        F("created_at", j.TIME),
    ),
    _builder(StepManifest),
)
PREDICTED_SPEC = j.Spec(
    "predicted",
    (
        F("schema", j.STR),
        F("run_id", j.STR),
        F("step", j.INT),
        F("group_id", j.STR),
        F("rollout_id", j.STR),
        F("stream", j.STR),
        F("policy_version", j.STR),
        F("anchor", j.BOOL),
        F("score", j.OPT_FLOAT, True),
        F("status", j.STR),
        F("reason", j.STR, True),
        F("model", j.STR, True),
        F("attempts", j.INT, True),
        F("latency_ms", j.FLOAT, True),
        F("created_at", j.TIME),
    ),
    _builder(PredictedReward),
)
EXECUTED_SPEC = j.Spec(
    "executed",
    (
        F("schema", j.STR),
        F("run_id", j.STR),
        F("step", j.INT),
        F("group_id", j.STR),
        F("rollout_id", j.STR),
        F("stream", j.STR),
        F("policy_version", j.STR),
        F("score", j.OPT_FLOAT, True),
        F("imputed", j.BOOL, True),
        F("status", j.STR),
        F("reason", j.STR, True),
        F("exit_code", j.INT, True),
        F("duration_ms", j.FLOAT, True),
        F("stderr_tail", j.STR, True),
        F("created_at", j.TIME),
    ),
    _builder(ExecutedReward),
)
CALIBRATION_SPEC = j.Spec(
    "calibration",
    (
        F("schema", j.STR),
        F("run_id", j.STR),
        F("stream", j.STR),
        F("step", j.INT),
        F("fit_version", j.UINT),
        F("pairs", j.INT),
        F("config_hash", j.STR),
        F("digest", j.STR),
        F("state", j.BYTES),
        F("break_x", j.FLOAT_LIST, True),
        F("break_y", j.FLOAT_LIST, True),
        F("anchor_weight", j.FLOAT),
        F("bias_before", j.FLOAT),
        F("bias_after", j.FLOAT),
        F("step_pairs", j.INT),
        F("created_at", j.TIME),
    ),
    _builder(CalibrationSnapshot),
)
ADVANTAGE_SPEC = j.Spec(
    "advantage",
    (
        F("run_id", j.STR),
        F("stream", j.STR),
        F("step", j.INT),
        F("group_id", j.STR),
        F("rollout_id", j.STR),
        F("policy_version", j.STR),
        F("source", j.STR),
        F("predicted", j.FLOAT),
        F("predicted_ok", j.BOOL),
        F("calibrated", j.FLOAT),
        F("executed", j.FLOAT),
        F("executed_ok", j.BOOL),
        F("used", j.FLOAT),
        F("advantage", j.FLOAT),
        F("weight", j.FLOAT),
        F("mask", j.BOOL),
        F("calibration_version", j.UINT),
        F("staleness", j.INT, True),
        F("staleness_ok", j.BOOL, True),
        F("mask_reason", j.STR, True),
    ),
    _builder(AdvantageRow),
)

Record = Rollout | StepManifest | PredictedReward | ExecutedReward | CalibrationSnapshot

_BY_SCHEMA: dict[str, tuple[type, j.Spec]] = {
    c.SCHEMA_ROLLOUT: (Rollout, ROLLOUT_SPEC),
    c.SCHEMA_STEP: (StepManifest, STEP_SPEC),
    c.SCHEMA_PREDICTED: (PredictedReward, PREDICTED_SPEC),
    c.SCHEMA_EXECUTED: (ExecutedReward, EXECUTED_SPEC),
    c.SCHEMA_CALIBRATION: (CalibrationSnapshot, CALIBRATION_SPEC),
}
_SCHEMA_OF: dict[type, str] = {cls: schema for schema, (cls, _) in _BY_SCHEMA.items()}
# A calibration snapshot is written as v2 (binary); the JSON spec above reads v1.
_SCHEMA_OF[CalibrationSnapshot] = c.SCHEMA_CALIBRATION_V2


def schema_of(record: Record) -> str:
    """The schema id a record type travels under (its type alone decides it)."""
    try:
        return _SCHEMA_OF[type(record)]
    except KeyError:
        raise TypeError(f"{type(record).__name__} is not a wmrl JSON record type") from None


def encode_record(record: Record) -> bytes:
    """Validate a record and encode it as Go's Encode* functions do, byte for byte: JSON, or the
    binary v2 layout for a CalibrationSnapshot.

    An empty schema is filled in; any other schema than the type's own is refused
    (SchemaVersionError), because the type alone decides the wire schema. A calibration snapshot
    read as v1 is written as v2, as Go's EncodeCalibration does.
    """
    schema = schema_of(record)
    if record.schema == "" or (isinstance(record, CalibrationSnapshot) and record.schema == c.SCHEMA_CALIBRATION):
        record = replace(record, schema=schema)
    record.validate()
    if isinstance(record, CalibrationSnapshot):
        return _encode_calibration(record)
    spec = _BY_SCHEMA[schema][1]
    return j.encode(record, spec, type(record).__name__)


def decode_record(schema: str, b: bytes) -> Record:
    """Strictly decode and validate the record named by schema (the wmrl-schema header)."""
    if schema in c.ADVANTAGE_SCHEMAS:
        raise SchemaVersionError(
            c.HEADER_SCHEMA, schema, "a JSON record schema", "advantages are Arrow: use decode_advantages"
        )
    if schema == c.SCHEMA_CALIBRATION_V2:
        snap = _decode_calibration(b)
        snap.validate()
        return snap
    entry = _BY_SCHEMA.get(schema)
    if entry is None:
        raise FieldError("", c.HEADER_SCHEMA, schema, "no decoder for this schema", UNKNOWN_SCHEMA)
    _, spec = entry
    rec: Record = j.decode(b, spec, schema)
    rec.validate()
    return rec


def decode_rollout(b: bytes) -> Rollout:
    r = decode_record(c.SCHEMA_ROLLOUT, b)
    assert isinstance(r, Rollout)
    return r


def decode_step(b: bytes) -> StepManifest:
    r = decode_record(c.SCHEMA_STEP, b)
    assert isinstance(r, StepManifest)
    return r


def advantage_row_from_json(obj: Mapping[str, Any]) -> AdvantageRow:
    """An AdvantageRow from its JSON object form (as in golden advantages.json)."""
    names = {f.name for f in fields(AdvantageRow)}
    unknown = set(obj) - names
    if unknown:
        raise FieldError("advantage", sorted(unknown)[0], None, "unknown field")
    return AdvantageRow(**dict(obj))


def encode_advantage_rows_json(rows: list[AdvantageRow]) -> str:
    """Rows as a JSON array with Go's field order and float formatting (one object per line)."""
    return "[\n" + ",\n".join(j.encode_obj(r, ADVANTAGE_SPEC) for r in rows) + "\n]\n"


# ---- binary calibration snapshot (topics/calibsnap.go) ----------------------------------------

_SNAP_MAGIC = b"WMRLCAL\x02"  # layout 2
_SNAP_MAGIC_DEBIAS = b"WMRLCAL\x03"  # layout 3: layout 2 plus the debias effect after created_at
_SNAP_DEBIAS = struct.Struct("<IIIId")  # rows, groups, reordered, flattened, mean_shift
_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _encode_calibration(s: CalibrationSnapshot) -> bytes:
    """The v2 layout of topics.EncodeCalibration: magic | run_id, stream, config_hash, digest
    (u16 length + UTF-8) | step i64 | fit_version, pairs, step_pairs u64 | anchor_weight,
    bias_before, bias_after f64 | created_at seconds i64, nanoseconds u32 | n u32, n break_x f64,
    n break_y f64 | state (u32 length + bytes); little endian. With ``debias`` set, layout 3:
    magic ``WMRLCAL\\x03`` and the debias block right after created_at."""
    out = bytearray(_SNAP_MAGIC if s.debias is None else _SNAP_MAGIC_DEBIAS)
    for v in (s.run_id, s.stream, s.config_hash, s.digest):
        raw = v.encode()
        out += struct.pack("<H", len(raw)) + raw
    delta = s.created_at - _UNIX_EPOCH
    sec = delta.days * 86400 + delta.seconds
    out += struct.pack(
        "<qQQQdddqI",
        s.step,
        s.fit_version,
        s.pairs,
        s.step_pairs,
        s.anchor_weight,
        s.bias_before,
        s.bias_after,
        sec,
        delta.microseconds * 1000,
    )
    if (d := s.debias) is not None:
        out += _SNAP_DEBIAS.pack(d.rows, d.groups, d.reordered, d.flattened, d.mean_shift)
    out += struct.pack(f"<I{len(s.break_x)}d{len(s.break_y)}d", len(s.break_x), *s.break_x, *s.break_y)
    state = bytes(s.state or b"")
    out += struct.pack("<I", len(state)) + state
    if len(out) > c.MAX_RECORD_BYTES:
        raise FieldError(
            _record_name("calibration", "run", s.run_id, "stream", s.stream),
            "state",
            len(state),
            f"snapshot of {len(out)} bytes exceeds {c.MAX_RECORD_BYTES}",
            TOO_LARGE,
        )
    return bytes(out)


def _decode_calibration(b: bytes) -> CalibrationSnapshot:
    """Parse a v2 snapshot (unvalidated), with the errors topics.DecodeCalibration gives."""
    if len(b) > c.MAX_RECORD_BYTES:
        raise FieldError("calibration", "value", len(b), f"exceeds {c.MAX_RECORD_BYTES} bytes", TOO_LARGE)
    if not (b.startswith(_SNAP_MAGIC) or b.startswith(_SNAP_MAGIC_DEBIAS)):
        raise MalformedError("binary", "calibration: not a v2 snapshot (magic)")
    pos = len(_SNAP_MAGIC)

    def take(n: int) -> bytes:
        nonlocal pos
        if n > len(b) - pos:
            raise MalformedError("binary", "calibration: value ends early")
        v = b[pos : pos + n]
        pos += n
        return v

    def text() -> str:
        # Invalid UTF-8 survives as lone surrogates, which validation refuses as Go's does.
        return take(struct.unpack("<H", take(2))[0]).decode("utf-8", errors="surrogateescape")

    run_id, stream, config_hash, digest = text(), text(), text(), text()
    step, fit_version, pairs, step_pairs, aw, bb, ba, sec, nsec = struct.unpack("<qQQQdddqI", take(68))
    debias = None
    if b.startswith(_SNAP_MAGIC_DEBIAS):
        rows, groups, reordered, flattened, shift = _SNAP_DEBIAS.unpack(take(_SNAP_DEBIAS.size))
        debias = DebiasShift(rows=rows, groups=groups, reordered=reordered, flattened=flattened, mean_shift=shift)
    (n,) = struct.unpack("<I", take(4))
    if n > (len(b) - pos) // 16:
        raise MalformedError("binary", "calibration: value ends early")
    breaks = struct.unpack(f"<{2 * n}d", take(16 * n))
    (m,) = struct.unpack("<I", take(4))
    state = take(m)
    if pos != len(b):
        raise MalformedError("binary", f"calibration: {len(b) - pos} bytes after the state")
    record = _record_name("calibration", "run", run_id, "stream", stream)
    if pairs > 2**31 - 1:
        raise FieldError(record, "pairs", pairs, "out of range")
    if step_pairs > 2**31 - 1:
        raise FieldError(record, "step_pairs", step_pairs, "out of range")
    if nsec >= 10**9:
        raise FieldError(record, "created_at", nsec, "nanoseconds out of range")
    try:
        created_at = _UNIX_EPOCH + timedelta(seconds=sec, microseconds=nsec // 1000)
    except OverflowError:
        raise FieldError(record, "created_at", sec, "out of the range of a Python datetime") from None
    return CalibrationSnapshot(
        schema=c.SCHEMA_CALIBRATION_V2,
        run_id=run_id,
        stream=stream,
        step=step,
        fit_version=fit_version,
        pairs=pairs,
        config_hash=config_hash,
        digest=digest,
        state=state or None,
        break_x=list(breaks[:n]),
        break_y=list(breaks[n:]),
        anchor_weight=aw,
        bias_before=bb,
        bias_after=ba,
        step_pairs=step_pairs,
        created_at=created_at,
        debias=debias,
    )


# ---- validation (topics/validate.go) ---------------------------------------------------------

_ID_RE = re.compile(r"[A-Za-z0-9._\-:@+]*\Z")
_HEX64_RE = re.compile(r"[0-9a-f]{64}\Z")
_SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_BAD_PCT_RE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def utf8_len(s: str) -> int:
    return len(s.encode("utf-8", "surrogatepass"))


def check_id(s: str) -> str:
    """ "" when s is a valid id (1..128 bytes of A-Z a-z 0-9 . _ - : @ +), else the reason."""
    if s == "":
        return "required"
    if utf8_len(s) > c.MAX_ID_LEN:
        return f"longer than {c.MAX_ID_LEN} bytes"
    if not _ID_RE.match(s):
        b = s.encode("utf-8", "surrogatepass")
        for i, ch in enumerate(b):
            if not (chr(ch).isascii() and _ID_RE.match(chr(ch))):
                return f"character {chr(ch)!r} at byte {i} not allowed in an id (allowed: A-Z a-z 0-9 . _ - : @ +)"
    return ""


def valid_id(s: str) -> bool:
    """Whether s is a valid wmrl id (topics.ValidID)."""
    return isinstance(s, str) and check_id(s) == ""


def _check_text(s: str, maxlen: int, multiline: bool) -> str:
    if utf8_len(s) > maxlen:
        return f"longer than {maxlen} bytes"
    if any("\ud800" <= ch <= "\udfff" for ch in s):
        return "not valid UTF-8"
    pos = 0
    for ch in s:
        if unicodedata.category(ch) == "Cc" and not (multiline and ch in "\n\t\r"):
            return f"control character {ch!r} at byte {pos}"
        pos += utf8_len(ch)
    return ""


def _record_name(kind: str, *kv: str) -> str:
    s = kind
    for i in range(0, len(kv) - 1, 2):
        v = kv[i + 1]
        if not isinstance(v, str) or v == "":
            continue
        if not valid_id(v):
            v = j.go_string(v)
        s += f" {kv[i]}={v}"
    return s


class _Checker:
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
        msg = _check_text(v, maxlen, multiline)
        if msg:
            self.fail(fld, v, msg)

    def schema(self, got: str, want: str) -> None:
        if got != want and self.err is None:
            self.err = SchemaVersionError(self.record, got or None, want)

    def step(self, v: int) -> None:
        if v < 0:
            self.fail("step", v, "must be >= 0")

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

    def status(self, v: str) -> None:
        if v not in c.STATUSES:
            self.fail("status", v or None, "must be one of ok, timeout, error, invalid")

    def score_status(self, score: float | None, status: str, reason: str, imputed: bool) -> None:
        self.status(status)
        ok = status == c.STATUS_OK
        if ok and imputed:
            self.fail("imputed", True, "an imputed score needs a failure status, not ok")
        elif ok and score is None:
            self.fail("score", None, "required when status is ok")
        elif not ok and imputed and score is None:
            self.fail("score", None, "required when imputed is set")
        elif not ok and not imputed and score is not None:
            self.fail("score", score, f"must be absent when status is {status} (set imputed to record a policy score)")
        if score is not None:
            self.score("score", score)
        if not ok and reason == "":
            self.fail("reason", None, f"required when status is {status}")
        self.text("reason", reason, c.MAX_REASON_LEN, True)

    def optional_score(self, fld: str, v: float, ok: bool) -> None:
        if ok:
            self.score(fld, v)
        elif v != 0 or math.copysign(1.0, v) < 0:
            self.fail(fld, v, f"must be 0 when {fld}_ok is false")

    def monotone(self, fld: str, xs: list[float]) -> None:
        for i, x in enumerate(xs):
            f = f"{fld}[{i}]"
            self.score(f, x)
            if i > 0 and x < xs[i - 1]:
                self.fail(f, x, f"decreases (previous {xs[i - 1]:g})")


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


def _check_types(record: Any, spec: j.Spec, name: str, prefix: str = "") -> None:
    """Python-side guard before Go's rules: each field must hold the Python type of its Go type."""
    for f in spec.fields:
        v = getattr(record, f.name)
        if f.kind == j.STRUCT_LIST:
            if not isinstance(v, list):
                raise FieldError(name, prefix + f.name, None, "must be a list")
            assert f.elem is not None
            for i, x in enumerate(v):
                if not isinstance(x, GroupManifest):
                    raise FieldError(name, f"{prefix}{f.name}[{i}]", None, "must be a GroupManifest")
                _check_types(x, f.elem, name, f"{prefix}{f.name}[{i}].")
            continue
        ok, want = _PY_TYPES[f.kind]
        if not ok(v):
            raise FieldError(name, prefix + f.name, None, f"must be {want}, got {type(v).__name__}")


def _validate_rollout(r: Rollout) -> None:
    name = _record_name("rollout", "run", r.run_id, "rollout", r.rollout_id)
    _check_types(r, ROLLOUT_SPEC, name)
    ch = _Checker(name)
    ch.schema(r.schema, c.SCHEMA_ROLLOUT)
    ch.id("run_id", r.run_id)
    ch.step(r.step)
    ch.id("group_id", r.group_id)
    ch.id("rollout_id", r.rollout_id)
    ch.id("stream", r.stream)
    ch.text("policy_version", r.policy_version, c.MAX_LABEL_LEN)
    if r.index < 0 or r.index >= c.MAX_GROUP_SIZE:
        ch.fail("index", r.index, f"must be in [0,{c.MAX_GROUP_SIZE})")
    art_len = utf8_len(r.artifact)
    if art_len > c.MAX_INLINE_ARTIFACT:
        ch.fail(
            "artifact",
            r.artifact,
            f"inline artifact over {c.MAX_INLINE_ARTIFACT} bytes: send it by reference (artifact_uri)",
            TOO_LARGE,
        )
    if r.artifact and r.artifact_uri:
        ch.fail("artifact_uri", r.artifact_uri, "artifact and artifact_uri are exclusive")
    if r.artifact_uri:
        ch.text("artifact_uri", r.artifact_uri, c.MAX_REASON_LEN)
        if not _SCHEME_RE.match(r.artifact_uri) or _BAD_PCT_RE.search(r.artifact_uri):
            ch.fail("artifact_uri", r.artifact_uri, "not an absolute URI")
        if not r.artifact_sha256:
            ch.fail("artifact_sha256", None, "required when artifact_uri is set")
    if r.artifact_sha256:
        if not _HEX64_RE.match(r.artifact_sha256):
            ch.fail("artifact_sha256", r.artifact_sha256, "want 64 lowercase hex digits")
        elif r.artifact:
            digest = hashlib.sha256(r.artifact.encode("utf-8", "surrogatepass")).hexdigest()
            if digest != r.artifact_sha256:
                ch.fail("artifact_sha256", r.artifact_sha256, "does not match the inline artifact")
    if r.artifact_size < 0:
        ch.fail("artifact_size", r.artifact_size, "must be >= 0")
    elif r.artifact and r.artifact_size != 0 and r.artifact_size != art_len:
        ch.fail("artifact_size", r.artifact_size, f"inline artifact has {art_len} bytes")
    if len(r.meta) > c.MAX_META_ENTRIES:
        ch.fail("meta", len(r.meta), f"more than {c.MAX_META_ENTRIES} entries")
    for k in sorted(r.meta, key=lambda s: s.encode("utf-8", "surrogatepass")):
        if k == "":
            ch.fail("meta", None, "empty key")
        ch.text("meta", k, c.MAX_LABEL_LEN)
        ch.text("meta." + k, r.meta[k], c.MAX_REASON_LEN, True)
    ch.done()


def _validate_step(m: StepManifest) -> None:
    name = _record_name("step", "run", m.run_id, "step", str(m.step))
    _check_types(m, STEP_SPEC, name)
    ch = _Checker(name)
    ch.schema(m.schema, c.SCHEMA_STEP)
    ch.id("run_id", m.run_id)
    ch.step(m.step)
    ch.text("policy_version", m.policy_version, c.MAX_LABEL_LEN)
    if m.policy_step is not None and not 0 <= m.policy_step <= m.step:
        ch.fail(
            "policy_step",
            m.policy_step,
            "must be in [0,step]: a step is trained on rollouts of its own or an earlier policy",
        )
    if not m.groups:
        ch.fail("groups", None, "at least one group required")
    if len(m.groups) > c.MAX_GROUPS_PER_STEP:
        ch.fail("groups", len(m.groups), f"more than {c.MAX_GROUPS_PER_STEP} groups")
    seen: dict[str, int] = {}
    for i, g in enumerate(m.groups):
        p = f"groups[{i}]."
        ch.id(p + "group_id", g.group_id)
        if g.group_id in seen:
            ch.fail(p + "group_id", g.group_id, f"duplicate of groups[{seen[g.group_id]}]")
        seen[g.group_id] = i
        ch.id(p + "stream", g.stream)
        if g.size < 1 or g.size > c.MAX_GROUP_SIZE:
            ch.fail(p + "size", g.size, f"must be in [1,{c.MAX_GROUP_SIZE}]")
    ch.done()


def _validate_predicted(p: PredictedReward) -> None:
    name = _record_name("predicted", "run", p.run_id, "rollout", p.rollout_id)
    _check_types(p, PREDICTED_SPEC, name)
    ch = _Checker(name)
    ch.schema(p.schema, c.SCHEMA_PREDICTED)
    ch.id("run_id", p.run_id)
    ch.step(p.step)
    ch.id("group_id", p.group_id)
    ch.id("rollout_id", p.rollout_id)
    ch.id("stream", p.stream)
    ch.text("policy_version", p.policy_version, c.MAX_LABEL_LEN)
    ch.score_status(p.score, p.status, p.reason, False)
    ch.text("model", p.model, c.MAX_LABEL_LEN)
    if p.attempts < 0:
        ch.fail("attempts", p.attempts, "must be >= 0")
    ch.non_negative("latency_ms", p.latency_ms)
    ch.done()


def _validate_executed(e: ExecutedReward) -> None:
    name = _record_name("executed", "run", e.run_id, "rollout", e.rollout_id)
    _check_types(e, EXECUTED_SPEC, name)
    ch = _Checker(name)
    ch.schema(e.schema, c.SCHEMA_EXECUTED)
    ch.id("run_id", e.run_id)
    ch.step(e.step)
    ch.id("group_id", e.group_id)
    ch.id("rollout_id", e.rollout_id)
    ch.id("stream", e.stream)
    ch.text("policy_version", e.policy_version, c.MAX_LABEL_LEN)
    ch.score_status(e.score, e.status, e.reason, e.imputed)
    ch.non_negative("duration_ms", e.duration_ms)
    ch.text("stderr_tail", e.stderr_tail, c.MAX_STDERR_TAIL, True)
    ch.done()


def _validate_calibration(s: CalibrationSnapshot) -> None:
    name = _record_name("calibration", "run", s.run_id, "stream", s.stream)
    _check_types(s, CALIBRATION_SPEC, name)
    ch = _Checker(name)
    if s.schema != c.SCHEMA_CALIBRATION:
        ch.schema(s.schema, c.SCHEMA_CALIBRATION_V2)
    ch.id("run_id", s.run_id)
    ch.id("stream", s.stream)
    ch.step(s.step)
    if s.pairs < 0:
        ch.fail("pairs", s.pairs, "must be >= 0")
    if s.step_pairs < 0:
        ch.fail("step_pairs", s.step_pairs, "must be >= 0")
    ch.text("config_hash", s.config_hash, c.MAX_LABEL_LEN)
    if s.digest == "":
        ch.fail("digest", None, "required")
    ch.text("digest", s.digest, c.MAX_LABEL_LEN)
    if len(s.break_x) != len(s.break_y):
        ch.fail("break_y", len(s.break_y), f"length differs from break_x ({len(s.break_x)})")
    if len(s.break_x) > c.MAX_BREAKPOINTS:
        ch.fail("break_x", len(s.break_x), f"more than {c.MAX_BREAKPOINTS} breakpoints")
    ch.monotone("break_x", [float(x) for x in s.break_x])
    ch.monotone("break_y", [float(x) for x in s.break_y])
    ch.non_negative("anchor_weight", s.anchor_weight)
    ch.finite("bias_before", s.bias_before)
    ch.finite("bias_after", s.bias_after)
    if (d := s.debias) is not None:
        for fname, v in (
            ("debias.rows", d.rows),
            ("debias.groups", d.groups),
            ("debias.reordered", d.reordered),
            ("debias.flattened", d.flattened),
        ):
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 2**31 - 1:
                ch.fail(fname, v, f"not in [0, {2**31 - 1}]")
        if d.reordered > d.groups:
            ch.fail("debias.reordered", d.reordered, f"exceeds groups ({d.groups})")
        if d.flattened > d.reordered:
            ch.fail("debias.flattened", d.flattened, f"exceeds reordered ({d.reordered})")
        ch.non_negative("debias.mean_shift", float(d.mean_shift))
    ch.done()


def _validate_advantage(a: AdvantageRow) -> None:
    name = _record_name("advantage", "run", a.run_id, "rollout", a.rollout_id)
    _check_types(a, ADVANTAGE_SPEC, name)
    ch = _Checker(name)
    ch.id("run_id", a.run_id)
    ch.id("stream", a.stream)
    ch.step(a.step)
    ch.id("group_id", a.group_id)
    ch.id("rollout_id", a.rollout_id)
    ch.text("policy_version", a.policy_version, c.MAX_LABEL_LEN)
    if a.source in (c.SOURCE_ANCHOR, c.SOURCE_WORLD_MODEL):
        pass
    elif a.source == "":
        if a.mask:
            ch.fail("source", None, "required for an unmasked row")
    else:
        ch.fail("source", a.source, "must be anchor or world_model")
    ch.optional_score("predicted", float(a.predicted), a.predicted_ok)
    ch.optional_score("executed", float(a.executed), a.executed_ok)
    ch.score("calibrated", float(a.calibrated))
    ch.score("used", float(a.used))
    ch.finite("advantage", float(a.advantage))
    ch.non_negative("weight", float(a.weight))
    if not a.mask:
        if a.advantage != 0:
            ch.fail("advantage", a.advantage, "must be 0 for a masked row")
    else:
        if a.source == c.SOURCE_ANCHOR and not a.executed_ok:
            ch.fail("executed_ok", False, "an unmasked anchor row needs an executed score")
        if a.source == c.SOURCE_WORLD_MODEL and not a.predicted_ok:
            ch.fail("predicted_ok", False, "an unmasked world_model row needs a predicted score")
    if not a.staleness_ok and a.staleness != 0:
        ch.fail("staleness", a.staleness, "must be 0 when staleness_ok is false")
    elif a.staleness < 0:
        ch.fail("staleness", a.staleness, "must be >= 0")
    if a.mask_reason == "":
        pass
    elif a.mask_reason == c.MASK_STALE:
        if a.mask:
            ch.fail("mask_reason", a.mask_reason, "only a masked row has a mask reason")
        elif not a.staleness_ok:
            ch.fail("mask_reason", a.mask_reason, "a row masked as stale needs a staleness")
    else:
        ch.fail("mask_reason", a.mask_reason, f"must be empty or {c.MASK_STALE!r}")
    ch.done()


def validate_advantage_rows(rows: list[AdvantageRow]) -> None:
    """Every row valid and no two rows for one (run, step, group, rollout) (topics.ValidateAdvantages)."""
    seen: dict[tuple[str, int, str, str], int] = {}
    for i, r in enumerate(rows):
        try:
            r.validate()
        except FieldError as e:
            raise FieldError(e.record, e.field, e.value, f"{e.why} (advantages row {i})", e.cause) from None
        k = (r.run_id, r.step, r.group_id, r.rollout_id)
        if k in seen:
            raise FieldError(
                _record_name("advantage", "run", r.run_id, "rollout", r.rollout_id),
                "rollout_id",
                r.rollout_id,
                f"duplicate of row {seen[k]} (advantages row {i})",
                CONFLICT,
            )
        seen[k] = i
