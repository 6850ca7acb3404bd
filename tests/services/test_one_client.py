"""One client cannot take the service down (the hardened-edge audit's first finding, replayed).

Before: DEXP_MAX_CONCURRENCY counted every connection with no per-client bound, so 1,010 idle
connections from one address made a real agent's 25 votes and /healthz all answer 503; and a body
trickled a byte every 5 s held a connection for over 30 s. Now (coordinator/server.py, edges.py):
a client address holds at most DEXP_MAX_CONNECTIONS_PER_CLIENT connections (a new one beyond is
closed as soon as it is accepted), /healthz is answered whatever the load, and a request's body
must arrive within DEXP_BODY_TIMEOUT_SECONDS (408, the connection closed).

Each test waits for conditions (a socket closed by the server, an answer), under a generous
overall deadline; clients bind distinct loopback addresses (127.0.0.x) to be distinct clients.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.services.helpers import (
    ADMIN_TOKEN,
    ThreadedCoordinator,
    coordinator,
    coordinator_settings,
    create_experiment,
    enroll_agents,
    idle,
)

PER_CLIENT = 10
CONCURRENCY = 25
DEADLINE = 30.0


@pytest.fixture
def server(redis_url: str, clean_redis: str) -> Iterator[ThreadedCoordinator]:
    settings = coordinator_settings(
        redis_url,
        max_connections_per_client=PER_CLIENT,
        max_concurrency=CONCURRENCY,
        body_timeout_seconds=1.0,
        # the process's own per-address bound is tried: every idle socket reaches it (the
        # kernel's deferral is tried in test_idle_sockets.py)
        defer_accept_seconds=0,
    )
    with coordinator(settings) as running:
        yield running


def closed_by_server(sockets: list[socket.socket]) -> int:
    """How many of `sockets` the server has closed by now (a read returns end of file, or a
    reset); one it keeps open would block."""
    count = 0
    for s in sockets:
        s.setblocking(False)
        try:
            count += s.recv(1) == b""
        except BlockingIOError:
            pass
        except ConnectionResetError:
            count += 1
    return count


def wait_for(condition: object, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {DEADLINE} s")
        time.sleep(0.02)


def test_idle_connections_of_one_address_cannot_starve_the_others(
    server: ThreadedCoordinator,
) -> None:
    with httpx.Client(base_url=server.url, timeout=10.0, trust_env=False) as client:
        create_experiment(client, id="crowded", arms=["A", "B", "C"], delta=0.25, eta=0.5)
        (agent,) = enroll_agents(client, "crowded", 1)
    attacker = idle(server, "127.0.0.3", PER_CLIENT + 40)
    try:
        # every connection beyond the bound is closed by the server; the first PER_CLIENT stay
        wait_for(lambda: closed_by_server(attacker[PER_CLIENT:]) == 40, "the extra connections")
        assert closed_by_server(attacker[:PER_CLIENT]) == 0
        with httpx.Client(base_url=server.url, timeout=10.0, trust_env=False) as client:
            for arm in (1, 2):
                vote = client.post(
                    "/v1/experiments/crowded/votes",
                    json={"arm": arm, "epoch": 0},
                    headers=agent.headers,
                )
                assert vote.status_code == 200, vote.text
            assert client.get("/healthz").status_code == 200
    finally:
        for s in attacker:
            s.close()


def test_healthz_is_answered_when_the_request_limit_is_full(
    server: ThreadedCoordinator,
) -> None:
    """Requests in flight fill DEXP_MAX_CONCURRENCY (bodies that do not come) and its line: other
    requests get 503 with Retry-After, /healthz 200."""
    head = (
        f"POST /v1/experiments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n"
        "Content-Length: 10\r\n\r\n"
    ).encode()
    crowd = [s for i in range(3, 9) for s in idle(server, f"127.0.0.{i}", PER_CLIENT)]
    try:
        for s in crowd:
            s.sendall(head)
        assert len(crowd) > 2 * CONCURRENCY
        with httpx.Client(base_url=server.url, timeout=10.0, trust_env=False) as client:
            wait_for(lambda: client.get("/readyz").status_code == 503, "the limit reached")
            busy = client.get("/v1/experiments")
            assert busy.status_code == 503 and "retry-after" in busy.headers
            assert client.get("/healthz").status_code == 200
    finally:
        for s in crowd:
            s.close()


def trickle(server: ThreadedCoordinator, head: bytes, body: bytes) -> bytes:
    """Send `head`, then `body` one byte every 0.2 s until the server answers; its answer."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE) as s:
        s.sendall(head)
        s.setblocking(False)
        answer = b""
        deadline = time.monotonic() + DEADLINE
        for byte in body:
            with contextlib.suppress(BlockingIOError):
                answer += s.recv(4096)
            if answer:
                break
            try:
                s.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break
            time.sleep(0.2)
            assert time.monotonic() < deadline, "no answer to a trickled body"
        s.setblocking(True)
        while b"\r\n\r\n" not in answer:
            chunk = s.recv(4096)
            if not chunk:
                break
            answer += chunk
        return answer


@pytest.mark.parametrize(
    "path, authorization",
    [
        ("/v1/experiments/slow/votes", "Bearer junk.token"),  # the vote fast path's candidate
        ("/v1/experiments", f"Bearer {ADMIN_TOKEN}"),  # an ordinary route, a valid credential
    ],
)
def test_a_trickled_body_gets_408_and_the_connection_closes(
    server: ThreadedCoordinator, path: str, authorization: str
) -> None:
    body = b'{"arm": 1, "epoch": 0}' + b" " * 200  # at 5 bytes/s: 44 s, far past the deadline
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: {authorization}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    answer = trickle(server, head, body)
    status_line = answer.split(b"\r\n", 1)[0]
    assert status_line.startswith(b"HTTP/1.1 408"), answer[:300]
    assert b"did not arrive within 1 s" in answer
    with httpx.Client(base_url=server.url, timeout=10.0, trust_env=False) as client:
        assert client.get("/v1/experiments").status_code == 200  # nothing else held up


@pytest.mark.parametrize(
    "path, authorization",
    [
        ("/v1/agents", ""),  # the red team's: anonymous enrollment
        ("/v1/agents", "Authorization: Bearer not-a-ticket\r\n"),
        ("/v1/experiments", "Authorization: Bearer wrong-admin-token\r\n"),
        ("/v1/experiments/slow/votes", "Authorization: Bearer no-dot\r\n"),
    ],
)
def test_a_trickled_body_without_a_valid_credential_gets_401_at_once(
    server: ThreadedCoordinator, path: str, authorization: str
) -> None:
    """The credential is checked before a byte of the body is read: 401 while the body has not
    begun (before, the body was read first: 408 after DEXP_BODY_TIMEOUT_SECONDS)."""
    body = b'{"experiment": "slow"}' + b" " * 200
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\n{authorization}"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE) as s:
        s.sendall(head)  # and not one byte of the body
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = s.recv(4096)
            assert chunk, answer
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 401"), answer[:300]
    assert b"connection: close" in answer.lower()
