"""Fixtures of the service tests: a real redis-server, a clean database per test, the coordinator
over real HTTP (uvicorn on a free port of 127.0.0.1), and an HTTP client for it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import redis

from .helpers import (
    RedisServer,
    RedisState,
    ThreadedCoordinator,
    coordinator,
    coordinator_settings,
    redis_server,
    snapshot,
)


@pytest.fixture(scope="session")
def redis_instance() -> Iterator[RedisServer]:
    """One redis-server for the session: `--save '' --appendonly no`, a temporary directory."""
    with redis_server() as server:
        yield server


@pytest.fixture(scope="session")
def redis_url(redis_instance: RedisServer) -> str:
    return redis_instance.url


@pytest.fixture
def clean_redis(redis_url: str) -> Iterator[str]:
    """The session's Redis, emptied before the test; yields its URL."""
    client = redis.Redis.from_url(redis_url)
    try:
        client.flushall()
    finally:
        client.close()
    yield redis_url


@pytest.fixture
def store(clean_redis: str) -> Iterator[redis.Redis]:
    """A connection to the test's emptied Redis: to copy and restore an experiment's keys as a
    failover does (tests/services/test_device.py, copy_keys and restore_keys)."""
    connection = redis.Redis.from_url(clean_redis)
    yield connection
    connection.close()


@pytest.fixture(scope="session")
def coordinator_server(redis_url: str) -> Iterator[ThreadedCoordinator]:
    """The coordinator app (its own Settings: the session's Redis, test tokens, a distinct default
    experiment) under a real uvicorn server."""
    with coordinator(coordinator_settings(redis_url)) as server:
        yield server


@pytest.fixture
def coordinator_url(coordinator_server: ThreadedCoordinator, clean_redis: str) -> str:
    """The base URL of the running coordinator, its Redis emptied before the test."""
    return coordinator_server.url


@pytest.fixture
def client(coordinator_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=coordinator_url, timeout=10.0, trust_env=False) as http:
        yield http


@pytest.fixture
def redis_state(clean_redis: str) -> RedisState:
    """A function returning every key of the (emptied) Redis with its content, to compare."""
    return lambda: snapshot(clean_redis)
