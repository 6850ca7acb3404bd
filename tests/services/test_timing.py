"""The timing attack on the public counters (issue 23, point 5), replayed against a real
coordinator and Redis.

The audit polled GET /v1/experiments/{id} and, knowing only when a device sent its vote, named the
arm it voted against: every vote was published at once. Votes are now published in batches
(lua/publish.lua): the public counters, their ETag and the replies a device gets move only once
DEXP_PUBLISH_BATCH messages came, and an elimination shows (and is streamed) at the next tick of
DEXP_PUBLISH_CADENCE_SECONDS. benchmarks/bench_timing_attack.py measures the attacker's score with
random timing; here the attack runs step by step, so that every figure is exact."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from tests.services.helpers import (
    Agent,
    admin_headers,
    coordinator,
    coordinator_settings,
    create_experiment,
    enroll_agents,
)
from tests.services.sse import Stream

M3 = {"delta": 0.2, "eta": 0.5}  # threshold M = 3
ARMS = [f"arm{i}" for i in range(10)]
BATCH = 10
CADENCE_MS = 1000
VOTES_OF = [i % len(ARMS) for i in range(2 * len(ARMS))]  # 20 votes, 2 per arm: M = 3 never


@pytest.fixture
def batched(redis_url: str, clean_redis: str) -> Iterator[httpx.Client]:
    """A client of a coordinator that publishes in batches of 10, with a 1 s cadence."""
    settings = coordinator_settings(
        redis_url,
        publish_batch=BATCH,
        publish_cadence_seconds=CADENCE_MS / 1000,
        sse_heartbeat_seconds=0.5,
        experiment="",
    )
    with (
        coordinator(settings) as server,
        httpx.Client(base_url=server.url, timeout=10, trust_env=False) as client,
    ):
        yield client


def public_votes(client: httpx.Client, exp: str) -> list[int]:
    response = client.get(f"/v1/experiments/{exp}")
    response.raise_for_status()
    return list(response.json()["votes"])


def vote(client: httpx.Client, exp: str, agent: Agent, arm: int) -> dict[str, object]:
    response = client.post(f"/v1/experiments/{exp}/votes", json={"arm": arm}, headers=agent.headers)
    response.raise_for_status()
    return dict(response.json())


def attack(client: httpx.Client, exp: str, agents: list[Agent]) -> tuple[list[float], set[int]]:
    """VOTES_OF sent one by one, the public counters read after each: the attacker's score for each
    vote (the chance that a guess in proportion to the next increments it saw names the vote's
    arm; 1/10 when it saw nothing move), and the sizes of the changes it saw."""
    seen = [public_votes(client, exp)]
    for agent, arm in zip(agents, VOTES_OF, strict=True):
        vote(client, exp, agent, arm)
        seen.append(public_votes(client, exp))
    changes = [np.subtract(b, a) for a, b in itertools.pairwise(seen)]
    scores = []
    for i, arm in enumerate(VOTES_OF):
        change = next((d for d in changes[i:] if d.any()), None)
        scores.append(1 / len(ARMS) if change is None else float(change[arm] / change.sum()))
    return scores, {int(d.sum()) for d in changes if d.any()}


def test_votes_published_at_once_are_singled_out_and_batches_are_not(
    client: httpx.Client, batched: httpx.Client
) -> None:
    """Every vote published at once (the audit's coordinator; the tests' default): each vote is
    named exactly. In batches of 10: the counters move twice, by 10 votes each time, and each
    vote scores 0.1, a blind guess (each batch holds one vote per arm)."""
    for exp, reader, scored, moves in (
        ("at-once", client, 1.0, {1}),
        ("in-batches", batched, 0.1, {BATCH}),
    ):
        create_experiment(reader, id=exp, arms=ARMS, **M3)
        agents = enroll_agents(reader, exp, len(VOTES_OF))
        scores, sizes = attack(reader, exp, agents)
        assert scores == pytest.approx([scored] * len(VOTES_OF))
        assert sizes == moves
        assert sum(public_votes(reader, exp)) == len(VOTES_OF)


def test_between_batches_nothing_public_moves(batched: httpx.Client) -> None:
    """Nine votes (messages 1 to 9): the document keeps its ETag (304), its counters read 0, and
    each device's reply shows the published count of its arm (0), not the live one (1). The tenth
    message publishes all ten."""
    create_experiment(batched, id="still", arms=ARMS, **M3)
    agents = enroll_agents(batched, "still", BATCH)
    before = batched.get("/v1/experiments/still")
    tag = before.headers["etag"]
    for agent, arm in zip(agents[:-1], VOTES_OF, strict=False):
        reply = vote(batched, "still", agent, arm)
        assert (reply["outcome"], reply["votes"], reply["version"]) == ("counted", 0, 0)
        assert (
            batched.get("/v1/experiments/still", headers={"If-None-Match": tag}).status_code == 304
        )
        assert batched.get("/v1/experiments/still/best-arm").json()["status"] == "exploring"
    state = batched.get("/v1/experiments/still").json()
    assert (state["votes"], state["messages"]) == ([0] * len(ARMS), 0)
    live = batched.get("/v1/experiments/still/voters", headers=admin_headers()).json()
    assert sum(map(len, live["voters"])) == BATCH - 1  # the admin reads the live voter sets
    reply = vote(batched, "still", agents[-1], VOTES_OF[BATCH - 1])
    assert reply["votes"] == 1  # published with its batch, its own vote included
    state = batched.get("/v1/experiments/still", headers={"If-None-Match": tag})
    assert state.status_code == 200 and state.headers["etag"] != tag
    assert (state.json()["votes"], state.json()["messages"]) == ([1] * len(ARMS), BATCH)


def test_an_elimination_shows_at_the_next_tick_and_is_streamed(batched: httpx.Client) -> None:
    """Three votes eliminate arm 0 (M = 3): 3 messages, no batch. The public state shows the arm
    in the global set until the first tick of the 1 s cadence after the elimination, and out
    from then on; the event stream sends the elimination at that tick, though no vote follows."""
    create_experiment(batched, id="tick", arms=ARMS, **M3)
    agents = enroll_agents(batched, "tick", 3)
    with Stream(str(batched.base_url), "/v1/experiments/tick/events") as stream:
        assert 0 in stream.next_event().json()["remaining_arms"]
        for agent in agents:
            outcome = vote(batched, "tick", agent, 0)["outcome"]
        assert outcome == "eliminated"
        started = time.time() * 1000
        remaining = batched.get("/v1/experiments/tick").json()["remaining_arms"]
        ended = time.time() * 1000
        event = stream.next_event()
        streamed = time.time() * 1000
    state = batched.get("/v1/experiments/tick").json()
    (eliminated,) = state["eliminations"]
    tick = (eliminated["time"] // CADENCE_MS + 1) * CADENCE_MS
    if ended < tick:
        assert 0 in remaining  # read before the tick: not published yet
    if started >= tick:
        assert 0 not in remaining
    assert 0 not in event.json()["remaining_arms"]
    assert streamed >= tick  # sent at the tick, not at the vote
    assert state["messages"] == 3  # published at the tick with the votes that came before it
