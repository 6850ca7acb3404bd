"""Cacheable reads, gzip and CORS against the real coordinator over real HTTP, real Redis.

ETag/304 on GET /v1/experiments/{id} and .../best-arm (coordinator/caching.py): a strong tag and
Cache-Control on every answer; If-None-Match with the current tag (alone, in a list, weakened by a
proxy, or *) gets 304 with no body and the same headers, from the revision alone (Redis's command
counts show that the document is not read); the tag changes whenever a byte of the document does,
and is the same on every coordinator. gzip for larger bodies, with its own strong tag
(coordinator/compression.py). CORS for the configured origins only, on the device's routes only
(coordinator/cors.py).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import redis
from pydantic import ValidationError

from common import redis_keys as keys
from coordinator.caching import RevisionCache
from coordinator.settings import Settings

from .helpers import (
    ThreadedCoordinator,
    admin_headers,
    ce_config_for_threshold,
    coordinator,
    coordinator_settings,
    create_experiment,
    enroll_agents,
    preflight,
)
from .sse import Stream, wait_until

M3 = {"delta": 0.2, "eta": 0.5}  # threshold M = 3
ROUTES = ["/v1/experiments/{}", "/v1/experiments/{}/best-arm"]
IDENTITY = {"Accept-Encoding": "identity"}


def read(client: httpx.Client, path: str, **headers: str) -> httpx.Response:
    response = client.get(path, headers={**IDENTITY, **headers})
    assert response.status_code in (200, 304), response.text
    return response


def tag_of(client: httpx.Client, path: str) -> str:
    response = read(client, path)
    assert response.status_code == 200
    return response.headers["etag"]


# -- ETag and 304 ---------------------------------------------------------------------------------
@pytest.mark.parametrize("route", ROUTES, ids=["state", "best-arm"])
def test_a_current_tag_gets_304_without_a_body(client: httpx.Client, route: str) -> None:
    create_experiment(client, id="tags", arms=["A", "B", "C"], **M3)
    path = route.format("tags")
    full = read(client, path)
    tag = full.headers["etag"]
    assert tag.startswith('"') and tag.endswith('"') and len(tag) > 8  # strong: no W/
    assert full.headers["cache-control"] == "public, max-age=1"
    assert "Accept-Encoding" in full.headers["vary"]
    assert read(client, path).headers["etag"] == tag  # stable while nothing changes
    opaque = tag.strip('"')
    for condition in (tag, f'"other", {tag}', f"W/{tag}", "*", f'"{opaque}-gzip"'):
        answer = read(client, path, **{"If-None-Match": condition})
        assert answer.status_code == 304, (condition, answer.text)
        assert answer.content == b"" and "content-type" not in answer.headers
        sent = f'"{opaque}-gzip"' if condition.endswith('-gzip"') else tag
        assert answer.headers["etag"] == sent
        assert answer.headers["cache-control"] == "public, max-age=1"
    for stale in ('"other"', 'W/"other"', "nonsense", tag[:-2] + '"', '""', ","):
        answer = read(client, path, **{"If-None-Match": stale})
        assert (answer.status_code, answer.headers["etag"]) == (200, tag), stale
        assert answer.json() == full.json()
    missing = client.get(route.format("missing"), headers={"If-None-Match": "*"})
    assert missing.status_code == 404  # * names a document that exists


@pytest.mark.parametrize("route", ROUTES, ids=["state", "best-arm"])
def test_the_tag_changes_with_every_change_of_the_document(
    client: httpx.Client, route: str, clean_redis: str
) -> None:
    create_experiment(client, id="moves", arms=["A", "B", "C"], **M3)
    path = route.format("moves")
    a, b, c = enroll_agents(client, "moves", 3)

    def known() -> str:
        """The current tag, which the coordinator now knows (it answered a 304 for it)."""
        tag = tag_of(client, path)
        assert read(client, path, **{"If-None-Match": tag}).status_code == 304
        return tag

    tags = [known()]

    def changed(what: str) -> None:
        """The document changed: the previous tag gets the new document at once (this
        coordinator made the change), under a new tag, never seen before."""
        answer = read(client, path, **{"If-None-Match": tags[-1]})
        assert answer.status_code == 200, what
        assert answer.headers["etag"] not in tags and answer.json() == read(client, path).json()
        tags.append(known())

    def vote(agent: Any, arm: int) -> None:
        reply = client.post(
            "/v1/experiments/moves/votes", json={"arm": arm, "epoch": 0}, headers=agent.headers
        )
        assert reply.status_code == 200, reply.text

    vote(a, 2)
    changed("a counted vote")
    vote(a, 2)  # a duplicate: only the message counters move, in the state document
    if route.endswith("best-arm"):
        tags.append(known())  # may move with them: a 304 less, never a stale one
    else:
        changed("a duplicate vote")
    enroll_agents(client, "moves", 1)
    changed("an enrollment")  # the agents, and the certificate of a tie, depend on them
    vote(b, 2)
    vote(c, 2)
    changed("an elimination")
    assert client.post("/v1/experiments/moves/reset", headers=admin_headers()).status_code == 200
    changed("a reset")
    lease = redis.Redis.from_url(clean_redis)
    try:  # the load generator's figures (its own process writes them): the state document only
        lease.set(keys.load_generator("moves"), json.dumps({"run": "r1", "activations": 5}))
        if route.endswith("best-arm"):
            assert tag_of(client, path) == tags[-1]
        else:  # Redis tells the coordinator, a moment after the write
            wait_until(
                lambda: read(client, path, **{"If-None-Match": tags[-1]}).status_code == 200,
                "the lease's change seen",
            )
            changed("the load generator's figures")
    finally:
        lease.close()
    client.delete("/v1/experiments/moves", headers=admin_headers())
    create_experiment(client, id="moves", arms=["A", "B", "C"], **M3)
    changed("deleted and created again")


def test_a_settled_message_changes_the_tag(client: httpx.Client, clean_redis: str) -> None:
    config = ce_config_for_threshold(3, n_arms=3)
    create_experiment(
        client, id="ce", arms=["A", "B", "C"], algorithm="ce", xi=config.xi, eta=0.5,
        delta=config.delta,
    )  # fmt: skip
    (agent,) = enroll_agents(client, "ce", 1)
    before = tag_of(client, "/v1/experiments/ce")
    settled = client.post("/v1/experiments/ce/settled", json={"epoch": 0}, headers=agent.headers)
    assert settled.status_code == 200 and settled.json()["settled"] is True
    assert tag_of(client, "/v1/experiments/ce") != before


def revisions(server: ThreadedCoordinator) -> RevisionCache:
    """The coordinator's revision cache (what its 304s are answered from)."""
    cache: RevisionCache = server.server.config.app.state.revisions
    return cache


def redis_calls(client: redis.Redis) -> dict[str, int]:
    """Redis's own count of the commands it ran, by command."""
    return {
        name.removeprefix("cmdstat_"): int(value["calls"])
        for name, value in client.info("commandstats").items()
    }


def test_a_304_costs_no_read_of_redis_once_the_revision_is_known(
    client: httpx.Client, coordinator_server: ThreadedCoordinator, clean_redis: str
) -> None:
    """Redis's own command counts: the first conditional read of an experiment reads its revision
    (HMGET, and GET of the lease), the next ones read nothing at all; a full read reads the
    document every time."""
    create_experiment(client, id="cheap", arms=[f"arm{i}" for i in range(10)], **M3)
    enroll_agents(client, "cheap", 2)
    wait_until(lambda: revisions(coordinator_server).ready, "the revision cache ready")
    stats = redis.Redis.from_url(clean_redis)

    def cost(path: str, times: int = 1, **headers: str) -> dict[str, int]:
        before = redis_calls(stats)
        for _ in range(times):
            response = read(client, path, **headers)
        after = redis_calls(stats)
        spent = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
        spent.pop("info", None)
        return {"status": response.status_code, **spent}

    try:
        for route in ROUTES:
            path = route.format("cheap")
            tag = tag_of(client, path)
            assert cost(path, **{"If-None-Match": tag}) in (
                {"status": 304, "hmget": 1, "get": 1},  # the first: the revision is read
                {"status": 304},  # or it was known already (the other route read it)
            )
            assert cost(path, 20, **{"If-None-Match": tag}) == {"status": 304}
            full = cost(path)
            assert full["status"] == 200 and full["hgetall"] >= 1 and full["lrange"] >= 1
    finally:
        stats.close()


def test_a_change_by_another_coordinator_or_writer_ends_the_304s(
    client: httpx.Client,
    coordinator_server: ThreadedCoordinator,
    redis_url: str,
    clean_redis: str,
) -> None:
    """The revision a coordinator knows is dropped when anyone changes the experiment: another
    coordinator's vote, a direct write, the lease's expiry; and when its tracking connections are
    killed, it answers from Redis meanwhile and knows again once they are back."""
    create_experiment(client, id="watched", arms=["A", "B", "C"], **M3)
    (agent,) = enroll_agents(client, "watched", 1)
    wait_until(lambda: revisions(coordinator_server).ready, "the revision cache ready")
    path = "/v1/experiments/watched"
    raw = redis.Redis.from_url(clean_redis)

    def current_then_stale(change: Any, what: str) -> None:
        tag = tag_of(client, path)
        assert read(client, path, **{"If-None-Match": tag}).status_code == 304  # known now
        change()
        wait_until(lambda: read(client, path, **{"If-None-Match": tag}).status_code == 200, what)

    try:
        with (
            coordinator(coordinator_settings(redis_url, experiment="")) as other,
            httpx.Client(base_url=other.url, timeout=10.0, trust_env=False) as second,
        ):
            current_then_stale(
                lambda: second.post(
                    "/v1/experiments/watched/votes", json={"arm": 0}, headers=agent.headers
                ).raise_for_status(),
                "a vote on another coordinator",
            )
        lease = keys.load_generator("watched")
        current_then_stale(lambda: raw.set(lease, b'{"run": "r"}'), "a lease written")
        current_then_stale(lambda: raw.pexpire(lease, 1), "the lease expired")
        for which in (0, 1):  # the listener, then the tracking connection
            connection = revisions(coordinator_server).ids[which]
            flags = {int(c["id"]): c["flags"] for c in raw.client_list()}[connection]
            assert ("P" if which == 0 else "t") in flags  # subscribed; tracking
            assert raw.client_kill_filter(_id=connection) == 1
            current_then_stale(
                lambda: raw.hincrby(keys.meta("watched"), "messages"), "a direct write"
            )
            wait_until(lambda: revisions(coordinator_server).ready, "the cache back")
    finally:
        raw.close()


@pytest.mark.parametrize("writer", ["this coordinator", "another writer"])
def test_a_change_during_a_read_of_the_revision_is_not_cached_over(
    client: httpx.Client, coordinator_server: ThreadedCoordinator, clean_redis: str, writer: str
) -> None:
    """The interleaving behind RevisionCache's read tokens, forced: a conditional request reads
    the revision (Redis now tracks the keys for the process), the experiment changes, and Redis's
    one invalidation of those keys is handled (by a vote on this coordinator, which also forgets
    at once; or by another writer, the message alone) before that read stores what it read. The
    read may still answer from the old revision (it began before the change), but must not keep
    it: Redis sends no second invalidation, so a kept entry would answer 304 to the old tag for
    as long as the process lives."""
    create_experiment(client, id="raced", arms=["A", "B", "C"], **M3)
    (agent,) = enroll_agents(client, "raced", 1)
    cache = revisions(coordinator_server)
    wait_until(lambda: cache.ready, "the revision cache ready")
    path = "/v1/experiments/raced"
    old = tag_of(client, path)
    assert "raced" not in cache.entries  # a full read does not fill the cache
    read_done, released = threading.Event(), threading.Event()
    invalidated: list[str] = []
    real_read, real_invalidate = cache.read, cache.invalidate

    async def paused_read(store: Any, exp: str) -> Any:
        """The real read over the tracking connection, then held until the test releases it
        (waiting in a thread: the process's loop, its invalidation listener included, runs on)."""
        entry = await real_read(store, exp)
        read_done.set()
        await asyncio.get_running_loop().run_in_executor(None, released.wait, 60)
        return entry

    def noted_invalidate(names: list[bytes] | None) -> None:
        invalidated.extend(keys.hash_tag(n.decode()) for n in names or [b"{*}"])
        real_invalidate(names)

    raw = redis.Redis.from_url(clean_redis)
    cache.read, cache.invalidate = paused_read, noted_invalidate  # type: ignore[method-assign]
    try:
        with (
            ThreadPoolExecutor(1) as pool,
            httpx.Client(base_url=str(client.base_url), timeout=60.0, trust_env=False) as racing,
        ):
            first = pool.submit(read, racing, path, **{"If-None-Match": old})
            assert read_done.wait(60), "the conditional read never read the revision"
            if writer == "this coordinator":
                vote = client.post(
                    "/v1/experiments/raced/votes", json={"arm": 2}, headers=agent.headers
                )
                assert vote.status_code == 200, vote.text
            else:
                raw.hincrby(keys.meta("raced"), "messages")
            wait_until(lambda: "raced" in invalidated, "Redis's invalidation handled")
            assert "raced" not in cache.reading  # the read's token withdrawn
            released.set()
            assert first.result(timeout=60).status_code == 304  # read before the change
        assert "raced" not in cache.entries  # what it read was not kept
        answer = read(client, path, **{"If-None-Match": old})
        assert answer.status_code == 200 and answer.headers["etag"] != old
        assert read(client, path, **{"If-None-Match": answer.headers["etag"]}).status_code == 304
    finally:
        released.set()
        del cache.read, cache.invalidate  # the class's methods again
        raw.close()


def test_every_coordinator_gives_the_same_tag(client: httpx.Client, redis_url: str) -> None:
    """The tag is made of Redis's state, not of a process's: a device may poll any coordinator."""
    create_experiment(client, id="shared", arms=["A", "B"], **M3)
    with (
        coordinator(coordinator_settings(redis_url, experiment="")) as other,
        httpx.Client(base_url=other.url, timeout=10.0, trust_env=False) as second,
    ):
        for route in ROUTES:
            path = route.format("shared")
            tag = tag_of(client, path)
            assert tag_of(second, path) == tag
            assert read(second, path, **{"If-None-Match": tag}).status_code == 304


# -- gzip -----------------------------------------------------------------------------------------
def test_larger_bodies_are_gzipped_with_their_own_tag(client: httpx.Client) -> None:
    create_experiment(client, id="big", arms=[f"arm-{i:03d}" for i in range(80)], **M3)
    path = "/v1/experiments/big"
    plain = read(client, path)
    assert "content-encoding" not in plain.headers
    with (
        httpx.Client(base_url=str(client.base_url), timeout=10.0, trust_env=False) as raw,
        raw.stream("GET", path, headers={"Accept-Encoding": "gzip"}) as zipped,
    ):
        body = b"".join(zipped.iter_raw())
        headers = zipped.headers
    assert headers["content-encoding"] == "gzip"
    assert int(headers["content-length"]) == len(body) < len(plain.content) / 2
    assert json.loads(gzip.decompress(body)) == plain.json()
    assert headers["etag"] == plain.headers["etag"][:-1] + '-gzip"'
    assert "Accept-Encoding" in headers["vary"]
    again = client.get(path, headers={"Accept-Encoding": "gzip", "If-None-Match": headers["etag"]})
    assert (again.status_code, again.headers["etag"]) == (304, headers["etag"])
    # refused encodings, small bodies and the event stream are not compressed
    for refused in ("br", "identity"):
        assert (
            "content-encoding" not in client.get(path, headers={"Accept-Encoding": refused}).headers
        )
    small = client.get("/healthz", headers={"Accept-Encoding": "gzip"})
    assert "content-encoding" not in small.headers
    with Stream(str(client.base_url), path + "/events", {"Accept-Encoding": "gzip"}) as stream:
        assert stream.next_event().json()["experiment"] == "big"
        assert "content-encoding" not in stream.headers


# -- CORS -----------------------------------------------------------------------------------------
ORIGIN = "https://devices.example"


@pytest.fixture(scope="module")
def cors_server(redis_url: str) -> Iterator[ThreadedCoordinator]:
    settings = coordinator_settings(redis_url, cors_origins=f"{ORIGIN}, http://localhost:3000")
    with coordinator(settings) as running:
        yield running


@pytest.fixture
def cors(cors_server: ThreadedCoordinator, clean_redis: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=cors_server.url, timeout=10.0, trust_env=False) as http:
        yield http


def test_cors_preflight_and_headers_for_the_configured_origins(cors: httpx.Client) -> None:
    create_experiment(cors, id="web", arms=["A", "B"], **M3)
    for path, method in (
        ("/v1/experiments/web/votes", "POST"),
        ("/v1/agents", "POST"),
        ("/v1/experiments/web", "GET"),
        ("/v1/experiments/web/events", "GET"),
        ("/v1/agents/me", "GET"),
    ):
        answer = preflight(cors, path, method, ORIGIN)
        assert answer.status_code == 200, (path, answer.text)
        assert answer.headers["access-control-allow-origin"] == ORIGIN
        assert method in answer.headers["access-control-allow-methods"]
        allowed = answer.headers["access-control-allow-headers"].lower()
        assert "authorization" in allowed and "content-type" in allowed
    # answers, errors included, name the origin and expose ETag and Retry-After
    read = cors.get("/v1/experiments/web", headers={"Origin": ORIGIN})
    assert read.headers["access-control-allow-origin"] == ORIGIN
    assert "ETag" in read.headers["access-control-expose-headers"]
    assert "Origin" in read.headers["vary"]
    refused = cors.post(
        "/v1/experiments/web/votes", json={"arm": 0}, headers={"Origin": "http://localhost:3000"}
    )
    assert refused.status_code == 401
    assert refused.headers["access-control-allow-origin"] == "http://localhost:3000"
    with Stream(str(cors.base_url), "/v1/experiments/web/events", {"Origin": ORIGIN}) as stream:
        assert stream.headers["access-control-allow-origin"] == ORIGIN


def test_no_cors_for_other_origins_routes_or_coordinators(
    cors: httpx.Client, client: httpx.Client
) -> None:
    create_experiment(cors, id="closed", arms=["A", "B"], **M3)
    stranger = "https://evil.example"
    answer = preflight(cors, "/v1/experiments/closed/votes", "POST", stranger)
    assert answer.status_code == 405 and "access-control-allow-origin" not in answer.headers
    assert (
        "access-control-allow-origin"
        not in cors.get("/v1/experiments/closed", headers={"Origin": stranger}).headers
    )
    # the admin routes, the dashboard and the probes never answer CORS
    for path, method in (("/v1/experiments", "POST"), ("/v1/experiments/closed", "DELETE")):
        answer = preflight(cors, path, method, ORIGIN)
        assert answer.status_code == 405 and "access-control-allow-origin" not in answer.headers
    dashboard = cors.get("/dashboard", headers={"Origin": ORIGIN})
    assert "access-control-allow-origin" not in dashboard.headers
    assert dashboard.headers["content-security-policy"].startswith("default-src 'self'")
    assert (
        "access-control-allow-origin"
        not in cors.get("/healthz", headers={"Origin": ORIGIN}).headers
    )
    # a coordinator without DEXP_CORS_ORIGINS (the default) answers no CORS at all
    plain = client.get("/v1/experiments", headers={"Origin": ORIGIN})
    assert "access-control-allow-origin" not in plain.headers
    assert preflight(client, "/v1/experiments/closed/votes", "POST", ORIGIN).status_code == 405


def test_a_bad_cors_origin_is_refused_at_start() -> None:
    for bad in ("devices.example", "https://devices.example/app", "ftp://x"):
        with pytest.raises(ValidationError, match="DEXP_CORS_ORIGINS"):
            Settings(cors_origins=bad)
