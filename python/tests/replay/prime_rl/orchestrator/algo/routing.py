"""prime-rl's ``assign_advantages`` as of 559b4477 (src/prime_rl/orchestrator/algo/routing.py), replayed:
a scalar is broadcast over the trace's sampled tokens (mask True), node by node; a list must have
one value per sampled token."""

from __future__ import annotations

from typing import Any


def assign_advantages(trace: Any, values: float | list[float]) -> None:
    nodes = [node for node in trace.nodes if any(node.mask)]
    for node in nodes:
        if len(node.mask) != len(node.token_ids):
            raise ValueError(f"node masks must align with token ids in trace {trace.id!r}")
    total = sum(sum(node.mask) for node in nodes)
    if isinstance(values, int | float):
        flat = [float(values)] * total
    else:
        if len(values) != total:
            raise ValueError(f"advantages must align with trace {trace.id!r}'s sampled tokens")
        flat = [float(v) for v in values]
    offset = 0
    for node in nodes:
        end = offset + sum(node.mask)
        node.advantages = flat[offset:end]
        offset = end
