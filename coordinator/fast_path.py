"""The fast path of the two messages devices send most: a step of the edge (coordinator/edge.py)
that answers a plain, valid vote or LDP report itself.

Votes (and, in an LDP experiment, reports: one per page visit) are the requests that arrive
thousands of times a second, and FastAPI's per-request work (routing through every route,
dependency solving, body and response models) cost more than the message. This step recognises
`POST /v1/experiments/{id}/votes` and `POST /v1/experiments/{id}/reports` with a bearer token and a
JSON body of exactly the shape the route's model accepts (VoteCreate: {"arm": int >= 0, "epoch":
int >= 0}, epoch optional; PrivateReportCreate: {"arm": int >= 0, "bit": 0 | 1, "seq": 1 to
1,000,000}; nothing else), applies it and answers with the same bytes the route would. Every other
request, including every message it does not recognise as plain, goes on unchanged to the FastAPI
app, whose route and validation stay the reference: the fast path can only answer a request the
route would accept. Both paths apply a message through the same call (coordinator.api.agents
vote_reply or private_report_reply -> one EVALSHA of its script), so authentication, the
per-agent rate limit (429 with Retry-After) and every error are the same on both.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from coordinator.api.agents import private_report_reply, vote_reply
from coordinator.api.models import MAX_ARMS
from coordinator.asgi import Exchange, Step, replay, send_json, send_problem
from coordinator.errors import CoordinatorError, StoreUnavailable

# The routes' paths with the experiment id pattern of coordinator.api.agents.ExperimentId.
VOTE_PATH = re.compile(r"/v1/experiments/([A-Za-z0-9_-]{1,64})/votes")
REPORT_PATH = re.compile(r"/v1/experiments/([A-Za-z0-9_-]{1,64})/reports")
MAX_BODY = 1024  # a message is ~30 bytes; anything longer takes the ordinary route


def integer(value: object, low: int, high: int | None = None) -> int | None:
    """`value` as the models' Integer reads it (an int, or a whole float up to 2^53; never a bool
    or a string), if within [low, high] (high None: no bound); else None."""
    if type(value) is float and value.is_integer() and abs(value) <= 2**53:
        value = int(value)
    if type(value) is not int or value < low:  # type() is: bool is refused
        return None
    return value if high is None or value <= high else None


def plain_vote(body: bytes) -> tuple[int, int, int | None] | None:
    """(arm, epoch, epoch_started_at or None) if `body` is a JSON object VoteCreate accepts as
    is, else None."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if type(data) is not dict or not data.keys() <= {"arm", "epoch", "epoch_started_at"}:
        return None
    arm = integer(data.get("arm"), 0, MAX_ARMS - 1)
    epoch = integer(data.get("epoch", 0), 0)
    started = data.get("epoch_started_at")
    if started is not None:
        started = integer(started, 0, 2**53)
        if started is None:
            return None
    if arm is None or epoch is None:
        return None
    return arm, epoch, started


def plain_report(body: bytes) -> tuple[int, int, int] | None:
    """(arm, bit, seq) if `body` is a JSON object PrivateReportCreate accepts as is, else None."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if type(data) is not dict or data.keys() != {"arm", "bit", "seq"}:
        return None
    arm = integer(data["arm"], 0, MAX_ARMS - 1)
    bit = integer(data["bit"], 0, 1)
    seq = integer(data["seq"], 1, 1_000_000)
    if arm is None or bit is None or seq is None:
        return None
    return arm, bit, seq


@dataclass(frozen=True)
class PlainRoute:
    """A route the fast path answers: its path (the experiment id its group), the parser of the
    bodies its model accepts as they are, and the call that applies one and encodes the reply."""

    path: re.Pattern[str]
    parse: Callable[[bytes], tuple[Any, ...] | None]
    reply: Callable[..., Awaitable[bytes]]  # (store, experiment, token, *parsed)


ROUTES = (
    PlainRoute(VOTE_PATH, plain_vote, vote_reply),
    PlainRoute(REPORT_PATH, plain_report, private_report_reply),
)


def bearer(value: bytes) -> str | None:
    """The token of an 'Authorization: Bearer <token>' header, read as HTTPBearer reads it."""
    scheme, _, token = value.decode("latin-1").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class FastPath(Step):
    async def run(self, ex: Exchange) -> bool:
        scope = ex.scope
        if scope["method"] != "POST":
            return False
        for route in ROUTES:
            match = route.path.fullmatch(scope["path"])
            if match is not None:
                break
        else:
            return False
        authorization = content_type = length = None
        for name, value in scope["headers"]:
            if name == b"authorization" and authorization is None:
                authorization = value
            elif name == b"content-type" and content_type is None:
                content_type = value
            elif name == b"content-length" and length is None:
                length = value
        if (
            authorization is None
            or content_type is None
            or content_type.split(b";", 1)[0].strip().lower() != b"application/json"
            or length is None
            or not length.isdigit()
            or int(length) > MAX_BODY
        ):
            return False
        token = bearer(authorization)
        if token is None:
            return False

        body, more = b"", True
        while more:
            message = await ex.receive()
            if message["type"] != "http.request":
                return True  # the client went away
            body += message.get("body", b"")
            more = message.get("more_body", False)
        parsed = route.parse(body)
        if parsed is None:
            ex.receive = replay(body, ex.receive)
            return False

        try:
            reply = await route.reply(scope["app"].state.store, match.group(1), token, *parsed)
        except CoordinatorError as exc:  # as app.py's handler answers it
            await send_problem(ex.send, exc.status, exc.message, exc.headers())
            return True
        except RedisError as exc:  # as app.py's handler answers it: 503, retry later
            error = StoreUnavailable.of(exc)
            await send_problem(ex.send, error.status, error.message, error.headers())
            return True
        await send_json(ex.send, 200, reply)
        return True
