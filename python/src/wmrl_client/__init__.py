"""wmrl trainer client: read fused advantages from Kafka into a PyTorch (or numpy) training loop,
and publish rollouts and step manifests with the same validation as the Go stages.

    from wmrl_client import AdvantageStream

    with AdvantageStream("127.0.0.1:9092", run_id="run-1", group_id="trainer") as stream:
        for step in stream:
            batch = step.to_numpy()          # or step.to_torch()
            ...                              # policy-gradient update
            step.ack()                       # commit: this step is trained
"""

from .anchor import anchor_hash, anchor_hash_u64, is_anchor
from .arrow import (
    ADVANTAGE_SCHEMA,
    ADVANTAGE_SCHEMA_V2,
    decode_advantages,
    encode_advantages,
    table_from_rows,
    validate_table,
)
from .codec import decode_record, encode_record
from .contract import (
    MASK_STALE,
    SCHEMA_ADVANTAGES,
    SCHEMA_ADVANTAGES_V2,
    SCHEMA_CALIBRATION,
    SCHEMA_EXECUTED,
    SCHEMA_PREDICTED,
    SCHEMA_ROLLOUT,
    SCHEMA_STEP,
    topic_name,
)
from .digest import digest_and_count, digest_rows, rows_from_table
from .errors import (
    BrokerUnavailableError,
    ConflictError,
    DeliveryError,
    FieldError,
    HeaderError,
    MalformedError,
    RunEndedError,
    SchemaVersionError,
    StepTimeoutError,
    TooLargeError,
    UnknownRunError,
    UnknownTopicError,
    WmrlError,
    reason,
)
from .ids import valid_id
from .masked import MaskedStepError
from .options import KafkaOptions
from .producer import PublishStats, RolloutProducer
from .records import AdvantageRow, GroupManifest, Rollout, StepManifest, validate_advantage_rows
from .reward import Group, RewardClient, StepResult
from .stream import AdvantageStream, ChunkMismatchError, StaleStepError, Step, StreamStats

__version__ = "0.1.0"

__all__ = [
    "BrokerUnavailableError",
    "Group",
    "RewardClient",
    "StepResult",
    "StepTimeoutError",
    "UnknownRunError",
    "UnknownTopicError",
    "ChunkMismatchError",
    "StaleStepError",
    "MaskedStepError",
    "ADVANTAGE_SCHEMA",
    "ADVANTAGE_SCHEMA_V2",
    "MASK_STALE",
    "AdvantageRow",
    "AdvantageStream",
    "ConflictError",
    "DeliveryError",
    "FieldError",
    "GroupManifest",
    "HeaderError",
    "KafkaOptions",
    "MalformedError",
    "PublishStats",
    "Rollout",
    "RolloutProducer",
    "SCHEMA_ADVANTAGES",
    "SCHEMA_ADVANTAGES_V2",
    "SCHEMA_CALIBRATION",
    "SCHEMA_EXECUTED",
    "SCHEMA_PREDICTED",
    "SCHEMA_ROLLOUT",
    "SCHEMA_STEP",
    "RunEndedError",
    "SchemaVersionError",
    "Step",
    "StepManifest",
    "StreamStats",
    "TooLargeError",
    "WmrlError",
    "anchor_hash",
    "anchor_hash_u64",
    "decode_advantages",
    "decode_record",
    "digest_and_count",
    "digest_rows",
    "encode_advantages",
    "encode_record",
    "is_anchor",
    "reason",
    "rows_from_table",
    "table_from_rows",
    "valid_id",
    "validate_advantage_rows",
    "validate_table",
    "topic_name",
]
