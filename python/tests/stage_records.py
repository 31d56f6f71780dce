"""The records only Go stages write (predicted and executed rewards, calibration snapshots): their
types, JSON layouts, rules and the binary calibration snapshot, for the contract tests alone.

The trainer client never writes or reads these records, so they are not part of wmrl_client; the
tests keep them to prove the client's generic codec (wmrl_client._json) and checker reproduce
Go's bytes and errors on every golden file, and golden_python.py writes them for
topics/python_contract_test.go. ``encode``/``decode`` cover every JSON record schema.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from client_codecs import decode_record

from wmrl_client import _json as j
from wmrl_client import contract as c
from wmrl_client.codec import encode_record
from wmrl_client.errors import TOO_LARGE, UNKNOWN_SCHEMA, FieldError, MalformedError
from wmrl_client.ids import check_id, record_name
from wmrl_client.records import (
    ADVANTAGE_SPEC,
    ROLLOUT_KEY_FIELDS,
    AdvantageRow,
    Rollout,
    StepManifest,
    _now,
    _RolloutKey,
)
from wmrl_client.validate import Checker, check_types

F = j.Field


@dataclass(kw_only=True)
class PredictedReward(_RolloutKey):
    """The world model's score for one rollout; score is present iff status is ok."""

    schema: str = c.SCHEMA_PREDICTED
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
class ExecutedReward(_RolloutKey):
    """The sandbox's real score for one anchor rollout; score iff ok, or imputed with a failure."""

    schema: str = c.SCHEMA_EXECUTED
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
class TrustGate:
    """The trust gate that decided one step's world-model rows (topics.TrustGate): ``closed`` when
    they were masked, the window's ``pairs`` and Pearson ``rho`` with its 95% Fisher-z interval
    [``lo``, ``hi``]."""

    closed: bool = False
    pairs: int = 0
    rho: float = 0.0
    lo: float = 0.0
    hi: float = 0.0


@dataclass(kw_only=True)
class CalibrationSnapshot:
    """The correction state of one (run, stream) sealed after step; keyed run_id/stream.

    Binary only (``encode``): the one layout of topics/calibsnap.go.
    """

    schema: str = c.SCHEMA_CALIBRATION
    run_id: str = ""
    stream: str = ""
    step: int = 0
    fit_version: int = 0
    pairs: int = 0
    config_hash: str = ""
    settings: str = ""
    digest: str = ""
    state: bytes | None = None
    break_x: list[float] = field(default_factory=list)
    break_y: list[float] = field(default_factory=list)
    anchor_weight: float = 0.0
    bias_before: float = 0.0
    bias_after: float = 0.0
    step_pairs: int = 0
    created_at: datetime = field(default_factory=_now)
    # None when the writer did not record it (bit 0 of the blocks byte clear).
    debias: DebiasShift | None = None
    # None when the writer ran without --trust-gate (bit 1 of the blocks byte clear).
    gate: TrustGate | None = None

    def validate(self) -> None:
        _validate_calibration(self)


PREDICTED_SPEC = j.Spec(
    "predicted",
    (
        *ROLLOUT_KEY_FIELDS,
        F("anchor", j.BOOL),
        F("score", j.OPT_FLOAT, True),
        F("status", j.STR),
        F("reason", j.STR, True),
        F("model", j.STR, True),
        F("attempts", j.INT, True),
        F("latency_ms", j.FLOAT, True),
        F("created_at", j.TIME),
    ),
    PredictedReward,
)
EXECUTED_SPEC = j.Spec(
    "executed",
    (
        *ROLLOUT_KEY_FIELDS,
        F("score", j.OPT_FLOAT, True),
        F("imputed", j.BOOL, True),
        F("status", j.STR),
        F("reason", j.STR, True),
        F("exit_code", j.INT, True),
        F("duration_ms", j.FLOAT, True),
        F("stderr_tail", j.STR, True),
        F("created_at", j.TIME),
    ),
    ExecutedReward,
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
        F("settings", j.STR, True),
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
    CalibrationSnapshot,
)


@dataclass(frozen=True)
class CalibrationEnd:
    """A run's end on the calibration changelog (topics.CalibrationEnd)."""

    run_id: str
    last_step: int
    ended_at: datetime
    reason: str

    def validate(self) -> None:
        record = record_name("calibration end", "run", self.run_id)
        if msg := check_id(self.run_id):
            raise FieldError(record, "run_id", self.run_id, msg)
        if self.last_step < 0:
            raise FieldError(record, "last_step", self.last_step, "must be >= 0")
        if self.reason not in c.END_REASONS:
            raise FieldError(record, "reason", self.reason, f"want {c.END_REASONS[0]!r} or {c.END_REASONS[1]!r}")


StageRecord = PredictedReward | ExecutedReward | CalibrationSnapshot | CalibrationEnd
Record = Rollout | StepManifest | StageRecord

_SPECS: dict[str, j.Spec] = {
    c.SCHEMA_PREDICTED: PREDICTED_SPEC,
    c.SCHEMA_EXECUTED: EXECUTED_SPEC,
}


def encode(record: Record) -> bytes:
    """encode_record for every record type: JSON, or the binary layout for a CalibrationSnapshot
    and a CalibrationEnd."""
    if isinstance(record, (Rollout, StepManifest)):
        return encode_record(record)
    if isinstance(record, CalibrationEnd):
        record.validate()
        return _encode_end(record)
    if isinstance(record, CalibrationSnapshot):
        if record.schema == "":
            record = replace(record, schema=c.SCHEMA_CALIBRATION)
        record.validate()
        return _encode_calibration(record)
    schema = {PredictedReward: c.SCHEMA_PREDICTED, ExecutedReward: c.SCHEMA_EXECUTED}[type(record)]
    if record.schema == "":
        record = replace(record, schema=schema)
    record.validate()
    return j.encode(record, _SPECS[schema], type(record).__name__)


def decode(schema: str, b: bytes) -> Record:
    """decode_record for every record schema, as strict as Go's decoders."""
    if schema == c.SCHEMA_CALIBRATION_END:
        end = _decode_end(b)
        end.validate()
        return end
    if schema == c.SCHEMA_CALIBRATION:
        snap = _decode_calibration(b)
        snap.validate()
        return snap
    spec = _SPECS.get(schema)
    if spec is None:
        return decode_record(schema, b)
    rec: StageRecord = j.decode(b, spec, schema)
    rec.validate()
    return rec


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


class StageChecker(Checker):
    """The checker's rules that only the stages' records use."""

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

    def monotone(self, fld: str, xs: list[float]) -> None:
        for i, x in enumerate(xs):
            f = f"{fld}[{i}]"
            self.score(f, x)
            if i > 0 and x < xs[i - 1]:
                self.fail(f, x, f"decreases (previous {xs[i - 1]:g})")


def _validate_predicted(p: PredictedReward) -> None:
    name = record_name("predicted", "run", p.run_id, "rollout", p.rollout_id)
    check_types(p, PREDICTED_SPEC, name)
    ch = StageChecker(name)
    ch.rollout_key(p, c.SCHEMA_PREDICTED)
    ch.score_status(p.score, p.status, p.reason, False)
    ch.text("model", p.model, c.MAX_LABEL_LEN)
    if p.attempts < 0:
        ch.fail("attempts", p.attempts, "must be >= 0")
    ch.non_negative("latency_ms", p.latency_ms)
    ch.done()


def _validate_executed(e: ExecutedReward) -> None:
    name = record_name("executed", "run", e.run_id, "rollout", e.rollout_id)
    check_types(e, EXECUTED_SPEC, name)
    ch = StageChecker(name)
    ch.rollout_key(e, c.SCHEMA_EXECUTED)
    ch.score_status(e.score, e.status, e.reason, e.imputed)
    ch.non_negative("duration_ms", e.duration_ms)
    ch.text("stderr_tail", e.stderr_tail, c.MAX_STDERR_TAIL, True)
    ch.done()


def _validate_calibration(s: CalibrationSnapshot) -> None:
    name = record_name("calibration", "run", s.run_id, "stream", s.stream)
    check_types(s, CALIBRATION_SPEC, name)
    ch = StageChecker(name)
    ch.schema(s.schema, c.SCHEMA_CALIBRATION)
    ch.id("run_id", s.run_id)
    ch.id("stream", s.stream)
    ch.step(s.step)
    if s.pairs < 0:
        ch.fail("pairs", s.pairs, "must be >= 0")
    if s.step_pairs < 0:
        ch.fail("step_pairs", s.step_pairs, "must be >= 0")
    ch.text("config_hash", s.config_hash, c.MAX_LABEL_LEN)
    ch.text("settings", s.settings, _MAX_SETTINGS_LEN)
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
    if (g := s.gate) is not None:
        if not isinstance(g.pairs, int) or isinstance(g.pairs, bool) or not 0 <= g.pairs <= 2**31 - 1:
            ch.fail("gate.pairs", g.pairs, f"not in [0, {2**31 - 1}]")
        for fname, v in (("gate.rho", g.rho), ("gate.lo", g.lo), ("gate.hi", g.hi)):
            if not -1 <= float(v) <= 1:  # NaN fails too
                ch.fail(fname, v, "not in [-1, 1]")
    ch.done()


# ---- binary calibration snapshot (topics/calibsnap.go) ----------------------------------------

_SNAP_MAGIC = b"WMRLCAL\x04"  # its last byte is the version of SCHEMA_CALIBRATION
_MAX_SETTINGS_LEN = 4096  # topics.maxSettingsLen
_SNAP_DEBIAS = struct.Struct("<IIIId")  # rows, groups, reordered, flattened, mean_shift
_SNAP_GATE = struct.Struct("<BIddd")  # closed, pairs, rho, lo, hi
_SNAP_HAS_DEBIAS, _SNAP_HAS_GATE = 1, 2  # bits of the blocks byte
_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _encode_calibration(s: CalibrationSnapshot) -> bytes:
    """The layout of topics.EncodeCalibration: magic | run_id, stream, config_hash, settings,
    digest (u16 length + UTF-8) | step i64 | fit_version, pairs, step_pairs u64 | anchor_weight,
    bias_before, bias_after f64 | created_at seconds i64, nanoseconds u32 | blocks u8 (bit 0 debias,
    bit 1 trust gate), then with bit 0 rows, groups, reordered, flattened u32, mean_shift f64, then
    with bit 1 closed u8, pairs u32, rho, lo, hi f64 | n u32, n break_x f64,
    n break_y f64 | state (u32 length + bytes); little endian."""
    out = bytearray(_SNAP_MAGIC)
    for v in (s.run_id, s.stream, s.config_hash, s.settings, s.digest):
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
    out.append((0 if s.debias is None else _SNAP_HAS_DEBIAS) | (0 if s.gate is None else _SNAP_HAS_GATE))
    if (d := s.debias) is not None:
        out += _SNAP_DEBIAS.pack(d.rows, d.groups, d.reordered, d.flattened, d.mean_shift)
    if (g := s.gate) is not None:
        out += _SNAP_GATE.pack(1 if g.closed else 0, g.pairs, g.rho, g.lo, g.hi)
    out += struct.pack(f"<I{len(s.break_x)}d{len(s.break_y)}d", len(s.break_x), *s.break_x, *s.break_y)
    state = bytes(s.state or b"")
    out += struct.pack("<I", len(state)) + state
    if len(out) > c.MAX_RECORD_BYTES:
        raise FieldError(
            record_name("calibration", "run", s.run_id, "stream", s.stream),
            "state",
            len(state),
            f"snapshot of {len(out)} bytes exceeds {c.MAX_RECORD_BYTES}",
            TOO_LARGE,
        )
    return bytes(out)


def _decode_calibration(b: bytes) -> CalibrationSnapshot:
    """Parse a snapshot (unvalidated), with the errors topics.DecodeCalibration gives."""
    if len(b) > c.MAX_RECORD_BYTES:
        raise FieldError("calibration", "value", len(b), f"exceeds {c.MAX_RECORD_BYTES} bytes", TOO_LARGE)
    if not b.startswith(_SNAP_MAGIC):
        raise FieldError(
            "calibration",
            "value",
            b[: len(_SNAP_MAGIC)],
            f"not a {c.SCHEMA_CALIBRATION} snapshot (magic)",
            UNKNOWN_SCHEMA,
        )
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

    run_id, stream, config_hash, settings, digest = text(), text(), text(), text(), text()
    step, fit_version, pairs, step_pairs, aw, bb, ba, sec, nsec = struct.unpack("<qQQQdddqI", take(68))
    (blocks,) = take(1)
    if blocks & ~(_SNAP_HAS_DEBIAS | _SNAP_HAS_GATE):
        raise MalformedError("binary", f"calibration: blocks byte {blocks} (want bits 0 and 1 only)")
    debias = None
    if blocks & _SNAP_HAS_DEBIAS:
        rows, groups, reordered, flattened, shift = _SNAP_DEBIAS.unpack(take(_SNAP_DEBIAS.size))
        debias = DebiasShift(rows=rows, groups=groups, reordered=reordered, flattened=flattened, mean_shift=shift)
    gate = None
    if blocks & _SNAP_HAS_GATE:
        closed, gpairs, rho, lo, hi = _SNAP_GATE.unpack(take(_SNAP_GATE.size))
        if closed > 1:
            raise MalformedError("binary", f"calibration: gate closed byte {closed} (want 0 or 1)")
        gate = TrustGate(closed=closed == 1, pairs=gpairs, rho=rho, lo=lo, hi=hi)
    (n,) = struct.unpack("<I", take(4))
    if n > (len(b) - pos) // 16:
        raise MalformedError("binary", "calibration: value ends early")
    breaks = struct.unpack(f"<{2 * n}d", take(16 * n))
    (m,) = struct.unpack("<I", take(4))
    state = take(m)
    if pos != len(b):
        raise MalformedError("binary", f"calibration: {len(b) - pos} bytes after the state")
    record = record_name("calibration", "run", run_id, "stream", stream)
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
        schema=c.SCHEMA_CALIBRATION,
        run_id=run_id,
        stream=stream,
        step=step,
        fit_version=fit_version,
        pairs=pairs,
        config_hash=config_hash,
        settings=settings,
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
        gate=gate,
    )


# ---- binary end record (topics/calibend.go) ---------------------------------------------------

_END_MAGIC = b"WMRLCEN\0"


def _encode_end(e: CalibrationEnd) -> bytes:
    run, reason = e.run_id.encode(), e.reason.encode()
    ms = (e.ended_at - _UNIX_EPOCH) // timedelta(milliseconds=1)
    return _END_MAGIC + struct.pack(f"<H{len(run)}sqqH", len(run), run, e.last_step, ms, len(reason)) + reason


def _decode_end(b: bytes) -> CalibrationEnd:
    """Parse an end record (unvalidated), with the errors topics.DecodeCalibrationEnd gives."""
    if not b.startswith(_END_MAGIC):
        raise FieldError("calibration end", "value", len(b), "not a calibration end record")
    pos = len(_END_MAGIC)

    def text() -> str:
        nonlocal pos
        if len(b) - pos < 2 or struct.unpack_from("<H", b, pos)[0] > len(b) - pos - 2:
            raise MalformedError("binary", "calibration end: value ends early")
        (n,) = struct.unpack_from("<H", b, pos)
        pos += 2 + n
        return b[pos - n : pos].decode("utf-8", errors="surrogateescape")

    run_id = text()
    if len(b) - pos < 16:
        raise MalformedError("binary", "calibration end: value ends early")
    last_step, ms = struct.unpack_from("<qq", b, pos)
    pos += 16
    reason = text()
    if pos != len(b):
        raise MalformedError("binary", f"calibration end: {len(b) - pos} bytes after the reason")
    return CalibrationEnd(run_id, last_step, _UNIX_EPOCH + timedelta(milliseconds=ms), reason)
