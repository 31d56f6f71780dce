"""prime-rl's algorithm registry as of 559b4477 (src/prime_rl/orchestrator/algo/__init__.py), replayed:
``build_algorithm`` instantiates ``ALGORITHM_CLASSES[config.type]`` with (config, policy_pool) after
checking that the class and the config declare the same ``action_loss_type``."""

from __future__ import annotations

from typing import Any

from prime_rl.orchestrator.algo.base import Algorithm
from prime_rl.orchestrator.algo.grpo import GRPOAlgorithm

ALGORITHM_CLASSES: dict[str, type[Algorithm]] = {"grpo": GRPOAlgorithm}


def build_algorithm(config: Any, policy_pool: Any) -> Algorithm:
    cls = ALGORITHM_CLASSES[config.type]
    assert cls.action_loss_type == config.action_loss_type
    return cls(config, policy_pool)
