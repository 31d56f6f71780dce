"""wmrl trainer client: read fused advantages from Kafka into a PyTorch (or numpy) training loop,
and publish rollouts and step manifests with the same validation as the Go stages.

    from wmrl_client import AdvantageStream

    with AdvantageStream("127.0.0.1:9092", run_id="run-1", group_id="trainer") as stream:
        for step in stream:
            batch = step.to_numpy()          # or step.to_torch()
            ...                              # policy-gradient update
            step.ack()                       # commit: this step is trained
"""

from .anchor import anchor_hash, is_anchor
from .arrow import ADVANTAGE_SCHEMA, ADVANTAGE_SCHEMA_V2, decode_advantages
from .codec import encode_record
from .contract import MASK_STALE
from .digest import digest_rows
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
from .masked import MaskedStepError
from .options import KafkaOptions
from .producer import PublishStats, RolloutProducer
from .records import AdvantageRow, GroupManifest, Rollout, StepManifest
from .reward import Group, RewardClient, StepResult
from .stream import AdvantageStream, ChunkMismatchError, StaleStepError, Step, StreamStats

__version__ = "0.1.0"

# The public API, the one list of it (python/README.md, "Public API"; tests/test_public_api.py
# asserts exactly these names). Everything else is reached by its module path and may change.
__all__ = [
    # reading advantages
    "AdvantageStream",
    "Step",
    "StreamStats",
    "AdvantageRow",
    "MASK_STALE",
    # scoring a step's rollouts
    "RewardClient",
    "Group",
    "StepResult",
    # publishing rollouts
    "RolloutProducer",
    "PublishStats",
    "Rollout",
    "GroupManifest",
    "StepManifest",
    "KafkaOptions",
    "is_anchor",
    "anchor_hash",
    # the wire contract
    "encode_record",
    "decode_advantages",
    "ADVANTAGE_SCHEMA",
    "ADVANTAGE_SCHEMA_V2",
    "digest_rows",
    "reason",
    # errors
    "WmrlError",
    "BrokerUnavailableError",
    "ChunkMismatchError",
    "ConflictError",
    "DeliveryError",
    "FieldError",
    "HeaderError",
    "MalformedError",
    "MaskedStepError",
    "RunEndedError",
    "SchemaVersionError",
    "StaleStepError",
    "StepTimeoutError",
    "TooLargeError",
    "UnknownRunError",
    "UnknownTopicError",
]
