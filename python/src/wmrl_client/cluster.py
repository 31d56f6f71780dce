"""Start-up checks against the cluster: a broker answers and the topics exist.

librdkafka retries an unreachable broker for ever and subscribes to a missing topic without
complaint, so a wrong address or topic prefix used to look like a pipeline that is merely slow.
These checks turn both into exceptions at construction time.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from .errors import BrokerUnavailableError, UnknownTopicError

LIBRDKAFKA_LOGGER = logging.getLogger("wmrl_client.librdkafka")
"""librdkafka's own log lines go to this logger (not raw to stderr)."""

DEFAULT_CONNECT_TIMEOUT = 10.0


def topic_suffix(topic: str) -> str:
    """The wmrl part of a topic name: its last two dot-separated components ("advantages.v1")."""
    parts = topic.split(".")
    return ".".join(parts[-2:]) if len(parts) >= 2 else topic


def check_topics(client: Any, topics: Sequence[str], *, brokers: str, timeout: float) -> None:
    """Raise BrokerUnavailableError when no broker answers within timeout seconds, and
    UnknownTopicError naming the first missing topic and the existing topics with its suffix."""
    from confluent_kafka import KafkaException

    try:
        md = client.list_topics(timeout=timeout)
    except KafkaException as e:
        raise BrokerUnavailableError(
            f"no Kafka broker at {brokers} answered within {timeout:g}s ({e.args[0] if e.args else e}): "
            "check that the broker runs and the bootstrap address, TLS and SASL options"
        ) from None
    for topic in topics:
        t = md.topics.get(topic)
        if t is not None and getattr(t, "error", None) is None:
            continue
        existing = {name for name, tm in md.topics.items() if getattr(tm, "error", None) is None}
        suffix = topic_suffix(topic)
        candidates = sorted(n for n in existing if n.endswith("." + suffix) or n == suffix)
        hint = ""
        if candidates:
            shown = ", ".join(candidates[:8]) + (f" (and {len(candidates) - 8} more)" if len(candidates) > 8 else "")
            prefixes = sorted({n[: -len(suffix)] for n in candidates})
            hint = (
                f"; topics ending in {suffix} on this cluster: {shown}. Pass topic_prefix= one of "
                f"{', '.join(repr(p) for p in prefixes[:4])} (the client does not guess)"
            )
        else:
            hint = f"; no topic on this cluster ends in {suffix}: create them with `wmrl topics create`"
        raise UnknownTopicError(f"topic {topic!r} does not exist on {brokers}{hint}", topic, candidates)
