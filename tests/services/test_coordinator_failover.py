"""The agents' client with several coordinators (clients/coordinator.py), against real coordinator
processes (uvicorn) on one real Redis: requests spread over the coordinators; one killed with
SIGKILL, the next request succeeds on another with no error surfaced, logged once; back, it is used
again; a coordinator answering 503 (its Redis gone) is left for another; every coordinator down,
the request waits with back-off until one is back (with an agent's defaults, through an 8 s
outage). Each coordinator's own vote counter (/metrics) says which one received what. Nothing waits
for a span of time and hopes: each step waits for the condition it needs (a cool-off's end, which
the client exposes; a coordinator answering; a request's result), under a generous deadline.
"""

from __future__ import annotations

import logging
import random
import re
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import redis

from agent.settings import AgentSettings
from clients.coordinator import CoordinatorClient, coordinator_urls
from common.algorithms import AlgorithmConfig
from dexp.demo import LocalStack, distinct_free_port

from .helpers import ADMIN_TOKEN, ENROLLMENT_SECRET, RedisServer

EXPERIMENT = "fo"
ARMS = ["a", "b", "c", "d"]
CONFIG = AlgorithmConfig(delta=0.05, eta=0.9)  # M = 29: no arm leaves with the votes below
CLIENTS = 12
COUNTED = re.compile(r'^dexp_votes_total\{outcome="counted"\} ([\d.]+)$', re.MULTILINE)
WAIT = re.compile(r"; retrying in ([\d.]+)s$")  # the client's line before a back-off wait


def coordinator_env(redis_url: str, port: int) -> dict[str, str]:
    return {
        "DEXP_REDIS_URL": redis_url,
        "DEXP_PORT": str(port),
        "DEXP_HOST": "127.0.0.1",
        "DEXP_ADMIN_TOKEN": ADMIN_TOKEN,
        "DEXP_ENROLLMENT_SECRET": ENROLLMENT_SECRET,
        "DEXP_EXPERIMENT": EXPERIMENT,
        "DEXP_ARMS": ",".join(ARMS),
        "DEXP_LOG_LEVEL": "warning",
        # every algorithm setting but LDP's B, which the coordinator refuses for a voting one
        **{
            f"DEXP_{k.upper()}": str(v)
            for k, v in CONFIG.__dict__.items()
            if k != "reports_per_agent"
        },
    }


@pytest.fixture(scope="module")
def coordinators(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """Two coordinator processes, coordinator-0 and coordinator-1, on the session's Redis (emptied
    first), for the whole module: each takes seconds to start."""
    client = redis.Redis.from_url(redis_url)
    try:
        client.flushall()
    finally:
        client.close()
    stack = LocalStack(tmp_path_factory.mktemp("coordinators"))
    ports: set[int] = set()
    try:
        for i in range(2):
            port = distinct_free_port(ports)
            name = f"coordinator-{i}"
            stack.coordinators[name] = f"http://127.0.0.1:{port}"
            stack.spawn(
                name, [sys.executable, "-m", "coordinator"], coordinator_env(redis_url, port)
            )
        stack.wait_coordinator()
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def stack(coordinators: LocalStack) -> LocalStack:
    """Both coordinators running (one a test killed is started again)."""
    for name in ("coordinator-0", "coordinator-1"):
        if coordinators.named[name].poll() is not None:
            coordinators.restart(name)
    coordinators.wait_coordinator()
    return coordinators


def counted(url: str) -> int:
    """Votes this coordinator process counted since it started (its own /metrics)."""
    found = COUNTED.search(httpx.get(f"{url}/metrics", timeout=5).text)
    return int(float(found.group(1))) if found else 0


def test_the_urls_are_checked_one_by_one() -> None:
    assert coordinator_urls(" http://a:1/ ,https://b.example/prefix,http://a:1") == [
        "http://a:1",
        "https://b.example/prefix",
    ]
    assert coordinator_urls("http://[::1]:8000") == ["http://[::1]:8000"]
    for bad, named in [
        ("http://a:1,localhost:8000", "'localhost:8000' is not an http:// or https:// URL"),
        ("http://a:1,,http://b:2", "an empty URL"),
        ("http://a:1,", "an empty URL"),
        ("http://a:70000", "'http://a:70000': the port is not between 1 and 65535"),
        ("ftp://a", "'ftp://a' is not an http:// or https:// URL"),
    ]:
        with pytest.raises(ValueError, match=re.escape(named)):
            coordinator_urls(bad)


def test_requests_spread_fail_over_when_one_is_killed_and_come_back(
    stack: LocalStack, caplog: pytest.LogCaptureFixture
) -> None:
    urls = stack.coordinator_urls
    both = ",".join(urls)
    random.seed(2024)  # each client draws its home coordinator
    clients = [CoordinatorClient(both, cool_off_seconds=0.5) for _ in range(CLIENTS)]
    try:
        tokens = [c.enroll(ENROLLMENT_SECRET, EXPERIMENT)["token"] for c in clients]
        homes = [c.home for c in clients]
        on = [homes.count(0), homes.count(1)]
        assert min(on) >= 3, homes  # spread over both
        for client, token in zip(clients, tokens, strict=True):
            assert client.vote(EXPERIMENT, token, 1, 0)["counted"]
            assert client.url == urls[client.home]  # kept there
        assert [counted(u) for u in urls] == on  # each coordinator got its clients' votes

        stack.kill("coordinator-0")  # SIGKILL: its keep-alive connections break
        caplog.set_level(logging.WARNING, logger="dexp.agent.client")
        for client, token in zip(clients, tokens, strict=True):
            assert client.vote(EXPERIMENT, token, 2, 0)["counted"]  # no error surfaced
            assert client.url == urls[1]
            assert client.failovers == (client.home == 0)
        # the clients that moved, and only they, avoid coordinator-0 for a while
        cool_off_ends = [client.cool_off_ends(urls[0]) for client in clients]
        assert [end > 0 for end in cool_off_ends] == [home == 0 for home in homes]
        assert counted(urls[1]) == on[1] + CLIENTS  # every second vote went to coordinator-1
        lines = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
        assert len(lines) == on[0], lines  # one line per client that moved
        assert all(f"coordinator {urls[0]} failed (" in line for line in lines), lines
        assert all(f"sent to {urls[1]} instead" in line for line in lines), lines

        stack.restart("coordinator-0")  # waits until it answers
        # A client goes home at its first request after its cool-off (0.5 s from its failure)
        # ends, not when the restart is done (0.4 s on an idle machine): wait for that moment.
        time.sleep(max(0.0, max(cool_off_ends) - time.monotonic()))
        for client, token in zip(clients, tokens, strict=True):
            assert client.vote(EXPERIMENT, token, 3, 0)["counted"]
            assert client.url == urls[client.home]  # back home
        assert counted(urls[0]) == on[0]  # the new process counted its clients' third votes
        assert counted(urls[1]) == on[1] + CLIENTS + on[1]
        votes = httpx.get(f"{urls[0]}/v1/experiments/{EXPERIMENT}", timeout=5).json()["votes"]
        assert votes == [0, CLIENTS, CLIENTS, CLIENTS]
    finally:
        for client in clients:
            client.close()


def test_a_coordinator_answering_503_is_left_for_another(stack: LocalStack, tmp_path: Path) -> None:
    """A third coordinator whose own Redis is killed answers 503 (the store is unavailable): the
    client, homed on it, gets its answer from coordinator-1 at once."""
    own = RedisServer().start()
    port = distinct_free_port(set())
    third = f"http://127.0.0.1:{port}"
    stack.coordinators["coordinator-2"] = third
    stack.spawn(
        "coordinator-2", [sys.executable, "-m", "coordinator"], coordinator_env(own.url, port)
    )
    stack.wait_coordinator("coordinator-2")
    own.stop()
    assert httpx.get(f"{third}/v1/experiments/{EXPERIMENT}", timeout=10).status_code == 503
    client = CoordinatorClient(f"{third},{stack.coordinators['coordinator-1']}", start=0)
    try:
        assert client.experiment(EXPERIMENT)["id"] == EXPERIMENT
    finally:
        client.close()
        stack.kill("coordinator-2")
        del stack.coordinators["coordinator-2"]
    assert client.failovers == 1 and client.url == stack.coordinators["coordinator-1"]
    # at once: the failover is the request's only retry (a back-off or a Retry-After wait would
    # be another one)
    assert (client.retries, client.rate_limited) == (1, 0)


def test_a_dead_coordinator_is_retried_after_its_cool_off_and_logged_once(
    stack: LocalStack, caplog: pytest.LogCaptureFixture
) -> None:
    """Cool-off 0.05 s: a client homed on the dead coordinator tries it again at its first request
    after each cool-off (doubled per failure in a row), never sooner, and fails over each time,
    every request answered; one warning line about it (FAILOVER_LOG_SECONDS)."""
    urls = stack.coordinator_urls
    stack.kill("coordinator-0")
    caplog.set_level(logging.WARNING, logger="dexp.agent.client")
    client = CoordinatorClient(",".join(urls), start=0, cool_off_seconds=0.05)
    ends: list[float] = []  # the cool-off's end after each failover
    deadline = time.monotonic() + 30  # a safety net: the cool-offs add up to 0.35 s
    try:
        while client.failovers < 4:
            assert time.monotonic() < deadline, f"{client.failovers} failovers"
            assert client.experiment(EXPERIMENT)["id"] == EXPERIMENT
            assert client.url == urls[1]
            if client.failovers > len(ends):
                ends.append(client.cool_off_ends(urls[0]))
            time.sleep(0.02)
    finally:
        client.close()
    assert len(ends) == client.failovers == 4
    # each try came after the previous cool-off ended, and started a cool-off twice as long
    for k in range(1, 4):
        assert ends[k] - ends[k - 1] >= 0.05 * 2**k - 1e-9, (k, ends)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"coordinator {urls[0]} failed (ConnectError")


OUTAGE_SECONDS = 8.0  # docs/RELIABILITY.md: the agents' default back-off rides out such an outage


def test_every_coordinator_down_waits_until_one_is_back(
    coordinators: LocalStack, caplog: pytest.LogCaptureFixture
) -> None:
    """Both killed: with give_up_after and nobody back, ConnectionError as with one URL. With an
    agent's defaults (no give-up; back-off from 0.05 s, doubled up to DEXP_RETRY_MAX_SECONDS,
    5 s), a request rides out an 8 s outage of both: it retries over both URLs, its waits double up
    to the cap, and it succeeds once coordinator-1 is back. The restart comes once the outage has
    lasted 8 s and the client waits at its cap, whatever the machine's speed."""
    stack = coordinators  # as they are: both are killed anyway
    urls = stack.coordinator_urls
    stack.kill("coordinator-0")
    stack.kill("coordinator-1")
    down_since = time.monotonic()
    quick = CoordinatorClient(",".join(urls), give_up_after=0.5, retry_max_seconds=0.2)
    try:
        with pytest.raises(ConnectionError, match="coordinator unreachable"):
            quick.experiment(EXPERIMENT)
    finally:
        quick.close()

    cap = AgentSettings.model_fields["retry_max_seconds"].default
    caplog.set_level(logging.WARNING, logger="dexp.agent.client")
    caplog.clear()  # the quick client's lines
    client = CoordinatorClient(",".join(urls), start=0)  # as agent/host.py builds it
    assert (client.retry_max_seconds, client.give_up_after) == (cap, None)

    def waits() -> list[str]:
        """The back-off waits the client logged, in order ("0.05", ...)."""
        found = (WAIT.search(r.getMessage()) for r in list(caplog.records))
        return [m.group(1) for m in found if m]

    try:
        with ThreadPoolExecutor(1) as pool:
            request = pool.submit(client.experiment, EXPERIMENT)
            deadline = time.monotonic() + 60  # a safety net: the cap is reached after 6.35 s
            while time.monotonic() - down_since < OUTAGE_SECONDS or f"{cap:.2f}" not in waits():
                assert not request.done(), request.result()
                assert time.monotonic() < deadline, waits()
                time.sleep(0.05)
            stack.restart("coordinator-1")  # waits until it answers
            assert request.result(timeout=60)["id"] == EXPERIMENT
    finally:
        client.close()
    assert client.url == urls[1]
    logged = waits()
    assert logged == [f"{min(0.05 * 2**k, cap):.2f}" for k in range(len(logged))], logged
    assert logged.count(f"{cap:.2f}") >= 1  # the cap was reached, and the request still waited
