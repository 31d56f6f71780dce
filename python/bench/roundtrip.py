"""The trainer-visible round trip of one step, with a per-hop breakdown, on the real stages.

    python bench/roundtrip.py --brokers 127.0.0.1:9092 --redis redis://127.0.0.1:6379/0 \\
        [--steps 60 --groups 4 --group-size 4 --anchor 0.25] [--jail off] [--run-as UID:GID]

Builds ./cmd/wmrl (or takes --wmrl), starts `wmrl worldmodel` against an instant fake judge
(an in-process OpenAI-compatible server that answers the score written in the artifact),
`wmrl sandbox` (cmd/wmrl/testdata/e2e/score.sh) and `wmrl correct` on fresh topics, then plays a
trainer: `RewardClient.score` one step at a time. Per step it records, relative to the start of
`publish()` (wall clock, milliseconds):

* ``publish``   — publish() returned (rollouts and manifest acknowledged by the broker)
* ``judge``     — the fake judge answered the step's last request
* ``predicted`` — the step's last predicted-reward record was produced (its CreateTime)
* ``executed``  — the step's last executed-reward record was produced (anchor groups only)
* ``sealed``    — the step's last advantage chunk was produced inside correct's transaction
* ``committed`` — a read_committed probe consumer (its own thread, 5 ms polls) saw the step
* ``client``    — wait() returned the StepResult to the trainer

Record timestamps are the producers' CreateTime (millisecond resolution); hops overlap
(``executed`` runs beside ``judge``/``predicted``). Prints one JSON line with p50/p99 of each
hop over the timed steps (the first --warmup steps excluded), the sandbox's jail setting, and
deletes the topics. ``--jail off`` runs the sandbox without its bwrap jail (``--bwrap=false
--allow-weak-containment``), the README's no-jail row.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

from wmrl_client import Group, RewardClient
from wmrl_client import contract as c

ROOT = Path(__file__).resolve().parents[2]
SCORE_SH = ROOT / "cmd" / "wmrl" / "testdata" / "e2e" / "score.sh"
HOPS = ("publish", "judge_first", "judge", "predicted", "executed", "sealed", "committed", "client")
WM_RE = re.compile(r'"wm":\s*([0-9][0-9.]*)')
STEP_RE = re.compile(r'"rollout":\s*"(\d+)-')


class Judge(BaseHTTPRequestHandler):
    """Instant OpenAI-compatible judge; records when it answered each step's requests."""

    answered: dict[int, float] = {}
    arrived: dict[int, float] = {}
    lock = threading.Lock()

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        arrived = time.time()
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        content = body["messages"][-1]["content"]
        m = WM_RE.search(content)
        reply = json.dumps({"score": float(m.group(1))}) if m else "no score"
        choice = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply}}
        out = json.dumps({"id": "b", "object": "chat.completion", "choices": [choice]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
        s = STEP_RE.search(content)
        if s:
            with Judge.lock:
                k = int(s.group(1))
                Judge.answered[k] = max(Judge.answered.get(k, 0.0), time.time())
                Judge.arrived[k] = min(Judge.arrived.get(k, arrived), arrived)

    def log_message(self, *args: Any) -> None:
        pass


class Server(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5: the world model's 16 concurrent connections
    # overflow it and the dropped SYNs are retried after 1 s, which would be measured as judge time.
    request_queue_size = 256
    daemon_threads = True


def probe_committed(brokers: str, topic: str, run: str, seen: dict[int, float], stop: threading.Event) -> None:
    """When each step first becomes visible to a read_committed consumer."""
    from confluent_kafka import Consumer

    con = Consumer({"bootstrap.servers": brokers, "group.id": f"bench-probe-{uuid.uuid4().hex[:8]}",
                    "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                    "enable.auto.commit": False, "fetch.wait.max.ms": 5})  # fmt: skip
    con.subscribe([topic])
    try:
        while not stop.is_set():
            for m in con.consume(num_messages=100, timeout=0.005):
                if m.error() is not None:
                    continue
                h = {k: (v or b"").decode() for k, v in (m.headers() or [])}
                if h.get(c.HEADER_RUN) == run and c.HEADER_STEP in h:
                    seen.setdefault(int(h[c.HEADER_STEP]), time.time())
    finally:
        con.close()


def record_times(brokers: str, topic: str, run: str, want: int) -> dict[int, float]:
    """The latest CreateTime (seconds) per step of the run's records on topic."""
    from confluent_kafka import Consumer

    con = Consumer({"bootstrap.servers": brokers, "group.id": f"bench-read-{uuid.uuid4().hex[:8]}",
                    "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    con.subscribe([topic])
    out: dict[int, float] = {}
    n, deadline = 0, time.monotonic() + 30
    try:
        while n < want and time.monotonic() < deadline:
            for m in con.consume(num_messages=500, timeout=0.5):
                if m.error() is not None:
                    continue
                h = {k: (v or b"").decode() for k, v in (m.headers() or [])}
                if h.get(c.HEADER_RUN) != run:
                    continue
                if c.HEADER_STEP in h:
                    step = int(h[c.HEADER_STEP])
                else:
                    step = int(json.loads(m.value())["step"])
                n += 1
                out[step] = max(out.get(step, 0.0), m.timestamp()[1] / 1000)
    finally:
        con.close()
    return out


def delete_topics(brokers: str, prefix: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": brokers})
    names = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix)]
    for f in admin.delete_topics(names).values() if names else ():
        f.result(30)


def pct(a: list[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(a), q)), 1) if a else float("nan")


def sandbox_flags(jail: str, run_as: str | None) -> list[str]:
    """The sandbox's flags for --jail and --run-as."""
    out = ["--bwrap=false", "--allow-weak-containment"] if jail == "off" else []
    return [*out, "--run-as", run_as] if run_as else out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", default="127.0.0.1:9092")
    ap.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--wmrl", default=None, help="the wmrl binary (default: go build ./cmd/wmrl)")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--anchor", type=float, default=0.25)
    ap.add_argument("--poll-timeout", type=float, default=None, help="RewardClient poll_timeout (default: its own)")
    ap.add_argument(
        "--consumer-config",
        action="append",
        default=[],
        metavar="K=V",
        help="librdkafka setting for the trainer's consumer (repeatable)",
    )
    ap.add_argument("--jail", choices=("on", "off"), default="on",
                    help="the sandbox's bwrap jail: on (the default) or off (--bwrap=false --allow-weak-containment: "
                         "the README's no-jail row)")  # fmt: skip
    ap.add_argument("--run-as", default=None, metavar="UID:GID",
                    help="the sandbox's job uid (wmrl sandbox --run-as; a root stage's default 65534 may have "
                         "no process to spare on a shared host)")  # fmt: skip
    ap.add_argument("--keep", action="store_true", help="keep the stages' logs (printed path)")
    args = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="wmrl-roundtrip-"))
    cli = Path(args.wmrl) if args.wmrl else tmp / "wmrl"
    if not args.wmrl:
        subprocess.run([shutil.which("go") or "go", "build", "-o", str(cli), "./cmd/wmrl"], cwd=ROOT, check=True)
    uniq = f"rt-{uuid.uuid4().hex[:8]}"
    prefix, run = f"{uniq}.", f"{uniq}-run"
    glob = ["--brokers", args.brokers, "--redis", args.redis, "--topic-prefix", prefix]
    subprocess.run([str(cli), *glob, "topics", "create", "--partitions", "1"], check=True, capture_output=True)
    judge = Server(("127.0.0.1", 0), Judge)
    threading.Thread(target=judge.serve_forever, daemon=True).start()
    procs = []
    stages = {
        "worldmodel": ["worldmodel", "--base-url", f"http://127.0.0.1:{judge.server_address[1]}/v1", "--model", "m"],
        "sandbox": ["sandbox", "--single-step-no-private",
                    "--argv", json.dumps(["/bin/sh", str(SCORE_SH), "{artifact}"]), "--timeout", "30s",
                    *sandbox_flags(args.jail, args.run_as)],
        "correct": ["correct", "--transactional-id", f"{uniq}-txn", "--redis-prefix", uniq, "--min-pairs", "5000"],
    }
    for name, a in stages.items():
        f = open(tmp / f"{name}.log", "w")  # noqa: SIM115 (closed below)
        procs.append((subprocess.Popen([str(cli), *glob, *a, "--metrics-addr", "127.0.0.1:0", "--group",
                                        f"{uniq}-{name}"], stdout=f, stderr=subprocess.STDOUT), f))  # fmt: skip
    committed: dict[int, float] = {}
    stop = threading.Event()
    probe = threading.Thread(
        target=probe_committed, args=(args.brokers, f"{prefix}{c.SUFFIX_ADVANTAGES}", run, committed, stop)
    )
    probe.start()
    t: dict[str, dict[int, float]] = {h: {} for h in HOPS}
    start: dict[int, float] = {}
    try:
        kw: dict[str, Any] = {} if args.poll_timeout is None else {"poll_timeout": args.poll_timeout}
        if args.consumer_config:
            kw["consumer_config"] = dict(kv.split("=", 1) for kv in args.consumer_config)
        t0 = time.time()
        client = RewardClient(args.brokers, run, f"{uniq}-trainer", anchor_fraction=args.anchor, topic_prefix=prefix,
                              **kw)  # fmt: skip
        construct = time.time() - t0
        with client:
            for step in range(args.steps):
                groups = [
                    Group(
                        completions=[json.dumps({"rollout": f"{step}-{j}-{i}", "wm": ((step + j + i) % 10) / 10,
                                                 "exec": ((step * 3 + j + i) % 10) / 10})
                                     for i in range(args.group_size)],
                        prompt=f"task {step}/{j}",
                    )
                    for j in range(args.groups)
                ]  # fmt: skip
                start[step] = time.time()
                client.publish(step, groups)
                t["publish"][step] = time.time()
                client.wait(step, timeout=60)
                t["client"][step] = time.time()
    finally:
        stop.set()
        probe.join()
        for p, f in procs:
            p.terminate()
            p.wait(30)
            f.close()
        judge.shutdown()
    rows = args.groups * args.group_size
    t["judge"] = dict(Judge.answered)
    t["judge_first"] = dict(Judge.arrived)
    t["predicted"] = record_times(args.brokers, f"{prefix}{c.SUFFIX_PREDICTED}", run, args.steps * rows)
    anchored = args.steps * rows * args.anchor * 0.5  # at least some anchors; read what is there
    t["executed"] = record_times(args.brokers, f"{prefix}{c.SUFFIX_EXECUTED}", run, int(anchored))
    t["sealed"] = record_times(args.brokers, f"{prefix}{c.SUFFIX_ADVANTAGES}", run, args.steps)
    t["committed"] = committed
    timed = range(args.warmup, args.steps)
    out: dict[str, Any] = {
        "steps": len(timed), "groups": args.groups, "group_size": args.group_size, "anchor": args.anchor,
        "jail": args.jail,
        "client_construct_ms": round(construct * 1000, 1),
        "first_step_ms": round((t["client"][0] - start[0]) * 1000, 1),
    }  # fmt: skip
    for h in HOPS:
        d = [(t[h][s] - start[s]) * 1000 for s in timed if s in t[h]]
        out[h] = {"p50": pct(d, 50), "p99": pct(d, 99), "n": len(d)}
    print(json.dumps(out))
    delete_topics(args.brokers, prefix)
    if args.keep:
        print(f"logs kept in {tmp}", file=sys.stderr)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
