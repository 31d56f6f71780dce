"""Every code block of python/README.md, and of README.md's trainer section, run as written.

The blocks are read from the markdown at test time, never retyped here. A block runs with the
fewest edits that point it at this test's broker, topics and run (``edit``: each edit must match
the block's text, so a changed README fails here until its runner follows), with small stand-ins
for the names a recipe leaves to the reader (``policy``, ``opt``, ``sample``, ``model``, ``ds``,
...). Every block must have a runner: a new block without one fails ``test_every_block_has_a_runner``.

What each runner does, when a block cannot run as a whole on this machine:
* the AsyncGRPOTrainer recipe: everything up to the trainer runs as written; the trainer itself
  needs vLLM, so its reward functions go through TRL's own spawned scoring process instead
  (test_trainers_trl_async's replay);
* the tests block: each command is checked where it runs (cd tracked), the benchmarks are run
  (short), make's database proves the make target exists in that directory, and pytest/pip are
  dry-run (this suite is what they would run);
* slime's flags: slime needs Megatron and GPUs, so every ``--custom-*-path`` the block names is
  resolved to the callable slime would load (test_trainers_slime replays the calls);
* prime-rl's block: run as written against the replayed prime_rl package (tests/replay, what
  test_trainers_prime_rl runs the seam against), and the registration checked;
* the ORS block: the command runs, and every flag of its example line is one the server takes.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import PY_ROOT, REPO
from test_reward_e2e import Stages
from trainerkit import Judge, Server, tiny_model

from wmrl_client import AdvantageStream

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.trainers, pytest.mark.e2e]

TRAINER_SECTION = "## Use from a PyTorch trainer"  # README.md's trainer part


@dataclass
class Block:
    file: str  # "python/README.md" or "README.md"
    heading: str
    lang: str
    index: int  # among the blocks of its language under the same heading
    code: str

    @property
    def key(self) -> str:
        return f"{self.file} | {self.heading} | {self.lang} #{self.index}"


def blocks_of(path: Path, rel: str, only: str | None = None) -> list[Block]:
    """The fenced code blocks of a markdown file (under the ``only`` heading and its subsections)."""
    out: list[Block] = []
    heading, level, keep, lang, buf = "", 0, only is None, None, []
    count: dict[tuple[str, str], int] = {}
    for line in path.read_text().splitlines():
        if lang is None:
            m = re.match(r"^(#+) (.*)$", line)
            if m:
                heading = line
                if only is not None:
                    if line == only:
                        keep, level = True, len(m.group(1))
                    elif keep and len(m.group(1)) <= level:
                        keep = False
                continue
            if line.startswith("```"):
                lang, buf = line[3:].strip() or "text", []
            continue
        if line.startswith("```"):
            if keep:
                i = count.get((heading, lang), 0)
                count[heading, lang] = i + 1
                out.append(Block(rel, heading, lang, i, "\n".join(buf) + "\n"))
            lang = None
            continue
        buf.append(line)
    return out


BLOCKS = blocks_of(PY_ROOT / "README.md", "python/README.md") + blocks_of(REPO / "README.md", "README.md",
                                                                           TRAINER_SECTION)  # fmt: skip


def edit(code: str, *pairs: tuple[str, str]) -> str:
    """The block with each (old, new) replaced; old must be in it."""
    for old, new in pairs:
        assert old in code, f"the README block no longer contains {old!r}: update its runner"
        code = code.replace(old, new)
    return code


# ---- the pipeline the blocks run against: one set of stages for the module


@dataclass
class Pipe:
    kafka: str
    prefix: str
    cli: Path
    redis: str
    tmp: Path
    model: Path

    def uid(self, what: str) -> str:
        return f"{what}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def pipe(kafka: str, redis_url: str, wmrl_cli: Path, gohelper: Callable[..., Any],
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipe]:  # fmt: skip
    tmp = tmp_path_factory.mktemp("recipes")
    prefix = f"pytest-{uuid.uuid4().hex[:10]}."
    judge = Server(("127.0.0.1", 0), Judge)
    threading.Thread(target=judge.serve_forever, daemon=True).start()
    st = Stages(wmrl_cli, kafka, redis_url, prefix)
    st.run("topics", "create", "--partitions", "1")
    try:
        # The recipes' tasks carry different meta keys (answer, label, ground_truth): anchors grade 0.5.
        st.start("worldmodel", "worldmodel", "--base-url", f"http://127.0.0.1:{judge.server_address[1]}/v1",
                 "--model", "m", log_dir=tmp)  # fmt: skip
        st.start("sandbox", "sandbox", "--argv", json.dumps(["/bin/cat", "{artifact}"]), "--grade-argv",
                 json.dumps(["/bin/sh", "-c", "printf '{\"score\": 0.5}\\n'"]), "--timeout", "30s", log_dir=tmp)  # fmt: skip
        st.start("correct", "correct", "--transactional-id", f"{st.unique}-txn", "--redis-prefix", st.unique,
                 "--min-pairs", "5000", log_dir=tmp)  # fmt: skip
        yield Pipe(kafka, prefix, wmrl_cli, redis_url, tmp, tiny_model(tmp / "tiny"))
        st.check_alive()
    finally:
        codes = st.stop()
        judge.shutdown()
        judge.server_close()
        gohelper("delete-topics", "--brokers", kafka, "--prefix", prefix)
    assert all(code == 0 for _, code in codes), codes


def run_python(code: str, ns: dict[str, Any], name: str) -> dict[str, Any]:
    exec(compile(code, name, "exec"), ns)  # noqa: S102 (the README's own code)
    return ns


def publish_steps(p: Pipe, run: str, steps: int = 1) -> None:
    """Steps of a run on the pipeline (for the blocks that read advantages)."""
    from wmrl_client import Group, RewardClient

    with RewardClient(p.kafka, run, p.uid("pub"), topic_prefix=p.prefix, anchor_fraction=0.0) as wm:
        for s in range(steps):
            wm.score(s, [Group(completions=[f"a{s}{i}" for i in range(4)], prompt="p")], timeout=60)


class Policy:
    """The stand-in policy of the loss recipes: log-probabilities that carry a gradient."""

    def __init__(self) -> None:
        self.theta = torch.zeros(1, requires_grad=True)
        self.steps = 0

    def logprobs(self, x: Any) -> Any:
        self.steps += 1
        return self.theta * torch.ones(len(x))


# ---- runners, one per block


def r_pip_install(b: Block, p: Pipe) -> None:
    (cmd,) = [ln.split("#")[0].split() for ln in b.code.splitlines() if ln.strip()]
    assert cmd[:2] == ["pip", "install"]
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--quiet", *cmd[2:]],
                         cwd=REPO, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    extras = re.findall(r"\./python\[(\w+)\]", b.code)
    pyproject = (PY_ROOT / "pyproject.toml").read_text()
    assert all(re.search(rf"^{e} = \[", pyproject, re.M) for e in extras), extras


def r_stream_sasl(b: Block, p: Pipe) -> None:
    run, group = p.uid("rs"), p.uid("g")
    publish_steps(p, run, 2)
    code = edit(b.code, ('"kafka-1:9092,kafka-2:9092"', repr(p.kafka)), ('"run-0042"', repr(run)),
                ('"trainer-0042"', repr(group)),
                ('sasl_mechanism="SCRAM-SHA-512", sasl_user="wmrl", sasl_password=os.environ["WMRL_SASL_PASSWORD"],',
                 f"topic_prefix={p.prefix!r}, idle_timeout=5,"),  # no SASL/TLS listener here
                ('tls_ca="/etc/wmrl/ca.pem",', ""), ('device="cuda"', 'device="cpu"'))  # fmt: skip
    pol = Policy()
    opt = torch.optim.SGD([pol.theta], lr=0.1)
    run_python(code, {"policy": pol, "rollouts_by_id": lambda ids: list(ids), "opt": opt}, b.key)
    assert pol.steps == 2


def r_demo(b: Block, p: Pipe) -> None:
    lines = [ln for ln in b.code.replace("\\\n", " ").splitlines() if ln.strip() and not ln.startswith("#")]
    demo, loop = (shlex.split(ln) for ln in lines)
    prefix = f"{p.prefix}demo."
    demo = edit(" ".join(demo), ("wmrl --brokers 127.0.0.1:9092 --redis redis://127.0.0.1:6379/0",
                                 f"wmrl --brokers {p.kafka} --redis {p.redis} --topic-prefix {prefix}")).split()
    out = subprocess.run([str(p.cli), *demo[1:]], cwd=p.tmp, capture_output=True, text=True, timeout=600)  # its report
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    m = re.search(r"run id (\S+); the wmrl arm's topic prefix is (\S+) \(advantages", out.stdout)
    assert m, out.stdout[-2000:]
    loop_cmd = edit(" ".join(loop), ("--bootstrap 127.0.0.1:9092", f"--bootstrap {p.kafka}"),
                    ("--run sim-1", f"--run {m.group(1)}"),
                    ("--topic-prefix wmrl.demo.1764840000.wmrl.", f"--topic-prefix {m.group(2)}"),
                    ("--group trainer-1", f"--group {p.uid('demo')} --idle-timeout 5")).split()  # fmt: skip
    assert loop_cmd[0] == "python"
    res = subprocess.run([sys.executable, *loop_cmd[1:]], cwd=PY_ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(PY_ROOT / "src")})  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "step" in res.stdout, res.stdout[-2000:]


def _reward_client_edits(b: Block, p: Pipe, run: str) -> str:
    return edit(b.code, ('"kafka:9092"', repr(p.kafka)), ('run_id="run-0042"', f"run_id={run!r}"),
                ('group_id="trainer-0042"', f"group_id={p.uid('rc')!r}, topic_prefix={p.prefix!r}"))  # fmt: skip


_shared: dict[str, Any] = {}  # the namespace the "Several ranks" block continues from


def r_reward_client(b: Block, p: Pipe) -> None:
    run = p.uid("rc")
    code = _reward_client_edits(b, p, run)
    losses: list[float] = []
    ns = {"num_steps": 2, "sample": lambda prompt, n: [f"{prompt} answer {i}" for i in range(n)],
          "batch": lambda step: [f"q{step}-{j}" for j in range(2)],
          "policy_loss": lambda a, w, m: losses.append(float((a * w * m).sum()))}  # fmt: skip
    ns = run_python(code, ns, b.key)
    assert len(losses) == 2 and ns["res"].step == 1 and len(ns["res"]) == 16
    _shared.update(ns, run=run)


def r_ranks(b: Block, p: Pipe) -> None:
    import torch.distributed as dist

    from wmrl_client import RewardClient

    assert "Group" in _shared, "runs after the RewardClient block, in its namespace (it uses its import)"
    port = 20000 + os.getpid() % 20000
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        with RewardClient(p.kafka, _shared["run"] + "-r", p.uid("rk"), topic_prefix=p.prefix) as wm:
            ns = dict(_shared, wm=wm, step=0, local_groups=[("p0", ["x", "y", "z", "w"]), ("p1", ["a", "b", "c", "d"])])
            ns = run_python(b.code, ns, b.key)
    finally:
        dist.destroy_process_group()
    assert len(ns["advantage"]) == 8 and len(ns["mask"]) == 8


def r_trl(b: Block, p: Pipe) -> None:
    import datasets

    code = edit(b.code, ('"kafka:9092"', repr(p.kafka)), ('run_id="run-0042"', f"run_id={p.uid('trl')!r}"),
                ('group_id="trl-0042"', f"group_id={p.uid('trl')!r}, topic_prefix={p.prefix!r}"),
                ("GRPOConfig(num_generations=8, ...)",
                 f"GRPOConfig(num_generations=8, output_dir={str(p.tmp / 'trl')!r}, per_device_train_batch_size=8, "
                 "max_completion_length=8, max_steps=2, use_cpu=True, report_to='none', save_strategy='no')"))  # fmt: skip
    ds = datasets.Dataset.from_dict({"prompt": [f"task {k}" for k in range(4)], "answer": [str(k) for k in range(4)]})
    ns = run_python(code, {"model": str(p.model), "ds": ds}, b.key)
    assert ns["trainer"].state.global_step == 2 and ns["reward"].last is not None
    ns["wm"].close()


def r_trl_async(b: Block, p: Pipe, monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets
    from test_trainers_trl_async import replay

    import trl.experimental.async_grpo as tag

    seen: dict[str, Any] = {}

    def trainer_without_vllm(**kw: Any) -> Any:
        """AsyncGRPOTrainer needs vLLM: its reward functions go through TRL's spawned scoring process."""
        assert isinstance(kw["args"], tag.AsyncGRPOConfig) and kw["args"].num_generations == 8
        rows = kw["train_dataset"]
        seen["samples"] = replay(kw["reward_funcs"][0], p.model, monkeypatch, rows, g=8)
        return type("T", (), {"train": lambda self: None})()

    code = edit(b.code, ('"run-0042", "trl-0042"', f"{p.uid('trla')!r}, {p.uid('trla')!r}"),
                ('brokers="kafka:9092"', f"brokers={p.kafka!r}, topic_prefix={p.prefix!r}"),
                ("AsyncGRPOTrainer(model=model,", "trainer_without_vllm(model=model,"),
                ("AsyncGRPOConfig(num_generations=8, ...)",
                 f"AsyncGRPOConfig(num_generations=8, output_dir={str(p.tmp / 'trla')!r}, use_cpu=True, "
                 "report_to='none')"))  # fmt: skip
    ds = datasets.Dataset.from_dict({"prompt": ["task 1"], "answer": ["3"],
                                     "completion": [[f"it is {i}" for i in range(8)]]})  # fmt: skip
    run_python(code, {"model": "unused: replayed", "ds": ds, "trainer_without_vllm": trainer_without_vllm}, b.key)
    assert len(seen["samples"]) == 8 and all(s.metrics["wmrl/step"] == 0.0 for s in seen["samples"])


def _verl_run(p: Pipe, overrides: list[str], prompts: int) -> list[dict[str, Any]]:
    from omegaconf import OmegaConf
    from test_trainers_verl import batch, run_reward_loop, verl_config
    from transformers import AutoTokenizer

    cfg = verl_config(p.model, {})
    cfg.actor_rollout_ref.rollout.n = 8
    cfg.data.train_batch_size = prompts
    OmegaConf.set_struct(cfg, False)
    cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist([o.lstrip("+") for o in overrides]))
    tok = AutoTokenizer.from_pretrained(p.model)
    import test_trainers_verl as tv

    old, tv.N = tv.N, 8
    try:
        data, _ = batch(tok, 5, prompts)
    finally:
        tv.N = old
    out, _ = run_reward_loop(cfg, data)
    return out


def _overrides(code: str) -> list[str]:
    return [t for t in shlex.split(code.replace("\\\n", " "), comments=True) if "=" in t]


def r_verl_fn(b: Block, p: Pipe) -> None:
    code = edit(b.code, ("brokers=kafka:9092", f"brokers={p.kafka}"), ("run_id=run-0042", f"run_id={p.uid('vf')}"),
                ("group_id=verl-0042", f"group_id={p.uid('vf')}"),
                ("groups_per_step=64", "groups_per_step=2"))  # fmt: skip
    out = _verl_run(p, [*_overrides(code), f"+reward.custom_reward_function.reward_kwargs.topic_prefix={p.prefix}",
                        "+reward.custom_reward_function.reward_kwargs.timeout=90"], 2)  # fmt: skip
    assert len(out) == 16 and {o["reward_extra_info"]["wmrl_step"] for o in out} == {0.0}


def r_verl_mgr(b: Block, p: Pipe, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "WMRL_BROKERS, WMRL_RUN, WMRL_TRAINER_GROUP" in b.code
    for k, v in {"WMRL_BROKERS": p.kafka, "WMRL_RUN": p.uid("vm"), "WMRL_TRAINER_GROUP": p.uid("vm"),
                 "WMRL_TOPIC_PREFIX": p.prefix}.items():  # fmt: skip
        monkeypatch.setenv(k, v)
    from wmrl_client.integrations import verl_manager

    try:
        out = _verl_run(p, _overrides(b.code), 2)
    finally:  # the manager's grouper is process-wide: later tests of this process configure their own
        if verl_manager._grouper is not None:
            verl_manager._grouper.close()
            verl_manager._grouper.client.close()
            verl_manager._grouper = None
    assert len(out) == 16 and {o["reward_extra_info"]["wmrl_step"] for o in out} == {0.0}


def r_openrlhf(b: Block, p: Pipe) -> None:
    cmd_line, url_line = (ln for ln in b.code.replace("\\\n", " ").splitlines() if ln.strip())
    token = p.tmp / "rm-token"
    token.write_text("t0ken\n")
    with socket_port() as port:
        cmd = edit(cmd_line, ("--brokers kafka:9092", f"--brokers {p.kafka} --topic-prefix {p.prefix}"),
                   ("--run run-0042", f"--run {p.uid('orl')}"), ("--group orl-0042", f"--group {p.uid('orl')}"),
                   ("--groups-per-step 64", "--groups-per-step 2"), ("--port 5000", f"--port {port}"),
                   ("--token-file /etc/wmrl/rm-token", f"--token-file {token}"))  # fmt: skip
        args = shlex.split(cmd)
        assert args[:3] == ["python", "-m", "wmrl_client.integrations.openrlhf"]
        # SIGINT back to its default in the child, as an operator's terminal has it: a test run
        # started in the background of a non-interactive shell ignores SIGINT, children inherit
        # that, and Python then installs no KeyboardInterrupt handler (the server never stops).
        srv = subprocess.Popen([sys.executable, *args[1:]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env={**os.environ, "PYTHONPATH": str(PY_ROOT / "src")},
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
        try:
            m = re.search(r"--remote_rm_url '([^']+)'", url_line)
            assert m, url_line
            url = m.group(1).replace("<host>", "127.0.0.1").replace(":5000", f":{port}").replace("<token>", "t0ken")
            _wait_listening(port, srv)
            items = [(f"<q{j}>", f" answer {i}{j}<|im_end|>") for i in range(8) for j in range(2)]
            with ThreadPoolExecutor(16) as ex:
                outs = list(ex.map(lambda it: _post(url, it[0], it[1]), items))
        finally:
            # The server's own shutdown budget: 1 s for open requests, 5 s for the Grouper's thread,
            # up to 30 s for the producer's flush, then the consumer leaves its group; 30 s here was
            # below it (CI under load ran out once, stop 43).
            srv.send_signal(signal.SIGINT)
            try:
                log = srv.communicate(timeout=60)[0].decode(errors="replace")
            except subprocess.TimeoutExpired:
                srv.kill()
                log = srv.communicate()[0].decode(errors="replace")
                pytest.fail(f"the OpenRLHF server did not exit within 60 s of SIGINT:\n{log[-3000:]}")
    assert all(o["extra_logs"]["wmrl_failed"] == [0.0] for o in outs), log[-3000:]
    assert {o["extra_logs"]["wmrl_step"][0] for o in outs} == {0.0}


def r_step_dataset(b: Block, p: Pipe) -> None:
    run = p.uid("sd")
    publish_steps(p, run, 2)
    code = edit(b.code, ('AdvantageStream("kafka:9092", "run-0042", "trainer-0042")',
                         f"AdvantageStream({p.kafka!r}, {run!r}, {p.uid('sd')!r}, topic_prefix={p.prefix!r}, "
                         "idle_timeout=5)"))  # fmt: skip
    pol = Policy()
    run_python(code, {"logprobs": lambda ids: pol.logprobs(ids)}, b.key)
    assert pol.steps == 2


def r_publish(b: Block, p: Pipe) -> None:
    run = p.uid("pr")
    code = edit(b.code, ('RolloutProducer("127.0.0.1:9092")', f"RolloutProducer({p.kafka!r}, topic_prefix={p.prefix!r})"),
                ('generate("run-0042", 7, sampled_groups)', f"generate({run!r}, 7, sampled_groups)"))  # fmt: skip
    run_python(code, {"sampled_groups": [("g0", ["x", "y"]), ("g1", ["z", "w"])]}, b.key)
    # Step 7 of a run without steps 0-6 is never sealed: check the records themselves reached the topics.
    from confluent_kafka import Consumer

    seen = {"rollouts.v1": 0, "steps.v1": 0}
    c = Consumer({"bootstrap.servers": p.kafka, "group.id": p.uid("pr"), "auto.offset.reset": "earliest"})
    try:
        c.subscribe([p.prefix + t for t in seen])
        deadline = time.monotonic() + 60
        while seen != {"rollouts.v1": 4, "steps.v1": 1} and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error() and run.encode() in (m.value() or b""):
                seen[m.topic()[len(p.prefix):]] += 1
    finally:
        c.close()
    assert seen == {"rollouts.v1": 4, "steps.v1": 1}, seen


def r_tests_block(b: Block, p: Pipe) -> None:
    cwd = REPO
    ran: list[str] = []
    for line in b.code.replace("\\\n", " ").splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        for part in line.split("&&"):
            args = shlex.split(part)
            env = dict(os.environ)
            while args and "=" in args[0] and not args[0].startswith(("-", ".")):
                k, v = args.pop(0).split("=", 1)
                env[k] = v
            prog = args[0]
            if prog == "cd":
                cwd = (cwd / args[1]).resolve()
                assert cwd.is_dir(), cwd
                ran.append(f"cd {cwd.name}")
            elif prog == "make":
                # Not `make -n`: make still runs a recipe line that calls $(MAKE), and test-trainers'
                # line brings the services up and down, which stopped the broker this suite runs on.
                # make's database (-p, with a goal that does not exist: nothing runs) names the targets.
                out = subprocess.run(["make", "-pRrq", "-f", "Makefile", "__wmrl_no_such_goal__"], cwd=cwd,
                                     capture_output=True, text=True, timeout=60)  # fmt: skip
                for target in (a for a in args[1:] if not a.startswith("-") and "=" not in a):
                    assert re.search(rf"^{re.escape(target)}:", out.stdout, re.M), f"no make target {target!r} in {cwd}"
                ran.append("make target")
            elif prog.startswith("python3") and args[1:3] == ["-m", "venv"]:  # the venv's place exists
                assert (cwd / args[3]).parent.is_dir()
                ran.append("venv")
            elif prog.endswith("/pip"):
                assert (cwd / prog).parent.parent.name == ".venv" and args[1] == "install"
                out = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--quiet",
                                      *args[2:]], cwd=cwd, capture_output=True, text=True, timeout=300)  # fmt: skip
                assert out.returncode == 0, out.stderr
                ran.append("pip --dry-run")
            elif prog.endswith("/python") and args[1:3] == ["-m", "pytest"]:
                assert (cwd / args[3]).is_dir()  # the suite this test belongs to
                ran.append("pytest (this suite)")
            elif prog.endswith("/python"):
                script = cwd / args[1]
                assert script.is_file(), script
                extra = {"roundtrip.py": ["--steps", "4", "--warmup", "1", "--redis", p.redis, "--wmrl", str(p.cli)],
                         "read_rows.py": ["--steps", "20"]}[script.name]  # fmt: skip
                a = [x if x != "127.0.0.1:9092" else p.kafka for x in args[2:]]
                out = subprocess.run([sys.executable, str(script), *a, *extra], cwd=cwd, capture_output=True,
                                     text=True, timeout=600, env={**env, "PYTHONPATH": str(PY_ROOT / "src")})  # fmt: skip
                assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
                ran.append(script.name + " " + " ".join(args[2:]))
            else:
                raise AssertionError(f"no check for the command {part!r}")
    assert "make target" in ran and any("--jail off" in r for r in ran), ran


def r_top_readme(b: Block, p: Pipe) -> None:
    run = p.uid("top")
    publish_steps(p, run, 2)
    code = edit(b.code, ('AdvantageStream("kafka:9092", run_id="run-0042", group_id="trainer-0042")',
                         f"AdvantageStream({p.kafka!r}, run_id={run!r}, group_id={p.uid('top')!r}, "
                         f"topic_prefix={p.prefix!r}, idle_timeout=5)"), ('device="cuda"', 'device="cpu"'))  # fmt: skip
    pol = Policy()
    opt = torch.optim.SGD([pol.theta], lr=0.1)
    run_python(code, {"logprobs": lambda step: pol.logprobs(step.to_numpy(["rollout_id"])["rollout_id"]),
                      "opt": opt}, b.key)  # fmt: skip
    assert pol.steps == 2


def r_slime_flags(b: Block, p: Pipe) -> None:
    import importlib

    paths = re.findall(r"--custom-[a-z-]+-path\s+(\S+)", b.code)
    assert len(paths) == 3, paths
    for path in paths:
        module, _, name = path.rpartition(".")
        fn = getattr(importlib.import_module(module), name)
        assert callable(fn), path


def r_prime_rl(b: Block, p: Pipe) -> None:
    replay = str(Path(__file__).parent / "replay")
    sys.path.insert(0, replay)
    try:
        import prime_rl.orchestrator.algo as algo

        saved = dict(algo.ALGORITHM_CLASSES)
        try:
            ns = run_python(b.code, {}, b.key)
            assert algo.ALGORITHM_CLASSES["grpo"] is ns["wmrl_prime"].WmrlAlgorithm
        finally:
            algo.ALGORITHM_CLASSES.clear()
            algo.ALGORITHM_CLASSES.update(saved)
    finally:
        sys.path.remove(replay)


def r_ors_help(b: Block, p: Pipe) -> None:
    lines = [ln for ln in b.code.splitlines() if ln.strip()]
    cmd = shlex.split(lines[0].split("#")[0])
    assert cmd[:3] == ["python", "-m", "wmrl_client.integrations.ors"], cmd
    out = subprocess.run([sys.executable, *cmd[1:]], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(PY_ROOT / "src")})  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    example = [ln for ln in lines if ln.lstrip().startswith("# e.g.")]
    assert example, b.code
    for flag in re.findall(r"(--[a-z][a-z-]*)", example[0]):
        assert flag in out.stdout, f"{flag} of the example is not an option of the ORS server"


RUNNERS: dict[str, Callable[..., None]] = {
    "python/README.md | # wmrl-client — the Python trainer client | sh #0": r_pip_install,
    "python/README.md | ## Use from a PyTorch trainer | python #0": r_stream_sasl,
    "python/README.md | ## Use from a PyTorch trainer | sh #0": r_demo,
    "python/README.md | ## Score a step's rollouts: `RewardClient` | python #0": r_reward_client,
    "python/README.md | ## Score a step's rollouts: `RewardClient` | python #1": r_ranks,
    "python/README.md | ### TRL 1.16 — `RewardFunc` and `WeightedGRPOTrainer` | python #0": r_trl,
    "python/README.md | ### TRL 1.16 `AsyncGRPOTrainer` — `AsyncRewardFunc` | python #0": r_trl_async,
    "python/README.md | ### verl 0.9.1 — per-sample `compute_score_async`, or `WmrlRewardManager` | sh #0": r_verl_fn,
    "python/README.md | ### verl 0.9.1 — per-sample `compute_score_async`, or `WmrlRewardManager` | sh #1": r_verl_mgr,
    "python/README.md | ### OpenRLHF 0.11 — `--remote_rm_url` server | sh #0": r_openrlhf,
    "python/README.md | ## A PyTorch `IterableDataset`: `wmrl_client.torch` | python #0": r_step_dataset,
    "python/README.md | ## Publish rollouts from Python | python #0": r_publish,
    "python/README.md | ## Tests and benchmark | sh #0": r_tests_block,
    "README.md | ## Use from a PyTorch trainer | python #0": r_top_readme,
    "python/README.md | ### slime ≥ 0.3 — wmrl's advantages after slime's normalisation | sh #0": r_slime_flags,
    "python/README.md | ### prime-rl — `WmrlAlgorithm` (`score_group`) | python #0": r_prime_rl,
    "python/README.md | ### Open Reward Standard — an ORS environment | sh #0": r_ors_help,
}


def test_every_block_has_a_runner() -> None:
    keys = [b.key for b in BLOCKS]
    assert len(keys) == len(set(keys))
    assert sorted(keys) == sorted(RUNNERS), {"no runner": sorted(set(keys) - set(RUNNERS)),
                                             "no block": sorted(set(RUNNERS) - set(keys))}  # fmt: skip


@pytest.mark.parametrize("block", BLOCKS, ids=[b.key.split(" | ", 1)[0] + ":" + re.sub(r"\W+", "-", b.key)[-40:]
                                               for b in BLOCKS])  # fmt: skip
def test_readme_block_runs_as_written(block: Block, pipe: Pipe, monkeypatch: pytest.MonkeyPatch) -> None:
    fn = RUNNERS[block.key]
    if "monkeypatch" in fn.__code__.co_varnames[: fn.__code__.co_argcount]:
        fn(block, pipe, monkeypatch)
    else:
        fn(block, pipe)


# ---- small helpers


class socket_port:  # noqa: N801 (used like a function)
    """A free loopback port (released on entry; the server binds it right after)."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        pass


def _wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    import socket

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0].decode(errors="replace")[-3000:]
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"the reward server did not listen on {port} within 60 s")


def _post(url: str, prompt: str, response: str) -> dict[str, Any]:
    body = json.dumps({"query": [prompt + response], "prompts": [prompt], "labels": ["1"]}).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]
