"""wmrl's reward as an Open Reward Standard (ORS) environment: HTTP + Server-Sent Events.

ORS (the specification's HTTP API and SSE pages, and its reference Python SDK ``ors-sdk`` 0.1.0,
openrewardstandard/python-sdk commit 34b9c21b298cc525179db3231fbafe6a9e54ccf7) connects an agent
or trainer to an RL environment: one session is one episode, its task is given at creation, the
agent acts through tool calls and a tool's output carries the reward. This server is one
environment, ``wmrl`` (``--env-name``), whose episode is one completion scored by wmrl::

    python -m wmrl_client.integrations.ors --brokers kafka:9092 --run run-0042 --group ors-0042 \\
        --group-size 8 --groups-per-step 64 --port 8080
    # an ORS client then: POST /create_session → sid; POST /create {"env_name": "wmrl", "task_spec":
    # {"prompt": "...", "group": "<prompt id>", "label": "..."}}; POST /wmrl/call {"name": "submit",
    # "input": {"answer": "<completion>"}} → SSE: task_id, then end with the reward.

* ``task_spec`` (a JSON object): ``prompt`` (text, what ``GET /wmrl/prompt`` returns), ``group``
  (the key the ``--group-size`` samples of one prompt share; default the prompt) and any other
  scalar fields, which become the rollout's meta (what the sandbox grades against: ``label``, …).
* Tool ``submit`` (``{"answer": text}``) files the completion with the ``Grouper`` as the OpenRLHF
  server does: a group is complete when its ``--group-size`` episodes have submitted, steps are
  published when ``--groups-per-step`` groups are in (or after ``--flush-after`` quiet seconds).
  While the step is corrected the stream sends an SSE comment every ``--ping`` seconds (the
  reference client drops a stream silent for 30 s); then ``end`` with ``{"ok": true, "output":
  {"blocks": [...], "reward": r, "finished": true, "metadata": {"wmrl_advantage", "wmrl_weight",
  "wmrl_mask", "wmrl_anchor", "wmrl_step", "wmrl_rollout_id"}}}``. ``reward`` is wmrl's corrected
  reward (a row without a graded reward: its group's graded mean, ``wmrl_mask`` 0). A group with
  no graded reward, or a step not corrected within ``--timeout``, ends the stream with an ``error``
  event saying so; an unknown tool or a second submit is ``{"ok": false, "error": ...}``. A
  client that reconnects with the ``task_id`` it was sent gets the same call's result.
* ``--tasks FILE`` (JSON Lines, one ``task_spec`` each) serves a task list as split ``--split``
  (``/{env}/tasks``, ``num_tasks``, ``task``, ``task_range``) and sessions created by ``split`` and
  ``index``: what TRL's ORS client (``trl.experimental.openreward.OpenRewardSpec``, TRL ≥ 1.16, on
  the ``openreward`` SDK) builds its dataset from. That SDK sends session requests to
  ``sessions.<host>`` of the URL it is given unless ``OPENREWARD_SESSION_URL`` is set: set it (and
  ``OPENREWARD_API_URL``) to this server's URL.
* Grouping needs the episodes of a group to run concurrently: a submit returns when its whole group
  has submitted and its step is corrected. TRL's ``GRPOTrainer`` (1.16) calls environment tools
  one rollout at a time, so there a submit waits for ``--timeout`` and TRL records a tool error
  with no reward: use wmrl's TRL ``RewardFunc`` for GRPOTrainer; the endpoint serves clients whose
  rollout workers run episodes in parallel (ORS sessions are independent by design).
* ``POST /create_session`` answers SSE (``task_id`` = the sid, then ``end``) to a client that
  accepts ``text/event-stream`` (the reference SDK), else ``{"sid": ...}`` (the specification's
  example). ``/health``, ``/list_environments``, ``/{env}/tools``, ``/{env}/task_tools``,
  ``/{env}/splits``, ``/{env}/prompt``, ``/ping``, ``/delete`` and ``/delete_session`` are as
  specified, also at the root for the default environment (as the SDKs ask given a bare URL).
  A session idle for ``--session-ttl`` seconds (15 minutes, as specified) is dropped.
* Auth: with ``--token-file`` (or WMRL_RM_TOKEN) every request but ``/health`` needs the token as
  ``X-API-Key`` (the reference SDK's header), ``Authorization: Bearer`` or ``?token=``. The HTTP
  server, its limits and its error handling are the OpenRLHF reward server's (``RewardServer``).
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import logging
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.web_request import BaseRequest

from wmrl_client.errors import StepTimeoutError, WmrlError
from wmrl_client.integrations._batch import task_meta
from wmrl_client.integrations._grouper import DEFAULT_FLUSH_AFTER, Grouper, SampleResult
from wmrl_client.integrations._server import (
    Limits,
    Reply,
    RewardServer,
    add_client_args,
    client_from_args,
    json_reply,
    read_json,
    serve,
    token_from,
)

log = logging.getLogger("wmrl_client.ors")

DEFAULT_TIMEOUT = 600.0
"""Seconds a submit waits for its step (the stream stays alive with pings meanwhile)."""

SESSION_TTL = 900.0
"""Seconds without a request after which a session is dropped (the specification's 15 minutes)."""

CHUNK = 4096
"""Bytes of the result per SSE event: larger results go as ``chunk`` events before ``end``."""

ENV_ROUTES = ("tools", "task_tools", "splits", "tasks", "num_tasks", "task", "task_range", "prompt", "call")
"""The per-environment routes, also served at the root for the default environment (the SDKs ask there
when given a server URL without an environment name)."""

TOOL = {
    "name": "submit",
    "description": "Submit the completion for this task; the reward is wmrl's corrected reward of it.",
    "input_schema": {
        "type": "object",
        "properties": {"answer": {"type": "string", "description": "the completion to score"}},
        "required": ["answer"],
    },
}


@dataclass
class _Session:
    sid: str
    prompt: str = ""
    key: Any = None
    meta: dict[str, str] = field(default_factory=dict)
    created: bool = False
    submitted: bool = False
    seen: float = field(default_factory=time.monotonic)
    calls: dict[str, asyncio.Task[dict[str, Any]]] = field(default_factory=dict)


def parse_task(spec: Any) -> tuple[str, Any, dict[str, str]]:
    """(prompt, group key, meta) of a ``task_spec`` (ValueError naming the field when malformed)."""
    if not isinstance(spec, Mapping):
        raise ValueError('field "task_spec": want a JSON object')
    prompt = spec.get("prompt", "")
    if not isinstance(prompt, str):
        raise ValueError('field "task_spec.prompt": want a string')
    key = spec.get("group", prompt)
    if not isinstance(key, str | int):
        raise ValueError('field "task_spec.group": want a string or an integer')
    scalars = {k: v for k, v in spec.items() if k not in ("prompt", "group")}
    for k, v in scalars.items():
        if v is not None and not isinstance(v, str | int | float | bool):
            raise ValueError(f'field "task_spec.{k}": want a scalar (string, number, boolean), got {type(v).__name__}')
    return prompt, key, task_meta(scalars, what="ORS task_spec")


def tool_output(r: SampleResult) -> dict[str, Any]:
    """The RunToolOutput of a scored submit (an error when the group has no graded reward)."""
    if not r.group_graded:
        raise WmrlError(f"group {r.group_id} of wmrl step {r.step} has no graded reward (the world model and "
                        "the sandbox failed every sample of it): no reward to give")  # fmt: skip
    meta: dict[str, Any] = {**r.extra(), "wmrl_rollout_id": r.rollout_id}
    text = f"wmrl reward {r.reward:.6g} (step {r.step}, {r.source})"
    return {"ok": True, "output": {"blocks": [{"text": text, "detail": None, "type": "text"}],
                                   "metadata": meta, "reward": r.reward, "finished": True}}  # fmt: skip


class OrsApp:
    """The ORS routes over a Grouper; ``server()`` wraps them in the OpenRLHF server's plumbing."""

    def __init__(self, grouper: Grouper, *, env_name: str = "wmrl", timeout: float | None = DEFAULT_TIMEOUT,
                 token: str | None = None, ping: float = 10.0, session_ttl: float = SESSION_TTL,
                 limits: Limits | None = None, tasks: Sequence[Mapping[str, Any]] = (),
                 split: str = "train") -> None:  # fmt: skip
        self.grouper, self.env, self.timeout, self.ping, self.ttl = grouper, env_name, timeout, ping, session_ttl
        for k, t in enumerate(tasks):
            try:
                parse_task(t)
            except ValueError as e:
                raise ValueError(f"task {k}: {e}") from None
        self.tasks, self.split = [dict(t) for t in tasks], split
        self.limits = limits or Limits()
        self._token = token.encode() if token else None
        self.sessions: dict[str, _Session] = {}

    # ---- plumbing

    def server(self, host: str = "127.0.0.1", port: int = 8080) -> RewardServer:
        return RewardServer(self.handle, host, port, self.limits)

    def _authorized(self, request: BaseRequest) -> bool:
        if self._token is None:
            return True
        auth = request.headers.get("Authorization", "")
        got = request.headers.get("X-API-Key") or (auth[7:] if auth.startswith("Bearer ") else "")
        return hmac.compare_digest((got or request.query.get("token", "")).encode(), self._token)

    def _session(self, request: BaseRequest, *, created: bool = True) -> _Session:
        sid = request.headers.get("X-Session-ID", "").strip()
        if not sid:
            raise Reply(400, "X-Session-ID header is required")
        s = self.sessions.get(sid)
        if s is None or (created and not s.created):
            raise Reply(404, f"no active session {sid[:64]!r}")
        s.seen = time.monotonic()
        return s

    def _env_of(self, name: str) -> None:
        if name != self.env:
            raise Reply(404, f"unknown environment {name[:64]!r} (this server has {self.env!r})")

    def _reap(self) -> None:
        now = time.monotonic()
        for sid in [sid for sid, s in self.sessions.items() if now - s.seen > self.ttl]:
            self._drop(sid)

    def _drop(self, sid: str) -> None:
        s = self.sessions.pop(sid, None)
        if s is not None:
            for t in s.calls.values():
                t.cancel()

    async def handle(self, request: BaseRequest) -> web.StreamResponse:
        try:
            if request.path != "/health" and not self._authorized(request):
                return json_reply(401, {"detail": "missing or wrong API key"}, close=True)
            self._reap()
            return await self._route(request)
        except Reply as e:
            return json_reply(e.status, {"detail": str(e)}, close=e.status not in (400, 404))
        except ValueError as e:
            return json_reply(400, {"detail": str(e)})

    async def _route(self, request: BaseRequest) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        m = request.method
        if m == "GET" and parts == ["health"]:
            return json_reply(200, {"status": "ok"})
        if m == "GET" and parts == ["list_environments"]:
            return json_reply(200, [self.env])  # type: ignore[arg-type]
        if m == "POST" and parts == ["create_session"]:
            return await self._create_session(request)
        if m == "POST" and parts == ["create"]:
            return await self._create(request)
        if m == "POST" and parts == ["ping"]:
            self._session(request, created=False)
            return json_reply(200, {"status": "ok"})
        if m == "POST" and parts in (["delete"], ["delete_session"]):
            s = self._session(request, created=False)
            self._drop(s.sid)
            return json_reply(200, {"sid": s.sid})
        if len(parts) == 1 and parts[0] in ENV_ROUTES:  # the default environment at the root, as the SDK asks
            parts = [self.env, parts[0]]
        if len(parts) == 2:
            self._env_of(parts[0])
            what = parts[1]
            if m == "GET" and what == "tools":
                return json_reply(200, {"tools": [TOOL]})
            if m == "GET" and what == "task_tools":
                self._session(request)
                return json_reply(200, {"tools": [TOOL]})
            if m == "GET" and what == "splits":
                return json_reply(200, [{"name": self.split, "type": "train"}])  # type: ignore[arg-type]
            if m == "POST" and what in ("tasks", "num_tasks", "task", "task_range"):
                return json_reply(200, await self._task_list(request, what))
            if m == "GET" and what == "prompt":
                s = self._session(request)
                return json_reply(200, [{"text": s.prompt, "detail": None, "type": "text"}])  # type: ignore[arg-type]
            if m == "POST" and what == "call":
                return await self._call(request)
        raise Reply(404, f"no route {m} {request.path[:128]}")

    async def _create_session(self, request: BaseRequest) -> web.StreamResponse:
        sid = str(uuid.uuid4())
        self.sessions[sid] = _Session(sid)
        if "text/event-stream" not in request.headers.get("Accept", ""):
            return json_reply(200, {"sid": sid})
        resp = await self._open_sse(request)
        await self._event(resp, "task_id", sid)
        await self._event(resp, "end", "")
        await resp.write_eof()
        return resp

    async def _task_list(self, request: BaseRequest, what: str) -> dict[str, Any]:
        body = await read_json(request, self.limits)
        if not self.tasks:
            raise Reply(400, "this server has no task list (--tasks): create each session with a task_spec")
        if body.get("split") != self.split:
            raise Reply(400, f"Invalid split {str(body.get('split'))[:64]!r} (this server has {self.split!r})")
        if what == "tasks":
            return {"tasks": self.tasks, "env_name": self.env}
        if what == "num_tasks":
            return {"num_tasks": len(self.tasks)}
        if what == "task":
            return {"task": self._task(body.get("index")), "env_name": self.env}
        start, stop = body.get("start"), body.get("stop")
        if not all(x is None or isinstance(x, int) for x in (start, stop)):
            raise Reply(400, 'fields "start"/"stop": want integers')
        return {"tasks": self.tasks[start:stop], "env_name": self.env}

    def _task(self, index: Any) -> dict[str, Any]:
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(self.tasks):
            raise Reply(400, f"Invalid index {str(index)[:32]} (the split has {len(self.tasks)} tasks)")
        return self.tasks[index]

    async def _create(self, request: BaseRequest) -> web.StreamResponse:
        s = self._session(request, created=False)
        if s.created:
            raise Reply(400, "Session already exists")
        body = await read_json(request, self.limits)
        env = body.get("env_name")
        if env is not None:
            self._env_of(str(env))
        spec = body.get("task_spec")
        if spec is None:
            if body.get("split") != self.split or not self.tasks:
                raise Reply(400, f"give a task_spec, or split {self.split!r} and an index into --tasks")
            spec = self._task(body.get("index"))
        s.prompt, s.key, s.meta = parse_task(spec)
        s.created = True
        return json_reply(200, {"sid": s.sid})

    async def _call(self, request: BaseRequest) -> web.StreamResponse:
        s = self._session(request)
        body = await read_json(request, self.limits)
        task_id = body.get("task_id")
        task = s.calls.get(task_id) if isinstance(task_id, str) else None
        if task is None:
            name, args = body.get("name"), body.get("input")
            if not isinstance(name, str) or not isinstance(args, Mapping):
                raise Reply(400, 'a tool call is {"name": text, "input": object}')
            task_id = uuid.uuid4().hex
            task = s.calls[task_id] = asyncio.ensure_future(self._run_tool(s, name, args))
        resp = await self._open_sse(request)
        try:
            return await self._stream_call(resp, s, task_id, task)
        except ConnectionError:  # the client went away: the call goes on, a reconnect with its task_id gets it
            log.info("session %s: client disconnected from call %s", s.sid, task_id)
            return resp

    async def _stream_call(self, resp: web.StreamResponse, s: _Session, task_id: str,
                           task: asyncio.Task[dict[str, Any]]) -> web.StreamResponse:  # fmt: skip
        await self._event(resp, "task_id", task_id)
        while not task.done():
            await asyncio.wait({task}, timeout=self.ping)
            if not task.done():
                await resp.write(b": ping\n\n")
        try:
            out = task.result()
        except (Exception, asyncio.CancelledError) as e:  # the client learns why, in the stream
            msg = str(e) or type(e).__name__
            log.warning("session %s: tool call failed: %s", s.sid, msg)
            await self._event(resp, "error", msg)
            await resp.write_eof()
            return resp
        data = json.dumps(out)
        for i in range(0, len(data), CHUNK):
            await self._event(resp, "end" if i + CHUNK >= len(data) else "chunk", data[i : i + CHUNK])
        await resp.write_eof()
        return resp

    async def _run_tool(self, s: _Session, name: str, args: Mapping[str, Any]) -> dict[str, Any]:
        if name != TOOL["name"]:
            return {"ok": False, "error": f"unknown tool {name[:64]!r}: this environment has {TOOL['name']!r}"}
        answer = args.get("answer")
        if not isinstance(answer, str):
            return {"ok": False, "error": 'tool submit: input "answer" must be a string'}
        if s.submitted:
            return {"ok": False, "error": "this episode is finished: its completion was already submitted"}
        s.submitted = True
        try:
            r = await self.grouper.asubmit(s.key, answer, prompt=s.prompt, meta=s.meta, timeout=self.timeout)
        except TimeoutError:
            raise StepTimeoutError(
                f"no wmrl reward within {self.timeout:g}s (pending: {self.grouper.pending}; a group completes when "
                f"its {self.grouper.group_size} episodes have submitted)"
            ) from None
        return tool_output(r)

    @staticmethod
    async def _open_sse(request: BaseRequest) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})  # fmt: skip
        await resp.prepare(request)  # type: ignore[arg-type]
        return resp

    @staticmethod
    async def _event(resp: web.StreamResponse, event: str, data: str) -> None:
        lines = "".join(f"data: {line}\n" for line in (data.split("\n") if data else [""]))
        await resp.write(f"event: {event}\n{lines}\n".encode())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="wmrl's reward as an Open Reward Standard environment", allow_abbrev=False)
    add_client_args(ap)
    ap.add_argument("--group-size", type=int, required=True, help="episodes per prompt (the trainer's group size)")
    ap.add_argument("--groups-per-step", type=int, default=None, help="prompts per training batch")
    ap.add_argument("--flush-after", type=float, default=DEFAULT_FLUSH_AFTER)
    ap.add_argument("--start-step", type=int, default=0, help="wmrl step of the first submit (resume)")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds a submit waits for its step")
    ap.add_argument("--ping", type=float, default=10.0, help="seconds between SSE keep-alive comments")
    ap.add_argument("--session-ttl", type=float, default=SESSION_TTL, help="idle seconds before a session is dropped")
    ap.add_argument("--env-name", default="wmrl")
    ap.add_argument("--tasks", default=None, help="JSON Lines file of task_specs: the task list of --split")
    ap.add_argument("--split", default="train", help="the split the --tasks list is served as")
    ap.add_argument("--token-file", default=None, help="file holding the API key (default: WMRL_RM_TOKEN)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    token = token_from(args.token_file)
    tasks = []
    if args.tasks:
        with open(args.tasks, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        tasks.append(json.loads(line))
                    except ValueError as e:
                        sys.exit(f"wmrl ors: {args.tasks}:{n}: not JSON: {e}")
    client = client_from_args(args, "wmrl ors")
    grouper = Grouper(client, group_size=args.group_size, groups_per_step=args.groups_per_step,
                      flush_after=args.flush_after, start_step=args.start_step, timeout=args.timeout)  # fmt: skip
    try:
        app = OrsApp(grouper, env_name=args.env_name, timeout=args.timeout, token=token, ping=args.ping,
                     session_ttl=args.session_ttl, tasks=tasks, split=args.split)  # fmt: skip
    except ValueError as e:
        sys.exit(f"wmrl ors: {args.tasks}: {e}")
    srv = app.server(args.host, args.port)
    log.info("serving ORS environment %r on http://%s:%d/ for run %s%s", args.env_name, args.host,
             srv.server_address[1], args.run, " (API key required)" if token else "")  # fmt: skip
    serve(srv, grouper, client)


if __name__ == "__main__":
    main()
