"""Health and metrics: liveness (/healthz), readiness (/readyz: Redis answers) and Prometheus."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from coordinator.api.deps import Problem

log = logging.getLogger("dexp.coordinator")
router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"model": Problem, "description": "Redis does not answer"}})
async def readyz(request: Request) -> JSONResponse:
    try:
        await request.app.state.redis.ping()
    except Exception:  # its text may name Redis's address: the log has it, not the answer
        log.warning("readyz: Redis unreachable", exc_info=True)
        return JSONResponse(
            {"status": "unavailable", "detail": "Redis unreachable"}, status_code=503
        )
    return JSONResponse({"status": "ready"})


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(request: Request) -> PlainTextResponse:
    await request.app.state.figures.refresh()  # experiments by status, agents enrolled
    return PlainTextResponse(generate_latest().decode(), media_type=CONTENT_TYPE_LATEST)
