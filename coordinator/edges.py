"""The request-body limit: an ASGI middleware that refuses a large body before anything parses it.

Without it a client could send any amount: FastAPI reads a route's whole body before it checks the
token or the JSON, so a 100 MB anonymous POST cost the coordinator 2.5 s and ~600 MB of memory
before its 401. BodyLimit answers 413 at once when Content-Length says too much (the body is never
read), and counts a body without Content-Length (chunked) while it streams in, answering 413 as soon
as it passes the limit: nothing ever holds more than `max_bytes` of it. The 413 closes the
connection, so a client cannot keep streaming into it.

A body must also arrive in time: the whole of it within DEXP_BODY_TIMEOUT_SECONDS of the request's
headers, else 408 and the connection closes. So a client that trickles a byte every few seconds
holds a connection that long at most (the audit held them 30 s and more, the vote fast path reading
the body before it checks the token). Every body is read whole here, counted and timed, before any
route or the fast path sees it: never more than `max_bytes` of it, as the limit already allowed.

It is a step of the edge (coordinator/edge.py), before the vote fast path and the credential gate. The headers have a limit of their own in the HTTP
protocol (coordinator/server.py).
"""

from __future__ import annotations

import asyncio

from coordinator.asgi import ASGIApp, Exchange, Receive, Send, Step, replay, send_problem


class BodyLimit(Step):
    """413 for a request body over `max_bytes` (settings.max_body_bytes), on every route."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout: float = 10.0) -> None:
        super().__init__(app)
        self.max_bytes = max_bytes
        self.timeout = timeout

    async def run(self, ex: Exchange) -> bool:
        length = coding = None
        for name, value in ex.scope["headers"]:
            if name == b"content-length" and length is None:
                length = value
            elif name == b"transfer-encoding":
                coding = value
        # 19 digits or more cannot be an honest size (and int() of a huge string is slow)
        if (
            length is not None
            and length.isdigit()
            and (len(length) > 18 or int(length) > self.max_bytes)
        ):
            await self.refuse(ex.send)
            return True
        if coding is None and (length is None or length == b"0"):
            return False  # no body at all
        try:
            async with asyncio.timeout(self.timeout):
                body = await self.counted(ex.receive)
        except TimeoutError:
            await send_problem(
                ex.send,
                408,
                f"the request body did not arrive within {self.timeout:g} s",
                {"Connection": "close"},
            )
            return True
        if body is None:  # the client went away: nobody to answer
            return True
        if isinstance(body, int):
            await self.refuse(ex.send)
            return True
        ex.receive = replay(body, ex.receive)
        return False

    async def counted(self, receive: Receive) -> bytes | int | None:
        """The body, read whole and counted as it streams in (Content-Length or chunked): past the
        limit, its size so far (413 before the app sees any of it, so every route answers alike
        whether or not it reads its body); None if the client went away."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return size
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def refuse(self, send: Send) -> None:
        await send_problem(
            send,
            413,
            f"request body too large: at most {self.max_bytes} bytes",
            {"Connection": "close"},  # the rest of the body is never read: no keep-alive after it
        )
