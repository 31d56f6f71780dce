"""The OpenRLHF reward server against hostile clients: half-open connections, a connection flood
past the cap, silent connections and malformed requests, each over raw sockets so that the bytes
on the wire are exactly the attack's (issue 35, item 4)."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from test_integrations import Pipeline, openrlhf_request, pipe  # noqa: F401 (pipe: a fixture)

from wmrl_client.integrations import openrlhf as orl
from wmrl_client.integrations._batch import BatchScorer

TOKEN = "s3cret"
HALF_OPEN = 1100
BOUND = 3.0  # seconds an authorized request may take while the half-open connections are held


def start(p: Any, **limits: Any) -> tuple[orl.RewardServer, str]:
    _, client = p
    srv = orl.make_server(BatchScorer(client, group_size=2), "127.0.0.1", 0, timeout=10, max_body=4096,
                          token=TOKEN, limits=orl.Limits(**limits))  # fmt: skip
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}/get_reward?token={TOKEN}"


@pytest.fixture
def served(pipe: Any, request: pytest.FixtureRequest) -> Iterator[tuple[orl.RewardServer, str]]:  # noqa: F811
    srv, url = start(pipe, **getattr(request, "param", {}))
    yield srv, url
    srv.shutdown()
    srv.server_close()


def scored(url: str) -> Any:
    """One authorized request of two whole groups, as OpenRLHF's batch-mode client sends it."""
    prompts = ["<q0>", "<q0>", "<q1>", "<q1>"]
    return openrlhf_request(url, {"query": [p + f" a score=0.{i + 1}" for i, p in enumerate(prompts)],
                                  "prompts": prompts, "labels": ["x"] * 4})  # fmt: skip


def half_open(port: int, n: int) -> list[socket.socket]:
    """n connections that send part of a request head (no token, no blank line) and then nothing."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /get_reward HTTP/1.1\r\nHost: rm\r\n")
        socks.append(s)
    return socks


def closed_by_server(s: socket.socket, within: float) -> bool:
    """Whether the server closes s (EOF or reset) within the given seconds."""
    s.settimeout(within)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.mark.parametrize("served", [{"header_timeout": 60.0}, {"header_timeout": 60.0, "max_connections": 500}],
                         indirect=True, ids=["under-cap", "over-cap"])  # fmt: skip
def test_reward_server_half_open_connections_do_not_delay_a_token_holder(served: tuple[orl.RewardServer, str]) -> None:
    """1,100 half-open connections, held open (header timeout 60 s), below the connection cap and
    past it: an authorized request is answered within BOUND seconds either way. Past the cap, the
    oldest half-open connections are the ones closed."""
    srv, url = served
    socks = half_open(srv.server_address[1], HALF_OPEN)
    try:
        t0 = time.monotonic()
        out = scored(url)
        took = time.monotonic() - t0
        assert len(out["rewards"]) == 4
        assert took < BOUND, f"authorized request took {took:.2f}s beside {HALF_OPEN} half-open connections"
        cap = srv.limits.max_connections
        if cap < HALF_OPEN:  # the first ones were closed to make room; the newest are still held
            assert closed_by_server(socks[0], 5) and not closed_by_server(socks[-1], 0.2)
        else:
            assert not any(closed_by_server(s, 0.001) for s in socks[:: HALF_OPEN // 20])
        print(f"\nreward server, cap {cap}: authorized request answered in {took * 1000:.0f} ms beside "
              f"{HALF_OPEN} half-open connections")  # fmt: skip
    finally:
        for s in socks:
            s.close()


@pytest.mark.parametrize("served", [{"header_timeout": 0.5}], indirect=True)
def test_reward_server_header_timeout_closes_silent_connections(served: tuple[orl.RewardServer, str]) -> None:
    srv, url = served
    port = srv.server_address[1]
    silent = socket.create_connection(("127.0.0.1", port))  # sends nothing at all
    socks = [silent, *half_open(port, 20)]
    try:
        t0 = time.monotonic()
        assert all(closed_by_server(s, 5) for s in socks)
        assert time.monotonic() - t0 < 5
        assert len(scored(url)["rewards"]) == 4  # and the server still serves
    finally:
        for s in socks:
            s.close()


def exchange(port: int, raw: bytes) -> tuple[int, dict[str, Any]]:
    """Send raw bytes and read the response: (status, JSON body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(raw)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
            head, sep, body = data.partition(b"\r\n\r\n")
            if sep and b"content-length:" in head.lower():
                n = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                if len(body) >= n:
                    break
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1."), data[:200]
    return int(head.split()[1]), json.loads(body) if body else {}


def post(body: bytes, *, headers: str = "", length: int | None = -1, auth: bool = True) -> bytes:
    hs = "POST /get_reward HTTP/1.1\r\nHost: rm\r\nContent-Type: application/json\r\n"
    if auth:
        hs += f"Authorization: Bearer {TOKEN}\r\n"
    if length is not None:
        hs += f"Content-Length: {len(body) if length == -1 else length}\r\n"
    return (hs + headers + "\r\n").encode() + body


MALFORMED = [
    ("bad request line", b"GARBAGE\r\n\r\n", 400, ""),
    ("bad request line (HTTP version)", b"POST / HTTP/9z\r\nHost: rm\r\n\r\n", 400, ""),
    ("Content-Length not a number", post(b"{}", length=None, headers="Content-Length: 1e9\r\n"), 400, ""),
    ("no Content-Length", post(b"", length=None), 411, "Content-Length is required"),
    ("chunked", post(b"2\r\n{}\r\n0\r\n\r\n", length=None, headers="Transfer-Encoding: chunked\r\n"), 411, "Length"),
    ("absurd Content-Length", post(b"{}", length=10**15), 413, "exceeds the 4096 byte limit"),
    ("absurd Content-Length, no token", post(b"{}", length=10**15, auth=False), 401, "token"),
    ("Content-Length past 64 bits", post(b"{}", length=10**20), 400, ""),
    ("bad request line with the token", f"POST /?token={TOKEN} HTTP/9z\r\n\r\n".encode(), 400, "parse"),
    ("a header line over 8 KiB after the token", post(b"{}", headers=f"X-Pad: {TOKEN * 3000}\r\n"), 431, "head"),
    ("a header line over 8 KiB", post(b"{}", headers=f"X-Pad: {'a' * 9000}\r\n"), 431, ""),
    ("100 header lines", post(b"{}", headers="".join(f"X-H{i}: v\r\n" for i in range(100))), 431, ""),
    ("deeply nested JSON", post(b"[" * 4000), 400, "nested too deeply"),
    ("not JSON", post(b"{nope"), 400, "not JSON"),
    ("JSON but not an object", post(b"[1]"), 400, "want a JSON object"),
    ("compressed body", post(b"\x1f\x8b", headers="Content-Encoding: gzip\r\n"), 415, "Content-Encoding"),
    ("GET", b"GET /get_reward?token=s3cret HTTP/1.1\r\nHost: rm\r\n\r\n", 405, "POST"),
]


@pytest.mark.parametrize(("name", "raw", "status", "says"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_reward_server_malformed_requests_get_their_status(
    served: tuple[orl.RewardServer, str], caplog: pytest.LogCaptureFixture, name: str, raw: bytes, status: int,
    says: str,
) -> None:  # fmt: skip
    srv, _ = served
    with caplog.at_level(logging.DEBUG):
        got, body = exchange(srv.server_address[1], raw)
    assert got == status, body
    assert says in body.get("error", ""), body
    assert not [r for r in caplog.records if r.exc_info], "a malformed request must not log a traceback"
    assert TOKEN not in caplog.text and TOKEN not in json.dumps(body), "the token must never be logged or echoed"


@pytest.mark.parametrize("served", [{"body_timeout": 0.5}], indirect=True)
def test_reward_server_slow_body_gets_408(served: tuple[orl.RewardServer, str]) -> None:
    srv, _ = served
    t0 = time.monotonic()
    got, body = exchange(srv.server_address[1], post(b'{"query"', length=100))  # 8 of its 100 bytes
    assert got == 408 and "not received within 0.5s" in body["error"]
    assert time.monotonic() - t0 < 5
