"""coordinator.fast_path: it answers only votes the FastAPI route would accept, and answers them the
same way; everything else reaches the route with its body intact."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, ValidationError

from common.votes import VoteOutcome
from coordinator.api.agents import PrivateReportCreate, VoteCreate
from coordinator.errors import Forbidden
from coordinator.fast_path import FastPath, bearer, plain_report, plain_vote
from coordinator.store import VoteResult

from .helpers import bearer as bearer_header
from .helpers import create_experiment, enroll_agents

BODIES = [
    b'{"arm": 0}',
    b'{"arm": 3, "epoch": 2}',
    b'{"epoch": 0, "arm": 7}',
    b' {"arm" : 1 , "epoch":0} ',
    b'{"arm": 12345678901234567890}',
    b'{"arm": 1, "arm": 2}',
    b"{}",
    b'{"arm": -1}',
    b'{"arm": 0, "epoch": -1}',
    b'{"arm": 1.0}',
    b'{"arm": 1e3}',
    b'{"arm": true}',
    b'{"arm": "1"}',
    b'{"arm": null}',
    b'{"arm": 0, "epoch": null}',
    b'{"arm": 0, "epoch": false}',
    b'{"arm": 0, "weight": 2}',
    b'{"arm": NaN}',
    b'{"arm": Infinity}',
    b"[0]",
    b"0",
    b'"arm"',
    b"null",
    b"",
    b"arm=0",
    b'{"arm": 0',
    '{"arm": 0, "é": 1}'.encode(),
    b'\xef\xbb\xbf{"arm": 0}',
    b'{"arm": 1, "epoch": 2, "epoch_started_at": 1767225600123}',
    b'{"arm": 1, "epoch": 2, "epoch_started_at": null}',
    b'{"arm": 1, "epoch_started_at": -1}',
    b'{"arm": 1, "epoch_started_at": 1.5}',
    b'{"arm": 1, "epoch_started_at": "1767225600123"}',
    b'{"arm": 1, "epoch_started_at": true}',
    b'{"arm": 1, "epoch_started_at": 9007199254740993}',
    b'{"arm": 2.0, "epoch": 1.0}',
    b'{"arm": 999}',
    b'{"arm": 1000}',
    b'{"arm": 1e300}',
    b'{"arm": 1, "epoch_started_at": 1767225600123.0}',
]


REPORT_BODIES = [
    b'{"arm": 0, "bit": 1, "seq": 1}',
    b'{"seq": 3, "bit": 0, "arm": 7}',
    b' {"arm" : 1 , "bit":0, "seq": 1000000} ',
    b'{"arm": 1, "bit": 0, "seq": 1000001}',
    b'{"arm": 1, "bit": 0, "seq": 0}',
    b'{"arm": 1, "bit": 2, "seq": 1}',
    b'{"arm": 1, "bit": -1, "seq": 1}',
    b'{"arm": -1, "bit": 1, "seq": 1}',
    b'{"arm": 1, "bit": true, "seq": 1}',
    b'{"arm": 1, "bit": 1.0, "seq": 1}',
    b'{"arm": 1.0, "bit": 1, "seq": 1}',
    b'{"arm": 1, "bit": 1, "seq": "1"}',
    b'{"arm": 1, "bit": 1}',
    b'{"arm": 1, "seq": 1}',
    b'{"bit": 1, "seq": 1}',
    b'{"arm": 1, "bit": 1, "seq": 1, "epoch": 0}',
    b'{"arm": 1, "bit": null, "seq": 1}',
    b'{"arm": 1, "bit": 1, "seq": 1, "seq": 2}',
    b'{"arm": 12345678901234567890, "bit": 1, "seq": 1}',
    b"[1, 1, 1]",
    b"{}",
    b"",
    b'{"arm": 0, "bit": 1, "seq": 1',
    b'{"arm": 2.0, "bit": 1.0, "seq": 1.0}',
    b'{"arm": 1000, "bit": 1, "seq": 1}',
    b'{"arm": 1, "bit": 1, "seq": 1.5}',
]


PARSERS: list[tuple[Callable[[bytes], Any], type[BaseModel], tuple[str, ...]]] = [
    (plain_vote, VoteCreate, ("arm", "epoch", "epoch_started_at")),
    (plain_report, PrivateReportCreate, ("arm", "bit", "seq")),
]


@pytest.mark.parametrize(
    ("parse", "model", "fields", "body"),
    [
        (*parser, body)
        for parser, bodies in zip(PARSERS, (BODIES, REPORT_BODIES), strict=True)
        for body in bodies
    ],
)
def test_the_fast_path_accepts_exactly_what_the_route_model_accepts(
    parse: Callable[[bytes], Any], model: type[BaseModel], fields: tuple[str, ...], body: bytes
) -> None:
    fast = parse(body)
    try:
        parsed = model.model_validate(json.loads(body))  # as FastAPI does: json.loads, the model
    except (ValueError, ValidationError):
        parsed = None
    if fast is None:
        assert parsed is None, "the fast path must hand on only what the route refuses"
    else:
        assert parsed is not None and fast == tuple(getattr(parsed, f) for f in fields)


@pytest.mark.parametrize(
    ("value", "token"),
    [
        (b"Bearer abc.def", "abc.def"),
        (b"bearer abc.def", "abc.def"),
        (b"BEARER   abc.def  ", "abc.def"),
        (b"Basic abc.def", None),
        (b"Bearer", None),
        (b"Bearer ", None),
        (b"abc.def", None),
    ],
)
def test_bearer_reads_the_header_as_http_bearer_does(value: bytes, token: str | None) -> None:
    assert bearer(value) == token


# -- the middleware alone: a fake store, a recording downstream app -----------------------------
class FakeStore:
    def __init__(self, error: Exception | None = None) -> None:
        self.calls: list[tuple[str, str, int, int]] = []
        self.error = error

    async def vote(
        self, exp: str, token: str, arm: int, epoch: int, epoch_started_at: int | None = None
    ) -> VoteResult:
        self.calls.append((exp, token, arm, epoch))
        if self.error:
            raise self.error
        return VoteResult(VoteOutcome.COUNTED, 4, epoch, 2)


def call(
    store: FakeStore,
    body: bytes,
    headers: list[tuple[bytes, bytes]],
    path: str = "/v1/experiments/exp/votes",
    method: str = "POST",
) -> tuple[list[dict[str, Any]], list[bytes]]:
    """Run one request through FastPath; returns (messages sent, bodies the app received)."""
    reached: list[bytes] = []

    async def downstream(scope: Any, receive: Any, send: Any) -> None:
        more = True
        while more:
            message = await receive()
            reached.append(message["body"])
            more = message.get("more_body", False)
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b"route"})

    async def main() -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []
        chunks = [body[:3], body[3:]]

        async def receive() -> dict[str, Any]:
            chunk = chunks.pop(0) if chunks else b""
            return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "method": method,
            "path": path,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
            "app": SimpleNamespace(state=SimpleNamespace(store=store)),
        }
        await FastPath(downstream)(scope, receive, send)
        return sent

    return asyncio.run(main()), reached


JSON = (b"content-type", b"application/json")
AUTH = (b"authorization", b"Bearer exp-1.secret")


def test_a_plain_vote_is_answered_without_the_route() -> None:
    store = FakeStore()
    sent, reached = call(store, b'{"arm": 3}', [JSON, AUTH])
    assert reached == []
    assert store.calls == [("exp", "exp-1.secret", 3, 0)]
    assert sent[0]["status"] == 200
    assert (b"content-type", b"application/json") in sent[0]["headers"]
    assert json.loads(sent[1]["body"]) == {
        "counted": True,
        "outcome": "counted",
        "eliminated": False,
        "arm_out": False,
        "votes": 2,
        "version": 4,
        "epoch": 0,
    }


def test_a_refused_vote_is_answered_as_the_app_handler_does() -> None:
    store = FakeStore(Forbidden("this agent is not enrolled in experiment 'exp'"))
    sent, reached = call(store, b'{"arm": 3}', [JSON, AUTH])
    assert reached == []
    assert sent[0]["status"] == 403
    assert sent[1]["body"] == b'{"detail":"this agent is not enrolled in experiment \'exp\'"}'


@pytest.mark.parametrize(
    ("body", "headers", "path", "method"),
    [
        (b'{"arm": 1.5}', [JSON, AUTH], None, None),
        (b'{"arm": 0, "x": 1}', [JSON, AUTH], None, None),
        (b"[0]", [JSON, AUTH], None, None),
        (b'{"arm": 0}', [AUTH], None, None),  # no content type: the route refuses it
        (b'{"arm": 0}', [(b"content-type", b"text/plain"), AUTH], None, None),
        (b'{"arm": 0}', [JSON], None, None),  # no token
        (b'{"arm": 0}', [JSON, (b"authorization", b"Basic x")], None, None),
        (b'{"arm": 0}', [JSON, AUTH], "/v1/experiments/bad.id/votes", None),
        (b'{"arm": 0}', [JSON, AUTH], "/v1/experiments/exp/votes/", None),
        (b'{"arm": 0}', [JSON, AUTH], "/v1/experiments/exp", None),
        (b'{"arm": 0}', [JSON, AUTH], None, "PUT"),
        (b'{"arm": 0, "pad": "' + b"x" * 2000 + b'"}', [JSON, AUTH], None, None),
    ],
)
def test_anything_else_reaches_the_route_with_its_body(
    body: bytes, headers: list[tuple[bytes, bytes]], path: str | None, method: str | None
) -> None:
    store = FakeStore()
    sent, reached = call(
        store, body, headers, path or "/v1/experiments/exp/votes", method or "POST"
    )
    assert store.calls == []
    assert sent[0]["status"] == 299
    assert b"".join(reached) == body


# -- over HTTP, against the real route ----------------------------------------------------------
@pytest.mark.parametrize(
    "headers",
    [
        {"content-type": "application/json; charset=utf-8"},
        {"content-type": "Application/JSON"},
        {"content-type": "application/vnd.api+json"},  # not plain: the route answers
    ],
)
def test_content_types_the_route_accepts(client: httpx.Client, headers: dict[str, str]) -> None:
    create_experiment(client, id="ct", arms=["A", "B"])
    (agent,) = enroll_agents(client, "ct", 1)
    for epoch, arm in enumerate((0, 1)):
        response = client.post(
            "/v1/experiments/ct/votes",
            content=json.dumps({"arm": arm}).encode(),
            headers={**headers, **agent.headers},
        )
        assert response.status_code == 200, response.text
        assert response.json()["outcome"] == "counted", epoch
    assert client.get("/v1/experiments/ct").json()["votes"] == [1, 1]


def test_a_vote_the_fast_path_hands_on_is_still_applied(client: httpx.Client) -> None:
    """A lower-case scheme and a JSON body the fast path leaves to the route: same outcome."""
    create_experiment(client, id="hand", arms=["A", "B", "C"])
    (agent,) = enroll_agents(client, "hand", 1)
    token = agent.token
    plain = client.post(
        "/v1/experiments/hand/votes", json={"arm": 0}, headers={"Authorization": f"bearer {token}"}
    )
    padded = client.post(
        "/v1/experiments/hand/votes",
        content=b'{"arm": 1, "epoch": 0' + b" " * 2000 + b"}",
        headers={"content-type": "application/json", **bearer_header(token)},
    )
    assert plain.status_code == padded.status_code == 200
    assert plain.json()["outcome"] == padded.json()["outcome"] == "counted"
    assert client.get("/v1/experiments/hand").json()["votes"] == [1, 1, 0]
