"""What an operator alerts on: RED per route, refusals by reason, enrollments and tickets, the
experiments and agents in the store, Redis's latency and errors (served at /metrics).

Every label set is bounded, so that no client can grow the scrape: routes are the app's route
templates ("/v1/experiments/{experiment}/votes", never a raw path; "other" for a path no route
takes), methods the standard ones ("other" for the rest), codes HTTP status codes, Redis commands
the ones this code sends. No experiment or agent id is a label. The store's figures (experiments
by status, agents enrolled) are read at scrape time, at most every REFRESH_SECONDS whoever asks
(/metrics is public), over the first SCANNED_EXPERIMENTS experiments; every replica reports the
same store, so a dashboard takes their max, not their sum.
"""

from __future__ import annotations

import asyncio
import functools
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from prometheus_client import Counter, Gauge, Histogram
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.routing import BaseRoute, compile_path

from coordinator.asgi import ASGIApp, Exchange, Message, Receive, Scope, Send

REFRESH_SECONDS = 5.0  # the store's figures are read at most this often
SCANNED_EXPERIMENTS = 1000  # experiments by status and agents: over at most this many
ROUTE_CACHE = 4096  # path -> route template, remembered; cleared when full (paths are clients')
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
STATUSES = ("exploring", "identified", "tied")
# the refusals an operator watches, by the answer's status (and "overloaded": DEXP_MAX_CONCURRENCY,
# answered by the server before the app, coordinator/server.py)
REASONS = {
    401: "unauthorized",
    403: "forbidden",
    413: "body_too_large",
    429: "rate_limited",
    503: "unavailable",
}
REDIS_ERRORS = ("connection", "timeout", "response", "other")

REQUESTS = Counter(
    "dexp_http_requests_total",
    "HTTP requests answered, by route template, method and status code",
    ["route", "method", "code"],
)
LATENCY = Histogram(
    "dexp_http_request_duration_seconds",
    "Time from a request's arrival to its answer's headers, by route template and method",
    ["route", "method"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
REFUSALS = Counter(
    "dexp_refusals_total",
    "Requests refused, by reason: unauthorized (401), forbidden (403), body_too_large (413), "
    "rate_limited (429), unavailable (503: Redis), overloaded (503: DEXP_MAX_CONCURRENCY)",
    ["reason"],
)
ENROLLMENTS = Counter(
    "dexp_enrollments_total", "Agents enrolled, by way: a ticket or open enrollment", ["via"]
)
TICKETS = Counter("dexp_tickets_issued_total", "One-time enrollment tickets issued")
LAPSED = Counter(
    "dexp_agents_lapsed_total",
    "Agents this process's lease sweep made leave: their host renewed nothing for a lease",
)
EXPERIMENTS = Gauge("dexp_experiments", "Experiments in the store, by status", ["status"])
AGENTS = Gauge("dexp_agents_enrolled", "Agents enrolled in the store's experiments")
STORE_UP = Gauge(
    "dexp_store_up", "Whether the last read of the store's figures succeeded (1) or not"
)
REDIS_LATENCY = Histogram(
    "dexp_redis_command_duration_seconds",
    "Time of the store's Redis commands (a pipeline or transaction counts once), by command",
    ["command"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
REDIS_ERRORS_TOTAL = Counter(
    "dexp_redis_errors_total",
    "The store's Redis commands that failed, by kind: connection, timeout, response, other",
    ["error"],
)

for _reason in (*REASONS.values(), "overloaded"):
    REFUSALS.labels(_reason)
for _via in ("ticket", "open"):
    ENROLLMENTS.labels(_via)
for _status in STATUSES:
    EXPERIMENTS.labels(_status)
for _error in REDIS_ERRORS:
    REDIS_ERRORS_TOTAL.labels(_error)


def refused(reason: str) -> None:
    REFUSALS.labels(reason).inc()


class RequestMetrics:
    """The outermost middleware: every answer the app gives is counted, its latency observed (to
    the answer's headers: an event stream's length is not its latency) and a refusal counted by
    reason, whichever layer gave it (throttle, gate, body limit, fast path or route)."""

    def __init__(self, app: ASGIApp, routes: Callable[[], Sequence[BaseRoute]]) -> None:
        self.app = app
        self.routes = routes
        self.patterns: list[tuple[re.Pattern[str], str]] | None = None  # read at the first request
        self.templates: dict[str, str] = {}
        # (route, method, code) -> its counter, histogram and refusal counter: labels() costs
        # more than the rest of the bookkeeping (the vote path counts every microsecond)
        self.children: dict[tuple[str, str, int], tuple[Any, Any, Any]] = {}

    def template(self, scope: Scope) -> str:
        path = scope.get("path", "")
        found = self.templates.get(path)
        if found is None:
            if self.patterns is None:
                self.patterns = [(compile_path(t)[0], t) for t in route_templates(self.routes())]
            found = next((t for regex, t in self.patterns if regex.match(path)), "other")
            if len(self.templates) >= ROUTE_CACHE:
                self.templates.clear()
            self.templates[path] = found
        return found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        ex = Exchange(scope, receive, send)
        counted = self.observe(ex)
        try:
            await self.app(scope, ex.receive, ex.send)
        finally:
            counted()

    def observe(self, ex: Exchange) -> Callable[[], None]:
        """Time the request from now to its answer's headers (`ex.send` wrapped); the function
        returned counts it, once the request is over, whatever happened."""
        scope, send = ex.scope, ex.send
        started = time.perf_counter()
        status = 0
        answered = 0.0

        async def timed_send(message: Message) -> None:
            nonlocal status, answered
            if message["type"] == "http.response.start":
                status, answered = int(message["status"]), time.perf_counter()
            await send(message)

        ex.send = timed_send

        def counted() -> None:
            nonlocal status, answered
            if not status:  # an exception no handler answered: the server's 500
                status, answered = 500, time.perf_counter()
            method = scope.get("method", "")
            method = method if method in METHODS else "other"
            key = (self.template(scope), method, status)
            children = self.children.get(key)
            if children is None:
                reason = REASONS.get(status)
                children = self.children[key] = (
                    REQUESTS.labels(key[0], method, str(status)),
                    LATENCY.labels(key[0], method),
                    None if reason is None else REFUSALS.labels(reason),
                )
            requests, latency, refusals = children
            requests.inc()
            latency.observe(answered - started)
            if refusals is not None:
                refusals.inc()

        return counted


def route_templates(routes: Sequence[BaseRoute]) -> list[str]:
    """The path templates of the app's routes, those of included routers too (FastAPI 0.165
    wraps an included router in one route; iter_route_contexts lists what it holds)."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # FastAPI before 0.165: included routes are the app's own
        contexts: Iterable[Any] = routes
    else:
        contexts = iter_route_contexts(routes)
    return [path for c in contexts if isinstance(path := getattr(c, "path", None), str)]


def _error_kind(exc: BaseException) -> str:
    if isinstance(exc, RedisTimeoutError | TimeoutError):
        return "timeout"
    if isinstance(exc, RedisConnectionError | ConnectionError | OSError):
        return "connection"
    if isinstance(exc, ResponseError):
        return "response"
    return "other"


def _timed(command: str | None, call: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
    """`call`, timed and its failures counted; `command` None: the command is its first arg."""

    histograms: dict[Any, Any] = {}  # command -> its histogram (labels() is the slow part)

    @functools.wraps(call)
    async def timed(*args: Any, **options: Any) -> Any:
        name = command or (args[0] if args else "other")
        histogram = histograms.get(name)
        if histogram is None:
            label = str(name).split(" ")[0].upper()
            histogram = histograms[name] = REDIS_LATENCY.labels(label)
        started = time.perf_counter()
        try:
            return await call(*args, **options)
        except NoScriptError:  # a script not cached yet: redis-py loads it and sends it again
            raise
        except (TimeoutError, RedisError, OSError) as exc:
            REDIS_ERRORS_TOTAL.labels(_error_kind(exc)).inc()
            raise
        finally:
            histogram.observe(time.perf_counter() - started)

    return timed


def instrument(redis: Any) -> Any:
    """The store's client (single Redis or cluster), its commands and pipelines timed and their
    errors counted; the same object, returned for convenience."""
    redis.execute_command = _timed(None, redis.execute_command)
    make_pipeline = redis.pipeline

    @functools.wraps(make_pipeline)
    def pipeline(*args: Any, **options: Any) -> Any:
        pipe = make_pipeline(*args, **options)
        pipe.execute = _timed("PIPELINE", pipe.execute)
        return pipe

    redis.pipeline = pipeline
    return redis


class StoreFigures:
    """Experiments by status and agents enrolled, read from the store at scrape time, at most
    every REFRESH_SECONDS (concurrent scrapes share one read)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.read_at = -REFRESH_SECONDS
        self.lock = asyncio.Lock()

    async def refresh(self) -> None:
        async with self.lock:
            if time.monotonic() - self.read_at < REFRESH_SECONDS:
                return
            self.read_at = time.monotonic()
            try:
                summaries: list[dict[str, Any]] = []
                after = ""
                while len(summaries) < SCANNED_EXPERIMENTS:
                    ids = await self.store.ids(
                        after, min(100, SCANNED_EXPERIMENTS - len(summaries))
                    )
                    if not ids:
                        break
                    summaries += await self.store.summaries(ids)
                    after = ids[-1]
            except (RedisError, OSError):
                STORE_UP.set(0)
                return
            STORE_UP.set(1)
            for status in STATUSES:
                EXPERIMENTS.labels(status).set(sum(s["status"] == status for s in summaries))
            AGENTS.set(sum(int(s["agents"]) for s in summaries))
