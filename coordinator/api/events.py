"""GET /v1/experiments/{id}/events: the experiment's public state changes as Server-Sent Events.

The wire format (what a client in any language reads):

    retry: 2000                     <- with the first event: the reconnection delay, ms
    id: 1767225600123-0             <- opaque, increasing with the changes: send it back as
    event: state                       Last-Event-ID when reconnecting
    data: {"experiment":"demo","version":3,"epoch":0,"epoch_started_at":1767225600000,
           "status":"exploring","remaining_arms":[0,1,4],"candidates":[],
           "best_arm":null}                                               <- one line

    : heartbeat                     <- every DEXP_SSE_HEARTBEAT_SECONDS when nothing else was sent

    event: deleted                  <- the experiment was deleted; then the stream ends
    data: {"experiment":"demo"}

The first event is the current state; then one event per change (coalesced when several come
together: coordinator/events.py). With Last-Event-ID the current state comes only if the id is not
the current one (then the client has it; the retry line comes alone).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Request
from starlette.responses import Response

from coordinator.addresses import client_group
from coordinator.api.deps import SettingsDep, StoreDep, problems
from coordinator.asgi import Receive, Scope, Send, StreamHandle, send_problem, stream_handle
from coordinator.errors import CoordinatorError, NotFound
from coordinator.events import Hub, Subscriber

router = APIRouter(prefix="/v1/experiments", tags=["events"])

ExperimentId = Annotated[
    str,
    Path(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="experiment id", examples=["demo"]),
]
HEARTBEAT = b": heartbeat\n\n"
HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # nginx must pass each event on, not buffer the stream
]
PROBLEM_JSON = {"application/json": {"schema": {"$ref": "#/components/schemas/Problem"}}}


def json_problems(*statuses: int, **descriptions: str) -> dict[int | str, dict[str, Any]]:
    """problems(), documented as JSON: FastAPI would give a documented error model this route's
    media type (text/event-stream), but every error is the usual JSON body."""
    return {
        status: {**{k: v for k, v in entry.items() if k != "model"}, "content": PROBLEM_JSON}
        for status, entry in problems(*statuses, **descriptions).items()
    }


STREAM_DESCRIPTION = (
    "text/event-stream: `retry:` with the first event, then events `state` (`id:`, and `data:` "
    "one JSON line: experiment, version, epoch, epoch_started_at, status, remaining_arms, "
    "candidates, best_arm), "
    "`: heartbeat` comments, and `deleted` before the stream ends"
)


class EventStream(Response):
    """The stream of one client: admitted at the process's bounds, taken out of the connection
    count, fed by the hub until the client leaves, the experiment is deleted, or the server shuts
    down; cut when a write stalls for two heartbeat periods (the client does not read)."""

    media_type = "text/event-stream"

    def __init__(
        self,
        hub: Hub,
        experiment: str,
        created_at: int,
        client: str,
        last_event_id: str | None,
        heartbeat: float,
        retry_ms: int,
    ) -> None:
        super().__init__(status_code=200)
        self.hub = hub
        self.experiment = experiment
        self.created_at = created_at
        self.client = client
        self.subscriber = Subscriber(last_event_id)
        self.heartbeat = heartbeat
        self.retry = b"retry: %d\n" % retry_ms

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            with self.hub.admitted(self.client):
                handle = stream_handle(scope, self.subscriber.end)
                try:
                    await self.stream(receive, send, handle)
                finally:
                    handle.release()
        except CoordinatorError as exc:  # a bound: 429 or 503, before anything was sent
            await send_problem(send, exc.status, exc.message, exc.headers())

    async def stream(self, receive: Receive, send: Send, handle: StreamHandle) -> None:
        subscriber = self.subscriber
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        watcher = asyncio.create_task(self.watch(receive))
        try:
            await self.hub.join(self.experiment, subscriber, self.created_at)
            if await self.write_events(send):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            else:
                handle.abort()  # a client that does not read: drop what it did not take
                await asyncio.sleep(0)  # the connection is lost before the response ends
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            await self.hub.leave(subscriber)

    async def watch(self, receive: Receive) -> None:
        """The client went away: the stream stops."""
        while (await receive())["type"] != "http.disconnect":
            pass
        self.subscriber.end()

    async def write_events(self, send: Send) -> bool:
        """Write what the subscriber is offered, or a heartbeat, until it stops; False if a write
        stalled (the connection is to be cut)."""
        subscriber = self.subscriber
        prefix = self.retry  # goes with the first thing written
        while True:
            quiet = False
            try:  # asyncio.timeout, not wait_for: no task per wake-up (10,000 streams wake at once)
                async with asyncio.timeout(self.heartbeat):
                    await subscriber.wake.wait()
            except TimeoutError:
                quiet = True
            subscriber.wake.clear()
            if subscriber.deleted:
                data = json.dumps({"experiment": self.experiment}, separators=(",", ":")).encode()
                chunk = prefix + b"event: deleted\ndata: " + data + b"\n\n"
            elif subscriber.stopped:
                return True
            elif (state := subscriber.take()) is not None:
                chunk = prefix + state.frame()
            elif subscriber.up_to_date and prefix:
                chunk = prefix + b"\n"  # the client has the current state: the retry alone
            elif quiet:
                chunk = prefix + HEARTBEAT
            else:
                continue
            subscriber.up_to_date = False
            prefix = b""
            try:
                async with asyncio.timeout(2 * self.heartbeat):
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except TimeoutError:
                return False
            if subscriber.deleted:
                return True


# One event of the stream, its fields as the wire format above names them (OpenAPI 3.1: a stream's
# `schema` describes each event). `data` is one line of JSON: the state, or {"experiment": id}.
EVENT = {
    "type": "object",
    "properties": {
        "event": {"enum": ["state", "deleted"]},
        "id": {"type": "string", "description": "send it back as Last-Event-ID to resume"},
        "data": {"type": "string", "contentMediaType": "application/json"},
        "retry": {"type": "integer", "minimum": 0, "description": "reconnection delay, ms"},
    },
}


@router.get(
    "/{experiment}/events",
    status_code=200,
    response_class=EventStream,
    responses={
        200: {
            "description": STREAM_DESCRIPTION,
            "content": {"text/event-stream": {"schema": EVENT}},
        },
        **json_problems(
            404,
            413,
            422,
            429,
            503,
            s429="this client address has DEXP_MAX_SUBSCRIBERS_PER_CLIENT streams open: retry "
            "after Retry-After seconds",
            s503="this coordinator process has DEXP_MAX_SUBSCRIBERS streams open, or the store "
            "(Redis) is unavailable: retry after Retry-After seconds (poll meanwhile)",
        ),
    },
)
async def events(
    experiment: ExperimentId,
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    last_event_id: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            max_length=64,
            description="the id of the last event received, when reconnecting",
        ),
    ] = None,
) -> EventStream:
    """Anonymous, like GET /v1/experiments/{id}: the experiment's public state, then one event
    per change (an elimination, a reset, an identification, a tie, a tie reopened), with comment
    heartbeats. A client that reconnects with Last-Event-ID gets the current state, unless it has
    it. `event: deleted`, then the end, when the experiment is deleted. Streams have bounds of
    their own (per process, and per client address), separate from the connection limit."""
    created_at = await store.created_at(experiment)
    if created_at is None:
        raise NotFound(f"experiment {experiment!r} does not exist")
    return EventStream(
        request.app.state.hub,
        experiment,
        created_at,
        client_group(request.client.host) if request.client else "",
        last_event_id,
        settings.sse_heartbeat_seconds,
        settings.sse_retry_ms,
    )
