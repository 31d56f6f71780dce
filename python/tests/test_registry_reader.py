"""A reader that is not wmrl: confluent-kafka's Protobuf deserializer and the schema registry.

gohelper produce-framed registers every topic's schema with the real registry (WMRL_TEST_REGISTRY,
Apicurio Registry started by deploy/local/registry.sh) through wmrl's Go package topics/schemareg,
and writes records of every message kind framed in the Confluent wire format, plus a dead letter.
This reader uses nothing of wmrl: it takes each record's schema id and message index with
confluent-kafka's own framing code, fetches the schema text by id from the registry, checks the id
is a version of the topic's subject (`<topic>-value`), compiles the text with protoc
(grpcio-tools), picks the message the index names, and decodes with ProtobufDeserializer.

Why protoc: confluent-kafka's deserializer, given a registry client, asks for the writer schema in
the `serialized` format (a base64 FileDescriptorProto), which Confluent's registry serves and
Apicurio's Confluent-compatible API does not (it returns the .proto text; the deserializer then
fails with "Wire format was corrupt"). So the reader fetches the text itself and hands the
deserializer the compiled message type.
"""

from __future__ import annotations

import json
import os
import tempfile
import urllib.request
from pathlib import Path
from typing import Any, Callable

import grpc_tools
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient, dual_schema_id_deserializer
from confluent_kafka.schema_registry.serde import SchemaId
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, json_format
from google.protobuf.message_factory import GetMessageClass
from grpc_tools import protoc

from conftest import _reachable, _service_env


def resolve_registry(env: dict[str, str] | os._Environ[str]) -> str:
    url = _service_env(env, "WMRL_TEST_REGISTRY").rstrip("/")
    hostport = url.split("://", 1)[-1].split("/", 1)[0]
    err = _reachable(hostport)
    if err is not None:
        pytest.fail(f"schema registry at WMRL_TEST_REGISTRY={url} is unreachable: {err}")
    return url


def compile_schema(text: str) -> descriptor_pool.DescriptorPool:
    """Compiles a .proto text from the registry with protoc (grpcio-tools), well-known types included."""
    includes = str(Path(grpc_tools.__file__).parent / "_proto")
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "registry.proto"
        src.write_text(text)
        out = Path(d) / "set.pb"
        rc = protoc.main(["protoc", f"-I{d}", f"-I{includes}", "--include_imports", f"--descriptor_set_out={out}", str(src)])
        assert rc == 0, f"protoc refused the registry's schema (exit {rc}):\n{text}"
        fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:
        pool.Add(f)
    return pool


def subjects_of(registry: str, schema_id: int) -> set[str]:
    """The subjects whose versions are schema_id (GET /schemas/ids/{id}/versions)."""
    with urllib.request.urlopen(f"{registry}/schemas/ids/{schema_id}/versions", timeout=10) as r:
        return {v["subject"] for v in json.load(r)}


class RegistryReader:
    """Decodes Confluent-framed Protobuf values by their schema id and message index alone."""

    def __init__(self, registry: str) -> None:
        self.url = registry
        self.client = SchemaRegistryClient({"url": registry})
        self.types: dict[tuple[int, tuple[int, ...]], Any] = {}

    def decode(self, topic: str, value: bytes, *, subject: str | None) -> tuple[int, list[int], Any]:
        ctx = SerializationContext(topic, MessageField.VALUE)
        sid = SchemaId("PROTOBUF")
        dual_schema_id_deserializer(value, ctx, sid)  # confluent-kafka's own frame parser
        index = list(sid.message_indexes or [0])
        if subject is not None:
            assert subject in subjects_of(self.url, sid.id), f"{topic}: schema id {sid.id} is not a version of {subject}"
        key = (sid.id, tuple(index))
        if key not in self.types:
            schema = self.client.get_schema(sid.id)
            assert schema.schema_type == "PROTOBUF", schema.schema_type
            pool = compile_schema(schema.schema_str)
            fd = pool.FindFileByName("registry.proto")
            desc = list(fd.message_types_by_name.values())[index[0]]
            for i in index[1:]:
                desc = desc.nested_types[i]
            self.types[key] = GetMessageClass(desc)
        msg = ProtobufDeserializer(self.types[key], {}, None)(value, ctx)
        return sid.id, index, msg


def read_all(kafka: str, topic: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": kafka, "group.id": f"registry-reader-{topic}", "enable.auto.commit": False})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.assign([TopicPartition(topic, 0, low)])
        out: list[bytes] = []
        while len(out) < high - low:
            m = c.poll(10)
            assert m is not None, f"{topic}: read {len(out)} of {high - low} records"
            assert m.error() is None, m.error()
            out.append(m.value())
        return out
    finally:
        c.close()


def test_registry_only_reader_decodes_every_topic(kafka: str, prefix: str, gohelper: Callable[..., Any]) -> None:
    registry = resolve_registry(os.environ)
    written = gohelper("produce-framed", "--brokers", kafka, "--prefix", prefix, "--registry", registry)
    reader = RegistryReader(registry)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for w in written:
        by_topic.setdefault(w["topic"], []).append(w)
    # Every topic with a schema (all but runs) got records: rollouts, steps, rewards, advantages,
    # calibration (snapshot, chunk, end), dead letters.
    assert len(by_topic) == 7, sorted(by_topic)
    for topic, want in by_topic.items():
        values = read_all(kafka, topic)
        assert len(values) == len(want), f"{topic}: {len(values)} records, wrote {len(want)}"
        # A dead letter keeps its source's frame: its id is the source subject's, not the DLQ's.
        subject = None if topic.endswith("dlq.v1") else f"{topic}-value"
        for v, w in zip(values, want):
            schema_id, index, msg = reader.decode(topic, v, subject=subject)
            assert (schema_id, index) == (w["id"], w["index"]), topic
            assert msg.DESCRIPTOR.full_name == w["message"], topic
            assert json_format.MessageToDict(msg) == w["json"], topic
