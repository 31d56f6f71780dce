"""prime-rl's default ``GRPOAlgorithm`` credit as of 559b4477 (src/prime_rl/orchestrator/algo/grpo.py),
replayed without its optional length penalty: reward minus the group mean (no std division)."""

from __future__ import annotations

from typing import Any

from prime_rl.orchestrator.algo.base import Algorithm, iter_trainable_traces
from prime_rl.orchestrator.algo.routing import assign_advantages


class GRPOAlgorithm(Algorithm):
    async def score_group(self, episodes: list[Any]) -> None:
        traces = [trace for _, trace in iter_trainable_traces(episodes)]
        if not traces:
            return
        mean = sum(t.reward for t in traces) / len(traces)
        for t in traces:
            assign_advantages(t, t.reward - mean)
