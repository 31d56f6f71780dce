"""Adapters that plug wmrl into RL frameworks that own generation.

Each module imports its framework (if at all) only inside functions, so ``import
wmrl_client.integrations.trl`` works without TRL installed:

* ``trl`` — ``RewardFunc``, a reward function for ``GRPOTrainer(reward_funcs=...)``.
* ``verl`` — ``compute_score``, a batch ``custom_reward_function`` for verl's ``batch`` reward manager.
* ``openrlhf`` — an HTTP server for ``--remote_rm_url`` and ``reward_func`` for a reward-function file.

All of them turn one framework call into one wmrl step through a ``RewardClient`` (rollouts and
manifest published, corrected rows awaited): samples with the same prompt form a group,
wherever they are in the batch, and the rows come back in batch order.
"""

from ._batch import BatchScorer, fill_masked, group_indices

__all__ = ["BatchScorer", "fill_masked", "group_indices"]
