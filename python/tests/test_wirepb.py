"""The Protobuf classes generated from schemas/ (wmrl_client.wirepb) read Go's Protobuf goldens
(topics/testdata/golden/protobuf) to the values of the JSON goldens of the same samples, and pass
over a field a newer schema added (schema evolution, docs/formats.md)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from google.protobuf.message import DecodeError  # the client's [test] extra installs protobuf

from wmrl_client.wirepb import executed_pb2, predicted_pb2, rollout_pb2, step_pb2

GOLDEN = Path(__file__).resolve().parents[2] / "topics" / "testdata" / "golden"
CASES = [
    ("rollout", rollout_pb2.Rollout),
    ("step", step_pb2.StepManifest),
    ("step_policy_step", step_pb2.StepManifest),
    ("step_end", step_pb2.StepManifest),
    ("predicted", predicted_pb2.PredictedReward),
    ("executed", executed_pb2.ExecutedReward),
    ("executed_imputed", executed_pb2.ExecutedReward),
]


def as_json_values(m) -> dict:
    """The message as the JSON record's members (no `schema`; absent optional fields left out)."""
    out = {}
    for f in m.DESCRIPTOR.fields:
        if f.has_presence and not m.HasField(f.name):
            continue
        v = getattr(m, f.name)
        if f.name == "created_at":
            v = v.ToDatetime().strftime("%Y-%m-%dT%H:%M:%SZ")
        elif f.message_type is not None and f.message_type.GetOptions().map_entry:
            v = dict(v)
        elif f.message_type is not None:  # repeated GroupManifest
            v = [as_json_values(g) for g in v]
        out[f.name] = v
    return out


@pytest.mark.parametrize(("name", "cls"), CASES)
def test_go_protobuf_golden_equals_json_golden(name, cls):
    m = cls()
    m.ParseFromString((GOLDEN / "protobuf" / f"{name}.bin").read_bytes())
    want = json.loads((GOLDEN / f"{name}.json").read_text())
    want.pop("schema")
    got = as_json_values(m)
    # JSON leaves empty optional members out and writes "groups": null for an end-of-run record;
    # proto3 has a zero value for each: compare the members JSON has, and zero for the rest.
    for k, v in got.items():
        if k in want and want[k] is not None:
            assert v == want[k], (name, k)
        else:
            assert not v, (name, k, v)
    assert set(want) <= set(got), (name, set(want) - set(got))


def test_old_reader_passes_over_a_new_optional_field():
    old = (GOLDEN / "protobuf" / "predicted.bin").read_bytes()
    # field 15, wire type 1: a newer schema's `optional double confidence = 15`, set to 0.9
    newer = old + bytes([15 << 3 | 1]) + struct.pack("<d", 0.9)
    m = predicted_pb2.PredictedReward()
    m.ParseFromString(newer)
    ref = predicted_pb2.PredictedReward()
    ref.ParseFromString(old)
    assert len(newer) == len(old) + 9
    assert m.score == ref.score and m.rollout_id == ref.rollout_id == "g3-r2"
    assert m.created_at == ref.created_at


def test_truncated_record_is_refused():
    with pytest.raises(DecodeError):
        predicted_pb2.PredictedReward().ParseFromString((GOLDEN / "protobuf" / "predicted.bin").read_bytes()[:-3])
