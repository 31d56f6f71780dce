"""The format trial's Python half (docs/formats.md): decode CPU per record, JSON vs Protobuf
(the ``protobuf`` package's upb backend, classes generated from schemas/) vs Avro (fastavro).

    PYTHONPATH=src:tests python bench/format_trial.py [--n 20000] [--rounds 5]

Per record type and format: decode the same record n times and convert it to what a reader uses
(rollouts and steps: the client's dataclasses, validated as the client validates them; rewards,
which the client has no type for: every field read once). Process CPU (time.process_time) per
record, rounds alternating the formats; prints the median and min of the rounds in µs and the
ratio to JSON. Not a test: a number to read on a quiet machine.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import time
from datetime import UTC, datetime

import fastavro
from client_codecs import decode_record
from google.protobuf.internal import api_implementation

from wmrl_client import contract as c
from wmrl_client.codec import encode_record
from wmrl_client.records import GroupManifest, Rollout, StepManifest
from wmrl_client.wirepb import executed_pb2, predicted_pb2, rollout_pb2, step_pb2

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
REF = dict(run_id="run-0001", step=3, group_id="s3-g12", rollout_id="s3-g12-r2", stream="mle", policy_version="ckpt-3")
ROLLOUT = Rollout(
    **REF,
    anchor=True,
    index=2,
    prompt="fit the <data> & report",
    artifact='{"model":"ridge","alpha":0.1}',
    artifact_size=29,
    meta={"task": "t17", "lang": "python"},
    created_at=T0,
)
STEP = StepManifest(
    run_id="run-0001",
    step=3,
    policy_version="ckpt-3",
    created_at=T0,
    groups=[
        GroupManifest(group_id="s3-g0", stream="mle", size=8),
        GroupManifest(group_id="s3-g12", stream="mle", size=8, anchor=True),
        GroupManifest(group_id="s3-g5", stream="dsbench", size=4),
    ],
)
PREDICTED = dict(
    schema=c.SCHEMA_PREDICTED,
    **REF,
    anchor=True,
    score=0.625,
    status="ok",
    reason="",
    model="wm-proxy",
    attempts=1,
    latency_ms=12.5,
    created_at="2026-03-01T12:00:00Z",
)
EXECUTED = dict(
    schema=c.SCHEMA_EXECUTED,
    **REF,
    score=0.0,
    imputed=True,
    status="timeout",
    reason="wall clock 600s exceeded",
    exit_code=-9,
    duration_ms=600000.0,
    stderr_tail="killed\n",
    created_at="2026-03-01T12:00:00Z",
)

_REF_AVRO = [{"name": k, "type": "long" if k == "step" else "string"} for k in REF]
_TIME_AVRO = {"name": "created_at", "type": {"type": "long", "logicalType": "timestamp-micros"}}
_SCORE_AVRO = {"name": "score", "type": ["null", "double"], "default": None}
AVRO = {
    "rollout": {
        "type": "record",
        "name": "Rollout",
        "fields": _REF_AVRO
        + [
            {"name": "anchor", "type": "boolean"},
            {"name": "index", "type": "long"},
            {"name": "prompt", "type": "string"},
            {"name": "artifact", "type": "string"},
            {"name": "artifact_uri", "type": "string"},
            {"name": "artifact_sha256", "type": "string"},
            {"name": "artifact_size", "type": "long"},
            {"name": "meta", "type": {"type": "map", "values": "string"}},
            _TIME_AVRO,
        ],
    },
    "step": {
        "type": "record",
        "name": "StepManifest",
        "fields": [
            {"name": "run_id", "type": "string"},
            {"name": "step", "type": "long"},
            {"name": "policy_version", "type": "string"},
            {"name": "policy_step", "type": ["null", "long"], "default": None},
            {"name": "end_of_run", "type": "boolean"},
            {
                "name": "groups",
                "type": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "GroupManifest",
                        "fields": [
                            {"name": "group_id", "type": "string"},
                            {"name": "stream", "type": "string"},
                            {"name": "size", "type": "long"},
                            {"name": "anchor", "type": "boolean"},
                        ],
                    },
                },
            },
            _TIME_AVRO,
        ],
    },
    "predicted": {
        "type": "record",
        "name": "PredictedReward",
        "fields": _REF_AVRO
        + [
            {"name": "anchor", "type": "boolean"},
            _SCORE_AVRO,
            {"name": "status", "type": "string"},
            {"name": "reason", "type": "string"},
            {"name": "model", "type": "string"},
            {"name": "attempts", "type": "long"},
            {"name": "latency_ms", "type": "double"},
            _TIME_AVRO,
        ],
    },
    "executed": {
        "type": "record",
        "name": "ExecutedReward",
        "fields": _REF_AVRO
        + [
            _SCORE_AVRO,
            {"name": "imputed", "type": "boolean"},
            {"name": "status", "type": "string"},
            {"name": "reason", "type": "string"},
            {"name": "exit_code", "type": "long"},
            {"name": "duration_ms", "type": "double"},
            {"name": "stderr_tail", "type": "string"},
            _TIME_AVRO,
        ],
    },
}
PARSED = {k: fastavro.parse_schema(v) for k, v in AVRO.items()}


def _ts(m) -> datetime:
    return datetime.fromtimestamp(m.created_at.seconds + m.created_at.nanos / 1e9, UTC)


def _avro_bytes(kind: str, values: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, PARSED[kind], values)
    return buf.getvalue()


def _fields(o, names) -> None:
    for n in names:
        getattr(o, n) if not isinstance(o, dict) else o.get(n)


def cases():
    """(record, format) → (payload, decode function)."""
    r = {
        k: getattr(ROLLOUT, k)
        for k in (
            "run_id",
            "step",
            "group_id",
            "rollout_id",
            "stream",
            "policy_version",
            "anchor",
            "index",
            "prompt",
            "artifact",
            "artifact_uri",
            "artifact_sha256",
            "artifact_size",
            "meta",
        )
    }
    s = dict(
        run_id=STEP.run_id,
        step=STEP.step,
        policy_version=STEP.policy_version,
        end_of_run=False,
        groups=[dict(group_id=g.group_id, stream=g.stream, size=g.size, anchor=g.anchor) for g in STEP.groups],
    )
    pb_r = rollout_pb2.Rollout(**r)
    pb_r.created_at.FromDatetime(T0)
    pb_s = step_pb2.StepManifest(
        **{k: v for k, v in s.items() if k != "groups"}, groups=[step_pb2.GroupManifest(**g) for g in s["groups"]]
    )
    pb_s.created_at.FromDatetime(T0)
    nojson = lambda d: {k: v for k, v in d.items() if k not in ("schema", "created_at")}  # noqa: E731
    pb_p = predicted_pb2.PredictedReward(**nojson(PREDICTED))
    pb_e = executed_pb2.ExecutedReward(**nojson(EXECUTED))
    pf, ef = list(nojson(PREDICTED)), list(nojson(EXECUTED))

    def rollout_from(m, ts):
        x = Rollout(
            **{k: m[k] if isinstance(m, dict) else getattr(m, k) for k in r if k != "meta"},
            meta=dict(m["meta"] if isinstance(m, dict) else m.meta),
            created_at=ts,
        )
        x.validate()
        return x

    def step_from(m, ts):
        get = (lambda o, k: o[k]) if isinstance(m, dict) else getattr  # noqa: E731
        x = StepManifest(
            run_id=get(m, "run_id"),
            step=get(m, "step"),
            policy_version=get(m, "policy_version"),
            groups=[
                GroupManifest(
                    group_id=get(g, "group_id"), stream=get(g, "stream"), size=get(g, "size"), anchor=get(g, "anchor")
                )
                for g in get(m, "groups")
            ],
            created_at=ts,
        )
        x.validate()
        return x

    def pb(cls, conv):
        def dec(b):
            m = cls()
            m.ParseFromString(b)
            return conv(m)

        return dec

    def av(kind, conv):
        sch = PARSED[kind]
        return lambda b: conv(fastavro.schemaless_reader(io.BytesIO(b), sch, None))

    return {
        ("rollout", "json"): (encode_record(ROLLOUT), lambda b: decode_record(c.SCHEMA_ROLLOUT, b)),
        ("rollout", "protobuf"): (pb_r.SerializeToString(), pb(rollout_pb2.Rollout, lambda m: rollout_from(m, _ts(m)))),
        ("rollout", "avro"): (
            _avro_bytes("rollout", {**r, "created_at": T0}),
            av("rollout", lambda m: rollout_from(m, m["created_at"])),
        ),
        ("step", "json"): (encode_record(STEP), lambda b: decode_record(c.SCHEMA_STEP, b)),
        ("step", "protobuf"): (pb_s.SerializeToString(), pb(step_pb2.StepManifest, lambda m: step_from(m, _ts(m)))),
        ("step", "avro"): (
            _avro_bytes("step", {**s, "created_at": T0}),
            av("step", lambda m: step_from(m, m["created_at"])),
        ),
        ("predicted", "json"): (json.dumps(PREDICTED).encode(), lambda b: _fields(json.loads(b), pf)),
        ("predicted", "protobuf"): (
            pb_p.SerializeToString(),
            pb(predicted_pb2.PredictedReward, lambda m: _fields(m, pf)),
        ),
        ("predicted", "avro"): (
            _avro_bytes("predicted", {**nojson(PREDICTED), "created_at": T0}),
            av("predicted", lambda m: _fields(m, pf)),
        ),
        ("executed", "json"): (json.dumps(EXECUTED).encode(), lambda b: _fields(json.loads(b), ef)),
        ("executed", "protobuf"): (pb_e.SerializeToString(), pb(executed_pb2.ExecutedReward, lambda m: _fields(m, ef))),
        ("executed", "avro"): (
            _avro_bytes("executed", {**nojson(EXECUTED), "created_at": T0}),
            av("executed", lambda m: _fields(m, ef)),
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    cs = cases()
    for (_, _), (b, dec) in cs.items():
        dec(b)  # every case decodes before anything is timed
    got: dict[tuple[str, str], list[float]] = {k: [] for k in cs}
    for _ in range(a.rounds):
        for k, (b, dec) in cs.items():
            t = time.process_time()
            for _ in range(a.n):
                dec(b)
            got[k].append((time.process_time() - t) / a.n * 1e6)
    print(f"protobuf backend: {api_implementation.Type()}; fastavro {fastavro.__version__}; n={a.n} rounds={a.rounds}")
    print(f"{'record':10} {'format':9} {'bytes':>5} {'median µs':>10} {'min µs':>8} {'÷ json':>7}")
    for (rec, fmt), v in got.items():
        med = statistics.median(v)
        ratio = med / statistics.median(got[(rec, "json")])
        print(f"{rec:10} {fmt:9} {len(cs[(rec, fmt)][0]):5d} {med:10.2f} {min(v):8.2f} {ratio:7.2f}")


if __name__ == "__main__":
    main()
