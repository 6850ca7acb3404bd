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
from collections import Counter
from collections.abc import Callable
from typing import Any

import uvicorn
from prometheus_client import Counter as MetricCounter
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol

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


async def overloaded(scope: Scope, receive: Receive, send: Send) -> None:
    """The answer beyond DEXP_MAX_CONCURRENCY: the API's JSON error, retry in a second."""
    refused("overloaded")  # before the app: its request metrics never see it
    await send_problem(
        send,
        503,
        "the coordinator has too many connections (DEXP_MAX_CONCURRENCY); retry later",
        {"Retry-After": "1", "Connection": "close"},
    )


TOO_LARGE_HEADERS = f'{{"detail":"request headers too large: at most {MAX_HEADER_BYTES} bytes"}}'


async def headers_too_large(scope: Scope, receive: Receive, send: Send) -> None:
    """The answer to a request line and headers over MAX_HEADER_BYTES (httptools)."""
    await send_json(send, 431, TOO_LARGE_HEADERS.encode(), {"Connection": "close"})


class Stream(StreamHandle):
    """A connection that serves a long-lived stream (asgi.STREAM_HOOK): out of the count of
    connections and tasks the limit applies to, until released or lost."""

    def __init__(self, protocol: EdgeGuards, stop: Callable[[], None]) -> None:
        self.protocol = protocol
        self.stop = stop
        protocol.streams[protocol] = self
        task = asyncio.current_task()
        if task is not None:  # a lost stream leaves the task count when its task is done
            task.add_done_callback(self.done)

    def release(self) -> None:
        """The stream ended on a live connection: it counts as an ordinary one again. (On a lost
        one its task is still unwinding: `done` takes it out once the task ends.)"""
        if self.protocol.streams.get(self.protocol) is self:
            del self.protocol.streams[self.protocol]

    def done(self, _: object) -> None:
        if self.protocol.streams.get(self.protocol) is self:
            del self.protocol.streams[self.protocol]
        if self.protocol.unwinding.get(self.protocol) is self:
            del self.protocol.unwinding[self.protocol]

    def abort(self) -> None:
        self.protocol.transport.abort()


class EdgeGuards:
    """What both protocol subclasses add to uvicorn's: the header deadline and the JSON 503.

    A mixin before uvicorn's class in the bases: its methods wrap uvicorn's through super().
    `header_timeout` is set by edge_protocol(); the connection limit is config.limit_concurrency,
    taken over from uvicorn (whose own check answers in plain text) at construction. `streams`
    (one dict per server, made by edge_protocol()) holds the connections that serve a long-lived
    stream.
    """

    header_timeout: float = 10.0
    # connections one client address may hold at once (0: no bound); beyond, a new one is closed
    # as soon as it is accepted, before it can hold a place in the connection limit. Trusted
    # proxies (DEXP_TRUSTED_PROXIES) are exempt: they carry many clients and bound them themselves.
    max_per_client: int = 0
    exempt: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    per_client: Counter[str] = Counter()  # noqa: RUF012 (replaced per server by edge_protocol)
    streams: dict[EdgeGuards, Stream] = {}  # noqa: RUF012 (replaced per server by edge_protocol)
    # streams whose connection is lost and whose task has not ended yet: out of the task count
    # until it ends, so that thousands of streams closing at once do not fill the limit
    unwinding: dict[EdgeGuards, Stream] = {}  # noqa: RUF012 (replaced per server, as streams)
    # uvicorn's per-connection state that the guards read
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    connections: set[Any]
    tasks: set[asyncio.Task[None]]
    limit_concurrency: int | None
    timeout_keep_alive_task: asyncio.TimerHandle | None
    app: ASGIApp

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_concurrency, self.limit_concurrency = self.limit_concurrency, None
        self.served_app, self.app = self.app, self.gate
        self.header_deadline: asyncio.TimerHandle | None = None

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

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if peer else ""
        if self.max_per_client and not self.trusted(self.peer):
            self.per_client[self.peer] += 1
            self.counted = True
            if self.per_client[self.peer] > self.max_per_client:
                REFUSED_CONNECTIONS.inc()
                self.transport.close()  # nothing is said: the client has asked nothing yet
                return
        self.arm_header_deadline()

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
        if getattr(self, "counted", False):
            self.counted = False
            self.per_client[self.peer] -= 1
            if self.per_client[self.peer] <= 0:
                del self.per_client[self.peer]
        self.cancel_header_deadline()
        stream = self.streams.pop(self, None)
        if stream is not None:
            self.unwinding[self] = stream
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
        # pipelined): that request's headers are due within header_timeout from now
        if self.timeout_keep_alive_task is not None:
            self.arm_header_deadline()

    # -- the connection limit -----------------------------------------------------------------
    async def gate(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app, or the JSON 503 beyond max_concurrency connections or running requests
        (this connection and this request's task are counted; streams are not, each being one
        connection and one task)."""
        limit = self.max_concurrency
        streams = len(self.streams)
        tasks = len(self.tasks) - streams - len(self.unwinding)
        if scope["path"] == "/healthz":  # liveness: answered whatever the load, it costs nothing
            return await self.served_app(scope, receive, send)
        if limit is not None and (len(self.connections) - streams > limit or tasks > limit):
            log.warning("Exceeded concurrency limit.")
            return await overloaded(scope, receive, send)
        scope[STREAM_HOOK] = self.as_stream
        return await self.served_app(scope, receive, send)

    def as_stream(self, stop: Callable[[], None]) -> StreamHandle:
        """asgi.STREAM_HOOK: this connection serves a long-lived stream from now on."""
        return Stream(self, stop)


class EdgeH11Protocol(EdgeGuards, H11Protocol):
    """h11 bounds the headers itself (h11_max_incomplete_event_size: 400 beyond)."""

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:  # uvicorn made a new cycle: a request's headers are in
            self.cancel_header_deadline()


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
            self.cancel_header_deadline()
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
) -> type[asyncio.Protocol]:
    """The protocol class for uvicorn.Config(http=...): httptools if importable, else h11. One
    class per server, with its own registry of streams and count of connections per client."""
    base: type[asyncio.Protocol] = FAST_PROTOCOL or EdgeH11Protocol
    attributes = {
        "header_timeout": header_timeout,
        "streams": {},
        "unwinding": {},
        "max_per_client": max_per_client,
        "exempt": exempt,
        "per_client": Counter(),
    }
    return type(base.__name__, (base,), attributes)


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
        ),
        "ws": "none",  # no WebSocket routes
        "lifespan": "on",  # Redis and the default experiment: a failed start-up must stop
        "log_level": settings.log_level,
        "access_log": False,
        "proxy_headers": bool(proxies),
        "forwarded_allow_ips": proxies or None,
        "timeout_keep_alive": settings.keep_alive_seconds,
        "limit_concurrency": settings.max_concurrency,
        "h11_max_incomplete_event_size": MAX_HEADER_BYTES,
    }
    options.update(overrides)
    return uvicorn.Config(app, **options)
