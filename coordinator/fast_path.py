"""The vote endpoint's fast path: a step of the edge (coordinator/edge.py) that answers a plain,
valid vote itself.

A vote is the one request that arrives thousands of times a second, and FastAPI's per-request work
(routing through every route, dependency solving, body and response models) cost more than the vote.
This step recognises `POST /v1/experiments/{id}/votes` with a bearer token and a JSON body of
exactly the shape VoteCreate accepts ({"arm": int >= 0, "epoch": int >= 0}, epoch optional, nothing
else), applies it and answers with the same bytes the route would. Every other request, including
every vote it does not recognise as plain, goes on unchanged to the FastAPI app, whose route and
validation stay the reference: the fast path can only answer a request the route would accept.
Both paths apply a vote through the same call (coordinator.api.agents.vote_reply -> one EVALSHA of
lua/vote.lua), so authentication, the per-agent rate limit (429 with Retry-After) and every error
are the same on both.
"""

from __future__ import annotations

import json
import re

from redis.exceptions import RedisError

from coordinator.api.agents import vote_reply
from coordinator.asgi import Exchange, Step, replay, send_json, send_problem
from coordinator.errors import CoordinatorError, StoreUnavailable

# The route's path with the experiment id pattern of coordinator.api.agents.ExperimentId.
VOTE_PATH = re.compile(r"/v1/experiments/([A-Za-z0-9_-]{1,64})/votes")
MAX_BODY = 1024  # a vote is ~20 bytes; anything longer takes the ordinary route


def plain_vote(body: bytes) -> tuple[int, int, int | None] | None:
    """(arm, epoch, epoch_started_at or None) if `body` is a JSON object VoteCreate accepts as
    is, else None."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if type(data) is not dict or not data.keys() <= {"arm", "epoch", "epoch_started_at"}:
        return None
    arm, epoch = data.get("arm"), data.get("epoch", 0)
    started = data.get("epoch_started_at")
    # type() is: StrictInt refuses bool (a subclass of int) and floats like 1.0
    if type(arm) is not int or type(epoch) is not int or arm < 0 or epoch < 0:
        return None
    if started is not None and (type(started) is not int or not 0 <= started <= 2**53):
        return None
    return arm, epoch, started


def bearer(value: bytes) -> str | None:
    """The token of an 'Authorization: Bearer <token>' header, read as HTTPBearer reads it."""
    scheme, _, token = value.decode("latin-1").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class VoteFastPath(Step):
    async def run(self, ex: Exchange) -> bool:
        scope = ex.scope
        if scope["method"] != "POST":
            return False
        match = VOTE_PATH.fullmatch(scope["path"])
        if match is None:
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
        vote = plain_vote(body)
        if vote is None:
            ex.receive = replay(body, ex.receive)
            return False

        try:
            reply = await vote_reply(scope["app"].state.store, match.group(1), token, *vote)
        except CoordinatorError as exc:  # as app.py's handler answers it
            await send_problem(ex.send, exc.status, exc.message, exc.headers())
            return True
        except RedisError as exc:  # as app.py's handler answers it: 503, retry later
            error = StoreUnavailable.of(exc)
            await send_problem(ex.send, error.status, error.message, error.headers())
            return True
        await send_json(ex.send, 200, reply)
        return True
