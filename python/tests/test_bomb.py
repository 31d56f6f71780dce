"""A decompression bomb on the advantages topic, against the real broker (issue 35, item 1): a
zstd record batch of 135 KB-class size that decompresses past the stream's limit, written by
internal/testenv/cmd/kafkabomb between valid steps. The stream must skip it unread, count it, read
the steps after it, and stay inside its memory bound while doing so."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, _go_build
from test_e2e import produce

from wmrl_client import AdvantageStream
from wmrl_client import contract as c

pytestmark = pytest.mark.e2e

BOMB_BYTES = 1200 << 20  # as in the issue: about 1.26 GB decompressed
# The stream's bound for one refused batch: librdkafka's zstd output buffer grows (×3 a round) up to
# receive.message.max.bytes (MAX_BATCH_BYTES + 512) and is freed on refusal; the fetch buffer is
# fetch.max.bytes at most. python/README.md states it.
RSS_BOUND = 2 * c.MAX_BATCH_BYTES + (16 << 20)


@pytest.fixture(scope="session")
def kafkabomb(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., dict[str, Any]]:
    exe: Path = _go_build(tmp_path_factory, "./internal/testenv/cmd/kafkabomb")

    def run(*args: str) -> dict[str, Any]:
        p = subprocess.run([str(exe), *args], cwd=REPO, capture_output=True, text=True, timeout=180)
        assert p.returncode == 0, p.stderr
        return dict(json.loads(p.stdout))

    return run


class PeakRSS:
    """Samples this process's resident set every 10 ms: the peak above the level at start."""

    def __init__(self) -> None:
        self.base = self.now()
        self.peak = self.base
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def now() -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) << 10
        raise AssertionError("no VmRSS")

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, self.now())

    def __enter__(self) -> PeakRSS:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()

    @property
    def growth(self) -> int:
        return self.peak - self.base


def test_stream_skips_a_decompression_bomb_and_reads_on(
    kafka: str, gohelper: Any, prefix: str, kafkabomb: Callable[..., dict[str, Any]]
) -> None:
    run = "bomb-run"
    produce(gohelper, kafka, prefix, "bomb-setup", 0, partitions=1)  # creates the topics
    topic = prefix + c.SUFFIX_ADVANTAGES
    ref = kafkabomb("--brokers", kafka, "--topic", topic, "--partition", "0", "--bytes", str(BOMB_BYTES))
    assert ref["decompressed_bytes"] > BOMB_BYTES and ref["compressed_bytes"] < 1 << 20
    produce(gohelper, kafka, prefix, run, 3, partitions=1)
    steps = []
    t0 = time.monotonic()
    with PeakRSS() as rss, AdvantageStream(kafka, run, f"g-{uuid.uuid4().hex[:8]}", topic_prefix=prefix,
                                           idle_timeout=30) as stream:  # fmt: skip
        for st in stream:
            steps.append(st.step)
            st.ack()
            if len(steps) == 3:
                break
        stats = stream.stats
    took = time.monotonic() - t0
    mib = rss.growth >> 20
    print(f"\npython client: bomb of {ref['decompressed_bytes']} bytes ({ref['compressed_bytes']} compressed) "
          f"skipped; peak RSS growth {mib} MiB (bound {RSS_BOUND >> 20} MiB), 3 steps in {took:.1f}s")  # fmt: skip
    assert steps == [0, 1, 2]
    assert stats.skipped_batches == 1
    assert rss.growth < RSS_BOUND, f"RSS grew {rss.growth >> 20} MiB, bound {RSS_BOUND >> 20} MiB"
