"""Named API keys with roles (viewer, operator, admin), and the audit log: the admin's routes.

One shared admin token let everyone do everything, and nothing said who did what. A team gives
each person or tool its own key, of the least role it needs, revokes one without touching the
others, and reads in the audit log which key made each change (coordinator/gate.py writes it).
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, status
from pydantic import BaseModel, ConfigDict, Field

from coordinator.api.deps import AdminDep, StoreDep, problems
from coordinator.store import Role

router = APIRouter(tags=["keys"])

NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
RoleName = Literal["viewer", "operator", "admin"]
KeyName = Annotated[str, Path(pattern=NAME_PATTERN, description="the key's name")]


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        pattern=NAME_PATTERN,
        description="who or what holds the key (a person, a CI job): unique; 'admin' is the "
        "admin token's",
        examples=["ci-deploy"],
    )
    role: RoleName = Field(
        description="viewer: every read, the admin-only ones too (voters, agents, suspects); "
        "operator: and create, reset and delete experiments, issue tickets, revoke agents; "
        "admin: and keys and the audit log",
        examples=["operator"],
    )


class KeyCreated(BaseModel):
    name: str
    role: RoleName
    key: str = Field(description="the key, shown this once: only its SHA-256 digest is kept")
    created_at: int = Field(description="unix ms")


class KeyView(BaseModel):
    name: str
    role: RoleName
    created_at: int = Field(description="unix ms")


class KeyList(BaseModel):
    keys: list[KeyView] = Field(description="every named key, by name (the admin token is not one)")


class AuditEntry(BaseModel):
    id: str = Field(description="the entry's id in the log (the `before` of the next page)")
    at: int = Field(description="when the call was answered, unix ms")
    key: str = Field(
        description="the name of the key that made the call ('admin': the admin token)"
    )
    role: RoleName
    method: str
    route: str = Field(description="the path called")
    experiment: str = Field(description="the experiment in the path ('' if none)")
    status: int = Field(description="the HTTP status it was answered with")


class AuditPage(BaseModel):
    entries: list[AuditEntry] = Field(description="newest first")
    next: str | None = Field(description="`before` for the next (older) page; null at the end")


@router.post(
    "/v1/keys",
    status_code=status.HTTP_201_CREATED,
    response_model=KeyCreated,
    dependencies=[AdminDep],
    responses=problems(401, 403, 409, 422, s409="a key with this name exists"),
)
async def create_key(body: KeyCreate, store: StoreDep) -> KeyCreated:
    """Admin key (or the admin token). A new key with its role, shown this once."""
    key, at = await store.api_keys.create(body.name, Role.of(body.role))
    return KeyCreated(name=body.name, role=body.role, key=key, created_at=at)


@router.get(
    "/v1/keys",
    response_model=KeyList,
    dependencies=[AdminDep],
    responses=problems(401, 403),
)
async def list_keys(store: StoreDep) -> KeyList:
    """Admin key. Every key's name, role and creation time; never a key or its digest."""
    return KeyList(keys=[KeyView(**k) for k in await store.api_keys.all()])


@router.delete(
    "/v1/keys/{name}",
    status_code=status.HTTP_204_NO_CONTENT,
    dependencies=[AdminDep],
    responses=problems(
        401, 403, 404, 409, 422, s404="no key with this name", s409="'admin': the admin token"
    ),
)
async def revoke_key(name: KeyName, store: StoreDep) -> None:
    """Admin key. Revokes the key: every request with it is answered 401 from the next one on."""
    await store.api_keys.revoke(name)


@router.get(
    "/v1/audit",
    response_model=AuditPage,
    dependencies=[AdminDep],
    responses=problems(401, 403, 422),
)
async def audit_log(
    store: StoreDep,
    limit: Annotated[int, Query(ge=1, le=1000, description="entries per page")] = 100,
    before: Annotated[
        str,
        Query(
            pattern=r"^([0-9]{1,20}-[0-9]{1,20})?$", description="the last id of the previous page"
        ),
    ] = "",
) -> AuditPage:
    """Admin key. Every state-changing call made with a key or the admin token, newest first:
    when, which key (its name), which route and experiment, and the status it was answered. The
    log keeps about DEXP_AUDIT_MAX_ENTRIES entries."""
    page = await store.api_keys.audit_page(before, limit + 1)
    return AuditPage(
        entries=[AuditEntry(**e) for e in page[:limit]],
        next=page[limit - 1]["id"] if len(page) > limit else None,
    )
