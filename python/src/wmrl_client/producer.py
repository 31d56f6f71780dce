"""RolloutProducer: publish rollouts and step manifests from Python, exactly as the Go generator does.

Every record is validated with the Go rules (``records.py``) before it is queued, encoded to the
bytes Go's ``topics.Encode*`` would produce, keyed by run_id and given the same headers as Go's
``topics.Names.RolloutRecord``/``StepRecord``. The producer is idempotent (``enable.idempotence``,
``acks=all``), so broker retries never duplicate or reorder a run's records, and partitions keys
with murmur2 like the Go stages, so a run's records meet on one partition number.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import contract as c
from .codec import encode_record
from .errors import DeliveryError
from .options import KafkaOptions, client_options
from .records import Rollout, StepManifest

log = logging.getLogger("wmrl_client")


@dataclass
class PublishStats:
    """What publish() queued and what the broker acknowledged."""

    rollouts: int = 0
    steps: int = 0
    bytes: int = 0


def record_headers(schema: str, run_id: str, step: int, stream: str = "") -> list[tuple[str, bytes]]:
    """The standard headers (topics.Headers), plus wmrl-stream when stream is set (topics.jsonRecord)."""
    hs = [
        (c.HEADER_SCHEMA, schema.encode()),
        (c.HEADER_CONTENT_TYPE, c.content_type_for(schema).encode()),
        (c.HEADER_RUN, run_id.encode()),
        (c.HEADER_STEP, str(step).encode()),
    ]
    if stream:
        hs.append((c.HEADER_STREAM, stream.encode()))
    return hs


class RolloutProducer:
    """Validate and publish Rollout and StepManifest records (idempotent Kafka producer).

    Connection options are those of AdvantageStream. ``send`` raises FieldError (naming the field
    and value) before anything is queued; delivery failures surface from ``flush``/``publish`` as
    DeliveryError. ``producer_factory`` builds the producer from the final librdkafka config
    (default: confluent_kafka.Producer).
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str] | None = None,
        *,
        kafka: KafkaOptions | None = None,
        linger_ms: int = 5,
        producer_config: Mapping[str, object] | None = None,
        producer_factory: Callable[[dict[str, object]], Any] | None = None,
        **kafka_options: Any,
    ) -> None:
        opts = client_options(bootstrap, kafka, kafka_options)
        conf = opts.librdkafka()
        conf.update({"linger.ms": linger_ms})
        for k, v in (producer_config or {}).items():
            if k == "enable.idempotence" and str(v).lower() != "true":
                raise ValueError("producer_config enable.idempotence=false: the producer must stay idempotent")
            if k == "acks" and str(v) not in ("all", "-1"):
                raise ValueError(f"producer_config acks={v!r}: an idempotent producer needs acks=all")
            if k == "partitioner" and str(v) != "murmur2_random":
                raise ValueError(
                    f"producer_config partitioner={v!r}: a run's records must land on the partition the Go "
                    "stages pick (murmur2_random, Kafka's Java/franz-go key hash)"
                )
            conf[k] = v
        # librdkafka's default partitioner hashes keys with CRC32; the Go stages (franz-go) and
        # Kafka's Java client use murmur2. The correction consumer joins a run's records by
        # partition number, so Python must place keys as Go does.
        conf.update({"enable.idempotence": True, "acks": "all", "partitioner": "murmur2_random"})
        self.config = dict(conf)
        if producer_factory is None:
            from confluent_kafka import Producer

            producer_factory = Producer
        self._producer = producer_factory(conf)
        self.rollouts_topic = c.topic_name(c.SUFFIX_ROLLOUTS, opts.topic_prefix)
        self.steps_topic = c.topic_name(c.SUFFIX_STEPS, opts.topic_prefix)
        # End-of-run records go to the run-control topic, which only trainers and operators may
        # write; wmrl correct relays them onto the steps topic (Go's topics.Names.EndRequestRecord).
        self.runs_topic = c.topic_name(c.SUFFIX_RUNS, opts.topic_prefix)
        self.stats = PublishStats()
        self._errors: list[tuple[str, str, str]] = []
        self._closed = False

    def __enter__(self) -> RolloutProducer:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self._closed = True
            self._producer.flush(5)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            key = (msg.key() or b"").decode("utf-8", "replace")
            self._errors.append((msg.topic(), key, str(err)))

    def send(self, record: Rollout | StepManifest) -> None:
        """Validate, encode and queue one record (raises FieldError for an invalid one)."""
        if self._closed:
            raise RuntimeError("RolloutProducer is closed")
        if isinstance(record, Rollout):
            topic, stream = self.rollouts_topic, record.stream
        elif isinstance(record, StepManifest):
            topic, stream = (self.runs_topic if record.end_of_run else self.steps_topic), ""
        else:
            raise TypeError(f"RolloutProducer publishes Rollout and StepManifest, not {type(record).__name__}")
        value = encode_record(record)
        schema = c.SCHEMA_ROLLOUT if isinstance(record, Rollout) else c.SCHEMA_STEP
        headers: list[tuple[str, str | bytes | None]] = list(record_headers(schema, record.run_id, record.step, stream))
        while True:
            try:
                self._producer.produce(
                    topic, value=value, key=record.run_id.encode(), headers=headers, on_delivery=self._on_delivery
                )
                break
            except BufferError:
                self._producer.poll(0.1)  # local queue full: serve deliveries, then retry
        self._producer.poll(0)
        if isinstance(record, Rollout):
            self.stats.rollouts += 1
        else:
            self.stats.steps += 1
        self.stats.bytes += len(value)

    def publish(self, records: Iterable[Rollout | StepManifest], *, flush: bool = True) -> PublishStats:
        """Send every record of an iterable (e.g. a generator), then flush; returns the stats."""
        for r in records:
            self.send(r)
        if flush:
            self.flush()
        return self.stats

    def flush(self, timeout: float = 30.0) -> None:
        """Wait for every queued record; raise DeliveryError for any that failed or are still queued."""
        deadline = time.monotonic() + timeout
        remaining = self._producer.flush(timeout)
        while remaining and time.monotonic() < deadline:
            remaining = self._producer.flush(max(0.0, deadline - time.monotonic()))
        errors, self._errors = self._errors, []
        if remaining:
            errors.append(("*", "*", f"{remaining} record(s) still queued after {timeout}s"))
        if errors:
            raise DeliveryError(errors)

    def fetch_metadata(self, topic: str, timeout: float) -> None:
        """Fetch topic's metadata now: librdkafka connects lazily, so the first publish would
        otherwise pay for it. Raises confluent_kafka.KafkaException when no answer comes in time."""
        self._producer.list_topics(topic, timeout=timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Flush and stop accepting records."""
        if not self._closed:
            self._closed = True
            self.flush(timeout)
