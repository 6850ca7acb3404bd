"""How uvicorn serves the coordinator: one place for the HTTP edge's settings and limits.

uvicorn's defaults are made for a trusted network. This module sets, from Settings:

- forwarded headers: believed only from DEXP_TRUSTED_PROXIES. uvicorn's default believes
  X-Forwarded-For from loopback (or FORWARDED_ALLOW_IPS), and a spoofed address gets a fresh
  per-client rate-limit bucket;
- a deadline for request headers (DEXP_HEADER_TIMEOUT_SECONDS), which uvicorn lacks: a client that
  trickles its headers would hold a connection for ever. A client must deliver complete headers
  within it after connecting, and after the previous response on a keep-alive connection;
- a bound on the size of request headers (MAX_HEADER_BYTES, 431): with httptools uvicorn has none,
  and 200 MB of headers took 270 MB of memory;
- the keep-alive timeout (DEXP_KEEP_ALIVE_SECONDS) and the connection limit (DEXP_MAX_CONCURRENCY),
  whose overload answer is the API's JSON 503 with Retry-After instead of uvicorn's plain text;
- long-lived streams (GET /v1/experiments/{id}/events) outside that limit: they have bounds of
  their own (DEXP_MAX_SUBSCRIBERS, coordinator/events.py), so that subscribers never starve votes
  and probes. A stream ends when the server shuts down (uvicorn would wait for it for ever).

The deadline, the header bound and the JSON 503 live in a small subclass of uvicorn's HTTP protocol
(httptools when importable, as http="auto" picks: the vote path stays fast; else h11).
The body limit is an ASGI middleware (coordinator/edges.py).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import resource
import socket
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from typing import Any

import uvicorn
from prometheus_client import Counter as MetricCounter
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol

from coordinator.addresses import client_group
from coordinator.asgi import (
    STREAM_HOOK,
    ASGIApp,
    Receive,
    Scope,
    Send,
    StreamHandle,
    send_json,
    send_problem,
)
from coordinator.metrics import refused
from coordinator.settings import Settings

MAX_HEADER_BYTES = 16 * 1024  # request line and headers; h11's default limit, applied to both
log = logging.getLogger("uvicorn.error")
REFUSED_CONNECTIONS = MetricCounter(
    "dexp_connections_refused_total",
    "Connections closed at once: their client address held DEXP_MAX_CONNECTIONS_PER_CLIENT",
)
REAPED_CONNECTIONS = MetricCounter(
    "dexp_idle_connections_reaped_total",
    "Idle connections (no request in flight) closed because the process held DEXP_MAX_IDLE_CONNECTIONS",
)


def trusted_proxies(value: str) -> list[str]:
    """The addresses and networks of DEXP_TRUSTED_PROXIES, checked: a typo must not pass silently
    (uvicorn would compare it as a literal and trust nobody), and "*" is refused (it would trust
    any client's X-Forwarded-For; name the proxies' network, e.g. 10.0.0.0/8)."""
    networks = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        try:
            network = ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ValueError(
                f"DEXP_TRUSTED_PROXIES: {item!r} is not an IP address or network"
            ) from None
        networks.append(str(network))
    return networks


QUEUE_SECONDS = 5.0  # a request waits this long at most for a place (DEXP_MAX_CONCURRENCY)
RETRY_AFTER_MAX = 30  # the longest Retry-After the overloaded answer gives
OPEN_FILES_RESERVE = 256  # descriptors kept for Redis, logs and the listening socket
MIN_IDLE = 64  # idle connections kept whatever the streams (within OPEN_FILES_RESERVE's room)


async def overloaded(send: Send, retry_after: int) -> None:
    """The answer beyond DEXP_MAX_CONCURRENCY requests in flight and as many waiting: the API's
    JSON error, with the Retry-After the places chose."""
    refused("overloaded")  # before the app: its request metrics never see it
    await send_problem(
        send,
        503,
        "the coordinator has too many requests in flight (DEXP_MAX_CONCURRENCY); retry after "
        "Retry-After seconds",
        {"Retry-After": str(retry_after), "Connection": "close"},
    )


TOO_LARGE_HEADERS = f'{{"detail":"request headers too large: at most {MAX_HEADER_BYTES} bytes"}}'
BAD_REQUEST = (
    b'{"detail":"invalid HTTP request: a malformed request line or header, or an ambiguous body '
    b'length (Content-Length with Transfer-Encoding, or Content-Length twice)"}'
)


async def headers_too_large(scope: Scope, receive: Receive, send: Send) -> None:
    """The answer to a request line and headers over MAX_HEADER_BYTES (httptools)."""
    await send_json(send, 431, TOO_LARGE_HEADERS.encode(), {"Connection": "close"})


class Admission:
    """One request's place among DEXP_MAX_CONCURRENCY, given back once (when the request ends, or
    earlier when it becomes a long-lived stream)."""

    __slots__ = ("held", "places")

    def __init__(self, places: Places) -> None:
        self.places = places
        self.held = True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.places.leave()


class Places:
    """The requests in flight of one server, at most `limit`: what DEXP_MAX_CONCURRENCY bounds.

    A request takes a place once its headers are complete, and gives it back when it ends or
    becomes a stream. Connections are not counted: an idle one (no request yet, or kept alive
    between two) holds no place, so idle sockets cannot starve requests (the hardened-edge round
    two: 5 addresses x 200 idle sockets got 71 of 75 votes a 503). Beyond the limit a request waits
    in line (at most `limit` of them, QUEUE_SECONDS each), so that a burst (2,000 devices
    subscribing in one second) is served in turn rather than refused; beyond the line, 503.
    """

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.running = 0
        self.waiting: deque[asyncio.Future[None]] = deque()
        self.window = 0.0  # the second in which `refusals` were counted
        self.refusals = 0

    async def admit(self) -> Admission | None:
        """A place, at once or after waiting in line; None if the line is full or the wait too
        long (the caller answers 503)."""
        if self.limit is None or (self.running < self.limit and not self.waiting):
            self.running += 1
            return Admission(self)
        if len(self.waiting) >= self.limit:
            return None
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append(turn)
        try:
            async with asyncio.timeout(QUEUE_SECONDS):
                await turn
        except BaseException as exc:
            if turn.done() and not turn.cancelled():
                self.leave()  # handed a place just as it gave up: pass it on
            else:
                turn.cancel()
                if turn in self.waiting:  # leave() may have passed over it, cancelled already
                    self.waiting.remove(turn)
            if isinstance(exc, TimeoutError):
                return None
            raise
        return Admission(self)  # the place of the request that handed it on

    def leave(self) -> None:
        """A place is free: to the first in line (it keeps the count), or back to the pool."""
        while self.waiting:
            turn = self.waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self.running -= 1

    def retry_after(self) -> int:
        """Seconds a refused client is told to wait: 1 for the first `limit` refused within a
        second, 2 for the next `limit`, and so on (at most RETRY_AFTER_MAX), so that a crowd
        refused at once comes back spread out instead of all together."""
        now = time.monotonic()
        if now - self.window >= 1.0:
            self.window, self.refusals = now, 0
        self.refusals += 1
        return min(RETRY_AFTER_MAX, 1 + (self.refusals - 1) // (self.limit or 1))


class Stream(StreamHandle):
    """A connection that serves a long-lived stream (asgi.STREAM_HOOK): its request gives its place
    back at once (streams have bounds of their own, coordinator/events.py)."""

    def __init__(self, protocol: EdgeGuards, stop: Callable[[], None]) -> None:
        self.protocol = protocol
        self.stop = stop
        protocol.streams[protocol] = self
        if protocol.admission is not None:
            protocol.admission.release()
        protocol.reap_idle()  # the stream's descriptor is no longer the idle connections' room

    def release(self) -> None:
        """The stream ended."""
        if self.protocol.streams.get(self.protocol) is self:
            del self.protocol.streams[self.protocol]

    def abort(self) -> None:
        self.protocol.transport.abort()


class EdgeGuards:
    """What both protocol subclasses add to uvicorn's: the header deadline, the places of requests
    in flight, the bound on idle connections, the bound per client address, and JSON errors.

    A mixin before uvicorn's class in the bases: its methods wrap uvicorn's through super().
    The class attributes are set per server by edge_protocol(). The connection limit of uvicorn
    (config.limit_concurrency, which counts connections and answers in plain text) is taken over
    at construction: it becomes `places`, which counts requests.
    """

    header_timeout: float = 10.0
    # connections one client (an IPv4 address, an IPv6 /64) may hold at once (0: no bound);
    # beyond, a new one is closed as soon as it is accepted. Trusted proxies
    # (DEXP_TRUSTED_PROXIES) are exempt: they carry many clients and bound them themselves.
    max_per_client: int = 0
    exempt: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    per_client: Counter[str] = Counter()  # noqa: RUF012 (replaced per server by edge_protocol)
    streams: dict[EdgeGuards, Stream] = {}  # noqa: RUF012 (replaced per server by edge_protocol)
    places: Places = Places(None)  # replaced per server by edge_protocol
    # connections without a request in flight, oldest first; beyond max_idle, less the streams
    # open, the oldest is closed
    idle: OrderedDict[EdgeGuards, None] = OrderedDict()  # noqa: RUF012 (as streams)
    max_idle: int = 0  # 0: no bound
    # uvicorn's per-connection state that the guards read
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    limit_concurrency: int | None
    timeout_keep_alive_task: asyncio.TimerHandle | None
    app: ASGIApp

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limit_concurrency = None
        self.served_app, self.app = self.app, self.gate
        self.header_deadline: asyncio.TimerHandle | None = None
        self.admission: Admission | None = None
        self.counted = False

    # -- the header deadline ------------------------------------------------------------------
    def arm_header_deadline(self) -> None:
        self.cancel_header_deadline()
        self.header_deadline = self.loop.call_later(self.header_timeout, self.headers_too_late)

    def cancel_header_deadline(self) -> None:
        if self.header_deadline is not None:
            self.header_deadline.cancel()
            self.header_deadline = None

    def headers_too_late(self) -> None:
        self.header_deadline = None
        if not self.transport.is_closing():
            self.transport.close()  # nothing is said: the client has not asked anything yet

    # -- idle connections ---------------------------------------------------------------------
    def now_idle(self) -> None:
        """No request in flight on this connection (just accepted, or kept alive after a
        response): its next request's headers are due within header_timeout, and beyond max_idle
        idle connections the oldest one is closed, so that idle sockets cost a bounded amount
        (a few KB each, and a descriptor) however many are opened."""
        self.arm_header_deadline()
        self.idle[self] = None
        self.idle.move_to_end(self)
        self.reap_idle()

    def reap_idle(self) -> None:
        """Close the oldest idle connections beyond max_idle less the streams open: the idle ones
        take the descriptors the streams do not use (idle_bound), and give them back, oldest
        first, as streams come."""
        if not self.max_idle:
            return
        # at least MIN_IDLE: a connection just accepted is never closed before its request came
        while len(self.idle) > max(MIN_IDLE, self.max_idle - len(self.streams)):
            oldest, _ = self.idle.popitem(last=False)
            REAPED_CONNECTIONS.inc()
            oldest.cancel_header_deadline()
            oldest.transport.close()  # nothing is said: it has not asked anything yet

    def now_busy(self) -> None:
        """A request's headers are complete."""
        self.cancel_header_deadline()
        self.idle.pop(self, None)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if peer else ""
        self.peer = client_group(address)
        if self.max_per_client and not self.trusted(address):
            self.per_client[self.peer] += 1
            self.counted = True
            if self.per_client[self.peer] > self.max_per_client:
                REFUSED_CONNECTIONS.inc()
                self.transport.close()  # nothing is said: the client has asked nothing yet
                return
        self.now_idle()

    def trusted(self, peer: str) -> bool:
        """A trusted proxy's address: exempt from the per-client bound."""
        if not self.exempt or not peer:
            return False
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        return any(address in network for network in self.exempt)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.counted:
            self.counted = False
            self.per_client[self.peer] -= 1
            if self.per_client[self.peer] <= 0:
                del self.per_client[self.peer]
        self.cancel_header_deadline()
        self.idle.pop(self, None)
        self.streams.pop(self, None)
        super().connection_lost(exc)  # type: ignore[misc]

    def shutdown(self) -> None:
        """The server shuts down: a stream is told to end (it completes its response, and this
        connection, no longer kept alive, then closes), as an ordinary response completes."""
        super().shutdown()  # type: ignore[misc]
        stream = self.streams.get(self)
        if stream is not None:
            stream.stop()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        # uvicorn arms its keep-alive timer when the connection waits for a next request (none is
        # pipelined): idle again, that request's headers due within header_timeout from now
        if self.timeout_keep_alive_task is not None:
            self.now_idle()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to what its parser refuses (malformed framing, a body length given
        twice or both ways), as the API's JSON error instead of plain text."""
        self.transport.write(
            b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(BAD_REQUEST), BAD_REQUEST)
        )
        self.transport.close()

    # -- the places of requests in flight -----------------------------------------------------
    async def gate(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app, once this request has a place among DEXP_MAX_CONCURRENCY (given back when it
        ends or becomes a stream); else the JSON 503 with Retry-After."""
        if scope["path"] == "/healthz":  # liveness: answered whatever the load, it costs nothing
            return await self.served_app(scope, receive, send)
        admission = await self.places.admit()
        if admission is None:
            log.warning("Exceeded concurrency limit.")
            return await overloaded(send, self.places.retry_after())
        self.admission = admission
        try:
            scope[STREAM_HOOK] = self.as_stream
            return await self.served_app(scope, receive, send)
        finally:
            admission.release()
            if self.admission is admission:
                self.admission = None

    def as_stream(self, stop: Callable[[], None]) -> StreamHandle:
        """asgi.STREAM_HOOK: this connection serves a long-lived stream from now on."""
        return Stream(self, stop)


class EdgeH11Protocol(EdgeGuards, H11Protocol):
    """h11 bounds the headers itself (h11_max_incomplete_event_size: 400 beyond)."""

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:  # uvicorn made a new cycle: a request's headers are in
            self.now_busy()


try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # no httptools: h11 only
    FAST_PROTOCOL: type[asyncio.Protocol] | None = None
else:

    class EdgeHttpToolsProtocol(EdgeGuards, HttpToolsProtocol):
        """httptools (llhttp) puts no bound on the request line and headers. They are measured
        once complete (431 through the ASGI cycle), and counted while they stream in (431, or a
        plain close while a response is pending): a client that never ends them holds at most
        MAX_HEADER_BYTES and two reads."""

        awaiting_headers = False  # a request has begun and its headers are not complete
        header_bytes = 0  # bytes received for them, from the chunk after the one they began in

        def data_received(self, data: bytes) -> None:
            counting = self.awaiting_headers
            super().data_received(data)
            if counting and self.awaiting_headers and not self.transport.is_closing():
                self.header_bytes += len(data)
                if self.header_bytes > MAX_HEADER_BYTES:
                    self.refuse_headers()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self.awaiting_headers, self.header_bytes = True, 0

        def on_headers_complete(self) -> None:
            self.awaiting_headers = False
            self.now_busy()
            size = len(self.url) + sum(len(name) + len(value) for name, value in self.headers)
            # uvicorn reads self.app here to serve this request
            self.app = headers_too_large if size > MAX_HEADER_BYTES else self.gate
            super().on_headers_complete()

        def refuse_headers(self) -> None:
            """431 and close, written directly (the request has no ASGI cycle yet)."""
            if self.cycle is None or self.cycle.response_complete:  # nothing else is being said
                body = TOO_LARGE_HEADERS.encode()
                self.transport.write(
                    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                    b"content-type: application/json\r\nconnection: close\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(body), body)
                )
            self.transport.close()

    FAST_PROTOCOL = EdgeHttpToolsProtocol


def edge_protocol(
    header_timeout: float,
    max_per_client: int = 0,
    exempt: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = (),
    max_concurrency: int | None = None,
    max_idle: int = 0,
) -> type[asyncio.Protocol]:
    """The protocol class for uvicorn.Config(http=...): httptools if importable, else h11. One
    class per server, with its own places, idle connections, streams and count per client."""
    base: type[asyncio.Protocol] = FAST_PROTOCOL or EdgeH11Protocol
    attributes = {
        "header_timeout": header_timeout,
        "streams": {},
        "max_per_client": max_per_client,
        "exempt": exempt,
        "per_client": Counter(),
        "places": Places(max_concurrency),
        "idle": OrderedDict(),
        "max_idle": max_idle,
    }
    return type(base.__name__, (base,), attributes)


def open_files() -> int:
    """The process's limit of open descriptors, its soft limit first raised to the hard one (each
    connection is one; Linux's usual soft limit, 1,024, would hold few)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


def idle_bound(settings: Settings, files: int) -> int:
    """The idle connections and streams one process keeps together (EdgeGuards.reap_idle):
    DEXP_MAX_IDLE_CONNECTIONS, less if the descriptors (`files`) would not hold them beside the
    requests in flight and those waiting (twice DEXP_MAX_CONCURRENCY) and OPEN_FILES_RESERVE; at
    least 64. So idle connections may use the descriptors that streams do not: with 20,000, 17,744
    idle connections while no stream is open, 7,744 beside 10,000 streams (DEXP_MAX_SUBSCRIBERS,
    which coordinator/events.py bounds on its own). A fixed share (files less every stream there
    could be) made 100 addresses x 200 idle sockets churn: 7,744 held, each new one reaping the
    oldest, whose client opened it again at once (docs/SCALING.md)."""
    room = files - 2 * settings.max_concurrency - OPEN_FILES_RESERVE
    return max(MIN_IDLE, min(settings.max_idle_connections, room))


def defer_accept(sock: socket.socket, seconds: int) -> bool:
    """Linux's TCP_DEFER_ACCEPT on the listening `sock` (nginx's `listen ... deferred`): the kernel
    completes a connection that sent nothing yet as a request socket of a few hundred bytes, no
    descriptor, no accept, no Python object; the connection reaches the process when its first
    bytes arrive, or once about `seconds` passed (the kernel's SYN-ACK retransmissions: 1, 2, 4,
    8 s...), and only then does the header deadline start. Without it, 100 addresses x 200 sockets
    that send nothing kept the accept queue full: each was accepted, held, reaped at the idle
    bound and opened again at once, and an honest device's connect waited behind them (docs/
    SCALING.md). Beyond the listen backlog of such sockets the kernel answers with SYN cookies,
    which it cannot defer: those reach the process at once, as without the option. False where
    the platform has no such option (the connections then reach the process at once)."""
    option = getattr(socket, "TCP_DEFER_ACCEPT", None)
    if not seconds or option is None:
        return False
    sock.setsockopt(socket.IPPROTO_TCP, option, seconds)
    return True


def listen_socket(config: Config, settings: Settings) -> socket.socket:
    """The coordinator's listening socket: uvicorn's (its host, port and backlog), deferred."""
    sock = config.bind_socket()
    defer_accept(sock, settings.defer_accept_seconds)
    return sock


SOMAXCONN = "/proc/sys/net/core/somaxconn"


def listen_backlog(settings: Settings) -> int:
    """Connections the kernel holds for the process before it accepts them: room for a storm of
    every stream (DEXP_MAX_SUBSCRIBERS) and the requests in flight and in line, arriving at once.
    With uvicorn's 2,048, a storm of 10,000 subscribers overflowed the queue; the kernel then drops
    the SYNs, and a client retries its connect only after 1, 3, 7, 15, 31 s (638 of 10,000 were
    still connecting after 60 s, benchmarks/bench_idle_sockets.py). With DEXP_DEFER_ACCEPT_SECONDS
    the connections that sent nothing yet wait in the kernel's queue of half-done connections,
    which the same backlog bounds: room for DEXP_MAX_IDLE_CONNECTIONS more. The kernel caps it at
    net.core.somaxconn (docs/SCALING.md says how to raise it)."""
    deferred = settings.max_idle_connections if settings.defer_accept_seconds else 0
    wanted = max(2048, settings.max_subscribers + 2 * settings.max_concurrency + deferred)
    try:
        with open(SOMAXCONN) as file:
            cap = int(file.read())
    except (OSError, ValueError):
        return wanted
    if cap < wanted:
        log.warning(
            "listen backlog: net.core.somaxconn (%d) caps it below %d (DEXP_MAX_SUBSCRIBERS + 2 x "
            "DEXP_MAX_CONCURRENCY, + DEXP_MAX_IDLE_CONNECTIONS when deferred): in a reconnection "
            "storm the kernel drops connects beyond it",
            cap,
            wanted,
        )
    return wanted


def uvicorn_config(app: Any, settings: Settings, **overrides: Any) -> Config:
    """uvicorn's Config for the coordinator: `app` is an ASGI app, or an import string such as
    "coordinator.app:create_app" with factory=True; `overrides` win over the settings."""
    proxies = trusted_proxies(settings.trusted_proxies)
    options: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "loop": "auto",  # uvloop if importable
        "http": edge_protocol(
            settings.header_timeout_seconds,
            settings.max_connections_per_client,
            tuple(ipaddress.ip_network(p, strict=False) for p in proxies),
            settings.max_concurrency,
            idle_bound(settings, open_files()),
        ),
        "ws": "none",  # no WebSocket routes
        "lifespan": "on",  # Redis and the default experiment: a failed start-up must stop
        "log_level": settings.log_level,
        "access_log": False,
        "proxy_headers": bool(proxies),
        "forwarded_allow_ips": proxies or None,
        "timeout_keep_alive": settings.keep_alive_seconds,
        "backlog": listen_backlog(settings),
        "h11_max_incomplete_event_size": MAX_HEADER_BYTES,
    }
    options.update(overrides)
    return uvicorn.Config(app, **options)
