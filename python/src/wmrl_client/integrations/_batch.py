"""The part every adapter shares: a flat batch of samples → groups → one wmrl step."""

from __future__ import annotations

import json
import threading
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from .. import contract as c
from ..errors import FieldError
from ..ids import check_text
from ..reward import Group, RewardClient, StepResult


def group_indices(keys: Sequence[Hashable], group_size: int | None = None) -> list[list[int]]:
    """The batch positions of each group: samples with equal keys (the prompt) form a group,
    groups in order of first appearance, positions in batch order (a framework may reorder a
    batch, e.g. verl's sequence-length balancing, so equal keys need not be adjacent).

    With ``group_size`` every key's sample count must be a multiple of it, and its samples are
    cut into groups of that size in batch order (a batch may hold a prompt twice). Raises
    ValueError naming the key otherwise, e.g. when a framework split a group across ranks.
    """
    if group_size is not None and group_size < 1:
        raise ValueError(f"group_size {group_size}: want at least 1")
    by: dict[Hashable, list[int]] = {}
    for i, k in enumerate(keys):
        by.setdefault(k, []).append(i)
    if group_size is None:
        return list(by.values())
    out: list[list[int]] = []
    for k, idx in by.items():
        if len(idx) % group_size:
            raise ValueError(
                f"{len(idx)} samples share the prompt {str(k)[:80]!r} (positions {idx[:8]}), not a multiple of "
                f"group_size {group_size}: each call must hold whole groups"
            )
        out.extend(idx[a : a + group_size] for a in range(0, len(idx), group_size))
    return out


def fill_masked(res: StepResult) -> np.ndarray:
    """``used`` with each row that has no graded reward replaced by its group's mean over graded rows.

    For frameworks that recompute group-relative advantages from the returned rewards: a row
    without a graded reward then adds nothing to its group's centred advantage (wmrl gives it
    advantage 0 and mask False), where a 0 would push the group's mean down.
    """
    used = np.array(res.used, dtype=np.float64)
    ok = np.asarray(res.graded, dtype=bool)
    for idx in res.group_indices():
        ix = np.asarray(idx)
        graded = ok[ix]
        used[ix[~graded]] = float(used[ix[graded]].mean()) if graded.any() else 0.0
    return used


def text_of(x: Any) -> str:
    """A completion or prompt as text: a string as it is, a chat message list as its last
    message's content (TRL's conversational format), anything else as JSON."""
    if isinstance(x, str):
        return x
    if isinstance(x, list) and x and isinstance(x[-1], dict) and "content" in x[-1]:
        content = x[-1]["content"]
        return content if isinstance(content, str) else json.dumps(content, sort_keys=True)
    return json.dumps(x, sort_keys=True, default=str)


def task_meta(fields: Mapping[str, Any], *, what: str = "task context") -> dict[str, str]:
    """A rollout's ``meta`` from a framework's task fields (a dataset row's columns, verl's
    ``ground_truth``/``data_source``/``extra_info``, OpenRLHF's label): the world model's prompt
    template sees them as ``.Meta`` and the sandbox's grade step as ``{meta.KEY}`` and in
    ``{dir}/rollout.json`` (private: the run step sees only keys named by ``--input-meta``).

    Strings stay as they are; numbers and booleans become their JSON text; None is left out.
    Lists and dicts are not scalars and raise (name the scalar fields you need instead). The
    contract's bounds are checked here, per sample, so one oversized field fails its own sample
    with a FieldError naming it, not the step it would have been published in:
    at most 64 entries, keys of 1–256 bytes, values up to 4096 bytes (a code task's tests larger
    than that travel by name, e.g. a path or test id the sandbox job resolves).
    """
    out: dict[str, str] = {}
    for k, v in fields.items():
        if v is None:
            continue
        if isinstance(v, bool):
            text = "true" if v else "false"
        elif isinstance(v, str):
            text = v
        elif isinstance(v, int | float) or type(v).__module__ == "numpy" and np.ndim(v) == 0:
            text = json.dumps(v.item() if hasattr(v, "item") else v)
        else:
            why = f"{what} field {k!r} is a {type(v).__name__}, not a scalar (str, number, bool)"
            raise FieldError("rollout", f"meta.{k}", None, why)
        if not k:
            raise FieldError("rollout", "meta", None, f"{what}: empty key")
        msg = check_text(k, c.MAX_LABEL_LEN, False) or check_text(text, c.MAX_REASON_LEN, True)
        if msg:
            raise FieldError("rollout", f"meta.{k[:64]}", None, f"{what} field: {msg}")
        out[k] = text
    if len(out) > c.MAX_META_ENTRIES:
        raise FieldError("rollout", "meta", len(out), f"{what}: more than {c.MAX_META_ENTRIES} entries")
    return out


def key_of(x: Any) -> Hashable:
    if isinstance(x, str | int | float | type(None)):
        return x
    return json.dumps(x, sort_keys=True, default=str)


class BatchScorer:
    """Scores flat batches as consecutive wmrl steps of one run.

    ``start_step`` is the first step's number: wmrl steps of a run are consecutive from 0, so a
    trainer resumed from a checkpoint passes the step it stopped at (``next_step``, persisted with
    the checkpoint). Calls are serialized: a step is published and awaited before the next.
    """

    def __init__(self, client: RewardClient, *, group_size: int | None = None, start_step: int = 0,
                 timeout: float | None = 600.0) -> None:  # fmt: skip
        self.client = client
        self.group_size = group_size
        self.next_step = start_step
        self.timeout = timeout
        self.last: StepResult | None = None
        self._lock = threading.Lock()

    def score(self, completions: Sequence[Any], group_keys: Sequence[Any], prompts: Sequence[Any] | None = None,
              meta: Sequence[dict[str, str]] | None = None) -> StepResult:  # fmt: skip
        """Publish the batch as one step (a group per run of equal ``group_keys``) and await it.
        Rows come back in batch order."""
        if len(group_keys) != len(completions):
            raise ValueError(f"{len(completions)} completions but {len(group_keys)} group keys")
        spans = group_indices([key_of(k) for k in group_keys], self.group_size)
        groups = [
            Group(
                completions=[text_of(completions[i]) for i in idx],
                prompt=text_of(prompts[idx[0]]) if prompts is not None else "",
                meta=dict(meta[idx[0]]) if meta is not None else {},
            )
            for idx in spans
        ]
        # Batch position -> (group j, index i): the rows come back in batch order.
        where = [(0, 0)] * len(completions)
        for j, idx in enumerate(spans):
            for i, pos in enumerate(idx):
                where[pos] = (j, i)
        with self._lock:
            step = self.next_step
            manifest = self.client.publish(step, groups)
            gids = [manifest.groups[j].group_id for j, _ in where]
            res = self.client.wait(
                step, timeout=self.timeout, order=([f"{gids[p]}-r{i}" for p, (_, i) in enumerate(where)], gids)
            )
            self.next_step = step + 1
            self.last = res
        return res
