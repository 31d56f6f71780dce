"""wmrl's records the trainer writes or reads (rollouts, step manifests, advantage rows), their
JSON layouts and their rules, mirroring Go package ``topics`` (types.go, validate.go).

Validation applies the rules of ``topics/validate.go`` in the same order, so the first bad field
reported is the one Go would report; every error is a ``FieldError`` naming the record, the field
and the value. The generic checker is in validate.py, the id and text rules in ids.py, and the
codecs in codec.py (JSON records) and arrow.py (advantages). The records only Go stages write
(predicted and executed rewards, calibration snapshots) have no Python type here: the client
never writes or reads them; the contract tests decode them (tests/stage_records.py).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from . import _json as j
from . import contract as c
from .errors import CONFLICT, TOO_LARGE, FieldError
from .ids import record_name, utf8_len
from .validate import Checker, check_types


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(kw_only=True)
class _RolloutKey:
    """The fields a rollout and its rewards begin with, in Go's order (ROLLOUT_KEY_FIELDS); each
    record type sets its own schema as the default."""

    schema: str = ""
    run_id: str = ""
    step: int = 0
    group_id: str = ""
    rollout_id: str = ""
    stream: str = ""
    policy_version: str = ""


@dataclass(kw_only=True)
class Rollout(_RolloutKey):
    """One sampled trajectory of a group. Key: run_id. Topic: rollouts."""

    schema: str = c.SCHEMA_ROLLOUT
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
    # Marks the run's end-of-run record instead of a step: ``step`` is then the run's last step
    # and ``groups`` is empty (Go's topics.StepManifest.EndOfRun).
    end_of_run: bool = False
    groups: list[GroupManifest] = field(default_factory=list)
    created_at: datetime = field(default_factory=_now)

    def validate(self) -> None:
        _validate_step(self)


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

# The fields a rollout and its rewards begin with, in Go's order (ROLLOUT_SPEC and the stages'
# reward specs; Checker.rollout_key holds their rules).
ROLLOUT_KEY_FIELDS = (
    F("schema", j.STR),
    F("run_id", j.STR),
    F("step", j.INT),
    F("group_id", j.STR),
    F("rollout_id", j.STR),
    F("stream", j.STR),
    F("policy_version", j.STR),
)
GROUP_SPEC = j.Spec(
    "group",
    (F("group_id", j.STR), F("stream", j.STR), F("size", j.INT), F("anchor", j.BOOL)),
    GroupManifest,
)
ROLLOUT_SPEC = j.Spec(
    "rollout",
    (
        *ROLLOUT_KEY_FIELDS,
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
    Rollout,
)
STEP_SPEC = j.Spec(
    "step",
    (
        F("schema", j.STR),
        F("run_id", j.STR),
        F("step", j.INT),
        F("policy_version", j.STR),
        F("policy_step", j.OPT_INT, True),
        F("end_of_run", j.BOOL, True),
        F("groups", j.STRUCT_LIST, False, GROUP_SPEC),
        F("created_at", j.TIME),
    ),
    StepManifest,
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
    AdvantageRow,
)

# ---- rules (topics/validate.go) ---------------------------------------------------------------

_HEX64_RE = re.compile(r"[0-9a-f]{64}\Z")
_SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_BAD_PCT_RE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _validate_rollout(r: Rollout) -> None:
    name = record_name("rollout", "run", r.run_id, "rollout", r.rollout_id)
    check_types(r, ROLLOUT_SPEC, name)
    ch = Checker(name)
    ch.rollout_key(r, c.SCHEMA_ROLLOUT)
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
    name = record_name("step", "run", m.run_id, "step", str(m.step))
    check_types(m, STEP_SPEC, name)
    ch = Checker(name)
    ch.schema(m.schema, c.SCHEMA_STEP)
    ch.id("run_id", m.run_id)
    ch.step(m.step)
    ch.text("policy_version", m.policy_version, c.MAX_LABEL_LEN)
    if m.end_of_run:
        if m.policy_step is not None:
            ch.fail("policy_step", m.policy_step, "must be absent in an end-of-run record")
        if m.groups:
            ch.fail("groups", len(m.groups), "must be empty in an end-of-run record")
        ch.done()
        return
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


def _validate_advantage(a: AdvantageRow) -> None:
    name = record_name("advantage", "run", a.run_id, "rollout", a.rollout_id)
    check_types(a, ADVANTAGE_SPEC, name)
    ch = Checker(name)
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
                record_name("advantage", "run", r.run_id, "rollout", r.rollout_id),
                "rollout_id",
                r.rollout_id,
                f"duplicate of row {seen[k]} (advantages row {i})",
                CONFLICT,
            )
        seen[k] = i
