"""Golden records written by the Python client, for the Go side to decode ("the reverse" contract).

    python tests/golden_python.py --write     # rewrite topics/testdata/golden/python/

``topics/python_contract_test.go`` decodes every file with the strict Go decoders, re-encodes the
valid ones and requires the very same bytes, checks that the invalid ones fail with the reason
Python's decoder gives, and that Go's digest of the Arrow rows equals the one recorded here.
``tests/test_contract.py`` checks that the committed files are what this script builds now.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from client_codecs import encode_advantages
from stage_records import (
    CalibrationSnapshot,
    DebiasShift,
    ExecutedReward,
    PredictedReward,
    TrustGate,
    encode,
    encode_advantage_rows_json,
)

from wmrl_client import AdvantageRow, GroupManifest, Rollout, StepManifest, digest_rows
from wmrl_client import contract as c

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "topics" / "testdata" / "golden" / "python"

T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
T1 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)

ARTIFACT = '{"model":"gbm","depth":6,"note":"größer → besser"}'

# Where the reward records' rollouts are: rollout.json's run, step and group, in stream mle.
REWARD_KEY: dict[str, Any] = {"run_id": "py-run_1", "step": 12, "group_id": "s12:g4", "stream": "mle"}


def valid_records() -> dict[str, tuple[str, object]]:
    """File name → (schema, record): values chosen to exercise escaping, floats and omitempty."""
    sha = hashlib.sha256(ARTIFACT.encode()).hexdigest()
    return {
        "rollout.json": (
            c.SCHEMA_ROLLOUT,
            Rollout(
                run_id="py-run_1",
                step=12,
                group_id="s12:g4",
                rollout_id="s12:g4-r7",
                stream="mle+ds@v2",
                policy_version="ckpt 12 (β)",
                anchor=True,
                index=7,
                prompt='fit <x> & "y"\\z\ttab\nnl\x01ctl\x7fdel\b\f\u2028\u2029 emoji 🙂',
                artifact=ARTIFACT,
                artifact_sha256=sha,
                artifact_size=len(ARTIFACT.encode()),
                meta={"zeta": "last", "alpha": "multi\nline\tvalue", "ü-key": "ü"},
                created_at=T0,
            ),
        ),
        "rollout_by_reference.json": (
            c.SCHEMA_ROLLOUT,
            Rollout(
                run_id="py-run_1",
                step=0,
                group_id="g0",
                rollout_id="g0-r0",
                stream="mle",
                artifact_uri="s3://bucket/runs/py-run_1/g0-r0.tar.zst?v=1%20a",
                artifact_sha256="0" * 64,
                artifact_size=123456789,
                created_at=T1,
            ),
        ),
        "step.json": (
            c.SCHEMA_STEP,
            StepManifest(
                run_id="py-run_1",
                step=12,
                policy_version="ckpt-12",
                created_at=T0,
                groups=[
                    GroupManifest(group_id="s12:g4", stream="mle+ds@v2", size=8, anchor=True),
                    GroupManifest(group_id="s12:g5", stream="mle", size=1024, anchor=False),
                ],
            ),
        ),
        "predicted.json": (
            c.SCHEMA_PREDICTED,
            PredictedReward(
                **REWARD_KEY,
                rollout_id="s12:g4-r7",
                anchor=True,
                score=1e-7,
                status="ok",
                model="wm/proxy",
                attempts=3,
                latency_ms=1e21,
                created_at=T1,
            ),
        ),
        "predicted_failed.json": (
            c.SCHEMA_PREDICTED,
            PredictedReward(
                **REWARD_KEY,
                rollout_id="s12:g4-r6",
                status="timeout",
                reason="no reply in 30s\n(retried 3×)",
                latency_ms=30000.5,
                created_at=T1,
            ),
        ),
        "executed_imputed.json": (
            c.SCHEMA_EXECUTED,
            ExecutedReward(
                **REWARD_KEY,
                rollout_id="s12:g4-r7",
                score=0.0,
                imputed=True,
                status="timeout",
                reason="wall clock 600s exceeded",
                exit_code=-9,
                duration_ms=600000.0,
                stderr_tail="Traceback …\n  killed\r\n",
                created_at=T1,
            ),
        ),
        "calibration.bin": (
            c.SCHEMA_CALIBRATION,
            CalibrationSnapshot(
                run_id="py-run_1",
                stream="mle",
                step=12,
                fit_version=2**64 - 1,
                pairs=5000,
                config_hash="cfg",
                settings="mode=default max-staleness=3",
                digest="sha256:abc",
                state=bytes(range(256)),
                break_x=[0.0, 0.05, 1 / 3, 1.0],
                break_y=[0.0, 0.0, 0.30000000000000004, 1.0],
                anchor_weight=2.0,
                bias_before=-1.5e-7,
                bias_after=123456789012345680000.0,
                step_pairs=16,
                created_at=T0,
            ),
        ),
        "calibration_debias.bin": (
            c.SCHEMA_CALIBRATION,
            CalibrationSnapshot(
                run_id="py-run_1",
                stream="mle",
                step=13,
                fit_version=7,
                pairs=4096,
                config_hash="cfg",
                digest="sha256:def",
                state=b"\x00\xff",
                anchor_weight=1.25,
                bias_before=0.1,
                bias_after=0.0,
                step_pairs=12,
                created_at=T1,
                debias=DebiasShift(rows=2**31 - 1, groups=40, reordered=40, flattened=0, mean_shift=1 / 3),
            ),
        ),
        "calibration_gate.bin": (
            c.SCHEMA_CALIBRATION,
            CalibrationSnapshot(
                run_id="py-run_1",
                stream="dsbench",
                step=14,
                fit_version=8,
                pairs=60,
                config_hash="cfg",
                settings="mode=default trust-gate=true",
                digest="sha256:0a1",
                state=b"\x01",
                anchor_weight=1.0,
                step_pairs=16,
                created_at=T1,
                gate=TrustGate(closed=True, pairs=2**31 - 1, rho=-1.0, lo=-1.0, hi=1 / 3),
            ),
        ),
    }


# Invalid cases beyond Go's own invalid set: (file name, text in the valid record, its replacement,
# the reason Python's decoder gives). Each edits, once, the valid record its name begins with.
_EDITS = (
    ("predicted_nan_literal.json", '"score":1e-7', '"score":NaN', "malformed-json"),
    ("predicted_score_overflow.json", '"score":1e-7', '"score":1e400', "invalid-field:score"),
    ("predicted_attempts_fraction.json", '"attempts":3', '"attempts":3.0', "invalid-field:attempts"),
    ("predicted_attempts_exponent.json", '"attempts":3', '"attempts":3e0', "invalid-field:attempts"),
    ("predicted_schema_number.json", '"schema":"wmrl.reward.predicted.v1"', '"schema":1', "unknown-schema"),
    ("predicted_negative_latency.json", '"latency_ms":1e+21', '"latency_ms":-1', "invalid-field:latency_ms"),
    ("step_nested_unknown.json", '"size":8,', '"size":8,"weight":2,', "invalid-field:groups[0].weight"),
    ("step_nested_duplicate.json", '"size":8,', '"size":8,"size":9,', "invalid-field:groups[0].size"),
    ("step_size_zero.json", '"size":8,', '"size":0,', "invalid-field:groups[0].size"),
    ("step_deep_nesting.json", '"policy_version":"ckpt-12"', '"x":' + "[" * 20 + "]" * 20, "malformed-json"),
    (
        "step_bad_time.json",
        '"created_at":"2026-03-01T12:00:00.123456+02:00"',
        '"created_at":"2026-03-01 12:00"',
        "invalid-field:created_at",
    ),
    ("rollout_meta_null_value.json", '"created_at"', '"meta":{"k":null},"created_at"', "invalid-field:meta.k"),
    ("rollout_uri_without_scheme.json", '"s3://bucket', '"//bucket', "invalid-field:artifact_uri"),
    ("rollout_step_negative.json", '"step":0', '"step":-1', "invalid-field:step"),
    ("rollout_index_out_of_range.json", '"index":0', '"index":1024', "invalid-field:index"),
    ("rollout_step_int64_overflow.json", '"step":0', '"step":9223372036854775808', "invalid-field:step"),
    ("rollout_bad_sha.json", '"0000', '"A000', "invalid-field:artifact_sha256"),
)

# The valid record each name prefix of _EDITS edits.
_EDITED = {"predicted": "predicted.json", "step": "step.json", "rollout": "rollout_by_reference.json"}


def invalid_records() -> dict[str, tuple[str, bytes, str]]:
    """File name → (schema, bytes, reason): cases beyond Go's own invalid set."""
    valid = valid_records()
    text = {kind: encode(valid[name][1]).decode() for kind, name in _EDITED.items()}  # type: ignore[arg-type]
    ok = text["predicted"]
    out = {
        "predicted_trailing_data.json": (c.SCHEMA_PREDICTED, (ok + " {}").encode(), "malformed-json"),
        "predicted_top_array.json": (c.SCHEMA_PREDICTED, f"[{ok}]".encode(), "malformed-json"),
    }
    for name, old, new, why in _EDITS:
        kind = name.split("_", 1)[0]
        assert old in text[kind], old
        out[name] = (valid[_EDITED[kind]][0], text[kind].replace(old, new, 1).encode(), why)
    return out


def advantage_rows() -> list[AdvantageRow]:
    """A step as the Python side would write it in a replay tool: every rule's edge once."""
    rows = []
    for i in range(6):
        rows.append(
            AdvantageRow(
                run_id="py-run_1",
                stream="mle" if i < 4 else "dsbench",
                step=12,
                group_id=f"g{i // 2}",
                rollout_id=f"g{i // 2}-r{i % 2}",
                policy_version="ckpt-12 β",
                source="anchor" if i % 3 == 0 else "world_model",
                predicted=i / 7,
                predicted_ok=True,
                calibrated=min(1.0, i / 6),
                executed=(i / 5 if i % 3 == 0 else 0.0),
                executed_ok=i % 3 == 0,
                used=i / 10,
                advantage=(-1) ** i * (i + 0.5) * 1e-3,
                weight=1.0 + i / 4,
                mask=True,
                calibration_version=2**63 + i,
            )
        )
    rows.append(AdvantageRow(run_id="py-run_1", stream="mle", step=12, group_id="g9", rollout_id="g9-r0", mask=False))
    return rows


def build() -> dict[str, bytes]:
    """Every file of topics/testdata/golden/python/ (except go_digests.json, which Go writes)."""
    files: dict[str, bytes] = {}
    manifest: dict[str, object] = {"valid": {}, "invalid": {}}
    for name, (schema, rec) in valid_records().items():
        # JSON files end with a newline, as Go's golden files do; binary ones are the value alone.
        files[name] = encode(rec) + (b"\n" if name.endswith(".json") else b"")  # type: ignore[arg-type]
        manifest["valid"][name] = schema  # type: ignore[index]
    for name, (schema, data, why) in invalid_records().items():
        files[f"invalid/{name}"] = data
        manifest["invalid"][name] = {"schema": schema, "reason": why}  # type: ignore[index]
    rows = advantage_rows()
    files["advantages.arrows"] = encode_advantages(rows)
    files["advantages.json"] = encode_advantage_rows_json(rows).encode()
    manifest["advantages_digest"] = digest_rows(rows)
    manifest["advantages_rows"] = len(rows)
    files["manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    return files


def write(out: Path = OUT) -> None:
    for name, data in build().items():
        p = out / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help=f"write the files to {OUT}")
    args = ap.parse_args(argv)
    if not args.write:
        for name, data in sorted(build().items()):
            print(f"{len(data):8d}  {name}")
        return 0
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
