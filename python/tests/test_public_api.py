"""The client's public API is the one list in wmrl_client.__all__ (python/README.md, "Public API"):
this test fails when a name is added to or dropped from it without the list and the README."""

from __future__ import annotations

import re
from pathlib import Path

import wmrl_client

PUBLIC = {
    # reading advantages
    "AdvantageStream", "Step", "StreamStats", "AdvantageRow", "MASK_STALE",
    # scoring a step's rollouts
    "RewardClient", "Group", "StepResult",
    # publishing rollouts
    "RolloutProducer", "PublishStats", "Rollout", "GroupManifest", "StepManifest", "KafkaOptions",
    "is_anchor", "anchor_hash",
    # the wire contract
    "encode_record", "decode_advantages", "ADVANTAGE_SCHEMA", "ADVANTAGE_SCHEMA_V2", "digest_rows", "reason",
    # errors
    "WmrlError", "BrokerUnavailableError", "ChunkMismatchError", "ConflictError", "DeliveryError", "FieldError",
    "HeaderError", "MalformedError", "MaskedStepError", "RunEndedError", "SchemaVersionError", "StaleStepError",
    "StepTimeoutError", "TooLargeError", "UnknownRunError", "UnknownTopicError",
}  # fmt: skip


def test_all_is_the_public_api() -> None:
    assert len(wmrl_client.__all__) == len(set(wmrl_client.__all__)), "a name is listed twice"
    assert set(wmrl_client.__all__) == PUBLIC


def test_every_public_name_is_importable() -> None:
    for name in wmrl_client.__all__:
        assert getattr(wmrl_client, name, None) is not None, name


def test_star_import_gives_exactly_the_public_api() -> None:
    ns: dict[str, object] = {}
    exec("from wmrl_client import *", ns)
    assert set(ns) - {"__builtins__"} == PUBLIC


def test_readme_lists_the_public_api() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("## Public API", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`([A-Za-z_][A-Za-z_0-9]*)`", section))
    assert listed == PUBLIC, f"README lists {sorted(listed - PUBLIC)} too many, {sorted(PUBLIC - listed)} missing"
