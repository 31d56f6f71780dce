"""Steps one after another, each acknowledged when the next is asked for (the torch-free core of
``wmrl_client.torch.StepDataset``).

A training loop that pulls step v+1 has finished its update on step v, so asking for the next
step is the acknowledgement: the stream commits v then. The step being trained when the loop
stops is not acknowledged (a restart re-delivers it); ``ack_current()`` commits it explicitly,
e.g. right before a checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .stream import AdvantageStream, Step


class AckOnNext:
    """Iterate the complete steps of a stream made by ``open_stream``, converting each with
    ``convert``; a step is acknowledged when the next one is requested."""

    def __init__(self, open_stream: Callable[[], AdvantageStream], convert: Callable[[Step], Any]) -> None:
        self._open = open_stream
        self._convert = convert
        self.current: Step | None = None

    def ack_current(self) -> None:
        """Commit the step handed out last (idempotent)."""
        if self.current is not None:
            self.current.ack()

    def __iter__(self) -> Iterator[Any]:
        with self._open() as stream:
            for step in stream:
                self.ack_current()
                self.current = step
                yield self._convert(step)
