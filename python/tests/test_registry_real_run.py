"""A reader that is not wmrl reads a real run: every topic, through the schema registry alone.

The Go side is the real pipeline, run as processes built from ./cmd/wmrl with --schema-registry
against the real broker, Redis and registry (WMRL_TEST_KAFKA, WMRL_TEST_REDIS,
WMRL_TEST_REGISTRY): `wmrl worldmodel` (an OpenAI-compatible fake that answers the score written
in the artifact), `wmrl sandbox` (cmd/wmrl/testdata/e2e/score.sh), `wmrl correct`, and `wmrl
generate --backend jsonl` writing STEPS steps and ending the run. One predicted reward that the
registry's schema accepts and wmrl's rules refuse (attempts -1) is put on the predicted topic
first, so the dead-letter topic holds one record.

The reader is test_registry_reader.RegistryReader: confluent-kafka's frame parser and
ProtobufDeserializer, the registry client, and the registry's schema text compiled by protoc;
nothing of wmrl's codecs. It reads every record of every topic with a schema (all but the
run-control topic) and the test requires per topic the count the run produced: the rollouts and
predictions written, the anchor groups' executions, the manifests and end-of-run record, the
advantage rows of `wmrl digest` (decoded with pyarrow from AdvantageBatch.arrow_ipc, and giving
its digest), one calibration snapshot per sealed step and the run's end, the one dead letter.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from google.protobuf import json_format
from test_e2e import wmrl_digest
from test_registry_reader import RegistryReader, resolve_registry
from test_reward_e2e import SCORE_SH, Stages, scores, world_model  # noqa: F401 (world_model: a fixture)

from wmrl_client.digest import digest_and_count

pytestmark = pytest.mark.e2e

STEPS = 4
GROUPS = 3
SIZE = 4
ANCHOR = 0.5
FRAMED = "application/x-protobuf; framing=confluent"


def latest_id(registry: str, subject: str, timeout: float = 60) -> int:
    """The id of subject's latest version, once a stage has registered it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{registry}/subjects/{subject}/versions/latest", timeout=10) as r:
                return int(json.load(r)["id"])
        except urllib.error.HTTPError as e:
            if e.code != 404 or time.monotonic() > deadline:
                raise AssertionError(f"subject {subject} not registered: {e}") from e
        time.sleep(0.5)


def bad_prediction(schema_id: int, run: str) -> bytes:
    """A predicted reward framed by hand (magic 0, id, message index [0] as the single byte 0):
    valid for the registry's schema, refused by wmrl's rules (attempts must be >= 0)."""
    from wmrl_client.wirepb import predicted_pb2

    msg = predicted_pb2.PredictedReward(  # type: ignore[attr-defined]
        run_id=run, step=0, group_id="0-g0", rollout_id="bad-0", stream="default", status="ok", score=0.5,
        attempts=-1,
    )  # fmt: skip
    body: bytes = msg.SerializeToString()
    return b"\x00" + schema_id.to_bytes(4, "big") + b"\x00" + body


def read_topic(kafka: str, topic: str) -> list[Any]:
    """Every committed record of topic, all partitions, from the start to the end."""
    c = Consumer({"bootstrap.servers": kafka, "group.id": f"registry-run-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "isolation.level": "read_committed",
                  "enable.partition.eof": True})  # fmt: skip
    try:
        md = c.list_topics(topic, timeout=10).topics[topic]
        parts = sorted(md.partitions)
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[Any] = []
        done: set[int] = set()
        deadline = time.monotonic() + 30
        while len(done) < len(parts):
            assert time.monotonic() < deadline, f"{topic}: no end after {len(out)} records"
            m = c.poll(1.0)
            if m is None:
                continue
            err = m.error()
            if err is not None:
                assert err.code() == KafkaError._PARTITION_EOF, err
                done.add(int(m.partition() or 0))
                continue
            out.append(m)
        return out
    finally:
        c.close()


def wait_for(what: str, ok: Any, st: Stages, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        st.check_alive()
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1)


def test_registry_only_reader_reads_a_real_run(
    kafka: str,
    redis_url: str,
    wmrl_cli: Path,
    prefix: str,
    world_model: str,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    registry = resolve_registry(os.environ)
    run = f"regrun-{uuid.uuid4().hex[:6]}"
    st = Stages(wmrl_cli, kafka, redis_url, prefix)
    st.glob += ["--schema-registry", registry]
    t = {k: f"{prefix}{s}" for k, s in [("rollouts", "rollouts.v1"), ("steps", "steps.v1"),
         ("predicted", "rewards.predicted.v1"), ("executed", "rewards.executed.v1"),
         ("advantages", "advantages.v1"), ("calibration", "calibration.v1"), ("dlq", "dlq.v1")]}  # fmt: skip
    st.run("topics", "create", "--partitions", "1")
    lines = []
    for s in range(STEPS):
        for j in range(GROUPS):
            for i in range(SIZE):
                wm, ex = scores(s, j, i)
                art = json.dumps({"rollout": f"{s}-{j}-{i}", "wm": wm, "exec": ex})
                lines.append(json.dumps({"step": s, "group_id": f"{s}-g{j}", "prompt": "p", "artifact": art}))
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    n = STEPS * GROUPS * SIZE
    try:
        st.start("worldmodel", "worldmodel", "--base-url", world_model, "--model", "m", "--concurrency", "4",
                 log_dir=tmp_path)  # fmt: skip
        st.start("sandbox", "sandbox", "--single-step-no-private",
                 "--argv", json.dumps(["/bin/sh", str(SCORE_SH), "{artifact}"]), "--slots", "2", "--timeout", "30s",
                 log_dir=tmp_path)  # fmt: skip
        st.start("correct", "correct", "--transactional-id", f"{st.unique}-txn", "--redis-prefix", st.unique,
                 "--min-pairs", "4", log_dir=tmp_path)  # fmt: skip
        pid = latest_id(registry, f"{t['predicted']}-value")
        p = Producer({"bootstrap.servers": kafka})
        p.produce(t["predicted"], bad_prediction(pid, run), key=run.encode(),
                  headers=[("content-type", FRAMED.encode()), ("wmrl-run", run.encode())])  # fmt: skip
        assert p.flush(30) == 0
        st.run("generate", "--backend", "jsonl", "--input", str(tmp_path / "in.jsonl"), "--run", run,
               "--anchor-fraction", str(ANCHOR))  # fmt: skip
        wait_for("every advantage row", lambda: wmrl_digest(wmrl_cli, kafka, t["advantages"], run)[1] >= n, st)
        wait_for("the dead letter", lambda: len(read_topic(kafka, t["dlq"])) >= 1, st, timeout=30)
        shown: dict[str, Any] = {}

        def ended() -> bool:
            shown.update(json.loads(st.run("runs", "show", run, "--output", "json", "--redis-prefix", st.unique)))
            return bool(shown.get("ended"))

        wait_for("the run's end", ended, st, timeout=60)
    finally:
        codes = st.stop()
    assert all(code == 0 for _, code in codes), codes
    digest, rows, nsteps = wmrl_digest(wmrl_cli, kafka, t["advantages"], run)
    assert (rows, nsteps) == (n, STEPS)

    reader = RegistryReader(registry)
    decoded: dict[str, list[Any]] = {}
    failures: dict[str, str] = {}
    raw: dict[str, list[Any]] = {}
    for name, topic in t.items():
        subject = None if name == "dlq" else f"{topic}-value"
        msgs = raw[name] = read_topic(kafka, topic)
        decoded[name] = []
        for m in msgs:
            try:
                decoded[name].append(reader.decode(topic, m.value(), subject=subject)[2])
            except Exception as e:  # noqa: BLE001 (reported per topic below)
                ct = dict(m.headers() or []).get("content-type", b"").decode()
                failures[name] = f"{len(msgs)} records, offset {m.offset()} (content-type {ct!r}): {e!r}"
                break
    assert not failures, "the registry-only reader could not decode:\n" + "\n".join(
        f"  {k}: {v}" for k, v in failures.items()
    )

    kinds = {k: Counter(m.DESCRIPTOR.full_name for m in v) for k, v in decoded.items()}
    assert kinds["rollouts"] == {"wmrl.v1.Rollout": n}, kinds
    # One manifest per step, then generate's end-of-run record naming the last step.
    assert kinds["steps"] == {"wmrl.v1.StepManifest": STEPS + 1}, kinds
    assert [(m.step, m.end_of_run) for m in decoded["steps"]] == [(s, False) for s in range(STEPS)] + [
        (STEPS - 1, True)
    ], [(m.step, m.end_of_run) for m in decoded["steps"]]
    assert kinds["predicted"] == {"wmrl.v1.PredictedReward": n + 1}, kinds
    # The sandbox executed exactly the rollouts of the groups the manifests mark as anchors.
    anchor_groups = {(m.step, g.group_id) for m in decoded["steps"] for g in m.groups if g.anchor}
    assert 0 < len(anchor_groups) < STEPS * GROUPS, anchor_groups
    want_exec = sorted(r.rollout_id for r in decoded["rollouts"] if (r.step, r.group_id) in anchor_groups)
    assert kinds["executed"] == {"wmrl.v1.ExecutedReward": len(want_exec)}, kinds
    assert sorted(m.rollout_id for m in decoded["executed"]) == want_exec
    assert sorted(m.rollout_id for m in decoded["predicted"]) == sorted(
        [r.rollout_id for r in decoded["rollouts"]] + ["bad-0"]
    )

    # Advantages: the Arrow IPC inside each AdvantageBatch, read by pyarrow, gives `wmrl digest`'s
    # rows and digest.
    assert set(kinds["advantages"]) == {"wmrl.v1.AdvantageBatch"}, kinds
    table = pa.concat_tables(pa.ipc.open_stream(m.arrow_ipc).read_all() for m in decoded["advantages"])
    assert digest_and_count(table) == (digest, n)

    # Calibration: a snapshot per sealed step and stream (`wmrl runs show`), chunks of the
    # window, the run's end.
    assert shown["last_sealed_step"] == STEPS - 1 and shown["ended"]["last_step"] == STEPS - 1, shown
    streams = sorted(s["stream"] for s in shown["streams"])
    snaps = [m for m in decoded["calibration"] if m.DESCRIPTOR.name == "CalibrationSnapshot"]
    ends = [m for m in decoded["calibration"] if m.DESCRIPTOR.name == "CalibrationEnd"]
    assert sorted((s.stream, s.step) for s in snaps) == [(x, v) for x in streams for v in range(STEPS)], snaps
    assert [(e.run_id, e.last_step) for e in ends] == [(run, STEPS - 1)], ends
    assert set(kinds["calibration"]) <= {"wmrl.v1.CalibrationSnapshot", "wmrl.v1.CalibrationChunk",
                                         "wmrl.v1.CalibrationEnd"}, kinds  # fmt: skip

    # The one dead letter is the hand-framed prediction, its frame kept: decoded as the
    # predicted topic's message with the value it was written with.
    assert len(decoded["dlq"]) == 1, kinds
    (dl,) = decoded["dlq"]
    hs = {k: (v or b"").decode() for k, v in raw["dlq"][0].headers() or []}
    assert (hs.get("wmrl-dlq-reason"), hs.get("wmrl-dlq-source-topic")) == ("invalid-field:attempts", t["predicted"]), (
        hs
    )
    assert (dl.DESCRIPTOR.full_name, dl.rollout_id, dl.attempts) == ("wmrl.v1.PredictedReward", "bad-0", -1)
    assert json_format.MessageToDict(dl)["runId"] == run
