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
from collections.abc import Callable, Iterator

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
M5 = {"delta": 0.05, "eta": 0.5}  # threshold M = 5


@pytest.fixture
def batched(redis_url: str, clean_redis: str) -> Iterator[httpx.Client]:
    """A client of a coordinator that publishes in batches of 10, with a 1 s cadence."""
    settings = coordinator_settings(
        redis_url,
        publish_batch=BATCH,
        publish_cadence_seconds=CADENCE_MS / 1000,
        sse_heartbeat_seconds=0.5,
        experiment="",
        vote_rate=0,  # the attacker's messages are answered, not refused: each one a message
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


def attack(
    client: httpx.Client,
    exp: str,
    agents: list[Agent],
    before_each: Callable[[], None] = lambda: None,
) -> tuple[list[float], set[int]]:
    """VOTES_OF sent one by one (each after `before_each`), the public counters read after each:
    the attacker's score for each vote (the chance that a guess in proportion to the next
    increments it saw names the vote's arm; 1/10 when it saw nothing move), and the sizes of the
    changes it saw."""
    seen = [public_votes(client, exp)]
    for agent, arm in zip(agents, VOTES_OF, strict=True):
        before_each()
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


def test_an_agent_cannot_flush_a_batch_with_ignored_messages(batched: httpx.Client) -> None:
    """Issue 36, item 2: after each publication one enrolled agent sent 9 ignored messages (votes
    of another epoch, duplicates), and the next honest vote completed the batch alone: 40 of 40
    named exactly. Only counted messages make a batch now: the attacker's 180 messages move no
    count and time no publication, and each of the 20 honest votes scores 0.1, a blind guess."""
    create_experiment(batched, id="flush", arms=ARMS, **M5)
    attacker, *agents = enroll_agents(batched, "flush", len(VOTES_OF) + 1)
    # its one counted vote, so that it can send duplicates; then a batch of 9 more publishes it,
    # and the honest votes start on a publication (as the audit's did)
    assert vote(batched, "flush", attacker, 0)["outcome"] == "counted"
    for arm, agent in enumerate(enroll_agents(batched, "flush", BATCH - 1), start=1):
        vote(batched, "flush", agent, arm)
    assert public_votes(batched, "flush") == [1] * len(ARMS)
    sent: list[str] = []

    def nine_ignored() -> None:  # cheap and repeatable: each one a message, none counted
        for i in range(BATCH - 1):
            body = {"arm": 0} if i % 3 == 0 else {"arm": i, "epoch": 7}
            reply = batched.post("/v1/experiments/flush/votes", json=body, headers=attacker.headers)
            sent.append(reply.json()["outcome"])

    scores, sizes = attack(batched, "flush", agents, nine_ignored)
    named = sum(score == 1.0 for score in scores)
    print(f"ignored messages {len(sent)}; honest votes named exactly {named} of {len(scores)}")
    assert set(sent) == {"duplicate", "stale_epoch"} and len(sent) == 9 * len(VOTES_OF)
    assert scores == pytest.approx([0.1] * len(VOTES_OF))
    assert sizes == {BATCH}
