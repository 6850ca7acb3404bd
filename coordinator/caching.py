"""Cacheable reads: strong ETags on the public documents, and 304 Not Modified without reading them.

GET /v1/experiments/{id} ("state") and GET /v1/experiments/{id}/best-arm ("best-arm") are what
devices poll. Each answer carries `ETag: "<tag>"` and `Cache-Control: public, max-age=N`
(DEXP_CACHE_MAX_AGE_SECONDS), so that a CDN or a caching proxy can serve them, and a request whose
`If-None-Match` names the current tag gets `304 Not Modified` with no body.

The tag is a digest of what determines the document: the meta hash's REVISION_FIELDS
(coordinator/store/: the publication of the votes, lua/publish.lua, and the revision every other
script that changes the document moves, lua/changes.lua) and, for "state", the load generator's
lease, which its own process rewrites. A vote moves the tag only with its batch's publication. A
revision whose publication is due (store.due_at: a batch complete, an elimination's tick come) is
not answered 304: the route reads the document, which takes the publication. So it changes whenever a byte of the document would, across coordinators, and
across a Redis failover that lost writes (the revision carries Redis's clock). A full read computes
the tag from the same fields, read in the same transaction as the document.

ConditionalReads answers the conditional requests before FastAPI, from what the process already
knows: RevisionCache keeps each experiment's revision fields and lease as last read, and Redis
itself tells the process when either key changes (CLIENT TRACKING: the reads that fill the cache go
over a connection whose tracked keys Redis invalidates, on any write by anyone, an expiry or a flush,
with a message to a second connection of the process). A cached revision costs no I/O: a digest and
a comparison (benchmarks/bench_reads.py measures it against full reads). The process that applies a
change forgets that experiment's revision at once; another one learns of it with Redis's message,
a moment after the write. While the two connections are not both up (at start-up, after an error),
on a Redis Cluster (tracking is per node), or where Redis refuses CLIENT TRACKING (an ACL without
it), the cache holds nothing and each conditional request reads the revision: one round trip. A
request ConditionalReads cannot answer 304 goes on to the route, which reads the document, and is
the reference: it checks If-None-Match too.

Representations: a document compressed by coordinator/compression.py is another representation of
it, so its strong tag differs: "<tag>-gzip". Both forms match the same document, and a 304 names the
one the client sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import time
from collections.abc import Mapping
from typing import Any

from redis.asyncio.connection import ConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from starlette.responses import Response

from common import redis_keys as keys
from coordinator.asgi import ASGIApp, Exchange, Scope, Step, header
from coordinator.store import PUBLICATION_FIELDS, REVISION_FIELDS, ExperimentStore, lease_bytes

log = logging.getLogger("dexp.coordinator.caching")

# What a tag is made of besides the state: a new document format is a new representation.
TAG_SALT = b"dexp-documents-1"
GZIP_SUFFIX = "-gzip"
# The cacheable routes, with the experiment id pattern of coordinator.api.experiments.ExperimentId.
CACHEABLE = re.compile(r"/v1/experiments/([A-Za-z0-9_-]{1,64})(/best-arm)?")
NOT_MODIFIED: dict[int | str, dict[str, Any]] = {
    304: {
        "description": "Not Modified: If-None-Match names the current ETag (no body); the same "
        "ETag and Cache-Control"
    }
}
CACHE_HEADERS = {
    "ETag": {
        "description": "strong validator of this document: send it back in If-None-Match",
        "schema": {"type": "string"},
    },
    "Cache-Control": {"description": "public, max-age=N", "schema": {"type": "string"}},
}


def cacheable_document(scope: Scope) -> tuple[str, str] | None:
    """(experiment, "state" or "best-arm") for a GET of a public document, else None."""
    if scope["method"] != "GET":
        return None
    match = CACHEABLE.fullmatch(scope["path"])
    if match is None:
        return None
    return match.group(1), ("best-arm" if match.group(2) else "state")


def etag(kind: str, revision: tuple[str, ...], lease: bytes = b"") -> str:
    """The quoted strong ETag of document `kind` ("state" or "best-arm") in the state that
    `revision` (store.REVISION_FIELDS) and the load generator's `lease` describe."""
    digest = hashlib.blake2b(TAG_SALT, digest_size=12)
    digest.update(kind.encode())
    for value in revision:
        digest.update(b"\x00" + value.encode())
    digest.update(b"\x01" + lease)
    return f'"{digest.hexdigest()}"'


def matching(if_none_match: str | None, tag: str) -> str | None:
    """The tag to answer 304 with when `If-None-Match` (a list of entity tags, or *) names the
    current document `tag`, in either representation, with the weak comparison RFC 9110 asks for
    (a proxy may have weakened it); else None."""
    if not if_none_match:
        return None
    opaque = tag.strip('"')
    for item in if_none_match.split(","):
        candidate = item.strip()
        if candidate == "*":
            return tag
        if candidate.startswith("W/"):
            candidate = candidate[2:]
        if len(candidate) < 2 or candidate[0] != '"' or candidate[-1] != '"':
            continue
        value = candidate[1:-1]
        if value in (opaque, opaque + GZIP_SUFFIX):
            return f'"{value}"'
    return None


def cache_headers(tag: str, max_age: int) -> dict[str, str]:
    """The headers of a cacheable document, on 200 and 304 alike. Vary: the gzip representation
    is only for clients that accept it."""
    return {
        "ETag": tag,
        "Cache-Control": f"public, max-age={max_age}",
        "Vary": "Accept-Encoding",
    }


def not_modified(tag: str, headers: Mapping[str, str]) -> Response:
    return Response(status_code=304, headers={**headers, "ETag": tag})


# REVISION_FIELDS' values, the lease as read, and when a publication is due (ms; None: none waits,
# store.due_at): a document whose publication is due is not answered from its revision
Revision = tuple[tuple[str, ...], bytes, int | None]
INVALIDATE = "__redis__:invalidate"  # where Redis sends what a tracking connection read and changed
PING_SECONDS = 1.0  # the listening connection is checked this often; silent for 3: broken
MAX_ENTRIES = 100_000  # experiments whose revision a process keeps
REVISIONS_CLIENT = "dexp-revisions"  # the name of its two connections (CLIENT LIST)


class RevisionCache:
    """The revisions of the experiments this process was asked about, each valid until Redis says
    its meta hash or its lease changed. `ready` only while both connections are up: the one that
    reads (CLIENT TRACKING ON REDIRECT <the listener>) and the listener, subscribed to Redis's
    invalidations; otherwise `revision` reads Redis every time."""

    def __init__(self, url: str | None, timeout: float | None = 3.0) -> None:
        """`url`: the Redis to track; None (a cluster): no cache. `timeout`: of a connection or a
        read (DEXP_REDIS_TIMEOUT_SECONDS)."""
        self.url = url
        self.timeout = timeout
        self.entries: dict[str, Revision] = {}
        # the reads in progress, each under a token an invalidation of its experiment withdraws:
        # a read that began before a change is not kept
        self.reading: dict[str, object] = {}
        self.ready = False
        self.pool: ConnectionPool | None = None
        self.reader: Any = None
        self.lock = asyncio.Lock()  # one command at a time on the reading connection
        self.failed = False  # the reading connection failed: both are rebuilt
        self.ids: tuple[int, int] = (0, 0)  # the listener's and the reader's CLIENT ID
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.url is not None and self.task is None:
            self.task = asyncio.create_task(self.run())

    def forget(self, exp: str) -> None:
        """`exp` changed (this process changed it, or Redis says so): read it again."""
        self.entries.pop(exp, None)
        self.reading.pop(exp, None)

    def flush(self) -> None:
        self.entries.clear()
        self.reading.clear()

    async def revision(self, store: ExperimentStore, exp: str, lease: bool) -> Revision | None:
        """The experiment's revision (and its lease if `lease`), None if it does not exist."""
        entry = self.entries.get(exp) if self.ready else None
        if entry is None:
            if not self.ready:
                return await store.revision(exp, lease)
            token = self.reading[exp] = object()
            try:
                entry = await self.read(store, exp)
            except (RedisError, OSError):
                self.failed = True
                self.broken()
                return await store.revision(exp, lease)
            if entry is None:
                return None
            if self.reading.get(exp) is token and len(self.entries) < MAX_ENTRIES:
                self.entries[exp] = entry
            if self.reading.get(exp) is token:
                del self.reading[exp]
        return entry if lease else (entry[0], b"", entry[2])

    async def read(self, store: ExperimentStore, exp: str) -> Revision | None:
        """The revision fields and the lease, over the tracking connection: Redis remembers both
        keys for this process from now on."""
        async with self.lock:
            reader = self.reader
            await reader.send_command(
                "HMGET", keys.meta(exp), *REVISION_FIELDS, *PUBLICATION_FIELDS
            )
            fields = await reader.read_response()
            if fields[0] is None:
                return None
            await reader.send_command("GET", keys.load_generator(exp))
            try:
                raw = await reader.read_response()
            except ResponseError as exc:  # not a string: the lease is unreadable
                raw = exc
        revision = fields[: len(REVISION_FIELDS)]
        return (
            tuple("" if v is None else v.decode() for v in revision),
            lease_bytes(raw),
            store.due_at(fields[len(REVISION_FIELDS) :]),
        )

    def broken(self) -> None:
        self.ready = False
        self.flush()

    async def run(self) -> None:
        """Keep the two connections up; rebuild both after any failure, with back-off."""
        backoff = 0.05
        assert self.url is not None
        while True:
            # RESP2: invalidations are messages on the listener, as the commands below expect
            self.pool = ConnectionPool.from_url(
                self.url,
                max_connections=2,
                protocol=2,
                client_name=REVISIONS_CLIENT,
                socket_timeout=self.timeout,
                socket_connect_timeout=self.timeout,
            )
            try:
                await self.listen(await self.connect())
            except asyncio.CancelledError:
                raise
            except ResponseError as exc:  # refused (no CLIENT TRACKING, or an ACL): no cache
                log.warning("no revision cache (%s): conditional reads each ask Redis", exc)
                return
            except (RedisError, OSError) as exc:
                log.warning("revision cache: %s; reconnecting", exc)
            finally:
                self.broken()
                with contextlib.suppress(Exception):
                    await self.pool.disconnect()
            await asyncio.sleep(backoff)
            backoff = min(2 * backoff, 2.0)

    async def connect(self) -> Any:
        """The listener (subscribed to Redis's invalidations) and the reader (tracked, its
        invalidations redirected to the listener)."""
        assert self.pool is not None
        listener = await self.pool.get_connection()
        await listener.send_command("CLIENT", "ID")
        client_id = await listener.read_response()
        await listener.send_command("SUBSCRIBE", INVALIDATE)
        reader = await self.pool.get_connection()
        await reader.send_command("CLIENT", "TRACKING", "ON", "REDIRECT", client_id)
        if await reader.read_response() != b"OK":
            raise ResponseError("CLIENT TRACKING was not turned on")
        await reader.send_command("CLIENT", "ID")
        self.ids = (int(client_id), int(await reader.read_response()))
        self.reader, self.failed = reader, False
        return listener

    async def listen(self, listener: Any) -> None:
        loop = asyncio.get_running_loop()
        heard = loop.time()
        while not self.failed:
            message = await listener.read_response(timeout=PING_SECONDS)
            now = loop.time()
            if message is not None:
                heard = now
                kind = message[0]
                if kind == b"subscribe":
                    self.ready = True  # invalidations reach this process from now on
                elif kind == b"message":
                    self.invalidate(message[2])
            elif now - heard > 3 * PING_SECONDS:
                raise RedisConnectionError("the invalidation listener does not answer")
            else:
                await listener.send_command("PING")  # its answer is a message: heard
        raise RedisConnectionError("the tracking connection failed")

    def invalidate(self, names: list[bytes] | None) -> None:
        """Redis's message: these keys changed (None: every key, a flush)."""
        if names is None:
            return self.flush()
        for name in names:
            self.forget(keys.hash_tag(name.decode()))

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


class ConditionalReads(Step):
    """304 for a GET of a cacheable document whose If-None-Match names its current tag, from its
    revision alone; any other request goes on unchanged."""

    def __init__(self, app: ASGIApp, max_age: int) -> None:
        super().__init__(app)
        self.max_age = max_age

    async def run(self, ex: Exchange) -> bool:
        scope = ex.scope
        document = cacheable_document(scope)
        if document is None:
            return False
        condition = header(scope, b"if-none-match")
        if condition is None:
            return False
        exp, kind = document
        state = scope["app"].state
        try:
            known = await state.revisions.revision(state.store, exp, kind == "state")
        except RedisError:
            known = None  # the route answers: 503 if Redis is still unreachable
        if known is not None and (known[2] is None or known[2] > time.time() * 1000):
            tag = etag(kind, known[0], known[1])
            matched = matching(condition.decode("latin-1"), tag)
            if matched is not None:
                headers = [
                    (k.lower().encode(), v.encode())
                    for k, v in cache_headers(matched, self.max_age).items()
                ]
                await ex.send({"type": "http.response.start", "status": 304, "headers": headers})
                await ex.send({"type": "http.response.body", "body": b""})
                return True
        return False
