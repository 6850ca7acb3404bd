"""Secrets are compared in constant time, on the real coordinator over real HTTP.

A timing measurement cannot prove this here (the noise of a loaded 2-core machine is far larger
than a string comparison), so the test checks what makes it true: every check of a presented
secret (the admin token, the open-enrollment secret, an agent token) goes through
`hmac.compare_digest`, with the presented value (or its SHA-256 digest) and the expected one, also
when the two differ only in their last character. The vote's Lua script compares digests with a
plain `~=` (coordinator/store/lua/vote.lua says why that is safe); the test checks its precondition:
Redis receives the token's SHA-256 digest, never the token or its secret part."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from .helpers import (
    ADMIN_TOKEN,
    ENROLLMENT_SECRET,
    bearer,
    create_experiment,
    enroll_agents,
)

EXP = "secrets"


@pytest.fixture
def compared(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, Any]]:
    """Every call of hmac.compare_digest in this process (the coordinator runs in a thread of
    it), with its arguments; the real function still answers."""
    calls: list[tuple[Any, Any]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    return calls


def near_miss(secret: str) -> str:
    """The same length and all but the last character: a `==` would take nearly as long as for
    the secret itself, and an early-exit comparison would leak everything else."""
    return secret[:-1] + ("x" if secret[-1] != "x" else "y")


def as_text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def seen(calls: list[tuple[Any, Any]], given: str, expected: str) -> bool:
    return any({as_text(a), as_text(b)} == {given, expected} for a, b in calls)


def test_the_admin_token_is_compared_in_constant_time(
    client: httpx.Client, compared: list[tuple[Any, Any]]
) -> None:
    wrong = near_miss(ADMIN_TOKEN)
    refused = client.post(
        "/v1/experiments", json={"id": EXP, "arms": ["a", "b"]}, headers=bearer(wrong)
    )
    assert refused.status_code == 401, refused.text
    assert seen(compared, wrong, ADMIN_TOKEN)
    compared.clear()
    create_experiment(client, id=EXP, arms=["a", "b"])
    assert seen(compared, ADMIN_TOKEN, ADMIN_TOKEN)


def test_the_enrollment_secret_is_compared_in_constant_time(
    client: httpx.Client, compared: list[tuple[Any, Any]]
) -> None:
    create_experiment(client, id=EXP, arms=["a", "b"])
    compared.clear()
    wrong = near_miss(ENROLLMENT_SECRET)
    refused = client.post("/v1/agents", json={"experiment": EXP}, headers=bearer(wrong))
    assert refused.status_code == 401, refused.text
    assert seen(compared, wrong, ENROLLMENT_SECRET)


def test_an_agent_token_is_compared_by_digest_in_constant_time(
    client: httpx.Client, compared: list[tuple[Any, Any]]
) -> None:
    create_experiment(client, id=EXP, arms=["a", "b"])
    (agent,) = enroll_agents(client, EXP, 1)
    compared.clear()
    wrong = near_miss(agent.token)
    refused = client.get("/v1/agents/me", headers=bearer(wrong))
    assert refused.status_code == 401, refused.text
    digest = lambda token: hashlib.sha256(token.encode()).hexdigest()  # noqa: E731
    assert seen(compared, digest(wrong), digest(agent.token))
    assert not any(agent.token in (as_text(a), as_text(b)) for a, b in compared)


@pytest.fixture
def command_log(clean_redis: str) -> Iterator[redis.Redis]:
    """Redis's slow log set to record every command (with its arguments), for one test."""
    client = redis.Redis.from_url(clean_redis)
    before = client.config_get("slowlog-log-slower-than")["slowlog-log-slower-than"]
    client.config_set("slowlog-log-slower-than", 0)
    try:
        yield client
    finally:
        client.config_set("slowlog-log-slower-than", before)
        client.close()


def test_redis_sees_only_the_digest_of_a_vote_token(
    client: httpx.Client, command_log: redis.Redis
) -> None:
    create_experiment(client, id=EXP, arms=["a", "b", "c"])
    (agent,) = enroll_agents(client, EXP, 1)
    secret = agent.token.split(".", 1)[1]
    command_log.slowlog_reset()
    voted = client.post(
        f"/v1/experiments/{EXP}/votes", json={"arm": 1, "epoch": 0}, headers=agent.headers
    )
    assert voted.status_code == 200, voted.text
    refused = client.post(
        f"/v1/experiments/{EXP}/votes",
        json={"arm": 2, "epoch": 0},
        headers=bearer(near_miss(agent.token)),
    )
    assert refused.status_code == 401, refused.text
    arguments = [
        as_text(arg) for entry in command_log.slowlog_get(1000) for arg in entry["command"].split()
    ]
    assert hashlib.sha256(agent.token.encode()).hexdigest() in arguments  # the vote's ARGV
    assert not any(secret in arg for arg in arguments)
    assert not any(ADMIN_TOKEN in arg for arg in arguments)  # nor is the admin token
