"""The cross-language contract, Go → Python: golden files the Go codecs wrote, read here.

And the Python → Go files: the committed topics/testdata/golden/python/ must be what
golden_python.py builds now (topics/python_contract_test.go decodes them with the Go decoders).
"""

from __future__ import annotations

import json
from pathlib import Path

import golden_python
import pytest
from client_codecs import encode_advantages
from stage_records import advantage_row_from_json, decode, encode

from wmrl_client import AdvantageRow, WmrlError, anchor, decode_advantages, digest_rows, reason

VALID = [
    ("rollout.json", "wmrl.rollout.v1"),
    ("step.json", "wmrl.step.v1"),
    ("predicted.json", "wmrl.reward.predicted.v1"),
    ("executed.json", "wmrl.reward.executed.v1"),
    ("executed_imputed.json", "wmrl.reward.executed.v1"),
    ("calibration.bin", "wmrl.calibration.v4"),
    ("calibration_debias.bin", "wmrl.calibration.v4"),
    ("calibration_gate.bin", "wmrl.calibration.v4"),
    ("step_policy_step.json", "wmrl.step.v1"),
    ("step_end.json", "wmrl.step.v1"),
    ("calibration_end.bin", "wmrl.calibration.end.v1"),
]


def golden_rows(golden: Path) -> list[AdvantageRow]:
    return [advantage_row_from_json(o) for o in json.loads((golden / "advantages.json").read_text())]


@pytest.mark.parametrize("name,schema", VALID)
def test_go_records_decode_and_reencode_byte_for_byte(golden: Path, name: str, schema: str) -> None:
    raw = (golden / name).read_bytes()
    rec = decode(schema, raw)
    assert encode(rec) + (b"\n" if name.endswith(".json") else b"") == raw


def test_calibration_binary_errors_match_go() -> None:
    snap = golden_python.valid_records()["calibration.bin"][1]
    raw = encode(snap)  # type: ignore[arg-type]
    for bad, want in [
        (raw[:-1], "malformed-binary"),
        (raw + b"\0", "malformed-binary"),
        (raw[:20], "malformed-binary"),
        # Superseded layouts (2, 3; JSON v1) are refused as unknown, never guessed at.
        (b"WMRLCAL\x02" + raw[8:], "unknown-schema"),
        (b"WMRLCAL\x03" + raw[8:], "unknown-schema"),
        (b'{"schema":"wmrl.calibration.v1"}', "unknown-schema"),
    ]:
        with pytest.raises(WmrlError) as ei:
            decode("wmrl.calibration.v4", bad)
        assert reason(ei.value) == want


def test_go_invalid_records_fail_with_go_reason(golden: Path) -> None:
    expected = json.loads((golden / "invalid" / "expected.json").read_text())
    assert len(expected) >= 10
    for name, want in expected.items():
        with pytest.raises(WmrlError) as ei:
            decode(want["schema"], (golden / "invalid" / name).read_bytes())
        assert reason(ei.value) == want["reason"], f"{name}: {ei.value}"


def test_go_arrow_golden_matches_json_rows(golden: Path) -> None:
    table = decode_advantages((golden / "advantages.arrows").read_bytes())
    rows = golden_rows(golden)
    assert table.num_rows == len(rows)
    from wmrl_client.digest import rows_from_table

    assert rows_from_table(table) == rows
    assert table.schema.metadata == {b"wmrl-schema": b"wmrl.advantages.v1"}


def test_digest_equals_go_digest_of_golden_rows(golden: Path) -> None:
    go = json.loads((golden / "python" / "go_digests.json").read_text())
    rows = golden_rows(golden)
    assert len(rows) == go["golden_advantages_rows"]
    assert digest_rows(rows) == go["golden_advantages"]
    assert digest_rows(decode_advantages((golden / "advantages.arrows").read_bytes())) == go["golden_advantages"]
    assert (
        digest_rows(decode_advantages((golden / "python" / "advantages.arrows").read_bytes()))
        == go["python_advantages"]
    )


def test_go_v2_golden_matches_json_rows_and_digest(golden: Path) -> None:
    from wmrl_client import ADVANTAGE_SCHEMA_V2, MASK_STALE
    from wmrl_client.digest import rows_from_table

    table = decode_advantages((golden / "advantages_v2.arrows").read_bytes())
    rows = [advantage_row_from_json(o) for o in json.loads((golden / "advantages_v2.json").read_text())]
    assert table.schema.equals(ADVANTAGE_SCHEMA_V2, check_metadata=True)
    assert rows_from_table(table) == rows
    assert [r.staleness for r in rows if r.staleness_ok] == [2] * (len(rows) - 1)
    assert [r.mask_reason for r in rows].count(MASK_STALE) == 1
    assert table.column("staleness").null_count == 1
    go = json.loads((golden / "python" / "go_digests.json").read_text())
    assert digest_rows(rows) == digest_rows(table) == go["golden_advantages_v2"]
    assert go["golden_advantages_v2"] != go["golden_advantages"]
    # Python writes v2 too, and reads back what it wrote.
    again = decode_advantages(encode_advantages(rows))
    assert again.schema.equals(ADVANTAGE_SCHEMA_V2, check_metadata=True)
    assert rows_from_table(again) == rows


def test_anchor_hash_matches_go(golden: Path) -> None:
    cases = json.loads((golden / "anchor_hash.json").read_text())
    assert len(cases) >= 10
    for c in cases:
        assert anchor.anchor_hash_u64(c["run_id"], c["group_id"]) == int(c["u64"])
        assert anchor.anchor_hash(c["run_id"], c["group_id"]) == c["hash"]
        assert anchor.is_anchor(c["run_id"], c["group_id"], 0.25) == c["anchor_at_0.25"]
    assert not anchor.is_anchor("r", "g", float("nan"))
    assert not anchor.is_anchor("r", "g", 0.0)
    assert anchor.is_anchor("r", "g", 1.0)


def test_python_golden_files_are_current(golden: Path) -> None:
    """The committed reverse-direction files are what golden_python.py builds (rerun it with --write)."""
    built = golden_python.build()
    out = golden / "python"
    for name, data in built.items():
        path = out / name
        assert path.exists(), f"{path} missing: run python tests/golden_python.py --write"
        if name.endswith(".arrows"):
            # pyarrow versions may lay out bytes differently; the content must be the same.
            assert decode_advantages(path.read_bytes()).equals(decode_advantages(data))
        else:
            assert path.read_bytes() == data, f"{name} is stale: run python tests/golden_python.py --write"
    on_disk = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert on_disk - set(built) == {"go_digests.json"}


def test_python_invalid_cases_fail_in_python_with_recorded_reason() -> None:
    cases = golden_python.invalid_records()
    assert len(cases) >= 10
    for name, (schema, data, want) in cases.items():
        with pytest.raises(WmrlError) as ei:
            decode(schema, data)
        assert reason(ei.value) == want, f"{name}: {ei.value}"


def test_content_types_match_go() -> None:
    """topics.ContentTypeFor: Arrow for advantages, binary for the calibration topic's snapshots,
    window chunks and end records, JSON for the rest."""
    from wmrl_client import contract as c

    assert c.content_type_for(c.SCHEMA_ADVANTAGES) == c.content_type_for(c.SCHEMA_ADVANTAGES_V2) == c.CONTENT_TYPE_ARROW
    assert c.content_type_for(c.SCHEMA_CALIBRATION) == c.CONTENT_TYPE_BINARY
    assert c.content_type_for(c.SCHEMA_CALIBRATION_CHUNK) == c.CONTENT_TYPE_BINARY
    assert c.content_type_for(c.SCHEMA_CALIBRATION_END) == c.CONTENT_TYPE_BINARY
    assert c.content_type_for(c.SCHEMA_ROLLOUT) == c.CONTENT_TYPE_JSON
