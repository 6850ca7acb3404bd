"""The FastAPI application: lifespan (Redis, default experiment), error mapping, health, metrics."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import fields
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from redis.exceptions import RedisError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from common.algorithms import AlgorithmConfig
from coordinator import dashboard, sdk
from coordinator.api import agents, events, experiments, health, keys, leases, tickets, webhooks
from coordinator.api.deps import problems
from coordinator.api.models import ExperimentCreate
from coordinator.caching import RevisionCache
from coordinator.edge import Edge
from coordinator.errors import Conflict, CoordinatorError, StoreUnavailable
from coordinator.events import EVENTS_CLIENT, Hub
from coordinator.leases import LeaseSweep
from coordinator.metrics import StoreFigures, instrument
from coordinator.redis_client import RedisCluster, client, connect
from coordinator.settings import Settings, get_settings
from coordinator.store import ExperimentStore, Limits
from coordinator.webhooks.dispatcher import WEBHOOKS_CLIENT, Dispatcher
from coordinator.webhooks.records import WebhookRecords

log = logging.getLogger("dexp.coordinator")


async def ensure_default_experiment(store: ExperimentStore, settings: Settings) -> None:
    """Create the experiment described by the environment, so `docker compose up` needs no step.
    It passes the same checks as POST /v1/experiments; a configuration that fails them stops the
    coordinator with the reason."""
    if not settings.experiment:
        return
    # dp_epsilon and B only when set: LDP's defaults are not the voting algorithms' (models.py)
    given = settings.model_fields_set
    params = {
        f.name: getattr(settings, f.name)
        for f in fields(AlgorithmConfig)
        if f.name not in ("dp_epsilon", "reports_per_agent") or f.name in given
    }
    try:
        body = ExperimentCreate(
            id=settings.experiment,
            arms=[a for a in settings.arms.split(",") if a.strip()],
            sigma=settings.sigma,
            rewards=settings.rewards,
            agents=settings.agents,
            **params,
        )
        config = body.checked_config(settings)
        expected = body.expected_agents(settings)
    except (ValidationError, CoordinatorError) as exc:
        raise InvalidDefaultExperiment(
            f"the default experiment {settings.experiment!r} (DEXP_EXPERIMENT, DEXP_ARMS and "
            f"the algorithm settings) is invalid: {exc}"
        ) from None
    try:
        await store.create(
            settings.experiment, body.arms, config, settings.sigma, expected, body.rewards
        )
        log.info(
            "created experiment %s (M=%s)",
            settings.experiment,
            config.threshold(len(body.arms), expected),
        )
    except Conflict:
        log.info("experiment %s exists", settings.experiment)


class InvalidDefaultExperiment(RuntimeError):
    """The environment describes a default experiment POST /v1/experiments would refuse."""


def allowed_methods(request: Request) -> str:
    """Every method some route takes for the request's path (the Allow header of a 405)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        if match != Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return ", ".join(sorted(methods))


def lifespan_of(settings: Settings) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """What a process opens at start and closes at stop: its Redis client, the store and its
    figures, the revision cache (304s without a round trip), the event streams' hub on a pub/sub
    client of its own, the webhook dispatcher on another, and the default experiment."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.environment == "production" and "@" not in settings.redis_url:
            log.warning("DEXP_REDIS_URL has no password: Redis should require one")
        redis = await connect(
            settings.redis_url,
            cluster=settings.redis_cluster,
            timeout=settings.redis_timeout_seconds,
        )
        app.state.redis = instrument(redis)  # its commands' latency and errors in /metrics
        app.state.store = ExperimentStore(redis, Limits.of(settings))
        app.state.figures = StoreFigures(app.state.store)
        app.state.revisions = RevisionCache(
            None if settings.redis_cluster else settings.redis_url, settings.redis_timeout_seconds
        )
        app.state.store.on_change = app.state.revisions.forget
        app.state.revisions.start()
        listener = client(
            settings.redis_url,
            settings.redis_cluster,
            name=EVENTS_CLIENT,
            timeout=settings.redis_timeout_seconds,
        )
        if isinstance(listener, RedisCluster):
            await listener.initialize()  # its pub/sub needs the slot map: the nodes are known
        app.state.hub = Hub(
            app.state.store,
            listener,
            settings.max_subscribers,
            settings.max_subscribers_per_client,
        )
        # webhooks: a pub/sub client of their own, and the dispatcher's task (coordinator/webhooks/)
        app.state.webhook_records = WebhookRecords(app.state.redis)
        hooks_listener = client(
            settings.redis_url,
            settings.redis_cluster,
            name=WEBHOOKS_CLIENT,
            timeout=settings.redis_timeout_seconds,
        )
        if isinstance(hooks_listener, RedisCluster):
            await hooks_listener.initialize()
        app.state.webhooks = Dispatcher(app.state.store, hooks_listener, settings)
        await ensure_default_experiment(app.state.store, settings)
        app.state.webhooks.start()
        # the agents whose lease lapsed leave (coordinator/leases.py): idle while none has one
        app.state.lease_sweep = LeaseSweep(app.state.store, settings.agent_lease_seconds)
        app.state.lease_sweep.start()
        try:
            yield
        finally:
            await app.state.lease_sweep.close()
            await app.state.webhooks.close()
            await hooks_listener.aclose()
            await app.state.hub.close()
            await app.state.revisions.close()
            await listener.aclose()
            await redis.aclose()

    return lifespan


async def domain_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, CoordinatorError)
    return JSONResponse({"detail": exc.message}, status_code=exc.status, headers=exc.headers())


async def store_unavailable(_: Request, exc: Exception) -> JSONResponse:
    error = StoreUnavailable.of(exc)
    log.warning("redis error: %s", exc)
    return JSONResponse(
        {"detail": error.message}, status_code=error.status, headers=error.headers()
    )


async def validation_error(_: Request, exc: Exception) -> JSONResponse:
    """422 with the first problem in `detail` ("body.arms: ..."), every one in `errors`."""
    assert isinstance(exc, RequestValidationError)
    errors = [
        {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
        for e in exc.errors()
    ]
    first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
    where = ".".join(str(p) for p in first["loc"])
    return JSONResponse({"detail": f"{where}: {first['msg']}", "errors": errors}, status_code=422)


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    headers = dict(exc.headers or {})
    status, detail = exc.status_code, exc.detail
    if status == 400:  # FastAPI's "error parsing the body" (e.g. not UTF-8): 422, as bad JSON
        status, detail = 422, f"body: {detail}"
    if status == 405:  # Starlette names only the first route of the path's methods
        headers["Allow"] = allowed_methods(request)
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


# Every error answers JSON with a `detail`: the domain's, Redis's, validation's and Starlette's.
ERROR_HANDLERS = (
    (CoordinatorError, domain_error),
    (RedisError, store_unavailable),
    (RequestValidationError, validation_error),
    (StarletteHTTPException, http_error),
)


def create_app(settings: Settings | None = None) -> FastAPI:
    """The application: its lifespan, its routers, the edge in front of them (one middleware,
    coordinator/edge.py) and the error handlers."""
    settings = settings or get_settings()
    app = FastAPI(
        title="dexp coordinator",
        version="0.1.0",
        description="Global arm set and vote counters of decentralized best-arm identification. "
        "Agents send only votes (an arm index); an arm leaves once M distinct agents voted.",
        lifespan=lifespan_of(settings),
        responses=problems(413, 503),  # any route: a body over the limit; Redis unreachable
    )
    app.state.settings = settings
    app.include_router(experiments.router)
    app.include_router(agents.router)
    app.include_router(leases.router)  # POST /v1/agents/leases: the agent service's renewals
    app.include_router(webhooks.router)  # .../webhooks: the decisions POSTed to the admin's URLs
    app.include_router(tickets.router)  # POST /v1/experiments/{id}/tickets/unused: public advice
    app.include_router(events.router)  # GET /v1/experiments/{id}/events: the SSE stream
    app.include_router(keys.router)  # /v1/keys and /v1/audit: named keys with roles, the log
    app.include_router(dashboard.router)  # GET /dashboard: static page over the public GET routes
    app.state.sdk = sdk.Build.find(settings.sdk_dir)  # the JavaScript SDK's build, or None
    app.include_router(sdk.router)  # GET /sdk/agent.js: the SDK, for pages to import
    app.include_router(health.router)  # /healthz, /readyz, /metrics
    # The edge, one middleware: metrics, CORS, throttle, 304s, body limit, vote fast path, gzip,
    # rendered documents, credential gate, in that order (the table of coordinator/edge.py).
    app.add_middleware(Edge, settings=settings, routes=lambda: app.router.routes)
    for error, handler in ERROR_HANDLERS:
        app.add_exception_handler(error, handler)
    app.openapi = with_settings(app.openapi, settings)  # type: ignore[method-assign]
    return app


def with_settings(
    openapi: Callable[[], dict[str, Any]], settings: Settings
) -> Callable[[], dict[str, Any]]:
    """FastAPI's schema (built once, then cached by it) with this coordinator's bounds."""
    built: list[dict[str, Any]] = []

    def schema() -> dict[str, Any]:
        if not built:
            built.append(experiments.settings_in_schema(openapi(), settings))
        return built[0]

    return schema
