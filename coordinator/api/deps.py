"""Dependencies shared by the routes: the store, the settings, and the three kinds of credential."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from coordinator.errors import Unauthorized
from coordinator.settings import Settings
from coordinator.store import ExperimentStore

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


async def require_admin(settings: SettingsDep, credentials: Credentials) -> None:
    if not same_secret(bearer_token(credentials), settings.admin_token):
        raise Unauthorized("invalid admin token")


async def require_enrollment(settings: SettingsDep, credentials: Credentials) -> None:
    if not same_secret(bearer_token(credentials), settings.enrollment_secret):
        raise Unauthorized("invalid enrollment secret")


AdminDep = Depends(require_admin)
EnrollmentDep = Depends(require_enrollment)
