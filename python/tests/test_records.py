"""Validation (topics/validate.go rules) and the JSON codecs, table-driven."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest
from client_codecs import decode_record
from stage_records import ExecutedReward, PredictedReward

from wmrl_client import (
    FieldError,
    GroupManifest,
    Rollout,
    SchemaVersionError,
    StepManifest,
    TooLargeError,
    encode_record,
    reason,
)
from wmrl_client._json import go_float, go_time, parse_time
from wmrl_client.ids import valid_id

T = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def rollout(**kw: object) -> Rollout:
    base = Rollout(
        run_id="r1",
        step=0,
        group_id="g0",
        rollout_id="g0-r1",
        stream="mle",
        index=1,
        artifact="model=ridge",
        created_at=T,
    )
    return replace(base, **kw)


def step(**kw: object) -> StepManifest:
    base = StepManifest(run_id="r1", step=3, groups=[GroupManifest(group_id="g0", stream="mle", size=8)], created_at=T)
    return replace(base, **kw)


def test_encode_matches_go_example() -> None:
    # The output of Go's ExampleEncodeRollout (topics/example_test.go).
    want = (
        b'{"schema":"wmrl.rollout.v1","run_id":"r1","step":0,"group_id":"g0","rollout_id":"g0-r1",'
        b'"stream":"mle","policy_version":"","anchor":false,"index":1,"artifact":"model=ridge",'
        b'"created_at":"2026-01-02T03:04:05Z"}'
    )
    assert encode_record(rollout()) == want


@pytest.mark.parametrize(
    "kw,field,why",
    [
        ({"run_id": ""}, "run_id", "required"),
        ({"run_id": "r1/x"}, "run_id", "character '/'"),
        ({"run_id": "r{1}"}, "run_id", "character '{'"),
        ({"run_id": "x" * 129}, "run_id", "longer than 128 bytes"),
        ({"group_id": "g 0"}, "group_id", "character ' '"),
        ({"stream": "é"}, "stream", "not allowed in an id"),
        ({"step": -1}, "step", "must be >= 0"),
        ({"index": 1024}, "index", "must be in [0,1024)"),
        ({"index": -1}, "index", "must be in [0,1024)"),
        ({"policy_version": "a\nb"}, "policy_version", "control character"),
        ({"policy_version": "v" * 257}, "policy_version", "longer than 256 bytes"),
        ({"artifact": "x" * (512 * 1024 + 1)}, "artifact", "send it by reference"),
        ({"artifact_uri": "s3://b/k", "artifact_sha256": "0" * 64}, "artifact_uri", "exclusive"),
        ({"artifact": "", "artifact_uri": "s3://b/k"}, "artifact_sha256", "required when artifact_uri is set"),
        (
            {"artifact": "", "artifact_uri": "no-scheme", "artifact_sha256": "0" * 64},
            "artifact_uri",
            "not an absolute URI",
        ),
        (
            {"artifact": "", "artifact_uri": "s3://b/%zz", "artifact_sha256": "0" * 64},
            "artifact_uri",
            "not an absolute URI",
        ),
        ({"artifact_sha256": "A" * 64}, "artifact_sha256", "64 lowercase hex"),
        ({"artifact_sha256": "0" * 64}, "artifact_sha256", "does not match the inline artifact"),
        ({"artifact_size": 5}, "artifact_size", "inline artifact has 11 bytes"),
        ({"artifact_size": -1}, "artifact_size", "must be >= 0"),
        ({"meta": {str(i): "v" for i in range(65)}}, "meta", "more than 64 entries"),
        ({"meta": {"": "v"}}, "meta", "empty key"),
        ({"meta": {"k": "bad\x00"}}, "meta.k", "control character"),
        ({"schema": "wmrl.rollout.v2"}, "schema", "want"),
        ({"step": "3"}, "step", "must be an int64"),
        ({"anchor": 1}, "anchor", "must be a bool"),
        ({"created_at": datetime(2026, 1, 1)}, "created_at", "timezone-aware"),
        ({"meta": {"k": 1}}, "meta", "dict[str, str]"),
    ],
)
def test_rollout_validation_names_field_and_value(kw: dict[str, object], field: str, why: str) -> None:
    with pytest.raises(FieldError) as ei:
        encode_record(rollout(**kw))
    e = ei.value
    assert e.field == field
    assert why in str(e)
    if field not in ("meta", "created_at", "artifact_sha256") and kw.get(field) not in ("", None):
        assert e.value == kw[field] or e.value is None and field in ("step", "anchor")


def test_unknown_schema_is_schema_version_error() -> None:
    with pytest.raises(SchemaVersionError) as ei:
        encode_record(rollout(schema="wmrl.rollout.v2"))
    assert reason(ei.value) == "unknown-schema"
    assert ei.value.got == "wmrl.rollout.v2"


def test_empty_schema_is_filled_in() -> None:
    assert encode_record(rollout(schema="")) == encode_record(rollout())


def test_inline_artifact_limits_and_hash() -> None:
    art = "ü" * 100
    sha = hashlib.sha256(art.encode()).hexdigest()
    encode_record(rollout(artifact=art, artifact_sha256=sha, artifact_size=200))
    with pytest.raises(FieldError, match="inline artifact has 200 bytes"):
        encode_record(rollout(artifact=art, artifact_size=100))
    with pytest.raises(FieldError) as ei:
        encode_record(rollout(artifact="x" * (512 * 1024 + 1)))
    assert reason(ei.value) == "too-large"
    encode_record(rollout(artifact="x" * (512 * 1024)))


def test_too_large_record_is_refused_after_validation() -> None:
    r = rollout(prompt="p" * (1 << 20))
    with pytest.raises(TooLargeError):
        encode_record(r)


@pytest.mark.parametrize(
    "kw,field",
    [
        ({"groups": []}, "groups"),
        ({"groups": [GroupManifest(group_id="g0", stream="mle", size=8)] * 2}, "groups[1].group_id"),
        ({"groups": [GroupManifest(group_id="g0", stream="mle", size=0)]}, "groups[0].size"),
        ({"groups": [GroupManifest(group_id="g0", stream="mle", size=1025)]}, "groups[0].size"),
        ({"groups": [GroupManifest(group_id="g0", stream="", size=1)]}, "groups[0].stream"),
        ({"groups": [GroupManifest(group_id="g/0", stream="s", size=1)]}, "groups[0].group_id"),
        ({"groups": [GroupManifest(group_id=f"g{i}", stream="s", size=1) for i in range(4097)]}, "groups"),
        ({"step": -5}, "step"),
        ({"groups": ["g0"]}, "groups[0]"),
    ],
)
def test_step_validation(kw: dict[str, object], field: str) -> None:
    with pytest.raises(FieldError) as ei:
        encode_record(step(**kw))
    assert ei.value.field == field


@pytest.mark.parametrize(
    "kw,field",
    [
        ({"status": "ok", "score": None}, "score"),
        ({"status": "ok", "score": 1.5}, "score"),
        ({"status": "ok", "score": float("nan")}, "score"),
        ({"status": "timeout", "score": 0.5, "reason": "x"}, "score"),
        ({"status": "timeout", "score": None, "reason": ""}, "reason"),
        ({"status": "weird", "score": None, "reason": "x"}, "status"),
        ({"status": "ok", "score": 0.5, "attempts": -1}, "attempts"),
        ({"status": "ok", "score": 0.5, "latency_ms": float("inf")}, "latency_ms"),
    ],
)
def test_predicted_status_score_consistency(kw: dict[str, object], field: str) -> None:
    p = PredictedReward(run_id="r1", step=1, group_id="g", rollout_id="g-r0", stream="s", created_at=T, **kw)  # type: ignore[arg-type]
    with pytest.raises(FieldError) as ei:
        p.validate()
    assert ei.value.field == field


def test_executed_imputed_rules() -> None:
    base = ExecutedReward(run_id="r1", step=1, group_id="g", rollout_id="g-r0", stream="s", created_at=T)
    replace(base, status="timeout", reason="600s", score=0.0, imputed=True).validate()
    for kw, field in [
        ({"status": "ok", "score": 0.0, "imputed": True}, "imputed"),
        ({"status": "timeout", "reason": "x", "imputed": True}, "score"),
        ({"status": "ok", "score": 0.5, "stderr_tail": "x" * (64 << 10 + 1)}, "stderr_tail"),
    ]:
        with pytest.raises(FieldError) as ei:
            replace(base, **kw).validate()
        assert ei.value.field == field


def test_error_message_format_matches_go() -> None:
    p = PredictedReward(
        run_id="r1",
        step=1,
        group_id="g3",
        rollout_id="g3-r2",
        stream="mle",
        policy_version="p1",
        score=1.5,
        status="ok",
        created_at=T,
    )
    with pytest.raises(FieldError) as ei:
        p.validate()
    # Go: topics.ExampleDecodePredicted
    assert str(ei.value) == 'predicted run=r1 rollout=g3-r2: field "score": value 1.5: out of range [0,1]'


@pytest.mark.parametrize(
    "f,want",
    [
        (0.0, "0"), (-0.0, "-0"), (1.0, "1"), (0.1, "0.1"), (1e-6, "0.000001"), (1e-7, "1e-7"),
        (1.5e-7, "1.5e-7"), (1e20, "100000000000000000000"), (1e21, "1e+21"), (123456.789, "123456.789"),
        (0.30000000000000004, "0.30000000000000004"), (-2.5e-300, "-2.5e-300"), (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
    ],
)  # fmt: skip
def test_go_float_formatting(f: float, want: str) -> None:
    assert go_float(f) == want


def test_time_format_and_parse() -> None:
    t = datetime(2026, 3, 1, 12, 0, 0, 120000, tzinfo=timezone(timedelta(hours=-5, minutes=-30)))
    assert go_time(t) == "2026-03-01T12:00:00.12-05:30"
    assert parse_time("2026-03-01T12:00:00.12-05:30") == t
    assert parse_time("2026-03-01T12:00:00.123456789Z").microsecond == 123456
    for bad in ("2026-03-01 12:00:00Z", "2026-03-01T12:00:00", "2026-13-01T12:00:00Z", "2026-03-01T12:00:00+24:00"):
        with pytest.raises(ValueError):
            parse_time(bad)
    with pytest.raises(ValueError, match="naive"):
        go_time(datetime(2026, 1, 1))


def test_decode_rejects_what_go_rejects() -> None:
    good = encode_record(rollout())
    assert decode_record("wmrl.rollout.v1", good) == rollout()
    cases = {
        b"": "malformed-json",
        b"[]": "malformed-json",
        b"null": "malformed-json",
        good + b"x": "malformed-json",
        good.replace(b'"step":0', b'"step":Infinity'): "malformed-json",
        good.replace(b'"index":1', b'"index":true'): "invalid-field:index",
        good.replace(b'"anchor":false', b'"anchor":null'): "invalid-field:anchor",
        good.replace(b'"run_id":"r1"', b'"Run_id":"r1"'): "invalid-field:Run_id",
        good.replace(b'"schema":"wmrl.rollout.v1"', b'"schema":"wmrl.step.v1"'): "unknown-schema",
        good.replace(b'"step":0', b'"step":0,"schema":"x"'): "unknown-schema",
        b" " * (1 << 20) + b"{}": "too-large",
    }
    for data, want in cases.items():
        with pytest.raises(Exception) as ei:
            decode_record("wmrl.rollout.v1", data)
        assert reason(ei.value) == want, (data[:80], ei.value)
    with pytest.raises(FieldError):
        decode_record("wmrl.nope.v1", good)


@pytest.mark.parametrize("schema", ["wmrl.reward.predicted.v1", "wmrl.reward.executed.v1", "wmrl.calibration.v4"])
def test_client_has_no_codec_for_stage_records(schema: str) -> None:
    # Only Go stages write these; the client neither writes nor reads them (tests/stage_records.py does).
    with pytest.raises(FieldError) as ei:
        decode_record(schema, b"{}")
    assert reason(ei.value) == "unknown-schema"
    with pytest.raises(TypeError, match="not a wmrl JSON record type"):
        encode_record(PredictedReward())  # type: ignore[arg-type]


def test_decode_null_optional_fields() -> None:
    raw = encode_record(rollout()).replace(b'"created_at"', b'"meta":null,"prompt":"\\ud83d\\ude00x","created_at"')
    r = decode_record("wmrl.rollout.v1", raw)
    assert isinstance(r, Rollout)
    assert r.meta == {} and r.prompt == "\U0001f600x"  # a valid surrogate pair is one rune


# The cases of Go's TestDecodeRefusesInvalidUTF8: invalid UTF-8, raw or as a lone surrogate escape,
# is refused naming its field (a key's fault names the key), never rewritten to U+FFFD.
INVALID_UTF8 = [
    (b'"prompt":"a\xffb"', "invalid-field:prompt"),
    (b'"prompt":"\xe2\x9c"', "invalid-field:prompt"),
    (b'"prompt":"\\ud800x"', "invalid-field:prompt"),
    (b'"prompt":"\\udc00\\ud800"', "invalid-field:prompt"),
    (b'"meta":{"task":"t\xff17"}', "invalid-field:meta.task"),
    (b'"meta":{"task":"t\\ud80017"}', "invalid-field:meta.task"),
    (b'"meta":{"t\xffk":"t17"}', "invalid-field:meta.t\ufffdk"),
    (b'"s\xfftep":3', "invalid-field:s\ufffdtep"),
]


@pytest.mark.parametrize(("member", "want"), INVALID_UTF8)
def test_decode_refuses_invalid_utf8(member: bytes, want: str) -> None:
    raw = encode_record(rollout()).replace(b'"created_at"', member + b',"created_at"')
    if member.startswith(b'"s'):
        raw = raw.replace(b'"step":0,', b"")
    with pytest.raises(FieldError) as ei:
        decode_record("wmrl.rollout.v1", raw)
    assert reason(ei.value) == want


@pytest.mark.parametrize(
    ("record", "field"),
    [
        (rollout(prompt="p\udcff"), "prompt"),
        (rollout(artifact="x = '\ud800'"), "artifact"),
        (rollout(meta={"task": "t\udc80"}), "meta.task"),
        (rollout(meta={"t\udc80": "v"}), "meta"),
    ],
    ids=["prompt", "artifact", "meta value", "meta key"],
)
def test_encode_refuses_lone_surrogates(record: Rollout, field: str) -> None:
    """A str with a lone surrogate (surrogateescape-decoded bytes, a \\ud800 escape) has no UTF-8:
    the client refuses to write it, naming the field, where Go's encoder would write U+FFFD."""
    with pytest.raises(FieldError) as ei:
        encode_record(record)
    assert reason(ei.value) == f"invalid-field:{field}" and "UTF-8" in str(ei.value)


def test_valid_id() -> None:
    assert valid_id("a.b_c-d:e@f+g9")
    assert not valid_id("")
    assert not valid_id("a/b")
    assert not valid_id(3)  # type: ignore[arg-type]
