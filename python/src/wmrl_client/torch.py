"""``StepDataset``: a PyTorch IterableDataset over complete wmrl steps.

    from torch.utils.data import DataLoader
    from wmrl_client.torch import StepDataset

    ds = StepDataset(lambda: AdvantageStream("kafka:9092", "run-0042", "trainer-0042"))
    for batch in DataLoader(ds, batch_size=None):      # one item = one whole step, no re-batching
        loss = -(batch["mask"] * batch["weight"] * batch["advantage"] * logprobs(batch["rollout_id"])).sum()
        ...                                             # the step is committed when the next is fetched

Each item is a dict: the numeric columns as tensors (``Step.to_torch``), ``rollout_id`` and
``group_id`` as lists of str, ``step`` and ``run_id``. Use ``batch_size=None`` (a step is the
batch) and ``num_workers`` 0 or 1: the stream is one consumer, opened inside the iterating process
(``open_stream`` is called there), and two workers would split nothing but duplicate the reads.
``ack_current()`` reaches the stream only with ``num_workers=0`` (with a worker process the stream
lives there; the step in flight is then re-delivered after a restart).
Needs PyTorch: ``pip install 'wmrl-client[torch]'``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

try:
    import torch
    from torch.utils.data import IterableDataset, get_worker_info
except ImportError as e:  # pragma: no cover - exercised only without torch
    raise ImportError("wmrl_client.torch needs PyTorch: pip install 'wmrl-client[torch]' (or torch itself)") from e

from .dataset import AckOnNext
from .stream import AdvantageStream, Step

DEFAULT_COLUMNS = ("advantage", "weight", "mask", "used", "calibration_version")


class StepDataset(IterableDataset):  # type: ignore[misc,type-arg,unused-ignore]
    """Complete steps of one run as dicts of tensors; a step is acknowledged when the next one is
    fetched, ``ack_current()`` commits the last one (before a checkpoint, or at the end)."""

    def __init__(
        self,
        open_stream: Callable[[], AdvantageStream],
        columns: Sequence[str] = DEFAULT_COLUMNS,
        *,
        device: str | torch.device | None = None,
        float_dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.columns = list(columns)
        self.device = device
        self.float_dtype = float_dtype
        self._it = AckOnNext(open_stream, self._convert)

    def _convert(self, step: Step) -> dict[str, Any]:
        out: dict[str, Any] = dict(step.to_torch(self.columns, device=self.device, float_dtype=self.float_dtype))
        ids = step.to_numpy(["rollout_id", "group_id"])
        out["rollout_id"] = [str(x) for x in ids["rollout_id"]]
        out["group_id"] = [str(x) for x in ids["group_id"]]
        out["step"] = step.step
        out["run_id"] = step.run_id
        return out

    def ack_current(self) -> None:
        self._it.ack_current()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        if info is not None and info.num_workers > 1:
            raise RuntimeError(
                f"StepDataset with num_workers={info.num_workers}: a run's steps come from one consumer; "
                "use num_workers=0 or 1"
            )
        return iter(self._it)
