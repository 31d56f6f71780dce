"""Masked rows of a delivered step: a row with mask false has no usable reward (the world model or
the sandbox failed on it) or was masked by a policy (stale), and carries no gradient. A trainer
would otherwise train on a step of zero-weight rows without a word."""

from __future__ import annotations

import logging
from typing import Literal

import numpy as np

from .errors import WmrlError
from .step import Step

log = logging.getLogger("wmrl_client")


class MaskedStepError(WmrlError, RuntimeError):
    """Every row of a step is masked, raised with ``on_masked="raise"``. ``step`` is the Step,
    still unacknowledged: ack() it to move past it, or stop and fix the failing stage."""

    def __init__(self, message: str, step: Step) -> None:
        self.step = step
        super().__init__(message)

    @property
    def reason(self) -> str:
        return "masked-step"


def masked_rows(st: Step) -> int:
    """How many of st's rows are masked (mask false)."""
    return int(np.count_nonzero(~st.table.column("mask").to_numpy(zero_copy_only=False)))


def check_masked(st: Step, masked: int, on_masked: Literal["warn", "raise"]) -> None:
    """Log a warning when st has masked rows; with on_masked="raise", raise MaskedStepError when
    every row is masked."""
    rows = st.num_rows
    if masked == 0:
        return
    log.warning(
        "wmrl_client: run %s step %d: %d of %d rows masked (no usable reward: see the world model's "
        "and the sandbox's logs and /healthz/scoring)",
        st.run_id, st.step, masked, rows,
    )  # fmt: skip
    if masked == rows and on_masked == "raise":
        raise MaskedStepError(
            f"run {st.run_id} step {st.step}: all {rows} rows are masked (no usable reward); "
            "ack() err.step to move past it",
            st,
        )
