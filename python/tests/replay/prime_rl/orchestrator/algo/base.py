"""prime-rl's ``Algorithm`` contract as of 559b4477 (src/prime_rl/orchestrator/algo/base.py), replayed.

The orchestrator builds one instance per env as ``cls(config, policy_pool)`` and awaits
``finalize_group(episodes)`` when a cohort completes, which awaits ``score_group(episodes)``;
``iter_trainable_traces`` skips errored traces, untrainable agents and traces without a sampled token.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar


def iter_trainable_traces(episodes: list[Any]) -> Iterator[tuple[Any, Any]]:
    for episode in episodes:
        for trace in episode.traces:
            if trace.has_error or not trace.agent.trainable:
                continue
            if any(any(node.mask) for node in trace.nodes):
                yield episode, trace


class Algorithm:
    action_loss_type: ClassVar[str] = "rl"

    def __init__(self, config: Any, policy_pool: Any) -> None:
        self.policy_pool = policy_pool

    async def score_episode(self, episode: Any) -> None:
        pass

    async def score_group(self, episodes: list[Any]) -> None:
        pass

    async def finalize_episode(self, episode: Any) -> None:
        if any(True for _ in iter_trainable_traces([episode])):
            await self.score_episode(episode)

    async def finalize_group(self, episodes: list[Any]) -> None:
        await self.score_group(episodes)
