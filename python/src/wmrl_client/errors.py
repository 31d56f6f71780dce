"""Errors of the wmrl client, shaped like Go's ``topics`` errors.

Each error maps to the short machine reason Go's ``topics.Reason`` gives (``reason(err)``), so
the golden ``invalid/expected.json`` can be checked in both languages with the same strings.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

# Causes of a FieldError, named like Go's sentinels.
INVALID: Final = "invalid"
MALFORMED: Final = "malformed"
UNKNOWN_SCHEMA: Final = "unknown-schema"
TOO_LARGE: Final = "too-large"
CONFLICT: Final = "conflict"

_MAX_SHOWN = 64


def show_value(v: Any) -> str:
    """Render a value the way Go's topics.showValue does: strings quoted and cut at 64 bytes."""
    if isinstance(v, str):
        b = v.encode("utf-8", "surrogatepass")
        if len(b) > _MAX_SHOWN:
            cut = b[:_MAX_SHOWN].decode("utf-8", "ignore")
            return f"{json.dumps(cut, ensure_ascii=False)}… ({len(b)} bytes)"
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "+Inf" if v > 0 else "-Inf"
        return repr(v)
    return str(v)


class WmrlError(Exception):
    """Base class of every error this package raises on purpose."""

    @property
    def reason(self) -> str:
        """The short machine reason (Go's topics.Reason)."""
        return "error"


class FieldError(WmrlError, ValueError):
    """One bad field of one record: names the record, the JSON field path and the value.

    ``value`` is None when the field is missing or its value is not shown. ``cause`` is one of
    INVALID, MALFORMED (wrong JSON type), UNKNOWN_SCHEMA, TOO_LARGE or CONFLICT.
    """

    def __init__(self, record: str, field: str, value: Any, why: str, cause: str = INVALID) -> None:
        self.record = record
        self.field = field
        self.value = value
        self.why = why
        self.cause = cause
        super().__init__(self._format())

    def _format(self) -> str:
        s = f"{self.record}: " if self.record else ""
        s += f"field {json.dumps(self.field)}"
        if self.value is not None:
            s += f": value {show_value(self.value)}"
        return f"{s}: {self.why}"

    @property
    def reason(self) -> str:
        if self.cause in (TOO_LARGE, UNKNOWN_SCHEMA, CONFLICT):
            return self.cause
        return f"invalid-field:{self.field}"


class SchemaVersionError(FieldError):
    """A record or batch carries a schema id this client does not read (missing or another version).

    The client never guesses at the fields of a schema it does not know: upgrade wmrl-client, or
    point it at the topic of the version it reads.
    """

    def __init__(self, record: str, got: str | None, want: str, where: str = "") -> None:
        why = f"want {json.dumps(want)}"
        if got is None:
            why = f"required (want {json.dumps(want)})"
        if where:
            why += f" ({where}; this client reads {want}: upgrade wmrl-client or read the topic of that version)"
        super().__init__(record, "schema", got, why, UNKNOWN_SCHEMA)
        self.got = got
        self.want = want


class MalformedError(WmrlError, ValueError):
    """Bytes that are not a well-formed encoding at all (bad JSON syntax, a corrupt Arrow stream)."""

    def __init__(self, fmt: str, message: str) -> None:
        self.format = fmt
        super().__init__(f"malformed {fmt}: {message}")

    @property
    def reason(self) -> str:
        return f"malformed-{self.format}"


class TooLargeError(WmrlError, ValueError):
    """A payload over its size limit, refused before parsing."""

    @property
    def reason(self) -> str:
        return TOO_LARGE


class HeaderError(WmrlError, ValueError):
    """A missing or unparseable wmrl-* header."""

    @property
    def reason(self) -> str:
        return "bad-header"


class ConflictError(WmrlError, ValueError):
    """Records that contradict each other (chunk counts of one step disagree, rows of another step)."""

    @property
    def reason(self) -> str:
        return CONFLICT


class DeliveryError(WmrlError):
    """The producer could not deliver some records; ``errors`` lists (topic, key, message)."""

    def __init__(self, errors: list[tuple[str, str, str]]) -> None:
        self.errors = errors
        first = "; ".join(f"{t} key={k}: {m}" for t, k, m in errors[:3])
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        super().__init__(f"{len(errors)} record(s) not delivered: {first}{more}")


class BrokerUnavailableError(WmrlError, ConnectionError):
    """No Kafka broker answered within the connect timeout (wrong address, broker down, TLS/SASL
    mismatch). Raised at start instead of librdkafka retrying silently for ever."""

    @property
    def reason(self) -> str:
        return "broker-unavailable"


class UnknownTopicError(WmrlError, LookupError):
    """A topic the client needs does not exist on the cluster. ``candidates`` lists existing topics
    with the same wmrl suffix (another ``topic_prefix`` is the usual cause); the client never
    guesses one of them."""

    def __init__(self, message: str, topic: str = "", candidates: list[str] | None = None) -> None:
        self.topic = topic
        self.candidates = candidates or []
        super().__init__(message)

    @property
    def reason(self) -> str:
        return "unknown-topic"


class UnknownRunError(WmrlError, LookupError):
    """The topic holds no record of the run asked for. ``runs_seen`` lists runs that it does hold
    (from the wmrl-run headers read), so a mistyped run id is visible at once."""

    def __init__(self, message: str, run_id: str = "", runs_seen: list[str] | None = None) -> None:
        self.run_id = run_id
        self.runs_seen = runs_seen or []
        super().__init__(message)

    @property
    def reason(self) -> str:
        return "unknown-run"


class StepTimeoutError(WmrlError, TimeoutError):
    """A step's advantages did not arrive in time; the message says what was seen meanwhile."""

    @property
    def reason(self) -> str:
        return "timeout"


class RunEndedError(WmrlError, RuntimeError):
    """The client ended its run (``RewardClient.close_run``): ``wmrl correct`` dead-letters any
    later step of the run (reason ``run_ended``), so the client refuses to publish one. A run that
    must go on needs a new run id."""

    def __init__(self, message: str, run_id: str = "", last_step: int = -1) -> None:
        self.run_id = run_id
        self.last_step = last_step
        super().__init__(message)

    @property
    def reason(self) -> str:
        return "run_ended"


def reason(err: BaseException | None) -> str:
    """Go's topics.Reason for an error of this package; "" for None, "error" for anything else."""
    if err is None:
        return ""
    if isinstance(err, WmrlError):
        return err.reason
    return "error"
