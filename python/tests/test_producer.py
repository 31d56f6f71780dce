"""RolloutProducer against a fake producer, and the SASL/TLS option mapping."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from conftest import FakeProducer

from wmrl_client import (
    DeliveryError,
    FieldError,
    GroupManifest,
    KafkaOptions,
    Rollout,
    RolloutProducer,
    StepManifest,
    encode_record,
    is_anchor,
)

T = datetime(2026, 1, 2, tzinfo=UTC)


def generate(run: str, step: int, groups: int = 2, size: int = 3) -> Iterator[Rollout | StepManifest]:
    manifest = StepManifest(run_id=run, step=step, created_at=T)
    for g in range(groups):
        gid = f"s{step}-g{g}"
        anchor = is_anchor(run, gid, 0.25)
        manifest.groups.append(GroupManifest(group_id=gid, stream="mle", size=size, anchor=anchor))
        for i in range(size):
            yield Rollout(
                run_id=run,
                step=step,
                group_id=gid,
                rollout_id=f"{gid}-r{i}",
                stream="mle",
                index=i,
                anchor=anchor,
                artifact=f"a{i}",
                created_at=T,
            )
    yield manifest


def test_publish_from_generator_with_go_headers(fake_producer: Callable[..., FakeProducer]) -> None:
    p = RolloutProducer("b:1", producer_factory=fake_producer, topic_prefix="lab.")
    stats = p.publish(generate("run-1", 4))
    fp: FakeProducer = fake_producer.made[-1]  # type: ignore[attr-defined]
    assert (stats.rollouts, stats.steps) == (6, 1)
    assert fp.conf["enable.idempotence"] is True and fp.conf["acks"] == "all"
    assert fp.conf["partitioner"] == "murmur2_random"  # the Go stages' key hash
    first, last = fp.produced[0], fp.produced[-1]
    assert first["topic"] == "lab.rollouts.v1" and last["topic"] == "lab.steps.v1"
    assert first["key"] == b"run-1"
    assert first["headers"] == [
        ("wmrl-schema", b"wmrl.rollout.v1"),
        ("content-type", b"application/json"),
        ("wmrl-run", b"run-1"),
        ("wmrl-step", b"4"),
        ("wmrl-stream", b"mle"),
    ]
    assert last["headers"] == [
        ("wmrl-schema", b"wmrl.step.v1"),
        ("content-type", b"application/json"),
        ("wmrl-run", b"run-1"),
        ("wmrl-step", b"4"),
    ]
    assert last["value"] == encode_record(list(generate("run-1", 4))[-1])  # type: ignore[arg-type]


def test_invalid_record_refused_before_queueing(fake_producer: Callable[..., FakeProducer]) -> None:
    p = RolloutProducer("b:1", producer_factory=fake_producer)
    fp: FakeProducer = fake_producer.made[-1]  # type: ignore[attr-defined]
    bad = Rollout(run_id="run 1", step=0, group_id="g", rollout_id="r", stream="s", created_at=T)
    with pytest.raises(FieldError) as ei:
        p.send(bad)
    assert ei.value.field == "run_id" and ei.value.value == "run 1"
    with pytest.raises(FieldError, match="at least one group"):
        p.send(StepManifest(run_id="r", step=0, created_at=T))
    with pytest.raises(TypeError):
        p.send("not a record")  # type: ignore[arg-type]
    assert fp.produced == []


def test_delivery_errors_surface_on_flush(fake_producer: Callable[..., FakeProducer]) -> None:
    p = RolloutProducer("b:1", producer_factory=fake_producer)
    fp: FakeProducer = fake_producer.made[-1]  # type: ignore[attr-defined]
    fp.fail_with = "Broker: Not enough in-sync replicas"
    with pytest.raises(DeliveryError, match="in-sync") as ei:
        p.publish(generate("r1", 0))
    assert len(ei.value.errors) == 7
    fp.fail_with = None
    p.publish(generate("r1", 1))  # errors were reported once and cleared


def test_full_queue_is_retried(fake_producer: Callable[..., FakeProducer]) -> None:
    p = RolloutProducer("b:1", producer_factory=fake_producer)
    fp: FakeProducer = fake_producer.made[-1]  # type: ignore[attr-defined]
    fp.buffer_errors = 3
    p.publish(generate("r1", 0, groups=1, size=1))
    assert len(fp.produced) == 2


def test_idempotence_cannot_be_switched_off(fake_producer: Callable[..., FakeProducer]) -> None:
    for conf in ({"enable.idempotence": False}, {"acks": "1"}, {"partitioner": "consistent_random"}):
        with pytest.raises(ValueError):
            RolloutProducer("b:1", producer_factory=fake_producer, producer_config=conf)
    with RolloutProducer("b:1", producer_factory=fake_producer) as p:
        p.send(next(generate("r1", 0)))
    with pytest.raises(RuntimeError, match="closed"):
        p.send(next(generate("r1", 0)))


@pytest.mark.parametrize(
    "opts,want",
    [
        ({}, {"security.protocol": "PLAINTEXT"}),
        ({"tls": True}, {"security.protocol": "SSL"}),
        ({"tls_ca": "/ca.pem"}, {"security.protocol": "SSL", "ssl.ca.location": "/ca.pem"}),
        (
            {"tls_cert": "/c.pem", "tls_key": "/k.pem"},
            {"security.protocol": "SSL", "ssl.certificate.location": "/c.pem", "ssl.key.location": "/k.pem"},
        ),
        (
            {"sasl_mechanism": "plain", "sasl_user": "u", "sasl_password": "p"},
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "u",
                "sasl.password": "p",
            },
        ),
        (
            {"sasl_mechanism": "SCRAM-SHA-256", "sasl_user": "u", "tls": True, "tls_skip_verify": True},
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-256",
                "enable.ssl.certificate.verification": False,
            },
        ),
    ],
)
def test_options_map_to_librdkafka(opts: dict[str, Any], want: dict[str, Any]) -> None:
    conf = KafkaOptions(**opts).librdkafka()
    for k, v in want.items():
        assert conf[k] == v
    if not opts.get("tls") and not any(k.startswith("tls_") for k in opts):
        assert not any(k.startswith("ssl.") for k in conf)


@pytest.mark.parametrize(
    "opts,match",
    [
        ({"brokers": []}, "no Kafka brokers"),
        ({"sasl_mechanism": "GSSAPI", "sasl_user": "u"}, "want one of"),
        ({"sasl_mechanism": "PLAIN"}, "needs sasl_user"),
        ({"tls_cert": "/c.pem"}, "together"),
        ({"tls": True, "tls_server_name": "kafka.internal"}, "not supported by librdkafka"),
    ],
)
def test_option_errors(opts: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        KafkaOptions(**opts).librdkafka()


def test_options_from_env_like_the_cli() -> None:
    env = {
        "WMRL_BROKERS": "k1:9092, k2:9092",
        "WMRL_SASL_MECHANISM": "SCRAM-SHA-512",
        "WMRL_SASL_USER": "wmrl",
        "WMRL_SASL_PASSWORD": "s3cret",
        "WMRL_TLS": "true",
        "WMRL_TOPIC_PREFIX": "prod.",
    }
    o = KafkaOptions.from_env(env)
    assert o.brokers == ["k1:9092", "k2:9092"] and o.tls and o.topic_prefix == "prod."
    conf = o.librdkafka()
    assert conf["bootstrap.servers"] == "k1:9092,k2:9092" and conf["security.protocol"] == "SASL_SSL"
    with pytest.raises(TypeError):
        KafkaOptions.from_env({}, nope=1)
