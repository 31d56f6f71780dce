"""Steps acknowledged on the next fetch (AckOnNext), and the torch StepDataset with DataLoader."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from conftest import FakeConsumer
from test_stream import Log, step_rows

from wmrl_client import AdvantageStream
from wmrl_client.dataset import AckOnNext


def three_steps(factory: Callable[..., FakeConsumer]) -> Callable[[], AdvantageStream]:
    log = Log()
    for v in range(3):
        log.step("r1", v, step_rows("r1", v), chunks=1)

    def open_stream() -> AdvantageStream:
        s = AdvantageStream("b:1", "r1", "g", consumer_factory=factory, idle_timeout=0, poll_timeout=0)
        factory.made[-1].queue = list(log.msgs)  # type: ignore[attr-defined]
        return s

    return open_stream


def test_a_step_is_acked_when_the_next_is_fetched(fake_consumer: Any) -> None:
    it = AckOnNext(three_steps(fake_consumer), lambda st: st.step)
    seen, commits = [], []
    for v in it:
        seen.append(v)
        commits.append(dict(fake_consumer.made[-1].committed_offsets()))
        if v == 2:
            break
    assert seen == [0, 1, 2]
    # Record offsets: step v's chunk is at 2v (a commit marker follows each transaction).
    assert commits == [{}, {("wmrl.advantages.v1", 0): 2}, {("wmrl.advantages.v1", 0): 4}]
    it.ack_current()  # the step in flight is committed only on request
    assert fake_consumer.made[-1].committed_offsets() == {("wmrl.advantages.v1", 0): 5}  # past the last record read


@pytest.mark.torch
def test_torch_step_dataset_with_dataloader(fake_consumer: Any) -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from wmrl_client.torch import StepDataset

    ds = StepDataset(three_steps(fake_consumer), ["advantage", "mask"], float_dtype=torch.float32)
    batches = list(DataLoader(ds, batch_size=None))
    assert [b["step"] for b in batches] == [0, 1, 2]
    assert batches[0]["advantage"].dtype == torch.float32 and batches[0]["mask"].dtype == torch.bool
    assert len(batches[0]["rollout_id"]) == 8 and batches[0]["run_id"] == "r1"
    assert fake_consumer.made[-1].committed_offsets() == {("wmrl.advantages.v1", 0): 4}
