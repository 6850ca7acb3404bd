"""A Redis that hangs (SIGSTOP: the process is there, its socket accepts, nothing answers).

Before DEXP_REDIS_TIMEOUT_SECONDS a vote waited for as long as the hang lasted (20.3 s in the
hardened-edge audit) before its 503, and /readyz named Redis's address in its error. Now a request
waits one timeout (no retry of a command that timed out), then gets the JSON 503 with Retry-After;
/healthz, which needs no Redis, keeps answering; /readyz says "Redis unreachable" and no more; and
once Redis resumes, votes count again, none doubled.

The client's timeout (15 s) is far above the coordinator's (1 s) and far below the hang's length
(the test holds Redis stopped until it has its answers), so the test fails if a request waits for
the hang, and does not bet on how fast a loaded machine answers.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import httpx
import pytest
import redis

from tests.services.helpers import (
    RedisServer,
    coordinator,
    coordinator_settings,
    create_experiment,
    enroll_agents,
    redis_server,
    snapshot,
)

CLIENT_TIMEOUT = 15.0


@pytest.fixture
def stopped_redis() -> Iterator[RedisServer]:
    with redis_server() as server:
        try:
            yield server
        finally:  # a stopped process cannot be terminated: resume it first
            assert server.process is not None
            os.kill(server.process.pid, signal.SIGCONT)


def test_a_hung_redis_costs_a_request_one_timeout_and_says_no_address(
    stopped_redis: RedisServer,
) -> None:
    settings = coordinator_settings(stopped_redis.url, redis_timeout_seconds=1.0)
    with (
        coordinator(settings) as server,
        httpx.Client(base_url=server.url, timeout=CLIENT_TIMEOUT, trust_env=False) as client,
    ):
        create_experiment(client, id="hang", arms=["A", "B", "C"], delta=0.25, eta=0.5)
        first, second = enroll_agents(client, "hang", 2)
        path = "/v1/experiments/hang/votes"
        assert client.post(path, json={"arm": 2, "epoch": 0}, headers=first.headers).is_success
        assert stopped_redis.process is not None
        os.kill(stopped_redis.process.pid, signal.SIGSTOP)
        try:
            vote = client.post(path, json={"arm": 2, "epoch": 0}, headers=second.headers)
            assert vote.status_code == 503, vote.text
            assert int(vote.headers["retry-after"]) >= 1 and vote.json()["detail"]
            read = client.get("/v1/experiments/hang")
            assert read.status_code == 503 and "retry-after" in read.headers
            assert client.get("/healthz").status_code == 200
            ready = client.get("/readyz")
            assert ready.status_code == 503
            assert ready.json() == {"status": "unavailable", "detail": "Redis unreachable"}
            assert str(stopped_redis.port) not in ready.text and "127.0.0.1" not in ready.text
        finally:
            os.kill(stopped_redis.process.pid, signal.SIGCONT)
        # Redis resumed: the vote that got 503 is sent again and counts once
        again = client.post(path, json={"arm": 2, "epoch": 0}, headers=second.headers)
        assert again.status_code == 200, again.text
        # Redis may have run the timed-out vote when it resumed (it was in its socket): then the
        # arm left with it, and this one is its duplicate; either way the agent is one voter
        assert again.json()["outcome"] in ("eliminated", "duplicate"), again.text
        state = client.get("/v1/experiments/hang").json()
        assert client.get("/readyz").status_code == 200
    assert state["remaining_arms"] == [0, 1]  # M = 2: two distinct voters
    assert [(e["arm"], e["votes"]) for e in state["eliminations"]] == [(2, 2)]


def evalsha_calls(url: str) -> int:
    """The scripts Redis has run (its own count: INFO commandstats)."""
    with redis.Redis.from_url(url) as connection:
        stats = connection.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0))


def test_a_vote_answered_503_while_redis_hung_changes_nothing_when_it_resumes(
    stopped_redis: RedisServer,
) -> None:
    """Issue 36, item 8: a vote answered 503 while Redis was stopped was counted once it resumed
    (its script waited in Redis's socket). The scripts that apply an agent's message or enroll
    one now carry a deadline in Redis's clock, half the coordinator's Redis timeout after they
    were sent, checked before any write: run after the coordinator gave up, the vote changes
    nothing. (The vote's fast path sends its script at once; the other routes check the token
    first, a read that a hung Redis fails before any script is sent: test_vote_script.py tries
    their deadlines on the scripts themselves.)"""
    url = stopped_redis.url
    settings = coordinator_settings(url, redis_timeout_seconds=1.0, experiment="")
    with (
        coordinator(settings) as server,
        httpx.Client(base_url=server.url, timeout=CLIENT_TIMEOUT, trust_env=False) as client,
    ):
        create_experiment(client, id="late", arms=["A", "B", "C"], delta=0.25, eta=0.5)
        first, voter = enroll_agents(client, "late", 2)
        path = "/v1/experiments/late/votes"  # a first vote loads the script (else NOSCRIPT)
        assert client.post(path, json={"arm": 0, "epoch": 0}, headers=first.headers).is_success
        before, scripts = snapshot(url), evalsha_calls(url)
        assert stopped_redis.process is not None
        os.kill(stopped_redis.process.pid, signal.SIGSTOP)
        try:
            vote = client.post(path, json={"arm": 2, "epoch": 0}, headers=voter.headers)
        finally:
            os.kill(stopped_redis.process.pid, signal.SIGCONT)
        assert vote.status_code == 503, vote.text
        # Redis resumed: it runs the script that waited in its socket (its own count says when)
        deadline = time.monotonic() + CLIENT_TIMEOUT
        while evalsha_calls(url) == scripts and time.monotonic() < deadline:
            time.sleep(0.01)
        assert evalsha_calls(url) == scripts + 1
        assert snapshot(url) == before  # the vote changed nothing
        again = client.post(path, json={"arm": 2, "epoch": 0}, headers=voter.headers)
        assert again.json()["outcome"] == "counted", again.text  # sent again: counted, once
