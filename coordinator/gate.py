"""The credential gate: every route that needs a credential has it checked before its body is read.

FastAPI reads and parses a request's body before it solves the route's dependencies, so a route's
own token check comes after the body: an anonymous 100 MB body was parsed before its 401. This ASGI
middleware checks the bearer credential from the headers alone and answers 401/403/404 without
reading a byte of the body; a request it lets through is checked again by the route (defence in
depth, and the route's checks are what OpenAPI documents). What each route needs:

| route | credential |
|---|---|
| GET /v1/experiments/{id}/voters, .../agents, .../suspects | a viewer key or above |
| POST /v1/experiments, DELETE /v1/experiments/{id}, POST .../tickets, DELETE .../agents/{agent}, POST and GET .../webhooks, DELETE .../webhooks/{webhook} | an operator key or above |
| POST /v1/keys, GET /v1/keys, DELETE /v1/keys/{name}, GET /v1/audit | an admin key |
| POST /v1/experiments/{id}/reset | an operator key or above, or a token of an agent of {id} |
| POST /v1/experiments/{id}/votes, POST .../settled, POST .../report, POST .../reports | a token of an agent of {id} |
| GET /v1/agents/me, DELETE /v1/agents/me | an agent token |
| POST /v1/agents | the open-enrollment secret (when open enrollment is on), or an unused, unexpired ticket |

A key is the admin token (DEXP_ADMIN_TOKEN, the built-in key named "admin", role admin) or a named
key (POST /v1/keys); each role may do what the roles below it may (viewer < operator < admin). An
unknown or revoked key is answered 401, a key whose role is below the route's 403.

The audit log: every call of a route above that is not a GET, made with a key (whatever its role,
refusals with 403 too), is written to the audit log (GET /v1/audit) when its answer starts, before
the client reads it: when, the key's name, its role, the method and path, the experiment, the
status. Not the calls with an agent's token or a ticket (the product's data, not operators'
actions), nor those refused 401 (no key to name: the throttle counts them, and an anonymous
client could otherwise flood the capped log and push out what it should keep).

It runs before the body limit (coordinator/edge.py), so before a byte of any body is read. A vote
or an LDP report (POST .../votes, .../reports) is checked here for the form of its token only
(present, '<agent id>.<secret>'): the fast path (coordinator/fast_path.py) checks the token in the
same Lua call that applies the message; checking it here too would add a Redis round trip to
every one.
"""

from __future__ import annotations

import logging
import re
import time
from enum import Enum

from redis.exceptions import RedisError

from coordinator.api.deps import no_key, principal_of, refusal, same_secret
from coordinator.asgi import Exchange, Message, Scope, Send, Step, header, send_problem
from coordinator.errors import CoordinatorError, StoreUnavailable, Unauthorized
from coordinator.fast_path import bearer
from coordinator.settings import Settings
from coordinator.store import (
    KEY_PREFIX,
    ExperimentStore,
    Principal,
    Role,
    agent_of,
    experiment_of,
    ticket_experiment,
)

log = logging.getLogger("dexp.coordinator")


class Need(Enum):
    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"
    OPERATOR_OR_AGENT = "operator or agent"
    AGENT = "agent"
    ENROLLMENT = "enrollment"


# the role of a key each need asks for (OPERATOR_OR_AGENT: when the credential is a key)
ROLE_OF = {
    Need.VIEWER: Role.VIEWER,
    Need.OPERATOR: Role.OPERATOR,
    Need.ADMIN: Role.ADMIN,
    Need.OPERATOR_OR_AGENT: Role.OPERATOR,
}


ID = r"(?P<exp>[^/]+)"
EXPERIMENT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
# the messages the fast path answers, its Lua call checking their token
FAST_PATH_SUFFIXES = ("/votes", "/reports")
ROUTES: list[tuple[str, re.Pattern[str], Need]] = [
    ("POST", re.compile(r"/v1/experiments"), Need.OPERATOR),
    ("DELETE", re.compile(rf"/v1/experiments/{ID}"), Need.OPERATOR),
    ("DELETE", re.compile(rf"/v1/experiments/{ID}/agents/[^/]+"), Need.OPERATOR),
    ("POST", re.compile(rf"/v1/experiments/{ID}/tickets"), Need.OPERATOR),
    ("GET", re.compile(rf"/v1/experiments/{ID}/(voters|agents|suspects)"), Need.VIEWER),
    ("POST", re.compile(r"/v1/keys"), Need.ADMIN),
    ("GET", re.compile(r"/v1/keys"), Need.ADMIN),
    ("DELETE", re.compile(r"/v1/keys/[^/]+"), Need.ADMIN),
    ("GET", re.compile(r"/v1/audit"), Need.ADMIN),
    ("POST", re.compile(rf"/v1/experiments/{ID}/webhooks"), Need.OPERATOR),
    ("GET", re.compile(rf"/v1/experiments/{ID}/webhooks"), Need.OPERATOR),
    ("DELETE", re.compile(rf"/v1/experiments/{ID}/webhooks/[^/]+"), Need.OPERATOR),
    ("POST", re.compile(rf"/v1/experiments/{ID}/reset"), Need.OPERATOR_OR_AGENT),
    ("POST", re.compile(rf"/v1/experiments/{ID}/votes"), Need.AGENT),
    ("POST", re.compile(rf"/v1/experiments/{ID}/settled"), Need.AGENT),
    ("POST", re.compile(rf"/v1/experiments/{ID}/reports?"), Need.AGENT),
    ("GET", re.compile(r"/v1/agents/me"), Need.AGENT),
    ("DELETE", re.compile(r"/v1/agents/me"), Need.AGENT),
    ("POST", re.compile(r"/v1/agents"), Need.ENROLLMENT),
]


def need_of(method: str, path: str) -> tuple[Need, str] | None:
    """The credential a request needs, and the experiment id in its path ('' if none)."""
    for route_method, pattern, need in ROUTES:
        if method == route_method and (match := pattern.fullmatch(path)):
            return need, match.groupdict().get("exp") or ""
    return None


def is_key(token: str, settings: Settings) -> bool:
    """Whether `token` is given as a key (the admin token, or a key's form), not an agent's."""
    return token.startswith(KEY_PREFIX) or same_secret(token, settings.admin_token)


async def check(
    need: Need, exp: str, token: str, settings: Settings, store: ExperimentStore
) -> Principal | None:
    """Raise the CoordinatorError the route would answer for this credential, but a key's 403:
    the key's principal when the credential is a key (the caller compares roles), else None if
    it may go."""
    role = ROLE_OF.get(need)
    if role is not None and (need is not Need.OPERATOR_OR_AGENT or is_key(token, settings)):
        principal = await principal_of(token, settings, store)
        if principal is None:
            raise no_key()
        return principal
    if need is Need.ENROLLMENT:
        if settings.open_enrollment_enabled and same_secret(token, settings.enrollment_secret):
            return None
        if not ticket_experiment(token):
            raise Unauthorized(
                "invalid enrollment credential: neither a ticket from the experiment's admin nor the "
                "open-enrollment secret"
                + ("" if settings.open_enrollment_enabled else " (open enrollment is off)")
            )
        if not await store.ticket_usable(token):
            raise Unauthorized("invalid ticket: unknown, already used or expired")
    elif not exp:  # GET /v1/agents/me: the experiment the agent token names
        exp = experiment_of(agent_of(token))
        if not exp:
            raise Unauthorized("invalid agent token")
        await store.authenticate(token, exp)
    elif EXPERIMENT_ID.fullmatch(exp):  # a malformed id: the route answers 422
        await store.authenticate(token, exp)
    return None


class CredentialGate(Step):
    async def run(self, ex: Exchange) -> bool:
        scope = ex.scope
        found = need_of(scope["method"], scope["path"])
        if found is None:
            return False
        need, exp = found
        authorization = header(scope, b"authorization")
        token = bearer(authorization) if authorization is not None else None
        try:
            if token is None:
                raise Unauthorized("missing bearer token (Authorization: Bearer ...)")
            if need is Need.AGENT and scope["path"].endswith(FAST_PATH_SUFFIXES):
                if not agent_of(token):  # the fast path or the route checks the rest
                    raise Unauthorized("invalid agent token")
                return False
            state = scope["app"].state
            principal = await check(need, exp, token, state.settings, state.store)
            if principal is not None:
                audit = Audit(state.settings, state.store, principal, scope, exp)
                changes = scope["method"] != "GET"  # reads are not logged
                refused = refusal(principal, ROLE_OF[need])
                if refused is not None:
                    if changes:
                        await audit.write(refused.status)
                    raise refused
                if changes:
                    ex.send = audit.wrap(ex.send)
        except CoordinatorError as exc:
            await send_problem(ex.send, exc.status, exc.message, unread(scope, exc.headers()))
            return True
        except RedisError as exc:
            error = StoreUnavailable.of(exc)
            await send_problem(ex.send, error.status, error.message, unread(scope, error.headers()))
            return True
        return False


class Audit:
    """One call's entry in the audit log, written when its answer starts (its status known)."""

    def __init__(
        self,
        settings: Settings,
        store: ExperimentStore,
        principal: Principal,
        scope: Scope,
        exp: str,
    ) -> None:
        self.settings = settings
        self.store = store
        self.principal = principal
        self.method = str(scope["method"])
        self.path = str(scope["path"])
        self.exp = exp

    async def write(self, status: int) -> None:
        """Append the entry; a store that fails then is logged, not answered: the call was made,
        and its answer must reach the client all the same."""
        entry: dict[str, str | int] = {
            "at": int(time.time() * 1000),
            "key": self.principal.name,
            "role": self.principal.role.label,
            "method": self.method,
            "route": self.path,
            "experiment": self.exp,
            "status": status,
        }
        try:
            await self.store.api_keys.audit(entry, self.settings.audit_max_entries)
        except RedisError as exc:
            log.warning("audit log not written (%s): %s", exc, entry)

    def wrap(self, send: Send) -> Send:
        async def audited(message: Message) -> None:
            if message["type"] == "http.response.start":
                await self.write(int(message["status"]))
            await send(message)

        return audited


def unread(scope: Scope, headers: dict[str, str]) -> dict[str, str]:
    """`headers`, and Connection: close when the request has a body: it is refused unread, and the
    connection must not go on reading it (a 100 MB anonymous body would still stream in)."""
    length = header(scope, b"content-length")
    if header(scope, b"transfer-encoding") is not None or length not in (None, b"0"):
        return {**headers, "Connection": "close"}
    return headers
