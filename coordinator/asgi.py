"""The few ASGI pieces the edge's steps share: types, a step, and a JSON problem response.

The steps of coordinator/edge.py answer outside FastAPI's exception handlers, so they send their
errors themselves, in the same shape as every other error: `{"detail": "..."}` with a 4xx or 503
status.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

JSON_HEADERS = [(b"content-type", b"application/json")]


class Exchange:
    """One HTTP request crossing the edge: its scope, and the `receive` and `send` the next step
    and finally the app get (a step that read the body replays it; one that watches or rewrites
    the answer wraps `send`)."""

    __slots__ = ("receive", "scope", "send")

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scope = scope
        self.receive = receive
        self.send = send


class Step(ABC):
    """A step of the edge (coordinator/edge.py runs them in order, in one middleware): `run`
    answers the request itself (True) or lets it go on (False), with `ex.receive` or `ex.send`
    replaced if it must. Called as an ASGI app, a step is a middleware around `app` on its own."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    @abstractmethod
    async def run(self, ex: Exchange) -> bool: ...

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ex = Exchange(scope, receive, send)
        if scope["type"] != "http" or not await self.run(ex):
            await self.app(ex.scope, ex.receive, ex.send)


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of header `name` (lower case), or None."""
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


async def send_json(
    send: Send, status: int, body: bytes, headers: Mapping[str, str] | None = None
) -> None:
    """A complete response of JSON bytes."""
    extra = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*JSON_HEADERS, *extra, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_problem(
    send: Send, status: int, detail: str, headers: Mapping[str, str] | None = None
) -> None:
    """An error response as app.py's handlers write it (JSONResponse's encoding)."""
    body = json.dumps({"detail": detail}, ensure_ascii=False, separators=(",", ":")).encode()
    await send_json(send, status, body, headers)


def replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives a body already read first, then the server's own messages: for the
    app downstream of a middleware that had to look at the body."""
    pending = True

    async def again() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


# The key of the scope under which coordinator/server.py offers a request to leave the connection
# count (DEXP_MAX_CONCURRENCY): `scope[STREAM_HOOK](stop)` marks the connection as serving a
# long-lived stream, registers `stop` (called when the server shuts down) and returns a
# StreamHandle. Absent under another server: NO_STREAM then.
STREAM_HOOK = "dexp.stream"


class StreamHandle:
    """A long-lived response's hold on its connection; this base does nothing."""

    def release(self) -> None:
        """The stream ended: the connection counts as an ordinary one again."""

    def abort(self) -> None:
        """Cut the connection at once, unsent data dropped (a client that does not read)."""


def stream_handle(scope: Scope, stop: Callable[[], None]) -> StreamHandle:
    hook = scope.get(STREAM_HOOK)
    return hook(stop) if hook is not None else StreamHandle()
