"""Dependencies shared by the routes: the store, the settings, and the admin credential.

FastAPI reads a route's body before it solves the route's dependencies, so these checks come too
late to spare the coordinator a hostile body: coordinator.gate checks every credential before the
body is read; the dependencies here document the scheme in OpenAPI and check again."""

from __future__ import annotations

import hmac
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field

from coordinator.errors import Forbidden, Unauthorized
from coordinator.settings import Settings
from coordinator.store import ADMIN_NAME, ExperimentStore, Principal, Role

bearer = HTTPBearer(auto_error=False)


# Every dependency is `async def`: FastAPI runs a plain `def` dependency in a thread pool, a thread
# hop per request on the vote path, for work that does no I/O.
async def get_store(request: Request) -> ExperimentStore:
    store: ExperimentStore = request.app.state.store
    return store


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


StoreDep = Annotated[ExperimentStore, Depends(get_store)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


def bearer_token(credentials: HTTPAuthorizationCredentials | None) -> str:
    if credentials is None or not credentials.credentials:
        raise Unauthorized("missing bearer token (Authorization: Bearer ...)")
    return credentials.credentials


def same_secret(given: str, expected: str) -> bool:
    """Constant-time comparison, so response times do not leak the secret."""
    return hmac.compare_digest(given.encode(), expected.encode())


async def principal_of(token: str, settings: Settings, store: ExperimentStore) -> Principal | None:
    """Who holds `token`: the admin token (the built-in admin key), a named key, or None."""
    if same_secret(token, settings.admin_token):
        return Principal(ADMIN_NAME, Role.ADMIN)
    return await store.api_keys.lookup(token)


async def authorize(
    token: str, role: Role, settings: Settings, store: ExperimentStore
) -> Principal:
    """The key's principal if its role is at least `role`: 401 if it is no key (unknown,
    revoked), 403 if its role is below."""
    principal = await principal_of(token, settings, store)
    if principal is None:
        raise no_key()
    refused = refusal(principal, role)
    if refused is not None:
        raise refused
    return principal


def no_key() -> Unauthorized:
    return Unauthorized("invalid key: neither the admin token nor a key (unknown or revoked)")


def refusal(principal: Principal, role: Role) -> Forbidden | None:
    """The 403 of a key whose role is below `role`; None if it may."""
    if principal.role >= role:
        return None
    return Forbidden(
        f"key {principal.name!r} has role {principal.role.label}: this call needs {role.label} "
        "or above"
    )


def require(role: Role) -> Any:
    """The dependency of a route that needs a key of `role` or above."""

    async def check(settings: SettingsDep, store: StoreDep, credentials: Credentials) -> None:
        await authorize(bearer_token(credentials), role, settings, store)

    return Depends(check)


ViewerDep = require(Role.VIEWER)
OperatorDep = require(Role.OPERATOR)
AdminDep = require(Role.ADMIN)


class Problem(BaseModel):
    """Every error: a 4xx (or 503) with a JSON body that says what is wrong."""

    detail: str = Field(description="what is wrong with the request")
    errors: list[dict[str, Any]] | None = Field(None, description="each validation error")


PROBLEMS: dict[int, str] = {
    401: "missing or invalid bearer token",
    413: "request body too large (DEXP_MAX_BODY_BYTES)",
    403: "the credential is valid but not allowed to do this (a key whose role is below the "
    "call's)",
    404: "no such experiment",
    409: "an experiment with this id exists",
    422: "invalid path, body or parameter (strict JSON types: no strings for numbers, no 0/1 "
    "for booleans, no unknown fields)",
    429: "too many requests from this agent or client: retry after Retry-After seconds",
    503: "the store (Redis) is unavailable: retry after Retry-After seconds",
}


def problems(*statuses: int, **descriptions: str) -> dict[int | str, dict[str, Any]]:
    """The `responses=` of a route that may answer `statuses` (descriptions may be given by
    'sNNN' keyword, e.g. s403="...")."""
    documented: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        entry: dict[str, Any] = {
            "model": Problem,
            "description": descriptions.get(f"s{status}", PROBLEMS[status]),
        }
        if status == 401:
            entry["headers"] = {
                "WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}}
            }
        if status in (429, 503):
            entry["headers"] = {
                "Retry-After": {
                    "description": "seconds to wait before retrying",
                    "schema": {"type": "integer", "minimum": 1},
                }
            }
        documented[status] = entry
    return documented
