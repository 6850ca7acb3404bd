"""The few ASGI pieces the coordinator's middlewares share: types and a JSON problem response.

Middlewares answer outside FastAPI's exception handlers, so they send their errors themselves, in
the same shape as every other error: `{"detail": "..."}` with a 4xx or 503 status.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

JSON_HEADERS = [(b"content-type", b"application/json")]


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
