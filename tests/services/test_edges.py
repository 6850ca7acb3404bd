"""The coordinator's HTTP edge against real servers: body and header limits, forwarded headers,
header and keep-alive timeouts, the connection limit (coordinator/edges.py, coordinator/server.py).

The memory of a 100 MB body is measured on the real `python -m coordinator` process (its peak RSS,
VmHWM); the rest runs on ThreadedCoordinator, which serves through the same uvicorn_config. Slow and
half-sent requests are written on raw sockets, since an HTTP client would not send them.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

import coordinator.server as server_module
from coordinator.addresses import client_group
from coordinator.server import trusted_proxies
from tests.prerequisites import missing

from .helpers import (
    ADMIN_TOKEN,
    DEFAULT_EXPERIMENT,
    ENROLLMENT_SECRET,
    ThreadedCoordinator,
    admin_headers,
    bearer,
    coordinator,
    coordinator_settings,
    create_experiment,
    enroll_agents,
    free_port,
    snapshot,
)

MB = 1 << 20
ATTACK = 100 * MB
LIMIT = 4096  # DEXP_MAX_BODY_BYTES of the ThreadedCoordinator servers (the process: the default)
HEADER_TIMEOUT = 1.0
SLACK = 2.0  # generous: a timeout must fire within its time plus this, never much later
CLOCK = 0.001  # uvloop counts a timer in whole ms from a truncated now: up to 1 ms early


# -- raw HTTP ----------------------------------------------------------------------------------
def connect(server: ThreadedCoordinator) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def request(
    path: str = "/healthz", method: str = "GET", headers: str = "", body: bytes = b""
) -> bytes:
    length = f"Content-Length: {len(body)}\r\n" if body else ""
    return f"{method} {path} HTTP/1.1\r\nHost: t\r\n{headers}{length}\r\n".encode() + body


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def read_reply(sock: socket.socket) -> Reply:
    """One response with a Content-Length (all of the coordinator's)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
    while len(rest) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "closed in the middle of a response"
        rest += chunk
    return Reply(int(status_line.split()[1]), headers, rest)


def seconds_until_closed(sock: socket.socket, wait: float, since: float | None = None) -> float:
    """How long from `since` (a time.monotonic(); default: now) until the server closes `sock`
    (reading and dropping whatever it says); fails if it is still open after `wait` seconds
    from now."""
    start = time.monotonic() if since is None else since
    sock.settimeout(wait)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        pytest.fail(f"the server kept the connection open for {wait} s")
    except ConnectionResetError:
        pass
    return time.monotonic() - start


# -- servers -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def edge(redis_url: str) -> Iterator[ThreadedCoordinator]:
    """Small body limit, 1 s header timeout, no trusted proxy, 3 enrollments per client at once."""
    settings = coordinator_settings(
        redis_url,
        max_body_bytes=LIMIT,
        header_timeout_seconds=HEADER_TIMEOUT,
        keep_alive_seconds=30.0,
        enroll_burst=3,
        enroll_rate=0.001,
    )
    with coordinator(settings) as server:
        yield server


@pytest.fixture(scope="module")
def proxied(redis_url: str) -> Iterator[ThreadedCoordinator]:
    """As `edge`, behind a proxy on 127.0.0.1 (DEXP_TRUSTED_PROXIES)."""
    settings = coordinator_settings(
        redis_url, trusted_proxies="127.0.0.1", enroll_burst=3, enroll_rate=0.001
    )
    with coordinator(settings) as server:
        yield server


@pytest.fixture
def edge_client(edge: ThreadedCoordinator, clean_redis: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=edge.url, timeout=10.0, trust_env=False) as http:
        yield http


@dataclass
class Process:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def peak_rss(self) -> int:
        """VmHWM: the most resident memory the process ever had, in bytes."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmHWM in /proc/<pid>/status")


@pytest.fixture(scope="module")
def coordinator_process(
    redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Process]:
    """`python -m coordinator` with its default limits, configured by DEXP_* variables only."""
    if not Path("/proc/self/status").exists():
        missing("peak RSS is read from /proc (Linux)")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEXP_")}
    env.update(
        DEXP_REDIS_URL=redis_url,
        DEXP_HOST="127.0.0.1",
        DEXP_PORT=str(port),
        DEXP_ADMIN_TOKEN=ADMIN_TOKEN,
        DEXP_ENROLLMENT_SECRET=ENROLLMENT_SECRET,
        DEXP_EXPERIMENT=DEFAULT_EXPERIMENT,
        DEXP_LOG_LEVEL="warning",
    )
    log = tmp_path_factory.mktemp("coordinator") / "coordinator.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "coordinator"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    running = Process(process, f"http://127.0.0.1:{port}", log)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, f"the coordinator exited: {log.read_text()}"
            assert time.monotonic() < deadline, f"the coordinator did not start: {log.read_text()}"
            try:
                if httpx.get(running.url + "/readyz", trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        yield running
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# -- the body limit ----------------------------------------------------------------------------
def megabytes(n: int) -> Iterator[bytes]:
    chunk = b"x" * MB
    for _ in range(n):
        yield chunk


MISSING_TOKEN = {"detail": "missing bearer token (Authorization: Bearer ...)"}
TOO_LARGE = {"detail": "request body too large: at most 65536 bytes"}
ATTACKS = {  # the request's headers, the answer's status and body
    # anonymous: refused from the headers alone by the credential gate, before any body byte
    "streamed-anonymous": ({}, 401, MISSING_TOKEN),  # no Content-Length: chunked
    "declared-anonymous": ({"Content-Length": str(ATTACK)}, 401, MISSING_TOKEN),
    # a valid admin token passes every credential check: only the body limit stops it
    "streamed-admin": ({"Authorization": f"Bearer {ADMIN_TOKEN}"}, 413, TOO_LARGE),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_100_mb_body_is_refused_quickly_without_being_held(
    coordinator_process: Process, clean_redis: str, attack: str
) -> None:
    headers, status, detail = ATTACKS[attack]
    with httpx.Client(base_url=coordinator_process.url, timeout=30, trust_env=False) as client:
        # warm the paths (imports, caches) so that the peak measures the body, not the first call
        client.post("/v1/experiments", content=b"x" * MB)
        client.post("/v1/experiments", content=megabytes(1))
        client.post("/v1/experiments", content=megabytes(1), headers=admin_headers())
        before, peak = snapshot(clean_redis), coordinator_process.peak_rss()

        response = client.post("/v1/experiments", content=megabytes(100), headers=headers)

        growth = coordinator_process.peak_rss() - peak
        assert response.status_code == status, response.text
        assert response.json() == detail
        assert response.headers["connection"] == "close"  # the rest is not read
        assert growth < 20 * MB, f"peak RSS grew by {growth / MB:.1f} MB (600 MB before the limit)"
        assert snapshot(clean_redis) == before
        assert client.get("/healthz").status_code == 200


def test_a_declared_length_over_the_limit_is_refused_before_any_body_byte(
    edge: ThreadedCoordinator,
) -> None:
    with connect(edge) as sock:
        credential = f"Authorization: Bearer {ADMIN_TOKEN}\r\n"
        sock.sendall(
            request("/v1/experiments", "POST", f"{credential}Content-Length: {ATTACK}\r\n")
        )
        reply = read_reply(sock)  # not one byte of the body was sent
        assert reply.status == 413
        assert reply.json() == {"detail": f"request body too large: at most {LIMIT} bytes"}
        assert reply.headers["content-type"] == "application/json"
        seconds_until_closed(sock, 5)  # and the connection is closed: the body is never read


ROUTES = [  # with a credential that passes the credential gate (it checks before the body)
    ("POST", "/v1/experiments", ADMIN_TOKEN),
    ("POST", "/v1/agents", ENROLLMENT_SECRET),
    ("POST", "/v1/experiments/limit/votes", "limit-0.secret"),  # only its form, for a vote
    ("POST", "/v1/experiments/limit/reset", ADMIN_TOKEN),
    ("DELETE", "/v1/experiments/limit", ADMIN_TOKEN),
    ("GET", "/healthz", ADMIN_TOKEN),
    ("PUT", "/no/such/route", ADMIN_TOKEN),
]


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize(("method", "path", "token"), ROUTES)
def test_a_body_just_over_the_limit_is_413_on_every_route(
    edge_client: httpx.Client, method: str, path: str, token: str, chunked: bool
) -> None:
    body = b"{" + b" " * (LIMIT - 1) + b"}"  # LIMIT + 1 bytes
    content = iter([body[:100], body[100:]]) if chunked else body
    response = edge_client.request(method, path, content=content, headers=bearer(token))
    assert response.status_code == 413, response.text
    assert response.json() == {"detail": f"request body too large: at most {LIMIT} bytes"}


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_of_exactly_the_limit_is_served(edge_client: httpx.Client, chunked: bool) -> None:
    valid = json.dumps({"id": "at-limit", "arms": ["a", "b"]}).encode()
    body = valid + b" " * (LIMIT - len(valid))  # JSON allows trailing white space
    assert len(body) == LIMIT
    content = iter([body[:100], body[100:]]) if chunked else body
    created = edge_client.post(
        "/v1/experiments",
        content=content,
        headers={**admin_headers(), "Content-Type": "application/json"},
    )
    assert created.status_code == 201, created.text
    assert edge_client.get("/v1/experiments/at-limit").json()["id"] == "at-limit"


# -- forwarded headers -------------------------------------------------------------------------
def enroll_spoofed(client: httpx.Client, experiment: str, forwarded_for: list[str]) -> list[int]:
    return [
        client.post(
            "/v1/agents",
            json={"experiment": experiment},
            headers={**bearer(ENROLLMENT_SECRET), "X-Forwarded-For": address},
        ).status_code
        for address in forwarded_for
    ]


SPOOFED = [f"203.0.113.{i}" for i in range(1, 6)]


def test_forwarded_for_is_ignored_without_trusted_proxies(edge_client: httpx.Client) -> None:
    create_experiment(edge_client, id="spoof", arms=["a", "b"])
    # a fresh spoofed address per request: still one client, whose burst is 3
    assert enroll_spoofed(edge_client, "spoof", SPOOFED) == [201, 201, 201, 429, 429]


def test_forwarded_for_names_the_client_behind_a_trusted_proxy(
    proxied: ThreadedCoordinator, clean_redis: str
) -> None:
    with httpx.Client(base_url=proxied.url, timeout=10.0, trust_env=False) as client:
        create_experiment(client, id="proxied", arms=["a", "b"])
        assert enroll_spoofed(client, "proxied", SPOOFED) == [201] * 5  # 5 clients, 1 each
        # the forwarded address is the client whose limits apply
        assert enroll_spoofed(client, "proxied", ["198.51.100.7"] * 4) == [201, 201, 201, 429]
        # the proxy's own requests (no header) are its own client
        assert len(enroll_agents(client, "proxied", 3)) == 3


def test_ipv6_clients_are_counted_by_their_64_as_at_the_proxy(
    redis_url: str, clean_redis: str
) -> None:
    """Failed credentials from 21 addresses of one IPv6 /64 share one window (20 a minute): the
    21st is throttled, as if one address (deploy/proxy groups IPv6 by /64 too); another /64 has a
    window of its own."""

    def me(address: str) -> int:
        headers = {"Authorization": "Bearer x.y", "X-Forwarded-For": address}
        return http.get("/v1/agents/me", headers=headers).status_code

    settings = coordinator_settings(
        redis_url, trusted_proxies="127.0.0.1", auth_failure_limit="20/minute"
    )
    with (
        coordinator(settings) as server,
        httpx.Client(base_url=server.url, trust_env=False) as http,
    ):
        statuses = [me(f"2001:db8:0:1:{i:x}::1") for i in range(1, 22)]
        assert statuses == [401] * 20 + [429]
        assert me("2001:db8:0:2::1") == 401


def test_client_groups() -> None:
    assert client_group("203.0.113.7") == "203.0.113.7"
    assert client_group("2001:db8:1:2:aaaa::1") == client_group("2001:db8:1:2::ffff")
    assert client_group("2001:db8:1:2::1") == "2001:db8:1:2::/64"
    assert client_group("2001:db8:1:3::1") != client_group("2001:db8:1:2::1")
    assert client_group("::ffff:203.0.113.7") == "203.0.113.7"
    assert client_group("testclient") == "testclient"


def test_trusted_proxies_are_checked_addresses() -> None:
    assert trusted_proxies("") == []
    assert trusted_proxies(" 127.0.0.1, 10.1.2.3/8 ,::1") == [
        "127.0.0.1/32",
        "10.0.0.0/8",
        "::1/128",
    ]
    for wrong in ("*", "proxy.internal", "10.0.0.0/33"):
        with pytest.raises(ValueError, match="DEXP_TRUSTED_PROXIES"):
            trusted_proxies(wrong)


# -- slow clients ------------------------------------------------------------------------------
def test_half_sent_headers_are_cut_off_at_the_header_timeout(edge: ThreadedCoordinator) -> None:
    """Closed at the header deadline: not before it (counted from before the connection, which
    starts it), and not much after."""
    connecting = time.monotonic()
    with connect(edge) as sock:
        sock.sendall(b"POST /v1/agents HTTP/1.1\r\nHost: t\r\n")  # ... and nothing more
        closed = seconds_until_closed(sock, HEADER_TIMEOUT + SLACK, since=connecting)
        assert closed >= HEADER_TIMEOUT - CLOCK


def test_headers_trickled_byte_by_byte_are_cut_off_too(edge: ThreadedCoordinator) -> None:
    """The deadline is for the whole headers: a client that keeps sending does not extend it."""
    with connect(edge) as sock:
        start = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        try:
            while time.monotonic() - start < HEADER_TIMEOUT + SLACK:
                sock.sendall(b"X-Slow: 1\r\n")
                time.sleep(0.1)
            pytest.fail("the server still took header bytes after the header timeout")
        except (BrokenPipeError, ConnectionResetError):
            pass
        seconds_until_closed(sock, SLACK)


def test_the_next_requests_headers_are_due_after_a_response(edge: ThreadedCoordinator) -> None:
    """The deadline starts again once a response is sent (after the request was): not before
    HEADER_TIMEOUT from the request, though the connection is older, and not much after."""
    with connect(edge) as sock:
        asked = time.monotonic()
        sock.sendall(request())
        assert read_reply(sock).status == 200
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")  # on the kept-alive connection, then a stall
        closed = seconds_until_closed(sock, HEADER_TIMEOUT + SLACK, since=asked)
        assert closed >= HEADER_TIMEOUT - CLOCK


def test_headers_over_16_kib_are_431(edge: ThreadedCoordinator) -> None:
    with connect(edge) as sock:
        sock.sendall(request(headers="X-Big: " + "b" * 8_000 + "\r\n"))
        assert read_reply(sock).status == 200  # big but within the bound
        sock.sendall(request(headers="X-Big: " + "b" * 20_000 + "\r\n"))
        reply = read_reply(sock)
        assert reply.status == 431
        assert reply.json() == {"detail": "request headers too large: at most 16384 bytes"}
        seconds_until_closed(sock, 5)


def test_an_idle_keep_alive_connection_is_closed_after_keep_alive_seconds(
    redis_url: str, clean_redis: str
) -> None:
    """Kept after a response (a second request is served on it), then closed once idle for
    keep_alive_seconds from the last response: not before (counted from before the request),
    and not much after (uvicorn's default is 5 s and the header deadline 30 s: only
    keep_alive_seconds fits)."""
    settings = coordinator_settings(redis_url, keep_alive_seconds=1.0, header_timeout_seconds=30.0)
    with coordinator(settings) as server, connect(server) as sock:
        sock.sendall(request())
        assert read_reply(sock).status == 200
        asked = time.monotonic()
        sock.sendall(request())  # the connection serves again
        assert read_reply(sock).status == 200
        assert seconds_until_closed(sock, 1.0 + SLACK, since=asked) >= 1.0 - CLOCK


# -- the limit of requests in flight ----------------------------------------------------------
def slow_request(server: ThreadedCoordinator) -> socket.socket:
    """A request in flight until its body comes (its headers whole, not one byte of its body)."""
    sock = connect(server)
    credential = f"Authorization: Bearer {ADMIN_TOKEN}\r\nContent-Length: 10\r\n"
    sock.sendall(request("/v1/experiments", "POST", credential))
    return sock


def test_requests_beyond_max_concurrency_wait_in_line_then_get_a_json_503(
    redis_url: str, clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DEXP_MAX_CONCURRENCY counts requests, not connections: 2 in flight, 2 waiting in line,
    the fifth refused at once; those in line get 503 when their wait ends; /healthz always."""
    monkeypatch.setattr(server_module, "QUEUE_SECONDS", 1.0)
    settings = coordinator_settings(redis_url, max_concurrency=2, body_timeout_seconds=60.0)
    with coordinator(settings) as server:
        places = server.server.config.http_protocol_class.places
        held = [slow_request(server) for _ in range(4)]
        try:
            wait(lambda: places.running == 2 and len(places.waiting) == 2, "2 in flight, 2 in line")
            with connect(server) as fifth:
                fifth.sendall(request("/readyz"))
                reply = read_reply(fifth)
                assert reply.status == 503
                assert reply.headers["retry-after"] == "1"
                assert reply.headers["content-type"] == "application/json"
                assert "DEXP_MAX_CONCURRENCY" in reply.json()["detail"]
                seconds_until_closed(fifth, 5)
            with connect(server) as probe:  # liveness is answered over the limit
                probe.sendall(request("/healthz"))
                assert read_reply(probe).status == 200
            for sock in held[2:]:  # the line's wait ended: 503, retry later
                assert read_reply(sock).status == 503
            for sock in held[:2]:
                sock.close()
            wait(lambda: places.running == 0, "the places given back")
            with connect(server) as again:
                again.sendall(request("/readyz"))
                assert read_reply(again).status == 200
        finally:
            for sock in held:
                sock.close()


def wait(condition: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.01)


# -- transport errors --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "framing",
    [
        "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
        "Content-Length: 5\r\nContent-Length: 6\r\n",
    ],
    ids=["length-and-chunked", "two-lengths"],
)
def test_an_ambiguous_body_length_is_a_json_400(edge: ThreadedCoordinator, framing: str) -> None:
    with connect(edge) as sock:
        sock.sendall(request("/v1/experiments", "POST", framing) + b"hello")
        reply = read_reply(sock)
        assert reply.status == 400
        assert reply.headers["content-type"] == "application/json"
        assert "Content-Length" in reply.json()["detail"]
        seconds_until_closed(sock, 5)
