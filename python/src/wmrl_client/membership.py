"""Whether a trainer can get its run's records: its consumer group's assignment, as `wmrl train`
checks it (cmd/wmrl/trainwatch.go).

A run's advantages sit on one partition (the Go stages and ``RolloutProducer`` key by run with
murmur2). In a group shared with trainers of other runs that partition may go to another member,
which filters the records out: this trainer then waits for ever. ``GroupWatch`` describes the
group every few seconds and logs, rate-limited, which partition holds the run, who holds it and
the group to use instead. Every trainer stream's Kafka client id names its run
(``trainer_client_id``), so members can tell each other's runs, Go's and Python's alike.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import contract as c

log = logging.getLogger("wmrl_client")

CLIENT_ID_BASE = "wmrl-trainer"
CHECK_EVERY = 3.0  # seconds between checks (Go: trainWatchEvery)
WARN_EVERY = 30.0  # a lasting problem is logged again this often (Go: trainWarnEvery)


def trainer_client_id(run_id: str) -> str:
    """The Kafka client id of a trainer of run_id: "wmrl-trainer/<run>" (Go: trainer.ClientID)."""
    return f"{CLIENT_ID_BASE}/{run_id}" if run_id else CLIENT_ID_BASE


def run_of_client_id(client_id: str) -> tuple[str, bool]:
    """The run a member with this client id consumes: ("", True) for a trainer of every run,
    ok False for a client that is not a trainer stream."""
    if client_id == CLIENT_ID_BASE:
        return "", True
    head, sep, run = client_id.partition("/")
    return run, head == CLIENT_ID_BASE and bool(sep) and bool(run)


def run_group(run_id: str, topic_prefix: str = c.DEFAULT_PREFIX) -> str:
    """The group `wmrl train --run` uses by default: one per run, carrying a topic prefix other
    than the default (the rule of cmd/wmrl/identity.go)."""
    base = f"{CLIENT_ID_BASE}-{run_id}"
    return base if topic_prefix in ("", c.DEFAULT_PREFIX) else topic_prefix + base


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (the Java client's and franz-go's key hash), as an unsigned 32-bit value."""
    m, r = 0x5BD1E995, 24
    n = len(data)
    h = (0x9747B28C ^ n) & 0xFFFFFFFF
    for i in range(0, n - n % 4, 4):
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = n - n % 4
    extra = n % 4
    if extra == 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def run_partition(run_id: str, partitions: int) -> int:
    """The partition of run_id's records among partitions (Go: topics.PartitionFor)."""
    return (murmur2(run_id.encode()) & 0x7FFFFFFF) % partitions


@dataclass(frozen=True)
class Member:
    """One member of a consumer group: ids, host and its partitions of the watched topic."""

    member_id: str
    client_id: str
    host: str
    partitions: tuple[int, ...]


def _serves(run: str, known: bool) -> str:
    if not known:
        return "not a wmrl trainer stream, or a custom client id: its run is unknown"
    return "a trainer of every run" if run == "" else f"a trainer of run {run}"


def group_problems(group: str, me: str, topic: str, run_id: str, partition: int,
                   members: Sequence[Member], fix: str) -> list[str]:  # fmt: skip
    """What keeps member me of group from its run's records, one line each (none: all is well)."""
    problems: list[str] = []
    others: list[str] = []
    mine: tuple[int, ...] = ()
    for m in members:
        run, known = run_of_client_id(m.client_id)
        if m.member_id == me:
            mine = m.partitions
            continue
        if known and run == run_id:
            continue
        others.append(f"{m.client_id} on {m.host} ({_serves(run, known)})")
        if partition in m.partitions:
            problems.append(
                f"run {run_id}'s records sit on partition {topic}/{partition}, which group {group} gave to "
                f"member {m.client_id} on {m.host} ({_serves(run, known)}), not to this trainer; it gets none "
                f"of the run's steps: give each run its own group, e.g. group_id={fix!r}"
            )
    if others:
        problems.append(
            f"group {group} is shared with consumers of other runs: {', '.join(others)}; a run's records go "
            f"to the one member holding its partition (this trainer holds {topic}/{sorted(mine)}; run "
            f"{run_id}'s are on {partition}), which drops other runs' records: give each run its own "
            f"group, e.g. group_id={fix!r}"
        )
    return problems


class GroupWatch:
    """Checks, on a daemon thread every CHECK_EVERY seconds, that the run's partition is held by
    this member (or a trainer of the same run) and that the group has no consumer of another run;
    logs each problem at warning, again every WARN_EVERY seconds while it lasts."""

    def __init__(self, conf: Mapping[str, object], group: str, topic: str, run_id: str, fix: str,
                 member_id: Callable[[], str],
                 admin_factory: Callable[[dict[str, object]], Any] | None = None) -> None:  # fmt: skip
        self._conf = {
            k: v for k, v in conf.items()
            if k in ("bootstrap.servers", "security.protocol", "client.id") or k.startswith(("sasl.", "ssl."))
        }  # fmt: skip
        self._group, self._topic, self._run, self._fix = group, topic, run_id, fix
        self._member_id = member_id
        self._admin_factory = admin_factory
        self._warned: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"wmrl-group-watch-{run_id}", daemon=True)
        self.problems: list[str] = []  # the last check's findings

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=1)  # a check in flight ends on its own; the thread is a daemon

    def _loop(self) -> None:
        factory = self._admin_factory
        if factory is None:
            from confluent_kafka.admin import AdminClient

            factory = AdminClient
        admin = factory(dict(self._conf))
        while not self._stop.wait(CHECK_EVERY):
            try:
                found = self.check(admin)
            except Exception as e:  # the broker may be away for a while; the next check retries
                log.debug("wmrl_client: could not check group %s: %s", self._group, e)
                continue
            if found is None:
                continue
            self.problems = found
            now = time.monotonic()
            for p in found:
                if now - self._warned.get(p, -WARN_EVERY) >= WARN_EVERY:
                    self._warned[p] = now
                    log.warning("wmrl_client: %s (said again every %.0fs while it lasts)", p, WARN_EVERY)

    def check(self, admin: Any) -> list[str] | None:
        """One check; None while the member has not joined or the group rebalances."""
        me = self._member_id()
        if not me:
            return None
        md = admin.list_topics(self._topic, timeout=10)
        parts = md.topics[self._topic].partitions
        if not parts:
            return None
        partition = run_partition(self._run, len(parts))
        desc = admin.describe_consumer_groups([self._group], request_timeout=10)[self._group].result(timeout=15)
        if getattr(desc.state, "name", str(desc.state)).upper() != "STABLE":
            return None
        members = [
            Member(m.member_id, m.client_id, m.host,
                   tuple(tp.partition for tp in (m.assignment.topic_partitions if m.assignment else [])
                         if tp.topic == self._topic))  # fmt: skip
            for m in desc.members
        ]
        return group_problems(self._group, me, self._topic, self._run, partition, members, self._fix)
