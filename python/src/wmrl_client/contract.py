"""The wire contract's constants, copied from Go package ``topics``.

Every number and name here is part of the contract between the Go stages and this client;
``tests/test_contract.py`` checks them against the golden files the Go codecs wrote, and
``topics/python_contract_test.go`` decodes what this package writes with the strict Go decoders.
"""

from __future__ import annotations

from typing import Final

# Schema identifiers (topics/records.go).
SCHEMA_ROLLOUT: Final = "wmrl.rollout.v1"
SCHEMA_STEP: Final = "wmrl.step.v1"
SCHEMA_PREDICTED: Final = "wmrl.reward.predicted.v1"
SCHEMA_EXECUTED: Final = "wmrl.reward.executed.v1"
SCHEMA_ADVANTAGES: Final = "wmrl.advantages.v1"
# v1 plus the staleness and mask_reason columns; written only when a row uses them.
SCHEMA_ADVANTAGES_V2: Final = "wmrl.advantages.v2"
ADVANTAGE_SCHEMAS: Final = (SCHEMA_ADVANTAGES, SCHEMA_ADVANTAGES_V2)
# The binary calibration snapshot (topics/calibsnap.go); its version is also its magic's last byte.
SCHEMA_CALIBRATION: Final = "wmrl.calibration.v4"
SCHEMA_CALIBRATION_CHUNK: Final = "wmrl.calibration.chunk.v1"
# A run's end on the calibration changelog (topics/calibend.go), binary.
SCHEMA_CALIBRATION_END: Final = "wmrl.calibration.end.v1"
END_REASONS: Final = ("marker", "idle")

# Status values of reward records and Source values of advantage rows.
STATUS_OK: Final = "ok"
STATUS_TIMEOUT: Final = "timeout"
STATUS_ERROR: Final = "error"
STATUS_INVALID: Final = "invalid"
STATUSES: Final = (STATUS_OK, STATUS_TIMEOUT, STATUS_ERROR, STATUS_INVALID)
SOURCE_ANCHOR: Final = "anchor"
SOURCE_WORLD_MODEL: Final = "world_model"
# mask_reason of a row masked by `wmrl correct --max-staleness` (topics.MaskStale).
MASK_STALE: Final = "stale"

# Header names (topics/headers.go).
HEADER_SCHEMA: Final = "wmrl-schema"
HEADER_CONTENT_TYPE: Final = "content-type"
HEADER_RUN: Final = "wmrl-run"
HEADER_STEP: Final = "wmrl-step"
HEADER_STREAM: Final = "wmrl-stream"
HEADER_CHUNK: Final = "wmrl-chunk"
HEADER_ROWS: Final = "wmrl-rows"

CONTENT_TYPE_JSON: Final = "application/json"
CONTENT_TYPE_ARROW: Final = "application/vnd.apache.arrow.stream"
CONTENT_TYPE_BINARY: Final = "application/octet-stream"
CONTENT_TYPE_PROTOBUF: Final = "application/x-protobuf"
# A Protobuf value in the Confluent wire format (topics.ContentTypeProtobufConfluent): what
# `wmrl correct` writes to the advantages topic when it has a schema registry, a
# wmrl.v1.AdvantageBatch holding the Arrow IPC bytes behind magic byte 0, the schema id and the
# message index.
CONTENT_TYPE_PROTOBUF_CONFLUENT: Final = CONTENT_TYPE_PROTOBUF + "; framing=confluent"

# Arrow schema-metadata key carrying the schema id (topics/arrow.go).
ARROW_SCHEMA_KEY: Final = "wmrl-schema"
MAX_ADVANTAGE_BYTES: Final = 16 << 20
# topics.MaxBatchBytes(MaxAdvantageBytes) (topics/batch.go): the decompressed size past which a
# reader of the advantages topic refuses a record batch.
MAX_BATCH_BYTES: Final = max(2 * MAX_ADVANTAGE_BYTES, 8 << 20)
REASON_BATCH_TOO_LARGE: Final = "batch-too-large"  # topics.ReasonBatchTooLarge

# Limits (topics/validate.go, topics/codec.go).
SCORE_MIN: Final = 0.0
SCORE_MAX: Final = 1.0
MAX_ID_LEN: Final = 128
MAX_LABEL_LEN: Final = 256
MAX_REASON_LEN: Final = 4096
MAX_STDERR_TAIL: Final = 64 << 10
MAX_META_ENTRIES: Final = 64
MAX_GROUP_SIZE: Final = 1024
MAX_GROUPS_PER_STEP: Final = 4096
MAX_INLINE_ARTIFACT: Final = 512 << 10
MAX_BREAKPOINTS: Final = 16384
MAX_RECORD_BYTES: Final = 1 << 20
MAX_JSON_DEPTH: Final = 16

# Topic names (topics/names.go).
DEFAULT_PREFIX: Final = "wmrl."
SUFFIX_ROLLOUTS: Final = "rollouts.v1"
SUFFIX_STEPS: Final = "steps.v1"
# The run-control topic: end-of-run requests, which ``wmrl correct`` relays onto the steps topic.
SUFFIX_RUNS: Final = "runs.v1"
SUFFIX_PREDICTED: Final = "rewards.predicted.v1"
SUFFIX_EXECUTED: Final = "rewards.executed.v1"
SUFFIX_ADVANTAGES: Final = "advantages.v1"
SUFFIX_CALIBRATION: Final = "calibration.v1"
SUFFIX_DLQ: Final = "dlq.v1"


def content_type_for(schema: str) -> str:
    """Arrow for advantages, binary for calibration snapshots, window chunks and end records,
    JSON else (topics.ContentTypeFor)."""
    if schema in ADVANTAGE_SCHEMAS:
        return CONTENT_TYPE_ARROW
    if schema in (SCHEMA_CALIBRATION, SCHEMA_CALIBRATION_CHUNK, SCHEMA_CALIBRATION_END):
        return CONTENT_TYPE_BINARY
    return CONTENT_TYPE_JSON


def topic_name(suffix: str, prefix: str = DEFAULT_PREFIX) -> str:
    """Full topic name under prefix; an empty prefix means DEFAULT_PREFIX, as in topics.NewNames."""
    return (prefix or DEFAULT_PREFIX) + suffix
