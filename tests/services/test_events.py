"""Push: GET /v1/experiments/{id}/events against the real coordinator over real HTTP, real Redis.

The wire contract (/v1/experiments/{id}/events, docs/API.md): the first event is the current
state; an elimination, a reset, an identification, a tie and a tie reopened each arrive as one
event, in order, with increasing ids; Last-Event-ID resumes; heartbeats keep an idle stream alive;
a deletion ends the stream. And what the hub promises (coordinator/events.py): one Redis
subscription per experiment per process whatever the number of clients, a reconnection that misses
nothing, subscriber bounds (429/503 with Retry-After) that leave votes and probes served, a slow
subscriber that holds up nobody, and streams that end when the server shuts down.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from common import redis_keys as keys
from common.algorithms import AlgorithmConfig
from coordinator.events import EVENTS_CLIENT, Hub, State, Subscriber
from coordinator.redis_client import client as redis_client

from .helpers import (
    Agent,
    ThreadedCoordinator,
    admin_headers,
    coordinator,
    coordinator_settings,
    create_experiment,
    enroll_agents,
    open_store,
    redis_server,
)
from .sse import DEADLINE, Stream, event_order, wait_until

HEARTBEAT = 0.2  # seconds: short, so that a test sees heartbeats soon; waits are for conditions
M3 = {"delta": 0.2, "eta": 0.5}  # threshold M = 3
ARMS = ["A", "B", "C"]


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """A Redis of this module's own: the tests count the hub's connections in CLIENT LIST, where
    the session's Redis also shows other coordinators' (the session's, which other modules
    stream from)."""
    with redis_server() as own:
        yield own.url


@pytest.fixture(scope="module")
def server(redis_url: str) -> Iterator[ThreadedCoordinator]:
    settings = coordinator_settings(redis_url, sse_heartbeat_seconds=HEARTBEAT, sse_retry_ms=1500)
    with coordinator(settings) as running:
        yield running


@pytest.fixture
def url(server: ThreadedCoordinator, clean_redis: str) -> str:
    return server.url


@pytest.fixture
def http(url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=10.0, trust_env=False) as client:
        yield client


def vote(http: httpx.Client, exp: str, agent: Agent, arm: int, epoch: int = 0) -> dict[str, Any]:
    response = http.post(
        f"/v1/experiments/{exp}/votes", json={"arm": arm, "epoch": epoch}, headers=agent.headers
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


class AnyInt:
    """Equal to any int (not a bool): an epoch's start is Redis's clock, not known in advance."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, int) and not isinstance(other, bool)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "<any int>"


def state(exp: str, version: int, epoch: int, status: str, remaining: list[int]) -> dict[str, Any]:
    """An event's data: the public state, nothing about agents."""
    return {
        "experiment": exp,
        "version": version,
        "epoch": epoch,
        "epoch_started_at": AnyInt(),
        "status": status,
        "remaining_arms": remaining,
        "candidates": remaining if status == "tied" else [],
        "best_arm": remaining[0] if status == "identified" else None,
    }


def numsub(redis_url: str, exp: str, client: redis.Redis | None = None) -> int:
    """Subscribers of the experiment's changes channel, over `client` (else a new connection)."""
    own = client or redis.Redis.from_url(redis_url)
    try:
        return int(dict(own.pubsub_numsub(keys.changes(exp)))[keys.changes(exp).encode()])
    finally:
        if client is None:
            own.close()


def hub_connections(client: redis.Redis) -> list[dict[str, Any]]:
    """The coordinators' event-stream connections that hold subscriptions (CLIENT LIST)."""
    return [c for c in client.client_list() if c["name"] == EVENTS_CLIENT and int(c["sub"]) > 0]


# -- the contract ---------------------------------------------------------------------------------
def test_each_change_of_the_public_state_is_one_event_in_order(
    url: str, http: httpx.Client
) -> None:
    create_experiment(http, id="flow", arms=ARMS, **M3)
    a, b, c, d = enroll_agents(http, "flow", 4)
    with Stream(url, "/v1/experiments/flow/events") as stream:
        assert stream.status == 200
        assert stream.headers["content-type"] == "text/event-stream; charset=utf-8"
        assert stream.headers["cache-control"] == "no-cache"
        assert stream.headers["x-accel-buffering"] == "no"
        first = stream.next_block()
        assert first is not None and first.is_event, first
        assert first.fields["retry"] == "1500"  # the first event carries the reconnection delay
        assert (first.event, first.json()) == ("state", state("flow", 0, 0, "exploring", [0, 1, 2]))
        events = [first]

        def expect(data: dict[str, Any]) -> None:
            event = stream.next_event()
            assert (event.event, event.json()) == ("state", data)
            assert "retry" not in event.fields
            events.append(event)

        for agent in (a, b, c):  # the third vote eliminates C
            vote(http, "flow", agent, 2)
        expect(state("flow", 1, 0, "exploring", [0, 1]))
        # counted votes that change no public state send nothing: the next event is the tie,
        # once d's vote leaves no arm able to reach M = 3 (each agent kept one of A and B)
        for agent, arm in ((a, 0), (b, 0), (c, 1), (d, 1)):
            vote(http, "flow", agent, arm)
        expect(state("flow", 1, 0, "tied", [0, 1]))
        enroll_agents(http, "flow", 1)  # one more agent can still vote: the tie is reopened
        expect(state("flow", 1, 0, "exploring", [0, 1]))
        reset = http.post("/v1/experiments/flow/reset", headers=admin_headers())
        assert reset.status_code == 200, reset.text
        expect(state("flow", 2, 1, "exploring", [0, 1, 2]))
        for agent in (a, b, c):
            vote(http, "flow", agent, 1, epoch=1)
        expect(state("flow", 3, 1, "exploring", [0, 2]))
        for agent in (a, b, c):
            vote(http, "flow", agent, 2, epoch=1)
        expect(state("flow", 4, 1, "identified", [0]))  # the identification

        ids = [event.id for event in events]
        assert all(ids), ids
        assert [event_order(i) for i in ids] == sorted({event_order(i) for i in ids}), ids
        # a newcomer's first event is the current state, with the current id
        with Stream(url, "/v1/experiments/flow/events") as late:
            now = late.next_event()
            assert (now.id, now.json()) == (ids[-1], state("flow", 4, 1, "identified", [0]))


def test_last_event_id_resumes_and_heartbeats_keep_an_idle_stream(
    url: str, http: httpx.Client
) -> None:
    create_experiment(http, id="resume", arms=ARMS, **M3)
    a, b, c = enroll_agents(http, "resume", 3)
    with Stream(url, "/v1/experiments/resume/events") as stream:
        seen = stream.next_event()
    for agent in (a, b, c):  # missed while disconnected
        vote(http, "resume", agent, 2)
    current = state("resume", 1, 0, "exploring", [0, 1])

    with Stream(url, "/v1/experiments/resume/events", {"Last-Event-ID": seen.id or ""}) as again:
        missed = again.next_event()
        assert missed.json() == current and event_order(missed.id or "") > event_order(
            seen.id or ""
        )
        assert missed.fields["retry"] == "1500"
    for unknown in ("garbage", "1-0", "99999999999999-0"):  # not the current id: the state
        with Stream(url, "/v1/experiments/resume/events", {"Last-Event-ID": unknown}) as other:
            assert other.next_event().json() == current

    # the client has the current state: the retry hint alone, then nothing but heartbeats
    with Stream(url, "/v1/experiments/resume/events", {"Last-Event-ID": missed.id or ""}) as idle:
        hint = idle.next_block()
        assert hint is not None and hint.fields == {"retry": "1500"} and not hint.comments
        for _ in range(3):
            blocks = idle.next_heartbeat()
            assert [b.is_event for b in blocks] == [False] * len(blocks), blocks
        reset = http.post("/v1/experiments/resume/reset", headers=admin_headers())
        assert reset.status_code == 200
        assert idle.next_event().json() == state("resume", 2, 1, "exploring", [0, 1, 2])


def test_a_deletion_ends_the_stream_and_a_missing_experiment_is_404(
    url: str, http: httpx.Client
) -> None:
    create_experiment(http, id="doomed", arms=ARMS, **M3)
    with Stream(url, "/v1/experiments/doomed/events") as stream:
        stream.next_event()
        assert http.delete("/v1/experiments/doomed", headers=admin_headers()).status_code == 204
        rest = [block for block in stream.ended() if block.is_event]
        assert [(b.event, b.json(), b.id) for b in rest] == [
            ("deleted", {"experiment": "doomed"}, None)
        ]
    with Stream(url, "/v1/experiments/doomed/events") as gone:
        assert gone.status == 404
        assert gone.headers["content-type"] == "application/json"
        assert httpx.Response(404, content=gone.body).json() == {
            "detail": "experiment 'doomed' does not exist"
        }


def test_a_new_stream_never_gets_a_lost_experiments_state(
    url: str, http: httpx.Client, redis_url: str
) -> None:
    """Redis is flushed (a failover to an empty replica, an operator's FLUSHALL) while a stream
    is open, and the experiment is created again under the same id, with other arms: nothing is
    published, so the hub still holds the lost one's state. A new stream gets the new experiment's
    state first, never the lost one's and never `deleted`; the old stream ends with `deleted`."""
    create_experiment(http, id="reborn", arms=ARMS, **M3)
    agents = enroll_agents(http, "reborn", 3)
    with Stream(url, "/v1/experiments/reborn/events") as old:
        old.next_event()
        for agent in agents:
            vote(http, "reborn", agent, 2)
        assert old.next_event().json()["remaining_arms"] == [0, 1]
        flusher = redis.Redis.from_url(redis_url)
        try:
            flusher.flushall()
        finally:
            flusher.close()
        create_experiment(http, id="reborn", arms=["X", "Y", "Z", "W"], **M3)
        with Stream(url, "/v1/experiments/reborn/events") as new:
            first = new.next_event()
            assert (first.event, first.json()) == (
                "state",
                state("reborn", 0, 0, "exploring", [0, 1, 2, 3]),
            )
        assert [b.event for b in old.ended() if b.is_event] == ["deleted"]


def test_one_subscription_per_experiment_whatever_the_number_of_clients(
    url: str, http: httpx.Client, redis_url: str
) -> None:
    for exp in ("many", "few"):
        create_experiment(http, id=exp, arms=ARMS, **M3)
    agents = enroll_agents(http, "many", 3)
    streams = [Stream(url, "/v1/experiments/many/events") for _ in range(20)]
    streams += [Stream(url, "/v1/experiments/few/events") for _ in range(5)]
    try:
        for stream in streams:
            stream.next_event()
        assert (numsub(redis_url, "many"), numsub(redis_url, "few")) == (1, 1)
        listing = redis.Redis.from_url(redis_url)
        try:  # one connection subscribed for all of them
            assert len(hub_connections(listing)) == 1
        finally:
            listing.close()
        for agent in agents:
            vote(http, "many", agent, 0)
        for stream in streams[:20]:  # fanned out to every client
            assert stream.next_event().json() == state("many", 1, 0, "exploring", [1, 2])
    finally:
        for stream in streams:
            stream.close()
    wait_until(lambda: numsub(redis_url, "many") + numsub(redis_url, "few") == 0, "unsubscribed")


def test_a_lost_subscription_is_restored_and_misses_nothing(
    url: str, http: httpx.Client, redis_url: str
) -> None:
    """The hub's pub/sub connection is killed, and Redis takes no new connection until the arm
    has left: the elimination's message is certainly lost. The stream gets the state anyway, from
    the read that follows the new subscription's confirmation."""
    create_experiment(http, id="cut", arms=ARMS, **M3)
    agents = enroll_agents(http, "cut", 3)
    admin = redis.Redis.from_url(redis_url, single_connection_client=True)
    try:
        for agent in agents[:2]:  # the store's pool has its connections now
            vote(http, "cut", agent, 1)
        with Stream(url, "/v1/experiments/cut/events") as stream:
            stream.next_event()  # read after the votes: no message is pending
            maxclients = admin.config_get("maxclients")["maxclients"]
            admin.config_set("maxclients", 1)
            try:
                (hub,) = hub_connections(admin)
                assert admin.client_kill_filter(_id=hub["id"]) == 1
                wait_until(lambda: numsub(redis_url, "cut", admin) == 0, "the subscription gone")
                assert vote(http, "cut", agents[2], 1)["eliminated"] is True
            finally:
                admin.config_set("maxclients", maxclients)
            assert stream.next_event().json() == state("cut", 1, 0, "exploring", [0, 2])
            wait_until(lambda: numsub(redis_url, "cut") == 1, "subscribed again")
    finally:
        admin.close()


# -- the bounds -----------------------------------------------------------------------------------
@pytest.fixture
def bounded(redis_url: str, clean_redis: str) -> Iterator[ThreadedCoordinator]:
    """A coordinator that believes X-Forwarded-For from 127.0.0.1 (so a test is several clients),
    with 6 streams at most (4 per client) and fewer connections (4) than that."""
    settings = coordinator_settings(
        redis_url,
        max_subscribers=6,
        max_subscribers_per_client=4,
        max_concurrency=4,
        trusted_proxies="127.0.0.1",
        sse_heartbeat_seconds=HEARTBEAT,
    )
    with coordinator(settings) as running:
        yield running


def from_client(address: str) -> dict[str, str]:
    return {"X-Forwarded-For": address}


def test_subscriber_bounds_refuse_with_retry_after_and_votes_are_still_served(
    bounded: ThreadedCoordinator,
) -> None:
    url = bounded.url
    with httpx.Client(base_url=url, timeout=10.0, trust_env=False) as http:
        create_experiment(http, id="full", arms=ARMS, **M3)
        (agent,) = enroll_agents(http, "full", 1)
    path = "/v1/experiments/full/events"
    held = [Stream(url, path, from_client("10.0.0.1")) for _ in range(4)]
    try:
        for stream in held:
            stream.next_event()
        over = Stream(url, path, from_client("10.0.0.1"))
        over.close()
        assert over.status == 429, over.body
        assert int(over.headers["retry-after"]) >= 1
        assert (
            "DEXP_MAX_SUBSCRIBERS_PER_CLIENT"
            in httpx.Response(429, content=over.body).json()["detail"]
        )
        held += [Stream(url, path, from_client("10.0.0.2")) for _ in range(2)]
        for stream in held[4:]:
            assert stream.status == 200
            stream.next_event()
        full = Stream(url, path, from_client("10.0.0.3"))
        full.close()
        assert full.status == 503, full.body
        assert int(full.headers["retry-after"]) >= 1
        assert "DEXP_MAX_SUBSCRIBERS" in httpx.Response(503, content=full.body).json()["detail"]

        # 6 streams held open on a coordinator of 4 connections: votes and probes are served
        with httpx.Client(base_url=url, timeout=10.0, trust_env=False) as http:
            assert http.get("/healthz").status_code == 200
            counted = http.post(
                "/v1/experiments/full/votes", json={"arm": 0, "epoch": 0}, headers=agent.headers
            )
            assert counted.status_code == 200 and counted.json()["counted"] is True
            assert http.get("/v1/experiments/full/best-arm").status_code == 200
        # a stream that ends gives its place back, once the coordinator sees it closed
        held.pop().close()

        def admitted() -> bool:
            held.append(Stream(url, path, from_client("10.0.0.3")))
            return held[-1].status == 200

        wait_until(admitted, "a place again")
    finally:
        for stream in held:
            stream.close()


def test_streams_end_when_the_server_shuts_down(redis_url: str, clean_redis: str) -> None:
    server = ThreadedCoordinator(coordinator_settings(redis_url)).start()
    try:
        with httpx.Client(base_url=server.url, timeout=10.0, trust_env=False) as http:
            create_experiment(http, id="bye", arms=ARMS, **M3)
        streams = [Stream(server.url, "/v1/experiments/bye/events") for _ in range(3)]
        for stream in streams:
            stream.next_event()
    finally:
        server.stop()  # uvicorn waits for open connections: the streams must end by themselves
    assert not server.thread.is_alive(), "the server did not shut down"
    for stream in streams:
        stream.ended()
        stream.close()


# -- the hub itself: a subscriber that does not read holds up nobody --------------------------------
async def next_state(subscriber: Subscriber) -> State:
    """The next state the hub offers `subscriber`, taken."""
    await asyncio.wait_for(subscriber.wake.wait(), DEADLINE)
    subscriber.wake.clear()
    taken = subscriber.take()
    assert taken is not None
    return taken


def test_a_subscriber_that_does_not_read_gets_the_latest_state_and_holds_up_nobody(
    clean_redis: str,
) -> None:
    """Two subscribers of the real hub on the real Redis: one takes every state as it comes, the
    other never takes any. Five resets later the first has seen each of them, and the other holds
    one state, the latest: its backlog is bounded and it slowed nobody."""

    async def body() -> None:
        async with open_store(clean_redis) as store:
            listener = redis_client(clean_redis)
            hub = Hub(store, listener, max_subscribers=10, max_per_client=10)
            try:
                await store.create("hub", ARMS, AlgorithmConfig(**M3))
                reader, stalled = Subscriber(), Subscriber()
                await hub.join("hub", reader)
                await hub.join("hub", stalled)
                seen = [await next_state(reader)]
                for _ in range(5):
                    await store.reset("hub", None)
                    seen.append(await next_state(reader))
                assert [json.loads(s.data)["epoch"] for s in seen] == [0, 1, 2, 3, 4, 5]
                assert stalled.take() == seen[-1] and stalled.take() is None
                await hub.leave(reader)
                await hub.leave(stalled)
                assert not hub.topics
            finally:
                await hub.close()
                await listener.aclose()

    asyncio.run(body())
