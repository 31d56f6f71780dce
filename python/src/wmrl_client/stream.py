"""AdvantageStream: complete training steps of one run from the advantages topic.

The correction consumer writes each step's rows as n Arrow chunks in one Kafka transaction. The
stream reads with ``isolation.level=read_committed`` (aborted chunks are never seen), reassembles
chunks 0..n-1 of (run, step), validates them, and yields a ``Step``, in step order like Go's
``trainer.Assembler``: a step that completes while a lower step still misses chunks waits for it
(at most ``max_buffered_steps`` such steps wait; then the lower step is abandoned). A copy of a
chunk is a duplicate only if its bytes hash the same (SHA-256) as the chunk already held or
delivered; a different copy raises ``ChunkMismatchError``, and a chunk of an already delivered step
that is no longer remembered raises ``StaleStepError``. Offsets are committed only
by ``Step.ack()``, and never past a record that an unacknowledged or still incomplete step needs:
per partition the commit is the lowest offset still held, so a trainer that crashes re-reads
exactly the steps it had not acknowledged.

A consumer is not thread-safe: iterate and ack from one thread.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from . import contract as c
from .arrow import advantage_arrow, check_advantage_content_type, decode_advantages, validate_table
from .cluster import DEFAULT_CONNECT_TIMEOUT, LIBRDKAFKA_LOGGER, check_topics
from .errors import ConflictError, HeaderError, SchemaVersionError, UnknownRunError, WmrlError
from .ids import check_id
from .masked import check_masked, masked_rows
from .membership import GroupWatch, run_group, trainer_client_id
from .options import KafkaOptions, client_options
from .step import NUMERIC_COLUMNS as NUMERIC_COLUMNS
from .step import Step as Step
from .step import TopicPartition, header_map, parse_canonical_int
from .step import parse_chunk as parse_chunk

if TYPE_CHECKING:
    import confluent_kafka

log = logging.getLogger("wmrl_client")

DEFAULT_MAX_BUFFERED_STEPS = 16
"""Go's trainer.DefaultMaxBufferedSteps: complete steps that may wait behind an incomplete one."""

DELIVERED_MEMORY = 1024
"""How many delivered steps keep their chunk hashes (Go's deliveredMemory), so a replayed copy of
a recent step is recognized as a duplicate rather than reported as stale."""


class ChunkMismatchError(ConflictError):
    """A chunk contradicts the step's other copy: a different chunk count or different bytes
    (Go's trainer.ErrChunkMismatch)."""


class StaleStepError(ConflictError):
    """A chunk of a step at or below the last delivered one whose chunks are no longer remembered
    (Go's trainer.ErrStale)."""


@dataclass
class _Assembly:
    n: int
    chunks: dict[int, pa.Table] = field(default_factory=dict)
    sums: dict[int, bytes] = field(default_factory=dict)
    pos: dict[int, tuple[TopicPartition, int]] = field(default_factory=dict)
    table: pa.Table | None = None  # set once complete and validated

    @property
    def offsets(self) -> dict[TopicPartition, list[int]]:
        out: dict[TopicPartition, list[int]] = {}
        for tp, off in self.pos.values():
            out.setdefault(tp, []).append(off)
        return out

    def min_offset(self, tp: TopicPartition) -> int | None:
        o = [off for p, off in self.pos.values() if p == tp]
        return min(o) if o else None

    def drop(self, gone: set[TopicPartition]) -> None:
        """Forget the chunks read from revoked partitions; their next owner reads them again."""
        for i in [i for i, (tp, _) in self.pos.items() if tp in gone]:
            del self.chunks[i], self.sums[i], self.pos[i]
            self.table = None


@dataclass
class StreamStats:
    """Counters of what the stream read."""

    records: int = 0
    skipped_other_runs: int = 0
    skipped_invalid: int = 0
    duplicate_chunks: int = 0
    abandoned_steps: int = 0
    skipped_batches: int = 0
    masked_rows: int = 0
    steps: int = 0
    rows: int = 0
    bytes: int = 0
    commits: int = 0


def _log_commit_errors(err: Any, partitions: list[Any]) -> None:
    if err is not None:
        log.warning("wmrl_client: asynchronous commit failed (the next ack commits again): %s", err)


class AdvantageStream:
    """Iterate complete training steps of one run, each a ``Step`` (pyarrow Table + ack()).

    ``bootstrap`` is the seed brokers (comma-separated or a list; None: from ``kafka`` or
    WMRL_BROKERS). SASL/TLS options mirror the Go CLI (``sasl_mechanism``, ``sasl_user``,
    ``sasl_password``, ``tls``, ``tls_ca``, ``tls_cert``, ``tls_key``, ``tls_skip_verify``); pass
    them as keywords or as a ``KafkaOptions``. Iteration ends after ``idle_timeout`` seconds
    without a record (None: never). ``on_invalid="skip"`` logs and skips bad records instead of
    raising; a skipped record is committed past like a record of another run.
    ``async_commit=True`` makes ack() return without waiting for the broker (commits are
    cumulative, so a lost one is covered by the next; a crash may re-deliver the last few acked
    steps). ``max_buffered_steps`` bounds the complete steps that wait behind an incomplete
    lower step (Go's MaxBufferedSteps). ``consumer_factory`` builds the consumer from the final
    librdkafka config (default: confluent_kafka.Consumer); tests and instrumented wrappers pass
    their own. ``watch_group`` (default: on with confluent_kafka's Consumer) checks every 3 s on a
    thread of its own that the run's partition is held by this member (or a trainer of the same
    run) and that the group has no consumer of another run, and logs at warning, every 30 s while it
    lasts, which partition, which member and which group_id fixes it (``membership.GroupWatch``).
    The client id defaults to "wmrl-trainer/<run_id>", which names the run to the group's other
    members. A step with masked rows (mask false: no usable reward) is logged at warning;
    ``on_masked="raise"`` raises MaskedStepError for a step whose every row is masked.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str] | None,
        run_id: str,
        group_id: str,
        *,
        topic: str | None = None,
        kafka: KafkaOptions | None = None,
        poll_timeout: float = 0.5,
        idle_timeout: float | None = None,
        validate: bool = True,
        on_invalid: Literal["raise", "skip"] = "raise",
        auto_offset_reset: Literal["earliest", "latest"] = "earliest",
        batch_size: int = 500,
        async_commit: bool = False,
        max_buffered_steps: int = DEFAULT_MAX_BUFFERED_STEPS,
        consumer_config: Mapping[str, object] | None = None,
        consumer_factory: Callable[[dict[str, object]], Any] | None = None,
        connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
        on_masked: Literal["warn", "raise"] = "warn",
        watch_group: bool | None = None,
        **kafka_options: Any,
    ) -> None:
        msg = check_id(run_id)
        if msg:
            raise ValueError(f"run_id {run_id!r}: {msg}")
        if not group_id:
            raise ValueError("group_id is required (offsets are committed for this consumer group)")
        if max_buffered_steps < 1:
            raise ValueError(f"max_buffered_steps {max_buffered_steps}: want at least 1")
        if on_invalid not in ("raise", "skip"):
            raise ValueError(f"on_invalid {on_invalid!r}: want 'raise' or 'skip'")
        if on_masked not in ("warn", "raise"):
            raise ValueError(f"on_masked {on_masked!r}: want 'warn' or 'raise'")
        self._on_masked = on_masked
        opts = client_options(bootstrap, kafka, kafka_options)
        conf = opts.librdkafka()
        if conf.get("client.id") in (None, "", KafkaOptions.client_id):
            conf["client.id"] = trainer_client_id(run_id)  # names the run to the group's other members
        for k, v in (consumer_config or {}).items():
            if k in ("enable.auto.commit", "isolation.level") and str(v).lower() not in ("false", "read_committed"):
                raise ValueError(f"consumer_config {k}={v!r} would break the stream's commit semantics")
            conf[k] = v
        conf.update(
            {
                "group.id": group_id,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
            }
        )
        conf.setdefault("auto.offset.reset", auto_offset_reset)
        # librdkafka decompresses a record batch into at most receive.message.max.bytes (it must
        # exceed fetch.max.bytes by 512) and reports a batch past it as _BAD_COMPRESSION, again at
        # every fetch: _skip_batch moves past it. The default (100 MB) would let one batch cost that.
        conf.setdefault("fetch.max.bytes", c.MAX_BATCH_BYTES)
        conf.setdefault("receive.message.max.bytes", int(str(conf["fetch.max.bytes"])) + 512)
        conf.setdefault("logger", LIBRDKAFKA_LOGGER)
        if async_commit:
            conf.setdefault("on_commit", _log_commit_errors)
        self.run_id = run_id
        self.group_id = group_id
        self.topic = topic or c.topic_name(c.SUFFIX_ADVANTAGES, opts.topic_prefix)
        self.stats = StreamStats()
        self._validate = validate
        self._on_invalid = on_invalid
        self._poll_timeout = poll_timeout
        self._idle_timeout = idle_timeout
        self._batch_size = batch_size
        self._async_commit = async_commit
        self._max_buffered = max_buffered_steps
        self._assembling: dict[int, _Assembly] = {}  # steps with chunks missing
        self._ready: dict[int, _Assembly] = {}  # complete steps waiting behind a lower open step
        self._unacked: dict[int, Step] = {}
        self._delivered = -1  # highest step delivered
        self._sums: OrderedDict[int, list[bytes]] = OrderedDict()  # chunk hashes of the last delivered steps
        self._parts: set[TopicPartition] = set()  # partitions the run's records came from
        self._seen_end: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._poisoned: dict[TopicPartition, int] = {}
        self._backlog: deque[Any] = deque()
        self._out: deque[Step] = deque()  # steps completed by next_step() and not yet returned
        self._runs_seen: dict[str, int] = {}  # records per other run (at most 16 runs), for UnknownRunError
        self._run_records = 0  # records of this run
        self._closed = False
        self._assigned = False  # set by the first partition assignment (join())
        self.config = dict(conf)
        default_consumer = consumer_factory is None
        if consumer_factory is None:
            from confluent_kafka import Consumer

            consumer_factory = Consumer
        self._consumer: confluent_kafka.Consumer = consumer_factory(conf)
        if connect_timeout is not None:
            try:
                self.check_topics([self.topic], connect_timeout)
            except WmrlError:
                self._consumer.close()
                raise
        self._consumer.subscribe(
            [self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        self._watch: GroupWatch | None = None
        if default_consumer if watch_group is None else watch_group:
            self._watch = GroupWatch(
                conf, group_id, self.topic, run_id, run_group(run_id, opts.topic_prefix),
                member_id=lambda: self._consumer.memberid() or "",
            )  # fmt: skip
            self._watch.start()

    # ---- context manager and lifecycle

    def __enter__(self) -> AdvantageStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check_topics(self, topics: Sequence[str], timeout: float) -> None:
        """Raise BrokerUnavailableError when no broker answers within timeout seconds, and
        UnknownTopicError naming the first of topics that does not exist (cluster.check_topics)."""
        check_topics(self._consumer, topics, brokers=str(self.config["bootstrap.servers"]), timeout=timeout)

    def close(self) -> None:
        """Leave the group without committing anything not acknowledged."""
        if not self._closed:
            self._closed = True
            if self._watch is not None:
                self._watch.stop()
            self._consumer.close()

    @property
    def pending(self) -> dict[str, list[int]]:
        """Steps held back: 'incomplete' (chunks missing), 'waiting' (complete, behind an incomplete
        lower step) and 'unacked' (yielded, not acknowledged)."""
        return {
            "incomplete": sorted(self._assembling),
            "waiting": sorted(self._ready),
            "unacked": sorted(s.step for s in self._unacked.values()),
        }

    # ---- iteration

    def __iter__(self) -> Iterator[Step]:
        """Complete steps in step order. Ends after idle_timeout seconds without a record; raises
        UnknownRunError then if records of other runs were read and none of this run."""
        if self._closed:
            raise RuntimeError("AdvantageStream is closed")
        last = time.monotonic()
        while True:
            while self._out:
                yield self._checked(self._out.popleft())
            if not self._backlog:
                self._fill(self._poll_timeout)
            if not self._backlog:
                if self._idle_timeout is not None and time.monotonic() - last >= self._idle_timeout:
                    self.check_run_seen()
                    return
                continue
            last = time.monotonic()
            while self._backlog:
                m = self._backlog.popleft()
                for st in self._handle(m):
                    yield self._checked(st)

    def next_step(self, timeout: float | None = None) -> Step | None:
        """The next complete step, or None when none completed within timeout seconds (None: no
        limit). Shares its state with iteration, so both may be used on one stream."""
        if self._closed:
            raise RuntimeError("AdvantageStream is closed")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._out:
                return self._checked(self._out.popleft())
            if self._backlog:
                self._out.extend(self._handle(self._backlog.popleft()))
                continue
            left = (
                self._poll_timeout
                if deadline is None
                else max(0.0, min(self._poll_timeout, deadline - time.monotonic()))
            )
            self._fill(left)
            if not self._backlog and deadline is not None and time.monotonic() >= deadline:
                return None

    def _checked(self, st: Step) -> Step:
        n = masked_rows(st)
        self.stats.masked_rows += n
        check_masked(st, n, self._on_masked)
        return st

    def _fill(self, timeout: float) -> None:
        """Wait up to timeout seconds for the first record, then take what is already fetched.

        ``consume(num_messages=N, timeout=t)`` returns only when N messages are there or t has
        passed, so a step that arrived early would sit out the rest of the poll; waiting for one
        message and then draining the local queue without blocking returns as soon as the step
        is there.
        """
        first = self._consumer.consume(num_messages=1, timeout=timeout)
        if not first:
            return
        self._backlog.extend(first)
        if self._batch_size > 1:
            self._backlog.extend(self._consumer.consume(num_messages=self._batch_size - 1, timeout=0))

    def join(self, timeout: float) -> bool:
        """Join the consumer group now (librdkafka joins on the first poll): poll until partitions
        are assigned or timeout seconds passed. Records fetched meanwhile are kept for iteration.
        Returns whether partitions were assigned."""
        if self._closed:
            raise RuntimeError("AdvantageStream is closed")
        deadline = time.monotonic() + timeout
        while not self._assigned and time.monotonic() < deadline:
            self._backlog.extend(self._consumer.consume(num_messages=self._batch_size, timeout=0.05))
        return self._assigned

    @property
    def runs_seen(self) -> list[str]:
        """Other runs whose records this stream read (at most 16), most records first."""
        return sorted(self._runs_seen, key=lambda r: -self._runs_seen[r])

    def check_run_seen(self) -> None:
        """Raise UnknownRunError when records of other runs were read but none of this run."""
        if self._run_records == 0 and self._runs_seen:
            runs = self.runs_seen
            raise UnknownRunError(
                f"{self.topic} holds no record of run {self.run_id!r} among the {self.stats.records} records read; "
                f"runs seen: {', '.join(runs)} (the demo prints its run id; `wmrl digest --topic {self.topic}` "
                "counts rows per topic)",
                self.run_id,
                runs,
            )

    def _handle(self, m: Any) -> list[Step]:
        err = m.error()
        if err is not None:
            from confluent_kafka import KafkaError, KafkaException

            if err.code() == KafkaError._PARTITION_EOF:
                return []
            if err.code() == KafkaError._BAD_COMPRESSION:
                self._skip_batch((m.topic(), m.partition()), m.offset(), err)
                return []
            if err.fatal() or not err.retriable():
                raise KafkaException(err)
            log.warning("wmrl_client: consumer error (retrying): %s", err)
            return []
        tp = (m.topic(), m.partition())
        off = m.offset()
        self.stats.records += 1
        value = m.value() or b""
        self.stats.bytes += len(value)
        where = f"{tp[0]}[{tp[1]}]@{off}"
        try:
            steps = self._chunk(m, tp, off, value, where)
        except WmrlError as e:
            if self._on_invalid == "skip":
                self.stats.skipped_invalid += 1
                log.warning("wmrl_client: skipping %s: %s (%s)", where, e, e.reason)
            else:
                # A poison record: never commit past it, so a restart meets it again.
                self._poisoned[tp] = min(off, self._poisoned.get(tp, off))
                e.add_note(f"record {where}")
                raise
            steps = []
        finally:
            self._seen_end[tp] = max(self._seen_end.get(tp, 0), off + 1)
        return steps

    def _skip_batch(self, tp: TopicPartition, base: int, err: Any) -> None:
        """Move past the record batch at offset base that librdkafka refuses to decompress
        (_BAD_COMPRESSION: it decompresses past receive.message.max.bytes, a decompression bomb, or
        is corrupt). librdkafka names only the batch's first offset and fetches it again forever,
        so the end is found by bisection: a fetch from an offset inside the batch meets the same
        refusal, one from past it a record (or nothing). log2(records) fetches, each decompressing
        at most receive.message.max.bytes; the batch is skipped unread, counted in
        stats.skipped_batches and logged at warning, and commits go past it like past a record of
        another run. The client writes no dead letter (a trainer's principal may not write the
        DLQ); the Go stages dead-letter such batches by reference."""
        from confluent_kafka import KafkaError
        from confluent_kafka import TopicPartition as KTP

        if base < self._seen_end.get(tp, -1):
            return  # a refusal queued before the skip below
        _, high = self._consumer.get_watermark_offsets(KTP(tp[0], tp[1]), timeout=10)

        def inside(x: int) -> bool:
            self._consumer.seek(KTP(tp[0], tp[1], x))
            deadline = time.monotonic() + 5  # a refusal comes with the first fetch
            while time.monotonic() < deadline:
                for m in self._consumer.consume(num_messages=self._batch_size, timeout=0.5):
                    if (m.topic(), m.partition()) != tp:
                        self._backlog.append(m)
                        continue
                    e = m.error()
                    if e is not None and e.code() == KafkaError._BAD_COMPRESSION and m.offset() == base:
                        return True
                    if e is not None or (m.offset() or 0) >= x:
                        return False  # a record past the batch, the partition's end or the next refusal
            return False  # nothing readable from x on: past the batch

        lo, hi = base + 1, max(high or 0, base + 1)
        while lo < hi:  # the least offset past the batch
            mid = (lo + hi) // 2
            if inside(mid):
                lo = mid + 1
            else:
                hi = mid
        self._consumer.seek(KTP(tp[0], tp[1], lo))
        self._seen_end[tp] = max(self._seen_end.get(tp, 0), lo)
        self.stats.skipped_batches += 1
        limit = self.config.get("receive.message.max.bytes")
        log.warning(
            "wmrl_client: %s[%d] offsets %d..%d: record batch refused (%s; receive.message.max.bytes %s); "
            "skipped unread (reason %s)",
            tp[0], tp[1], base, lo - 1, err.str(), limit, c.REASON_BATCH_TOO_LARGE,
        )  # fmt: skip

    def _chunk(self, m: Any, tp: TopicPartition, off: int, value: bytes, where: str) -> list[Step]:
        h = header_map(m.headers())
        schema = h.get(c.HEADER_SCHEMA)
        if schema is None:
            raise HeaderError(f"{where}: no {c.HEADER_SCHEMA} header")
        if schema not in c.ADVANTAGE_SCHEMAS:
            raise SchemaVersionError(
                "advantages record", schema, " or ".join(c.ADVANTAGE_SCHEMAS), f"header {c.HEADER_SCHEMA} of {where}"
            )
        run = h.get(c.HEADER_RUN)
        if run is None:
            raise HeaderError(f"{where}: no {c.HEADER_RUN} header")
        if run != self.run_id:
            self.stats.skipped_other_runs += 1
            if run in self._runs_seen or len(self._runs_seen) < 16:
                self._runs_seen[run] = self._runs_seen.get(run, 0) + 1
            return []
        self._run_records += 1
        ct = h.get(c.HEADER_CONTENT_TYPE)
        check_advantage_content_type(ct, where)
        for name in (c.HEADER_STEP, c.HEADER_CHUNK, c.HEADER_ROWS):
            if name not in h:
                raise HeaderError(f"{where}: no {name} header")
        step = parse_canonical_int(h[c.HEADER_STEP], c.HEADER_STEP)
        i, n = parse_chunk(h[c.HEADER_CHUNK])
        nrows = parse_canonical_int(h[c.HEADER_ROWS], c.HEADER_ROWS)
        sum_ = hashlib.sha256(value).digest()
        if step <= self._delivered:
            sums = self._sums.get(step)
            if sums is None:
                raise StaleStepError(
                    f"{where}: step {step} is at or below step {self._delivered}, already delivered for run {run}"
                )
            if len(sums) != n:
                raise ChunkMismatchError(
                    f"{where}: chunk {i}/{n}, but the delivered step {step} had {len(sums)} chunks"
                )
            if sums[i] != sum_:
                raise ChunkMismatchError(
                    f"{where}: chunk {i}/{n} differs from the chunk already delivered for step {step}"
                )
            return self._duplicate(where, i, n, step)
        asm = self._assembling.get(step) or self._ready.get(step)
        if asm is not None and asm.n != n:
            raise ChunkMismatchError(f"{where}: step {step} chunk {i}/{n}, but earlier chunks said {asm.n} chunks")
        if asm is not None and i in asm.chunks:
            if asm.sums[i] != sum_:
                (ptp, poff) = asm.pos[i]
                raise ChunkMismatchError(
                    f"{where}: chunk {i}/{n} of step {step} differs from its copy at {ptp[0]}[{ptp[1]}]@{poff}"
                )
            return self._duplicate(where, i, n, step)
        # With a schema registry `wmrl correct` frames the Arrow bytes in a wmrl.v1.AdvantageBatch.
        table = decode_advantages(advantage_arrow(value, ct, where), validate=False)
        if table.num_rows != nrows:
            raise ConflictError(f"{where}: {c.HEADER_ROWS} says {nrows} rows, the payload has {table.num_rows}")
        if nrows and not (
            bool((table.column("run_id").to_numpy() == run).all())
            and bool((table.column("step").to_numpy() == step).all())
        ):
            raise ConflictError(f"{where}: rows of another run or step than the headers' run={run} step={step}")
        if asm is None:
            asm = self._assembling[step] = _Assembly(n)
        asm.chunks[i] = table
        asm.sums[i] = sum_
        asm.pos[i] = (tp, off)
        self._parts.add(tp)
        if len(asm.chunks) < n:
            return []
        del self._assembling[step]
        full = pa.concat_tables([asm.chunks[k] for k in range(n)]) if n > 1 else asm.chunks[0]
        if self._validate:
            validate_table(full)
        asm.table = full
        self._ready[step] = asm
        return self._deliver(run)

    def _duplicate(self, where: str, i: int, n: int, step: int) -> list[Step]:
        self.stats.duplicate_chunks += 1
        log.warning("wmrl_client: %s: identical copy of chunk %d/%d of step %d; skipping it", where, i, n, step)
        return []

    def _deliver(self, run: str) -> list[Step]:
        """Hand out ready steps in step order (Go's Assembler.deliver): a ready step waits while a
        lower step is incomplete, unless more than max_buffered_steps wait; then the lower
        incomplete steps are abandoned (their records are committed past, never delivered)."""
        out: list[Step] = []
        while self._ready:
            nxt = min(self._ready)
            lower = sorted(s for s in self._assembling if s < nxt)
            if lower:
                if len(self._ready) <= self._max_buffered:
                    break
                for s in lower:
                    a = self._assembling.pop(s)
                    self.stats.abandoned_steps += 1
                    log.warning(
                        "wmrl_client: abandoning step %d of run %s: %d of %d chunks after %d later steps completed",
                        s, run, len(a.chunks), a.n, len(self._ready),
                    )  # fmt: skip
            asm = self._ready.pop(nxt)
            assert asm.table is not None
            self._delivered = nxt
            self._sums[nxt] = [asm.sums[k] for k in range(asm.n)]
            while len(self._sums) > DELIVERED_MEMORY:
                self._sums.popitem(last=False)
            st = Step(self._acked, run, nxt, asm.table, asm.n, asm.offsets)
            self._unacked[id(st)] = st
            self.stats.steps += 1
            self.stats.rows += asm.table.num_rows
            out.append(st)
        return out

    # ---- commits

    def _commit_point(self, tp: TopicPartition) -> int | None:
        end = self._seen_end.get(tp)
        if end is None:
            return None
        waiting = [*self._assembling.values(), *self._ready.values()]
        held = [o for o in (a.min_offset(tp) for a in waiting) if o is not None]
        held += [o for o in (s.min_offset(tp) for s in self._unacked.values()) if o is not None]
        if tp in self._poisoned:
            held.append(self._poisoned[tp])
        return min([end, *held])

    def _commit(self, tps: Sequence[TopicPartition]) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka import TopicPartition as KTP

        todo = []
        for tp in tps:
            point = self._commit_point(tp)
            if point is not None and point > self._committed.get(tp, -1):
                todo.append((tp, point))
        if not todo:
            return
        offsets = [KTP(t, p, o) for (t, p), o in todo]
        if self._async_commit:
            self._consumer.commit(offsets=offsets, asynchronous=True)
        else:
            for r in self._consumer.commit(offsets=offsets, asynchronous=False) or ():
                if r.error is not None:
                    raise KafkaException(r.error)
        for tp, point in todo:
            self._committed[tp] = point
        self.stats.commits += 1

    def _acked(self, s: Step) -> None:
        if self._unacked.pop(id(s), None) is None:
            log.warning("wmrl_client: ack of %r after its partition was revoked: nothing committed", s)
            return
        self._commit(list(self._seen_end))

    # ---- rebalance callbacks

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self._assigned = True
        log.info("wmrl_client: assigned %s", [(p.topic, p.partition) for p in partitions])

    def _drop(self, partitions: list[Any]) -> None:
        gone = {(p.topic, p.partition) for p in partitions}
        # Like Go's Assembler.DropPartition: only the chunks read from revoked partitions are
        # forgotten; chunks on partitions still assigned stay held.
        for step, asm in list(self._ready.items()):
            asm.drop(gone)
            if len(asm.chunks) < asm.n:
                del self._ready[step]
                if asm.chunks:
                    self._assembling[step] = asm
        for step, asm in list(self._assembling.items()):
            asm.drop(gone)
            if not asm.chunks:
                del self._assembling[step]
        for key, s in list(self._unacked.items()):
            if gone & set(s.offsets):
                del self._unacked[key]
                self._sums.pop(s.step, None)
        self._parts -= gone
        if not self._parts:
            # The run lives on no assigned partition: start cleanly from the committed offset.
            self._delivered = -1
            self._sums.clear()
        self._backlog = deque(m for m in self._backlog if (m.topic(), m.partition()) not in gone)
        for tp in gone:
            self._seen_end.pop(tp, None)
            self._committed.pop(tp, None)
            self._poisoned.pop(tp, None)

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        tps = [(p.topic, p.partition) for p in partitions]
        try:
            self._commit([tp for tp in tps if tp in self._seen_end])
        except Exception as e:  # the group is moving on; the next owner re-reads from the last commit
            log.warning("wmrl_client: commit on revoke failed: %s", e)
        self._drop(partitions)

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        self._drop(partitions)
