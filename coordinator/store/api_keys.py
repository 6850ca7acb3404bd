"""Named API keys with roles, and the audit log of the calls made with them.

A key is shown once, when it is created: Redis keeps its SHA-256 digest (a key is 256 random
bits, so a digest needs no salt or stretching, as agents' tokens), looked up by digest on each
request. Creation and revocation are Lua scripts (lua/key_create.lua, lua/key_revoke.lua) so that
a name and its digest come and go together. The audit log is a capped stream (XADD MAXLEN ~).
The admin token (DEXP_ADMIN_TOKEN) is not stored here: it is the built-in key named "admin".
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from common import redis_keys as keys
from coordinator.errors import Conflict, NotFound
from coordinator.store.core import StoreCore, digest, now_ms, text

KEY_PREFIX = "dexp_"  # no '.': a key is never taken for an agent's token '<agent>.<secret>'
ADMIN_NAME = "admin"  # the admin token's name in the audit log; no key may take it


class Role(IntEnum):
    """What a key may do; each role may do what the roles below it may."""

    VIEWER = 1  # every read, the admin-only ones too (voters, agents, suspects)
    OPERATOR = 2  # and every change of experiments: create, reset, delete, tickets, revocations
    ADMIN = 3  # and the keys themselves, and the audit log

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def of(cls, label: str) -> Role:
        return cls[label.upper()]


@dataclass(frozen=True)
class Principal:
    """Who made a request: a key's name (ADMIN_NAME for the admin token) and its role."""

    name: str
    role: Role


class ApiKeys:
    """The named keys (create, look up, list, revoke) and the audit log (append, page)."""

    def __init__(self, core: StoreCore) -> None:
        self.core = core
        self.redis = core.redis

    async def create(self, name: str, role: Role) -> tuple[str, int]:
        """A new key named `name` with `role`, and its creation time (unix ms): the key is
        returned this once, only its digest is kept. Conflict if the name is taken."""
        if name == ADMIN_NAME:
            raise Conflict(f"key {name!r} exists: it is the admin token (DEXP_ADMIN_TOKEN)")
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        at = now_ms()
        created = await self.core.scripts.key_create(
            names_key=keys.API_KEYS,
            digests_key=keys.API_KEY_DIGESTS,
            name=name,
            digest=digest(key),
            name_doc=json.dumps({"digest": digest(key), "role": role.label, "created_at": at}),
            digest_doc=json.dumps({"name": name, "role": role.label}),
        )
        if not int(created):
            raise Conflict(f"key {name!r} exists: revoke it first (DELETE /v1/keys/{name})")
        return key, at

    async def lookup(self, key: str) -> Principal | None:
        """The key's name and role, or None if it is no key (never created, or revoked)."""
        if not key.startswith(KEY_PREFIX):
            return None
        doc = await self.redis.hget(keys.API_KEY_DIGESTS, digest(key))  # type: ignore[misc]
        if doc is None:
            return None
        found = json.loads(text(doc))
        return Principal(found["name"], Role.of(found["role"]))

    async def all(self) -> list[dict[str, Any]]:
        """Every key's name, role and creation time (never a digest), by name."""
        raw = await self.redis.hgetall(keys.API_KEYS)  # type: ignore[misc]
        docs = {text(k): json.loads(text(v)) for k, v in raw.items()}
        return [
            {"name": name, "role": doc["role"], "created_at": doc["created_at"]}
            for name, doc in sorted(docs.items())
        ]

    async def revoke(self, name: str) -> None:
        """Revoke the key named `name`: the next request with it is refused (401). NotFound if
        there is no such key; Conflict for the admin token, which only its setting changes."""
        if name == ADMIN_NAME:
            raise Conflict("the admin token cannot be revoked here: change DEXP_ADMIN_TOKEN")
        revoked = await self.core.scripts.key_revoke(
            names_key=keys.API_KEYS, digests_key=keys.API_KEY_DIGESTS, name=name
        )
        if not int(revoked):
            raise NotFound(f"no key named {name!r}")

    async def audit(self, entry: dict[str, str | int], max_entries: int) -> None:
        """Append one call to the audit log, trimmed to about `max_entries` (MAXLEN ~)."""
        await self.redis.xadd(
            keys.AUDIT,
            entry,  # type: ignore[arg-type]
            maxlen=max_entries,
            approximate=True,
        )

    async def audit_page(self, before: str, limit: int) -> list[dict[str, Any]]:
        """Up to `limit` entries of the audit log, newest first, older than entry id `before`
        ('' for the newest), each with its `id` (the cursor of the next page)."""
        newest = f"({before}" if before else "+"
        raw: Any = await self.redis.xrevrange(keys.AUDIT, newest, "-", count=limit)
        page = []
        for entry_id, fields in raw:
            entry: dict[str, Any] = {text(k): text(v) for k, v in fields.items()}
            entry["at"] = int(entry["at"])
            entry["status"] = int(entry["status"])
            page.append({"id": text(entry_id), **entry})
        return page
