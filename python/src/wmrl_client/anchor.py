"""The stable anchor hash (topics/hash.go): which groups are also executed in the sandbox."""

from __future__ import annotations

import hashlib
import math


def anchor_hash_u64(run_id: str, group_id: str) -> int:
    """First 8 bytes of SHA-256(run_id + NUL + group_id), big-endian (topics.AnchorHashUint64)."""
    data = run_id.encode("utf-8") + b"\x00" + group_id.encode("utf-8")
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big")


def anchor_hash(run_id: str, group_id: str) -> float:
    """The hash scaled to [0, 1) from its top 53 bits, so every language gets the same double."""
    return (anchor_hash_u64(run_id, group_id) >> 11) / 2**53


def is_anchor(run_id: str, group_id: str, fraction: float) -> bool:
    """Whether the group is an anchor group at this anchor fraction (NaN selects none)."""
    if math.isnan(fraction):
        return False
    return anchor_hash(run_id, group_id) < fraction
