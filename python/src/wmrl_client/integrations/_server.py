"""The HTTP side of the reward servers (OpenRLHF's ``--remote_rm_url`` and ORS): an aiohttp server
with socketserver's interface and per-client limits, and what their command lines share."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import sys
import threading
from dataclasses import dataclass
from typing import Any

from aiohttp import web, web_protocol
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong
from aiohttp.web_request import BaseRequest

from wmrl_client.errors import WmrlError
from wmrl_client.options import KafkaOptions
from wmrl_client.reward import RewardClient

log = logging.getLogger("wmrl_client.openrlhf")  # the servers' log lines kept their logger

DEFAULT_MAX_BODY = 8 << 20
"""Largest request body read (bytes); a per-sample request is a few KiB."""


@dataclass(frozen=True)
class Limits:
    """What one client may cost the server: every wait has a deadline and every buffer a size.

    ``header_timeout`` bounds the wait for a request's head, from the connection's start (and after
    each response on a kept-alive connection); ``body_timeout`` the read of an authorized body. At
    ``max_connections`` a new connection closes the oldest one still waiting for its head, or is
    itself closed when every connection is busy with a request: half-open connections cannot keep a
    token holder out, whatever their number. A head over ``max_field_bytes`` per line or
    ``max_headers`` lines is answered 431."""

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    max_connections: int = 4096
    max_body: int = DEFAULT_MAX_BODY
    max_field_bytes: int = 8190
    max_headers: int = 64


class Reply(Exception):
    """An HTTP error answer (status, message) raised inside the request handler."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def json_reply(status: int, body: dict[str, Any], *, close: bool = False) -> web.Response:
    resp = web.json_response(body, status=status)
    if close:  # refused before its body was read: never linger reading an unread body
        resp.force_close()
    return resp


class _Protocol(web_protocol.RequestHandler):
    """aiohttp's connection handler, answering parse errors (bad request line, bad or absurd
    headers, a head over the limits) as JSON with one WARNING line instead of a traceback."""

    def handle_error(
        self, request: BaseRequest, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:
            raise ConnectionError("response already started: cannot send the error")
        if status == 500:
            log.error("%s: internal error", request.remote, exc_info=exc)
            return json_reply(500, {"error": "internal error"}, close=True)
        if isinstance(exc, LineTooLong) or (isinstance(exc, BadHttpMessage) and "Too many headers" in str(exc)):
            status, text = 431, "request head over the limits (a line or the number of lines)"
        else:  # the parser's message quotes the request line or a header, which may hold the token
            text = f"cannot parse the request ({type(exc).__name__})" if exc else "cannot parse the request"
        log.warning("%s: malformed request: %d %s", request.remote, status, text)
        return json_reply(status, {"error": f"malformed request: {text}"}, close=True)


class _CappedServer(web.Server):
    """aiohttp's low-level server with a connection cap (see Limits)."""

    def __init__(self, handler: Any, *, max_connections: int, busy: set[Any], **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._protocol_kwargs = kwargs
        self._cap = max_connections
        self._busy = busy
        self.evicted = 0

    def __call__(self) -> web_protocol.RequestHandler:
        return _Protocol(self, loop=asyncio.get_running_loop(), **self._protocol_kwargs)

    def connection_made(self, handler: web_protocol.RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        live = [h for h in self.connections if h.transport is not None]
        if len(live) <= self._cap:
            return
        victim = next((h for h in live if h not in self._busy), handler)  # oldest first: dict order
        victim.force_close()
        self.evicted += 1
        if self.evicted & (self.evicted - 1) == 0:  # 1, 2, 4, 8, …: a flood does not flood the log
            log.warning("connection cap %d reached: closed a connection that had sent no request (%d so far)",
                        self._cap, self.evicted)  # fmt: skip


class RewardServer:
    """The reward HTTP server on aiohttp, with socketserver's interface: ``serve_forever()`` runs it
    (in the calling thread, on its own event loop), ``shutdown()`` stops it from another thread,
    ``server_close()`` releases the socket, ``server_address`` is the bound address."""

    def __init__(self, handle: Any, host: str, port: int, limits: Limits) -> None:
        self.limits = limits
        self._handle = handle
        self.socket = socket.create_server((host, port), backlog=1024)  # OpenRLHF's actors connect at once
        self.server_address: tuple[Any, ...] = self.socket.getsockname()
        self._mu = threading.Lock()
        self._stopping = False
        self._wake: Any = None
        self._done = threading.Event()

    def serve_forever(self) -> None:
        try:
            asyncio.run(self._serve())
        finally:
            self._done.set()

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        with self._mu:
            if self._stopping:
                return
            self._wake = lambda: loop.call_soon_threadsafe(stop.set)
        busy: set[Any] = set()

        async def handler(request: BaseRequest) -> web.StreamResponse:
            busy.add(request.protocol)
            try:
                resp: web.StreamResponse = await self._handle(request)
            finally:
                busy.discard(request.protocol)
            log.log(logging.INFO if resp.status < 400 else logging.WARNING, "%s %s %s -> %d",
                    request.remote, request.method, request.path, resp.status)  # fmt: skip
            return resp

        lim = self.limits
        srv = _CappedServer(handler, max_connections=lim.max_connections, busy=busy,
                            keepalive_timeout=lim.header_timeout, max_field_size=lim.max_field_bytes,
                            max_line_size=lim.max_field_bytes, max_headers=lim.max_headers,
                            auto_decompress=False, access_log=None)  # fmt: skip
        listener = await loop.create_server(srv, sock=self.socket)
        try:
            await stop.wait()
        finally:
            listener.close()
            await srv.shutdown(1.0)

    def shutdown(self) -> None:
        """Stop serve_forever and wait for it (a no-op before it started)."""
        with self._mu:
            self._stopping = True
            wake = self._wake
        if wake is not None:
            wake()
            self._done.wait()

    def server_close(self) -> None:
        self.socket.close()


async def read_json(request: BaseRequest, lim: Limits) -> dict[str, Any]:
    """The request's JSON object, read under the body limits (an error status as Reply)."""
    if request.method != "POST":
        raise Reply(405, f"method {request.method} not allowed: POST the JSON request")
    if request.headers.get("Content-Encoding", "identity") != "identity":
        raise Reply(415, "Content-Encoding is not supported: send the JSON uncompressed")
    n = request.content_length
    if n is None:
        raise Reply(411, "a Content-Length is required")
    if n > lim.max_body:
        raise Reply(413, f"body of {n} bytes exceeds the {lim.max_body} byte limit")
    try:
        async with asyncio.timeout(lim.body_timeout):
            body = await request.content.readexactly(n)
    except TimeoutError:
        raise Reply(408, f"body of {n} bytes not received within {lim.body_timeout:g}s") from None
    except asyncio.IncompleteReadError:
        raise Reply(400, f"body ended before its {n} bytes") from None
    try:
        req = json.loads(body or b"null")
    except RecursionError:
        raise Reply(400, "request body: JSON nested too deeply") from None
    except ValueError as e:
        raise Reply(400, f"request body: not JSON: {e}") from None
    if not isinstance(req, dict):
        raise Reply(400, "request body: want a JSON object")
    return req


def add_client_args(ap: argparse.ArgumentParser) -> None:
    """The command-line options of the servers' RewardClient."""
    ap.add_argument("--brokers", default=None, help="seed brokers (default: WMRL_BROKERS)")
    ap.add_argument("--topic-prefix", default=None)
    ap.add_argument("--run", required=True, help="wmrl run id")
    ap.add_argument("--group", required=True, help="consumer group of this trainer job")
    ap.add_argument("--anchor-fraction", type=float, default=0.25)


def client_from_args(args: argparse.Namespace, what: str) -> RewardClient:
    """The RewardClient add_client_args's options and the WMRL_* connection variables describe; on
    a bad setting the process exits naming it (what: the command)."""
    opts = KafkaOptions.from_env()
    if args.topic_prefix is not None:
        opts.topic_prefix = args.topic_prefix
    try:
        return RewardClient(args.brokers, args.run, args.group, kafka=opts, anchor_fraction=args.anchor_fraction)
    except WmrlError as e:
        sys.exit(f"{what}: {e}")


def token_from(token_file: str | None) -> str | None:
    """The bearer token: token_file's content, else WMRL_RM_TOKEN (None: no token required)."""
    if not token_file:
        return os.environ.get("WMRL_RM_TOKEN") or None
    with open(token_file, encoding="utf-8") as f:
        return f.read().strip() or None


def serve(srv: RewardServer, *close: Any) -> None:
    """Serve until interrupted, then release the socket and close what the server used, in order."""
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
        for c in close:
            c.close()
