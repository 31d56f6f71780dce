"""slime ≥ 0.3: wmrl's fused advantages (IVD weights applied) as slime's trained advantages.

``--group-rm`` (``slime.group_rm``) hands slime a reward per sample, which slime then
group-normalises itself: the IVD weight, and wmrl's own normalisation, are lost. These two hooks
put wmrl's ``advantage × weight`` where slime trains on it::

    --group-rm --custom-rm-path wmrl_client.integrations.slime.group_rm \\
    --custom-reward-post-process-path wmrl_client.integrations.slime_advantage.post_process_rewards \\
    --custom-advantage-function-path wmrl_client.integrations.slime_advantage.advantages
    # and not --normalize-advantages (advantages refuses it: it would whiten wmrl's advantages again)

Where they run, as of slime v0.3.1 (THUDM/slime tag v0.3.1, commit
a6272da0d4f3d0a08520c99a2f3b4f6c887960dc; the seam is the same in v0.3.0, bf14dc21):

* ``post_process_rewards(args, samples) -> (raw_rewards, rewards)`` replaces
  ``RolloutManager._post_process_rewards`` (slime/ray/rollout.py), in the rollout process, where
  ``group_rm`` left each sample's wmrl row in ``sample.metadata["wmrl"]``. ``raw_rewards`` (slime
  logs them) are the corrected rewards; ``rewards`` — slime's normalised rewards, the field
  ``_split_train_data_by_dp`` ships to each data-parallel rank — are wmrl's fused advantages, in
  place of slime's group mean/std normalisation.
* ``advantages(args, rollout_data)`` is loaded with ``load_function`` and called by
  ``compute_advantages_and_returns`` (slime/backends/megatron_utils/loss.py) on the last pipeline
  stage, after the KL term is computed (``rollout_data["kl"]``: one tensor per sample, of its
  response tokens) and in place of the ``--advantage-estimator``. It sets
  ``rollout_data["advantages"]`` and ``["returns"]``: each sample's wmrl advantage on every response
  token, as slime's GRPO does with a normalised reward. slime applies ``--use-opd`` and
  ``--normalize-advantages`` after it; the first composes, the second would re-whiten the batch
  (a global affine map that undoes wmrl's scale), so ``advantages`` raises when it is set.

slime is not on PyPI and needs Megatron, SGLang and GPUs: the tests replay these two calls with
slime v0.3.1's argument names and data layout (per-rank ``rollout_data`` of lists, ``rewards``
floats, ``kl`` tensors) on the real wmrl stages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .slime import ROW_KEY

POST_PROCESS_PATH = "wmrl_client.integrations.slime_advantage.post_process_rewards"
"""What ``--custom-reward-post-process-path`` must name for ``advantages`` to trust ``rewards``."""


def _row(sample: Any) -> dict[str, Any]:
    md = getattr(sample, "metadata", None)
    row = md.get(ROW_KEY) if isinstance(md, dict) else None
    if not isinstance(row, dict) or "advantage" not in row:
        raise RuntimeError(
            f"slime sample {getattr(sample, 'index', '?')}: no wmrl row in sample.metadata[{ROW_KEY!r}]; "
            "post_process_rewards needs --group-rm --custom-rm-path wmrl_client.integrations.slime.group_rm, "
            "which scores the sample and leaves its row there"
        )
    return row


def post_process_rewards(args: Any, samples: Sequence[Any]) -> tuple[list[float], list[float]]:
    """slime's ``--custom-reward-post-process-path``: (corrected rewards, wmrl's fused advantages)."""
    raw = [float(s.get_reward_value(args)) if hasattr(s, "get_reward_value") else float(s.reward) for s in samples]
    return raw, [float(_row(s)["advantage"]) for s in samples]


def advantages(args: Any, rollout_data: dict[str, Any]) -> None:
    """slime's ``--custom-advantage-function-path``: wmrl's advantage on each response token."""
    if getattr(args, "custom_reward_post_process_path", None) != POST_PROCESS_PATH:
        raise RuntimeError(
            "wmrl slime advantages: rollout_data['rewards'] holds wmrl's advantages only with "
            f"--custom-reward-post-process-path {POST_PROCESS_PATH} (got "
            f"{getattr(args, 'custom_reward_post_process_path', None)!r})"
        )
    if getattr(args, "normalize_advantages", False):
        raise RuntimeError(
            "wmrl slime advantages: drop --normalize-advantages; slime whitens the advantages across the "
            "batch after this function, which would undo wmrl's group normalisation and IVD weights"
        )
    import torch

    rewards = rollout_data["rewards"]
    kl = rollout_data["kl"]
    if len(rewards) != len(kl):
        raise RuntimeError(f"wmrl slime advantages: {len(rewards)} rewards but {len(kl)} KL tensors in rollout_data")
    adv = [torch.full_like(k, float(r), dtype=torch.float32) for r, k in zip(rewards, kl, strict=True)]
    rollout_data["advantages"] = adv
    rollout_data["returns"] = list(adv)  # its own list: --use-opd reassigns the advantages' items
