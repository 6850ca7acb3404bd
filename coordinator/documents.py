"""Full reads of the public documents, answered with the bytes the route rendered for their ETag.

GET /v1/experiments/{id} ("state") and GET .../best-arm are what devices and dashboards read. A
full read (no If-None-Match, or one that names an older document) reads the parts of the document's
strong ETag as the route's read reads them (store.tag_parts: the same commands in one read-only
script, lua/tag.lua, and a publication that is due taken first), not the whole state, then
computes the tag (coordinator/caching.py). A strong tag names one document byte for byte: that is
what a 304 already relies on. So when this process kept what the route sent under that tag, it
sends those bytes again, without building the state or its status, FastAPI's routing and
dependencies, the certificate's computation and pydantic's validation and serialization (most of a
full read's CPU: benchmarks/bench_reads.py).
Otherwise the request goes on to the route, and its 200 is kept under the ETag it carries (the
route reads the whole state, with its status and a decision's result: the reference).

Kept: the last 200 of each (experiment, document), while they total at most MAX_BYTES (the oldest
dropped first). A read of an experiment that does not exist goes on to the route, which answers
its 404; a read that Redis fails is answered 503 here, as the route would (one timeout, not two).
A request whose If-None-Match names the current tag goes on too (the route answers 304):
coordinator.caching.ConditionalReads answers those before, from the revision alone, and lets one
through only when its revision is not the current one.

The step sits inside gzip (coordinator/edge.py): what it keeps and sends is the uncompressed form,
compressed on its way out for a client that accepts gzip, as the route's own answer is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from redis.exceptions import RedisError

from coordinator.asgi import ASGIApp, Exchange, Message, Send, Step, header, send_problem
from coordinator.caching import cacheable_document, etag, matching
from coordinator.errors import CoordinatorError, StoreUnavailable

MAX_BYTES = 32 * 1024 * 1024  # the documents one process keeps, in all


@dataclass(frozen=True)
class Rendered:
    """A 200 of the route: its ETag, headers (as sent, before gzip) and body."""

    tag: bytes
    headers: Sequence[tuple[bytes, bytes]]
    body: bytes


class RenderedDocuments(Step):
    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BYTES) -> None:
        super().__init__(app)
        self.max_bytes = max_bytes
        self.kept: dict[tuple[str, str], Rendered] = {}
        self.size = 0

    async def run(self, ex: Exchange) -> bool:
        scope = ex.scope
        key = cacheable_document(scope)
        if key is None:
            return False
        try:
            revision, lease = await scope["app"].state.store.tag_parts(key[0])
        except CoordinatorError:
            return False  # the route reads again and answers it (404)
        except RedisError as exc:  # as app.py's handler answers it: one timeout, not two
            error = StoreUnavailable.of(exc)
            await send_problem(ex.send, error.status, error.message, error.headers())
            return True
        tag = etag(key[1], revision, lease if key[1] == "state" else b"")
        condition = header(scope, b"if-none-match")
        if condition is not None and matching(condition.decode("latin-1"), tag) is not None:
            return False  # the route answers 304
        kept = self.kept.get(key)
        if kept is not None and kept.tag == tag.encode():
            await ex.send(
                {"type": "http.response.start", "status": 200, "headers": [*kept.headers]}
            )
            await ex.send({"type": "http.response.body", "body": kept.body})
            return True
        ex.send = self.keeping(key, ex.send)
        return False

    def keeping(self, key: tuple[str, str], send: Send) -> Send:
        """`send`, keeping the route's answer if it is a 200 with an ETag, in one body."""
        headers: list[tuple[bytes, bytes]] | None = None

        async def kept(message: Message) -> None:
            nonlocal headers
            if message["type"] == "http.response.start":
                if message["status"] == 200:
                    headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", [])]
            elif message["type"] == "http.response.body" and headers is not None:
                tag = next((v for k, v in headers if k == b"etag"), None)
                if tag is not None and not message.get("more_body", False):
                    self.keep(key, Rendered(tag, headers, bytes(message.get("body", b""))))
                headers = None
            await send(message)

        return kept

    def keep(self, key: tuple[str, str], rendered: Rendered) -> None:
        old = self.kept.pop(key, None)
        if old is not None:
            self.size -= len(old.body)
        if len(rendered.body) > self.max_bytes:
            return
        while self.kept and self.size + len(rendered.body) > self.max_bytes:
            oldest = next(iter(self.kept))
            self.size -= len(self.kept.pop(oldest).body)
        self.kept[key] = rendered
        self.size += len(rendered.body)
