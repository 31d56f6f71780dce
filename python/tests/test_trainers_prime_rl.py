"""prime-rl's algorithm seam (``score_group``) replayed against the real stages (`make test-trainers`).

prime-rl is not on the package registry reachable here (it installs from its repository, with
verifiers from git), so tests/replay/prime_rl holds its orchestrator's algorithm contract as of
commit 559b44772e471d1538537b8805cc77f3824a5e64, replayed: ``ALGORITHM_CLASSES`` and
``build_algorithm``, ``Algorithm.finalize_group`` → ``score_group``, ``iter_trainable_traces``,
``assign_advantages``, and its mean-only GRPO. The episodes mirror verifiers' shapes as prime-rl's
own tests build them (tests/unit/orchestrator/test_advantage.py): one trace per episode, a user
prompt node (mask False) and an assistant node of sampled tokens (mask True).

``register()`` puts ``WmrlAlgorithm`` under ``grpo``; the orchestrator's ``build_algorithm`` builds
it; per step, two cohorts finish concurrently and are scored with ``finalize_group`` (two steps: the
second's anchor rows carry IVD weights fitted on the first's anchor pairs). Every sampled token
must carry wmrl's ``advantage × weight`` of its own rollout, prompt tokens nothing, an errored
trace nothing (and it is not sent to wmrl); anchors carry the sandbox's grade.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import HERE
from test_reward_e2e import Stages
from trainerkit import grade, judge, mixed_run, start_stages

from wmrl_client import AdvantageStream, RewardClient, is_anchor
from wmrl_client.integrations._grouper import Grouper

pytestmark = [pytest.mark.trainers, pytest.mark.e2e]

PRIME_RL_COMMIT = "559b44772e471d1538537b8805cc77f3824a5e64"
N, PROMPTS, ANCHOR, STEPS = 4, 2, 0.5, 2
judge_url = pytest.fixture(judge)


@pytest.fixture(scope="module")
def prime() -> Any:
    """The replayed prime_rl package on sys.path, and wmrl's algorithm module imported against it."""
    sys.path.insert(0, str(HERE / "replay"))
    try:
        import prime_rl.orchestrator.algo as algo

        from wmrl_client.integrations import prime_rl as wmrl_prime

        yield algo, wmrl_prime
    finally:
        sys.path.remove(str(HERE / "replay"))


@dataclass
class Message:
    content: str


@dataclass
class Node:
    message: Message
    token_ids: list[int]
    mask: list[bool]
    sampled: bool
    advantages: list[float] | None = None


@dataclass
class TaskData:
    idx: int
    prompt: str | None = None
    answer: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def model_dump(self) -> dict[str, Any]:
        return {"idx": self.idx, "prompt": self.prompt, "answer": self.answer, "info": self.info}


@dataclass
class Trace:
    id: str
    nodes: list[Node]
    reward: float
    task: Any
    has_error: bool = False
    agent: Any = field(default_factory=lambda: type("Agent", (), {"trainable": True})())


@dataclass
class Episode:
    traces: list[Trace]


@dataclass
class AlgoConfig:
    type: str = "grpo"
    action_loss_type: str = "rl"


def episode(j: int, i: int, v: int = 0, *, error: bool = False) -> Episode:
    prompt, answer = f"what is {j} + {j + 3}?", f"it is {'7' * (i + v + 1)} ({i}{j}{v})"
    task = type("Task", (), {"data": TaskData(idx=j, answer=str(2 * j + 3))})()
    nodes = [Node(Message(prompt), [1, 2], [False, False], False),
             Node(Message(answer), list(range(3 + i)), [True] * (3 + i), True)]  # fmt: skip
    return Episode([Trace(f"t{v}-{j}-{i}", nodes, reward=0.0, task=task, has_error=error)])


def two_step_run(prefix: str) -> str:
    """A run mixing anchor and world-model groups with an anchor group in every step: step 1's anchor
    rows carry the IVD weight fitted on step 0's anchor pairs, which differs from 1."""
    while True:
        run = mixed_run(prefix, [f"s{v}-g{j}" for v in range(STEPS) for j in range(PROMPTS)], ANCHOR)
        if all(any(is_anchor(run, f"s{v}-g{j}", ANCHOR) for j in range(PROMPTS)) for v in range(STEPS)):
            return run


def test_prime_rl_algorithm_through_the_real_stages(
    prime: Any, kafka: str, redis_url: str, wmrl_cli: Path, prefix: str, judge_url: str, tmp_path: Path
) -> None:
    algo, wmrl_prime = prime
    run = two_step_run("prime")
    st = Stages(wmrl_cli, kafka, redis_url, prefix)
    st.run("topics", "create", "--partitions", "1")
    # Per step and cohort: N trainable episodes and one errored one, which prime-rl does not train on.
    rounds = [[[episode(j, i, v) for i in range(N)] + [episode(j, N, v, error=True)] for j in range(PROMPTS)]
              for v in range(STEPS)]  # fmt: skip
    saved = dict(algo.ALGORITHM_CLASSES)
    seen: list[dict[str, Any]] = []
    took: list[float] = []
    try:
        start_stages(st, judge_url, "answer", tmp_path)
        with RewardClient(kafka, run, f"{st.unique}-prime", anchor_fraction=ANCHOR, topic_prefix=prefix) as client:
            grouper = Grouper(client, group_size=N, groups_per_step=PROMPTS, timeout=90)
            wmrl_prime.configure(grouper)
            wmrl_prime.register()
            try:
                a = algo.build_algorithm(AlgoConfig(), policy_pool=None)
                assert isinstance(a, wmrl_prime.WmrlAlgorithm)
                for cohorts in rounds:

                    async def finish(cohorts: list[list[Episode]] = cohorts) -> None:
                        await asyncio.gather(*(a.finalize_group(c) for c in cohorts))

                    t0 = time.perf_counter()
                    asyncio.run(finish())
                    took.append(time.perf_counter() - t0)
                    seen.append(dict(a.rows))
            finally:
                wmrl_prime.configure(None)
                grouper.close()
        rows = {}
        with AdvantageStream(kafka, run, f"check-{uuid.uuid4().hex[:6]}", topic_prefix=prefix) as s:
            for v in range(STEPS):
                step = s.next_step(timeout=30)
                assert step is not None and step.step == v
                rows.update({r.rollout_id: r for r in step.rows()})
        st.check_alive()
    finally:
        algo.ALGORITHM_CLASSES.clear()
        algo.ALGORITHM_CLASSES.update(saved)
        codes = st.stop()
    assert all(code == 0 for _, code in codes), codes
    grpo = algo.ALGORITHM_CLASSES["grpo"](AlgoConfig(), None)
    plain = [[episode(j, i, 9) for i in range(N)] for j in range(PROMPTS)]

    async def finish_plain() -> None:
        await asyncio.gather(*(grpo.finalize_group(c) for c in plain))

    t0 = time.perf_counter()
    asyncio.run(finish_plain())
    plain_took = time.perf_counter() - t0
    print(f"prime-rl: wmrl steps of {PROMPTS}x{N} through WmrlAlgorithm.score_group: "
          + ", ".join(f"{t:.3f}s" for t in took) + f"; prime-rl's own GRPO: {plain_took * 1e3:.2f} ms")  # fmt: skip

    assert len(rows) == STEPS * PROMPTS * N  # the errored traces were not sent
    anchors, weighted = 0, 0
    for cohorts, by_trace in zip(rounds, seen, strict=True):
        assert len(by_trace) == PROMPTS * N
        for c in cohorts:
            (bad,) = c[N].traces
            assert all(n.advantages is None for n in bad.nodes), "an errored trace got credit"
            groups = set()
            for e in c[:N]:
                (tr,) = e.traces
                prompt_node, answer_node = tr.nodes
                row = rows[by_trace[tr.id].rollout_id]
                groups.add(row.group_id)
                assert prompt_node.advantages is None
                want = [row.advantage * row.weight] * len(answer_node.token_ids)
                assert answer_node.advantages == pytest.approx(want, abs=1e-12)
                assert row.mask
                if row.source == "anchor":
                    anchors += 1
                    assert row.used == pytest.approx(grade(answer_node.message.content, int(tr.task.data.answer)),
                                                     abs=1e-12)  # fmt: skip
                    assert row.weight >= 1
                else:
                    assert row.weight == 1
                if row.weight != 1.0 and row.advantage != 0.0:
                    weighted += 1
            assert len(groups) == 1, "a cohort's traces must form one wmrl group"
    assert 0 < anchors < len(rows)
    assert weighted > 0, "no row where the IVD weight changes the credit"
    # credit="centred": prime-rl's mean-only GRPO credit on wmrl's rewards, weighted.
    group = [seen[-1][e.traces[0].id] for e in rounds[-1][0][:N]]
    cen = wmrl_prime.credit(group, "centred")
    mean = sum(r.reward for r in group) / len(group)
    assert cen == pytest.approx([(r.reward - mean) * r.weight for r in group])
    assert sum(c / r.weight for c, r in zip(cen, group, strict=True)) == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError, match="credit 'std'"):
        wmrl_prime.credit(group, "std")


def test_prime_rl_anchor_meta_and_text(prime: Any) -> None:
    _, wmrl_prime = prime
    (tr,) = episode(1, 2).traces
    assert wmrl_prime.completion_of(tr) == "it is 777 (210)"
    assert wmrl_prime.prompt_of(tr) == "what is 1 + 4?"
    assert wmrl_prime.meta_of(tr) == {"idx": "1", "answer": "5"}  # None and the dict are left out
