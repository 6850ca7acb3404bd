"""Idle sockets hold no place a request needs (the hardened edge, round two, item 1, replayed).

Before: DEXP_MAX_CONCURRENCY counted connections that had not become streams, so 5 addresses x 200
idle sockets (no byte sent) made 71 of 75 votes, 73 of 75 reads and new event streams answer 503.
Now (coordinator/server.py) the limit counts requests in flight; an idle connection costs a
descriptor and a few KB, the process keeps at most DEXP_MAX_IDLE_CONNECTIONS of them (the oldest
closed first), and each address still holds at most DEXP_MAX_CONNECTIONS_PER_CLIENT.

Here, at a small scale: 10 addresses x 20 idle sockets (ten times DEXP_MAX_CONCURRENCY = 20, three
times DEXP_MAX_IDLE_CONNECTIONS = 64); an honest device from another address then votes, reads
and opens a stream, every one served. That is the process's own bound, for the connections that
reach it: those tests turn the kernel's deferral off (DEXP_DEFER_ACCEPT_SECONDS=0). With it (the
default), a socket that sends nothing does not reach the process at all until its first bytes or
the deferral's end: the last test. benchmarks/bench_idle_sockets.py measures the full scale.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import httpx
import pytest

from tests.services.helpers import (
    ThreadedCoordinator,
    coordinator,
    coordinator_settings,
    create_experiment,
    enroll_agents,
    idle,
)
from tests.services.sse import Stream, wait_until

ADDRESSES = 10
PER_ADDRESS = 20  # DEXP_MAX_CONNECTIONS_PER_CLIENT: every attacker's address holds its maximum
CONCURRENCY = 20
MAX_IDLE = 64


@pytest.fixture
def server(redis_url: str, clean_redis: str) -> Iterator[ThreadedCoordinator]:
    settings = coordinator_settings(
        redis_url,
        max_connections_per_client=PER_ADDRESS,
        max_concurrency=CONCURRENCY,
        max_idle_connections=MAX_IDLE,
        keep_alive_seconds=30.0,
        header_timeout_seconds=30.0,  # the attack's sockets are not cut by the header deadline
        defer_accept_seconds=0,  # every socket reaches the process: its own bound is tried
    )
    with coordinator(settings) as running:
        yield running


@pytest.fixture
def deferred(redis_url: str, clean_redis: str) -> Iterator[ThreadedCoordinator]:
    """The default edge, but a deferral longer than any wait of the test."""
    settings = coordinator_settings(
        redis_url, max_connections_per_client=PER_ADDRESS, defer_accept_seconds=60
    )
    with coordinator(settings) as running:
        yield running


def closed(s: socket.socket) -> bool:
    """Whether the server has closed `s` (end of file or reset); an open one would block."""
    s.setblocking(False)
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def test_idle_sockets_of_many_addresses_leave_votes_reads_and_streams_served(
    server: ThreadedCoordinator,
) -> None:
    with httpx.Client(base_url=server.url, timeout=10.0, trust_env=False) as http:
        create_experiment(http, id="idle", arms=["A", "B", "C"], delta=0.25, eta=0.5)
        agents = enroll_agents(http, "idle", 3)
    attack = [s for i in range(ADDRESSES) for s in idle(server, f"127.0.1.{i + 1}", PER_ADDRESS)]
    try:
        assert len(attack) == 10 * CONCURRENCY
        # the process keeps MAX_IDLE idle connections: the oldest of the others are closed
        wait_until(
            lambda: sum(closed(s) for s in attack) >= len(attack) - MAX_IDLE, "idle ones reaped"
        )
        assert not any(closed(s) for s in attack[-MAX_IDLE // 2 :])  # the newest are kept
        with httpx.Client(base_url=server.url, timeout=10.0, trust_env=False) as http:
            for n, agent in enumerate(agents):
                vote = http.post(
                    "/v1/experiments/idle/votes", json={"arm": n % 3, "epoch": 0},
                    headers=agent.headers,
                )  # fmt: skip
                assert vote.status_code == 200, vote.text
            for path in ("/v1/experiments/idle", "/v1/experiments/idle/best-arm", "/readyz"):
                read = http.get(path)
                assert read.status_code == 200, read.text
        with Stream(server.url, "/v1/experiments/idle/events") as stream:
            assert stream.status == 200, stream.body
            assert stream.next_event().json()["experiment"] == "idle"
    finally:
        for s in attack:
            s.close()


def test_sockets_that_send_nothing_never_reach_the_process(deferred: ThreadedCoordinator) -> None:
    """Five times DEXP_MAX_CONNECTIONS_PER_CLIENT idle sockets from one address, then a device at
    that same address votes and reads: served, and no idle socket was closed. The kernel queues
    connections in order, so without the deferral the idle ones would have been accepted before
    the device's: counted against the address's bound (the device's connection then closed at
    once, as main's code did before DEXP_DEFER_ACCEPT_SECONDS) and all but PER_ADDRESS of them
    closed."""
    with httpx.Client(base_url=deferred.url, timeout=10.0, trust_env=False) as http:
        create_experiment(http, id="deferred", arms=["A", "B"], delta=0.25, eta=0.5)
        (agent,) = enroll_agents(http, "deferred", 1)
    attack = idle(deferred, "127.0.2.1", 5 * PER_ADDRESS)
    try:
        device = httpx.HTTPTransport(local_address="127.0.2.1")
        with httpx.Client(
            base_url=deferred.url, timeout=10.0, trust_env=False, transport=device
        ) as http:
            vote = http.post(
                "/v1/experiments/deferred/votes", json={"arm": 1, "epoch": 0}, headers=agent.headers
            )
            assert vote.status_code == 200, vote.text
            assert http.get("/v1/experiments/deferred").status_code == 200
        assert not any(closed(s) for s in attack)
    finally:
        for s in attack:
            s.close()


@pytest.fixture
def roomy(redis_url: str, clean_redis: str) -> Iterator[ThreadedCoordinator]:
    settings = coordinator_settings(
        redis_url,
        max_idle_connections=150,
        max_connections_per_client=0,
        header_timeout_seconds=30.0,
        defer_accept_seconds=0,
    )
    with coordinator(settings) as running:
        yield running


def test_streams_take_back_the_descriptors_idle_connections_borrowed(
    roomy: ThreadedCoordinator,
) -> None:
    """DEXP_MAX_IDLE_CONNECTIONS (150) bounds idle connections and streams together: 140 idle
    sockets are all kept while no stream is open, and 50 streams then close the 40 oldest. (A fixed share,
    which reserved every stream there could be, held fewer idle sockets under an attack that opened
    them again as fast as they were closed; here main's code closed none.)"""
    with httpx.Client(base_url=roomy.url, timeout=10.0, trust_env=False) as http:
        create_experiment(http, id="roomy", arms=["A", "B"], delta=0.25, eta=0.5)
    attack = idle(roomy, "127.0.3.1", 140)
    try:
        with httpx.Client(base_url=roomy.url, timeout=10.0, trust_env=False) as http:
            assert http.get("/readyz").status_code == 200  # every idle socket accepted by now
        assert not any(closed(s) for s in attack)
        with contextlib.ExitStack() as streams:
            for _ in range(50):
                stream = streams.enter_context(Stream(roomy.url, "/v1/experiments/roomy/events"))
                assert stream.status == 200, stream.body
            wait_until(lambda: all(closed(s) for s in attack[:40]), "the oldest 40 reaped")
            assert not any(closed(s) for s in attack[40:])
    finally:
        for s in attack:
            s.close()
