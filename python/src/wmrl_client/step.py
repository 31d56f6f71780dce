"""Step: one complete training step read by AdvantageStream, and the header parsers it needs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from . import contract as c
from .digest import digest_rows, rows_from_table
from .errors import HeaderError
from .records import AdvantageRow

if TYPE_CHECKING:
    import torch

TopicPartition = tuple[str, int]

NUMERIC_COLUMNS = (
    "step", "predicted", "predicted_ok", "calibrated", "executed", "executed_ok",
    "used", "advantage", "weight", "mask", "calibration_version",
)  # fmt: skip

_TORCH_MISSING = (
    "Step.to_torch() needs PyTorch, which is not installed: pip install 'wmrl-client[torch]' "
    "(or torch itself), or use Step.to_numpy()"
)


# OnAck is what a Step needs from the stream that delivered it (AdvantageStream): a callback on
# ack. A plain callable, so this module imports nothing from stream.py, which imports it.
OnAck = Callable[["Step"], None]


def parse_canonical_int(s: str, what: str) -> int:
    """0 or a decimal without sign, spaces or leading zeros, at most 18 digits (Go's parseCanonicalInt)."""
    if not s or len(s) > 18:
        raise HeaderError(f"{what} {s!r}: want 1 to 18 decimal digits")
    if len(s) > 1 and s[0] == "0":
        raise HeaderError(f"{what} {s!r}: leading zero")
    if not all("0" <= ch <= "9" for ch in s):
        raise HeaderError(f"{what} {s!r}: non-digit")
    return int(s)


def parse_chunk(v: str) -> tuple[int, int]:
    """Parse a wmrl-chunk value "i/n" with 0 <= i < n (topics.ParseChunk)."""
    a, sep, b = v.partition("/")
    if not sep:
        raise HeaderError(f"{c.HEADER_CHUNK} {v!r}: want i/n")
    i = parse_canonical_int(a, f"{c.HEADER_CHUNK} chunk index")
    n = parse_canonical_int(b, f"{c.HEADER_CHUNK} chunk count")
    if i >= n:
        raise HeaderError(f"{c.HEADER_CHUNK} {v!r}: index must be below the count")
    return i, n


def header_map(headers: Sequence[tuple[str, bytes | None]] | None) -> dict[str, str]:
    """Headers as a dict; the last header of a name wins, as in Go's topics.HeaderValue."""
    out: dict[str, str] = {}
    for k, v in headers or ():
        out[k] = "" if v is None else v.decode("utf-8", "replace")
    return out


class Step:
    """One complete training step: its rows as a pyarrow Table, and ack() to commit it."""

    def __init__(
        self,
        on_ack: OnAck | None,
        run_id: str,
        step: int,
        table: pa.Table,
        chunks: int,
        offsets: Mapping[TopicPartition, Sequence[int]],
    ) -> None:
        self.run_id = run_id
        self.step = step
        self.table = table
        self.chunks = chunks
        self.offsets: dict[TopicPartition, list[int]] = {tp: sorted(o) for tp, o in offsets.items()}
        self.acked = False
        self._on_ack = on_ack

    @property
    def num_rows(self) -> int:
        return int(self.table.num_rows)

    def __len__(self) -> int:
        return int(self.table.num_rows)

    def __repr__(self) -> str:
        state = "acked" if self.acked else "unacked"
        return f"Step(run_id={self.run_id!r}, step={self.step}, rows={self.num_rows}, chunks={self.chunks}, {state})"

    def min_offset(self, tp: TopicPartition) -> int | None:
        o = self.offsets.get(tp)
        return o[0] if o else None

    def ack(self) -> None:
        """Mark the step trained; commits every partition up to the lowest offset still needed.

        Idempotent. Raises confluent_kafka.KafkaException when the commit fails (the step then
        counts as acknowledged and the next ack retries the commit).
        """
        if self.acked:
            return
        self.acked = True
        if self._on_ack is not None:
            self._on_ack(self)

    def rows(self) -> list[AdvantageRow]:
        return rows_from_table(self.table)

    def digest(self) -> str:
        """The canonical digest of this step's rows (equal to Go's topics.DigestRows)."""
        return digest_rows(self.table)

    def to_numpy(self, columns: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Columns as numpy arrays: predicted/executed are NaN where null, with *_ok bool arrays.

        Strings become object arrays. Default: every column plus predicted_ok and executed_ok.
        """
        names = list(columns) if columns is not None else [*self.table.column_names, "predicted_ok", "executed_ok"]
        out: dict[str, np.ndarray] = {}
        for name in names:
            if name in ("predicted_ok", "executed_ok"):
                col = self.table.column(name[: -len("_ok")])
                out[name] = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
                continue
            if name not in self.table.column_names:
                raise KeyError(f"no column {name!r} (have {', '.join(self.table.column_names)})")
            col = self.table.column(name)
            if name in ("predicted", "executed"):
                out[name] = col.fill_null(float("nan")).to_numpy()
            else:
                out[name] = col.to_numpy()
        return out

    def to_torch(
        self,
        columns: Sequence[str] | None = None,
        *,
        device: str | torch.device | None = None,
        float_dtype: torch.dtype | None = None,
    ) -> dict[str, torch.Tensor]:
        """Numeric columns as torch tensors (needs torch; raises ImportError with a hint without it).

        float_dtype (e.g. torch.float32) converts the float64 columns; mask and *_ok stay bool,
        step and calibration_version become int64.
        """
        try:
            import torch
        except ImportError as e:
            raise ImportError(_TORCH_MISSING) from e
        names = list(columns) if columns is not None else list(NUMERIC_COLUMNS)
        bad = [n for n in names if n not in NUMERIC_COLUMNS]
        if bad:
            raise TypeError(f"to_torch: columns {bad} are not numeric (numeric: {', '.join(NUMERIC_COLUMNS)})")
        arrays = self.to_numpy(names)
        out: dict[str, torch.Tensor] = {}
        for name, a in arrays.items():
            if a.dtype == np.uint64:
                if a.size and int(a.max()) > np.iinfo(np.int64).max:
                    raise OverflowError(f"to_torch: {name} does not fit in int64")
                a = a.astype(np.int64)
            t = torch.from_numpy(np.ascontiguousarray(a))
            if float_dtype is not None and t.is_floating_point():
                t = t.to(float_dtype)
            if device is not None:
                t = t.to(device)
            out[name] = t
        return out
