"""The credential gate: every route that needs a credential has it checked before its body is read.

FastAPI reads and parses a request's body before it solves the route's dependencies, so a route's
own token check comes after the body: an anonymous 100 MB body was parsed before its 401. This ASGI
middleware checks the bearer credential from the headers alone and answers 401/403/404 without
reading a byte of the body; a request it lets through is checked again by the route (defence in
depth, and the route's checks are what OpenAPI documents). What each route needs:

| route | credential |
|---|---|
| POST /v1/experiments, DELETE /v1/experiments/{id}, POST .../tickets, GET .../voters, .../agents, .../suspects, DELETE .../agents/{agent}, POST and GET .../webhooks, DELETE .../webhooks/{webhook} | the admin token |
| POST /v1/experiments/{id}/reset | the admin token, or a token of an agent of {id} |
| POST /v1/experiments/{id}/votes, POST .../settled, POST .../report, POST .../reports | a token of an agent of {id} |
| GET /v1/agents/me | an agent token |
| POST /v1/agents | the open-enrollment secret (when open enrollment is on), or an unused, unexpired ticket |

It runs before the body limit (coordinator/edge.py), so before a byte of any body is read. A vote
or an LDP report (POST .../votes, .../reports) is checked here for the form of its token only
(present, '<agent id>.<secret>'): the fast path (coordinator/fast_path.py) checks the token in the
same Lua call that applies the message; checking it here too would add a Redis round trip to
every one.
"""

from __future__ import annotations

import re
from enum import Enum

from redis.exceptions import RedisError

from coordinator.api.deps import same_secret
from coordinator.asgi import Exchange, Scope, Step, header, send_problem
from coordinator.errors import CoordinatorError, StoreUnavailable, Unauthorized
from coordinator.fast_path import bearer
from coordinator.settings import Settings
from coordinator.store import ExperimentStore, agent_of, experiment_of, ticket_experiment


class Need(Enum):
    ADMIN = "admin"
    ADMIN_OR_AGENT = "admin or agent"
    AGENT = "agent"
    ENROLLMENT = "enrollment"


ID = r"(?P<exp>[^/]+)"
EXPERIMENT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
# the messages the fast path answers, its Lua call checking their token
FAST_PATH_SUFFIXES = ("/votes", "/reports")
ROUTES: list[tuple[str, re.Pattern[str], Need]] = [
    ("POST", re.compile(r"/v1/experiments"), Need.ADMIN),
    ("DELETE", re.compile(rf"/v1/experiments/{ID}"), Need.ADMIN),
    ("DELETE", re.compile(rf"/v1/experiments/{ID}/agents/[^/]+"), Need.ADMIN),
    ("POST", re.compile(rf"/v1/experiments/{ID}/tickets"), Need.ADMIN),
    ("GET", re.compile(rf"/v1/experiments/{ID}/(voters|agents|suspects)"), Need.ADMIN),
    ("POST", re.compile(rf"/v1/experiments/{ID}/webhooks"), Need.ADMIN),
    ("GET", re.compile(rf"/v1/experiments/{ID}/webhooks"), Need.ADMIN),
    ("DELETE", re.compile(rf"/v1/experiments/{ID}/webhooks/[^/]+"), Need.ADMIN),
    ("POST", re.compile(rf"/v1/experiments/{ID}/reset"), Need.ADMIN_OR_AGENT),
    ("POST", re.compile(rf"/v1/experiments/{ID}/votes"), Need.AGENT),
    ("POST", re.compile(rf"/v1/experiments/{ID}/settled"), Need.AGENT),
    ("POST", re.compile(rf"/v1/experiments/{ID}/reports?"), Need.AGENT),
    ("GET", re.compile(r"/v1/agents/me"), Need.AGENT),
    ("POST", re.compile(r"/v1/agents"), Need.ENROLLMENT),
]


def need_of(method: str, path: str) -> tuple[Need, str] | None:
    """The credential a request needs, and the experiment id in its path ('' if none)."""
    for route_method, pattern, need in ROUTES:
        if method == route_method and (match := pattern.fullmatch(path)):
            return need, match.groupdict().get("exp") or ""
    return None


async def check(
    need: Need, exp: str, token: str, settings: Settings, store: ExperimentStore
) -> None:
    """Raise the CoordinatorError the route would answer for this credential; None if it may go."""
    admin = same_secret(token, settings.admin_token)
    if need is Need.ADMIN:
        if not admin:
            raise Unauthorized("invalid admin token")
    elif need is Need.ENROLLMENT:
        if settings.open_enrollment_enabled and same_secret(token, settings.enrollment_secret):
            return
        if not ticket_experiment(token):
            raise Unauthorized(
                "invalid enrollment credential: neither a ticket from the experiment's admin nor the "
                "open-enrollment secret"
                + ("" if settings.open_enrollment_enabled else " (open enrollment is off)")
            )
        if not await store.ticket_usable(token):
            raise Unauthorized("invalid ticket: unknown, already used or expired")
    elif need is Need.ADMIN_OR_AGENT and admin:
        return
    elif not exp:  # GET /v1/agents/me: the experiment the agent token names
        exp = experiment_of(agent_of(token))
        if not exp:
            raise Unauthorized("invalid agent token")
        await store.authenticate(token, exp)
    elif EXPERIMENT_ID.fullmatch(exp):  # a malformed id: the route answers 422
        await store.authenticate(token, exp)


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
            await check(need, exp, token, state.settings, state.store)
        except CoordinatorError as exc:
            await send_problem(ex.send, exc.status, exc.message, unread(scope, exc.headers()))
            return True
        except RedisError as exc:
            error = StoreUnavailable.of(exc)
            await send_problem(ex.send, error.status, error.message, unread(scope, error.headers()))
            return True
        return False


def unread(scope: Scope, headers: dict[str, str]) -> dict[str, str]:
    """`headers`, and Connection: close when the request has a body: it is refused unread, and the
    connection must not go on reading it (a 100 MB anonymous body would still stream in)."""
    length = header(scope, b"content-length")
    if header(scope, b"transfer-encoding") is not None or length not in (None, b"0"):
        return {**headers, "Connection": "close"}
    return headers
