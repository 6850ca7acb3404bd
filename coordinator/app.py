"""The FastAPI application: lifespan (Redis, default experiment), error mapping, health, metrics."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from common.algorithms import AlgorithmConfig
from coordinator.api import agents, experiments
from coordinator.errors import Conflict, CoordinatorError
from coordinator.fast_path import VoteFastPath
from coordinator.redis_client import connect
from coordinator.settings import Settings, get_settings
from coordinator.store import ExperimentStore

log = logging.getLogger("dexp.coordinator")


async def ensure_default_experiment(store: ExperimentStore, settings: Settings) -> None:
    """Create the experiment described by the environment, so `docker compose up` needs no step."""
    if not settings.experiment:
        return
    config = AlgorithmConfig(
        algorithm=settings.algorithm,
        subroutine=settings.subroutine,
        epsilon=settings.epsilon,
        delta=settings.delta,
        eta=settings.eta,
        xi=settings.xi,
        dp_epsilon=settings.dp_epsilon,
        beta=settings.beta,
        phi=settings.phi,
        every_arm=settings.every_arm,
    )
    arms = [a.strip() for a in settings.arms.split(",") if a.strip()]
    try:
        await store.create(settings.experiment, arms, config, settings.sigma)
        log.info("created experiment %s (M=%s)", settings.experiment, config.threshold(len(arms)))
    except Conflict:
        log.info("experiment %s exists", settings.experiment)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        redis = await connect(settings.redis_url)
        app.state.redis = redis
        app.state.store = ExperimentStore(redis)
        await ensure_default_experiment(app.state.store, settings)
        try:
            yield
        finally:
            await redis.aclose()

    app = FastAPI(
        title="dexp coordinator",
        version="0.1.0",
        description="Global arm set and vote counters of decentralized best-arm identification. "
        "Agents send only votes (an arm index); an arm leaves once M distinct agents voted.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.include_router(experiments.router)
    app.include_router(agents.router)
    app.add_middleware(VoteFastPath)  # plain valid votes skip FastAPI's machinery (see the module)

    @app.exception_handler(CoordinatorError)
    async def domain_error(_: Request, exc: CoordinatorError) -> JSONResponse:
        return JSONResponse({"detail": exc.message}, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()
        ]
        first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
        where = ".".join(str(p) for p in first["loc"])
        return JSONResponse(
            {"detail": f"{where}: {first['msg']}", "errors": errors}, status_code=422
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"])
    async def readyz(request: Request) -> JSONResponse:
        try:
            await request.app.state.redis.ping()
        except Exception as exc:
            return JSONResponse({"status": "unavailable", "detail": str(exc)}, status_code=503)
        return JSONResponse({"status": "ready"})

    @app.get("/metrics", tags=["health"], response_class=PlainTextResponse)
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(generate_latest().decode(), media_type=CONTENT_TYPE_LATEST)

    return app
