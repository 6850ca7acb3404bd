"""Domain errors, each with the HTTP status it maps to (one place: app.py's handler)."""

from __future__ import annotations

import math


class CoordinatorError(Exception):
    status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def headers(self) -> dict[str, str]:
        """Extra response headers."""
        return {}


class NotFound(CoordinatorError):
    status = 404


class Conflict(CoordinatorError):
    status = 409


class Unauthorized(CoordinatorError):
    status = 401

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": "Bearer"}  # RFC 9110: a 401 names the scheme it wants


class Forbidden(CoordinatorError):
    status = 403


class Invalid(CoordinatorError):
    status = 422


class RateLimited(CoordinatorError):
    """Too many requests from one agent or client: retry after `retry_after` seconds."""

    status = 429

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        # Retry-After takes whole seconds (RFC 9110); round up so that a retry at that time passes.
        return {"Retry-After": str(max(1, math.ceil(self.retry_after)))}


class StoreUnavailable(CoordinatorError):
    """Redis does not answer (down, loading, failing over, read-only replica), or ran a script
    after its deadline (lua/deadline.lua): 503, retry later. What such a call may still have
    done, per route: docs/RELIABILITY.md, "What a 503 promises"; an agent's retry is safe."""

    status = 503
    retry_after = 1

    @classmethod
    def of(cls, exc: Exception) -> StoreUnavailable:
        return cls(f"the store (Redis) is unavailable: {type(exc).__name__}; retry later")

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class Overloaded(RateLimited):
    """This coordinator process is at a bound of its own (e.g. DEXP_MAX_SUBSCRIBERS): 503, retry
    after `retry_after` seconds, here or on another coordinator."""

    status = 503
