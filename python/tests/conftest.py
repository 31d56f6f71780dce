"""Shared fixtures: golden paths, a fake Kafka consumer/producer for unit tests, and the real
broker plus the Go helper for end-to-end tests.

Service policy (as Go's internal/testenv): WMRL_TEST_KAFKA unset skips the e2e tests, unless
WMRL_REQUIRE_SERVICES=1 or CI=true, which turn unset or unreachable into a failure.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import types
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest

HERE = Path(__file__).resolve().parent
PY_ROOT = HERE.parent
REPO = PY_ROOT.parent
GOLDEN = REPO / "topics" / "testdata" / "golden"

T = TypeVar("T")

sys.path.insert(0, str(HERE))

# The real-trainer tests (`make test-trainers`) import torch, TRL and verl at module level; where
# torch is not installed (`make test-python`) they are not collected at all.
if importlib.util.find_spec("torch") is None:
    collect_ignore_glob = ["test_trainers_*.py"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that ran stages (their logs are *.log in its tmp_path) shows each log's tail."""
    outcome = yield
    rep = outcome.get_result()  # type: ignore[attr-defined]
    tmp = getattr(item, "funcargs", {}).get("tmp_path")
    if rep.when == "call" and rep.failed and isinstance(tmp, Path):
        for log in sorted(tmp.glob("*.log")):
            rep.sections.append((f"stage log {log.name} (tail)", log.read_text(errors="replace")[-4000:]))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """WMRL_TEST_REQUIRE_TRAINERS=1 (`make test-trainers`): a skipped test is a failure, so a trainer
    test that silently could not run (a missing package, an unset service) fails the target."""
    if not _truthy(os.environ.get("WMRL_TEST_REQUIRE_TRAINERS")):
        return
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = tr.stats.get("skipped", []) if tr is not None else []
    if skipped:
        where = ", ".join(sorted({str(getattr(r, "nodeid", "") or r.location[0]) for r in skipped}))
        print(
            f"\nWMRL_TEST_REQUIRE_TRAINERS=1: {len(skipped)} test(s) skipped ({where}): failing the run",
            file=sys.stderr,
        )
        session.exitstatus = 1


@pytest.fixture(scope="session")
def golden() -> Path:
    return GOLDEN


# ---- fakes for unit tests ------------------------------------------------------------------


class FakeMessage:
    """The part of confluent_kafka.Message the stream uses."""

    def __init__(
        self, value: bytes, headers: list[tuple[str, bytes]], offset: int, partition: int = 0,
        topic: str = "wmrl.advantages.v1", key: bytes | None = None, error: Any = None,
    ) -> None:  # fmt: skip
        self._v, self._h, self._o, self._p, self._t, self._k, self._e = (
            value,
            headers,
            offset,
            partition,
            topic,
            key,
            error,
        )

    def value(self) -> bytes:
        return self._v

    def headers(self) -> list[tuple[str, bytes]]:
        return self._h

    def offset(self) -> int:
        return self._o

    def partition(self) -> int:
        return self._p

    def topic(self) -> str:
        return self._t

    def key(self) -> bytes | None:
        return self._k

    def error(self) -> Any:
        return self._e


class FakeCommitResult:
    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self.topic, self.partition, self.offset, self.error = topic, partition, offset, None


class FakeTopics(dict):  # type: ignore[type-arg]
    """Topic metadata in which every topic exists, unless listed in ``missing``."""

    def __init__(self, missing: set[str]) -> None:
        super().__init__()
        self.missing = missing

    def get(self, name: str, default: Any = None) -> Any:
        return default if name in self.missing else types.SimpleNamespace(topic=name, error=None)


class FakeConsumer:
    """Hands out queued messages in batches and records commits; no broker."""

    missing_topics: set[str] = set()

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return types.SimpleNamespace(topics=FakeTopics(self.missing_topics))

    def __init__(self, conf: dict[str, object]) -> None:
        self.conf = conf
        self.queue: list[FakeMessage] = []
        self.commits: list[dict[tuple[str, int], int]] = []
        self.closed = False
        self.callbacks: dict[str, Callable[..., None]] = {}
        self.topics: list[str] = []
        self.assigned = False
        self.consume_calls: list[tuple[int, float]] = []

    def subscribe(self, topics: list[str], **callbacks: Callable[..., None]) -> None:
        self.topics = topics
        self.callbacks = callbacks

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[FakeMessage]:
        # librdkafka joins the group on the first poll: partition 0 of each topic is assigned then.
        if not self.assigned and "on_assign" in self.callbacks:
            self.assigned = True
            self.callbacks["on_assign"](self, [types.SimpleNamespace(topic=t, partition=0) for t in self.topics])
        self.consume_calls.append((num_messages, timeout))
        out, self.queue = self.queue[:num_messages], self.queue[num_messages:]
        return out

    def commit(self, offsets: list[Any], asynchronous: bool = True) -> list[FakeCommitResult] | None:
        self.asynchronous = asynchronous
        self.commits.append({(o.topic, o.partition): o.offset for o in offsets})
        return None if asynchronous else [FakeCommitResult(o.topic, o.partition, o.offset) for o in offsets]

    def close(self) -> None:
        self.closed = True

    def committed_offsets(self) -> dict[tuple[str, int], int]:
        merged: dict[tuple[str, int], int] = {}
        for c in self.commits:
            merged.update(c)
        return merged


class FakeProducer:
    """Records produce() calls and reports deliveries on poll/flush."""

    def __init__(self, conf: dict[str, object]) -> None:
        self.conf = conf
        self.produced: list[dict[str, Any]] = []
        self.pending: list[tuple[Callable[..., None], Any]] = []
        self.fail_with: str | None = None
        self.buffer_errors = 0

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return types.SimpleNamespace(topics=FakeTopics(set()))

    def produce(
        self, topic: str, value: bytes, key: bytes, headers: list[tuple[str, bytes]], on_delivery: Callable[..., None]
    ) -> None:
        if self.buffer_errors:
            self.buffer_errors -= 1
            raise BufferError("queue full")
        self.produced.append({"topic": topic, "value": value, "key": key, "headers": headers})
        msg = FakeMessage(value, headers, len(self.produced) - 1, topic=topic, key=key)
        self.pending.append((on_delivery, msg))

    def poll(self, timeout: float = 0) -> int:
        return self._deliver()

    def flush(self, timeout: float = -1) -> int:
        self._deliver()
        return 0

    def _deliver(self) -> int:
        n = len(self.pending)
        for cb, msg in self.pending:
            cb(self.fail_with, msg)
        self.pending = []
        return n


def _recording_factory(cls: Callable[[dict[str, object]], T]) -> Callable[[dict[str, object]], T]:
    """A client factory that keeps every client it made in ``.made``, for the test to inspect."""
    made: list[T] = []

    def factory(conf: dict[str, object]) -> T:
        made.append(cls(conf))
        return made[-1]

    factory.made = made  # type: ignore[attr-defined]
    return factory


@pytest.fixture
def fake_consumer() -> Callable[[dict[str, object]], FakeConsumer]:
    return _recording_factory(FakeConsumer)


@pytest.fixture
def fake_producer() -> Callable[[dict[str, object]], FakeProducer]:
    return _recording_factory(FakeProducer)


# ---- real services ---------------------------------------------------------------------------


def _truthy(v: str | None) -> bool:
    return (v or "").strip().lower() in ("1", "true", "yes", "on")


def services_required(env: Mapping[str, str] = os.environ) -> bool:
    return _truthy(env.get("CI")) or _truthy(env.get("WMRL_REQUIRE_SERVICES"))


HOW_TO_RUN = (
    "run `make test`, or `deploy/local/services.sh up` and then WMRL_TEST_KAFKA=127.0.0.1:9092 "
    "WMRL_TEST_REDIS=redis://127.0.0.1:6379/0 python -m pytest python/tests"
)


def _reachable(brokers: str) -> str | None:
    first = brokers.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=5):
            return None
    except (OSError, ValueError) as e:
        return str(e)


def _service_env(env: Mapping[str, str], var: str) -> str:
    """The value of VAR; unset skips the test, or fails it when services are required."""
    value = env.get(var, "").strip()
    if value:
        return value
    if services_required(env):
        pytest.fail(f"{var} is not set but services are required (CI=true or WMRL_REQUIRE_SERVICES=1): " + HOW_TO_RUN)
    pytest.skip(f"{var} is not set; end-to-end test skipped ({HOW_TO_RUN})")


def resolve_kafka(env: Mapping[str, str]) -> str:
    """Seed brokers from WMRL_TEST_KAFKA after a TCP check; skip or fail by the service policy."""
    brokers = _service_env(env, "WMRL_TEST_KAFKA")
    err = _reachable(brokers)
    if err is not None:
        pytest.fail(f"Kafka at WMRL_TEST_KAFKA={brokers} is unreachable: {err} ({HOW_TO_RUN})")
    return brokers


def resolve_redis(env: Mapping[str, str]) -> str:
    """The Redis URL from WMRL_TEST_REDIS after a TCP check; skip or fail by the service policy."""
    url = _service_env(env, "WMRL_TEST_REDIS")
    hostport = url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    if ":" not in hostport:
        hostport += ":6379"
    err = _reachable(hostport)
    if err is not None:
        pytest.fail(f"Redis at WMRL_TEST_REDIS={url} is unreachable: {err} ({HOW_TO_RUN})")
    return url


@pytest.fixture(scope="session")
def redis_url() -> str:
    """URL of the real Redis the Go pipeline keeps its state in (see resolve_redis)."""
    return resolve_redis(os.environ)


@pytest.fixture(scope="session")
def wmrl_cli(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wmrl CLI, built with `go build` from this tree (WMRL_TEST_WMRL: a prebuilt binary instead)."""
    if os.environ.get("WMRL_TEST_WMRL"):
        return Path(os.environ["WMRL_TEST_WMRL"])
    return _go_build(tmp_path_factory, "./cmd/wmrl")


def _go_build(tmp_path_factory: pytest.TempPathFactory, pkg: str) -> Path:
    """Builds the Go command pkg (a path from the repository root) into a fresh directory."""
    go = shutil.which("go")
    if go is None:
        if services_required():
            pytest.fail("the end-to-end tests need the Go toolchain on PATH")
        pytest.skip("go not on PATH; end-to-end test skipped")
    name = Path(pkg).name
    exe = tmp_path_factory.mktemp(name) / name
    subprocess.run([go, "build", "-o", str(exe), pkg], cwd=REPO, check=True, timeout=600)
    return exe


@pytest.fixture(scope="session")
def kafka() -> str:
    """Seed brokers of the real broker (see resolve_kafka)."""
    return resolve_kafka(os.environ)


@pytest.fixture(scope="session")
def gohelper(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., dict[str, Any]]:
    """Build python/tests/gohelper with `go build` and return a runner that parses its JSON output."""
    exe = _go_build(tmp_path_factory, "./python/tests/gohelper")

    def run(*args: str, timeout: float = 180) -> dict[str, Any]:
        p = subprocess.run([str(exe), *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise AssertionError(f"gohelper {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        return json.loads(p.stdout) if p.stdout.strip() else {}

    return run


@pytest.fixture
def prefix(kafka: str, gohelper: Callable[..., dict[str, Any]]) -> Iterator[str]:
    """A fresh topic prefix per test; its topics are deleted afterwards."""
    p = f"pytest-{uuid.uuid4().hex[:10]}."
    yield p
    gohelper("delete-topics", "--brokers", kafka, "--prefix", p)
