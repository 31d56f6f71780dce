"""The e2e service policy: skip without WMRL_TEST_KAFKA, fail when services are required or down."""

from __future__ import annotations

import socket

import pytest
from conftest import resolve_kafka, resolve_redis


def test_unset_skips_for_a_developer() -> None:
    with pytest.raises(pytest.skip.Exception, match="WMRL_TEST_KAFKA is not set"):
        resolve_kafka({})


@pytest.mark.parametrize("env", [{"CI": "true"}, {"WMRL_REQUIRE_SERVICES": "1"}])
def test_unset_fails_when_required(env: dict[str, str]) -> None:
    with pytest.raises(pytest.fail.Exception, match="services are required"):
        resolve_kafka(env)


def test_unreachable_fails() -> None:
    with socket.socket() as s:  # a port nobody listens on: bind, then close
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(pytest.fail.Exception, match="unreachable"):
        resolve_kafka({"WMRL_TEST_KAFKA": f"127.0.0.1:{port}"})


def test_reachable_returns_brokers() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        addr = f"127.0.0.1:{s.getsockname()[1]}"
        assert resolve_kafka({"WMRL_TEST_KAFKA": addr}) == addr


def test_redis_policy() -> None:
    with pytest.raises(pytest.skip.Exception):
        resolve_redis({})
    with pytest.raises(pytest.fail.Exception, match="services are required"):
        resolve_redis({"CI": "true"})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        url = f"redis://:pw@127.0.0.1:{s.getsockname()[1]}/0"
        assert resolve_redis({"WMRL_TEST_REDIS": url}) == url
