"""GET /v1/agents/me shows an agent its own messages as counted (issue 37: a device could not see
one real device working): DE's votes, CDE's report, LDP's reports, at once, whatever the
publication batch; and nothing of the others' messages but the count waiting for the next
publication, which GET /v1/experiments/{id}/waiting shows anyone."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from .helpers import (
    bearer,
    coordinator,
    coordinator_settings,
    create_experiment,
    enroll_agents,
)

ARMS = ["red", "green", "blue"]


@pytest.fixture
def batched(redis_url: str, clean_redis: str) -> Iterator[httpx.Client]:
    """A coordinator that publishes in batches of 10, eliminations at a tick of an hour."""
    settings = coordinator_settings(
        redis_url, publish_batch=10, publish_cadence_seconds=3600, experiment=""
    )
    with (
        coordinator(settings) as server,
        httpx.Client(base_url=server.url, timeout=10, trust_env=False) as client,
    ):
        yield client


def me(client: httpx.Client, token: str) -> dict[str, object]:
    reply = client.get("/v1/agents/me", headers=bearer(token))
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def test_an_agent_sees_its_votes_counted_before_the_public_does(batched: httpx.Client) -> None:
    create_experiment(batched, id="de", arms=ARMS, eta=0.5, delta=0.1)  # M = 4
    one, other = enroll_agents(batched, "de", 2)
    for arm in (0, 2):
        reply = batched.post("/v1/experiments/de/votes", json={"arm": arm}, headers=one.headers)
        assert reply.json()["outcome"] == "counted"
    batched.post("/v1/experiments/de/votes", json={"arm": 1}, headers=other.headers)
    mine = me(batched, one.token)
    assert mine["votes"] == [{"arm": 0, "outcome": "counted"}, {"arm": 2, "outcome": "counted"}]
    assert (mine["waiting"], mine["publish_batch"], mine["algorithm"]) == (3, 10, "de")
    assert (mine["reported"], mine["reports_sent"], mine["reports_left"]) == (None, None, None)
    assert me(batched, other.token)["votes"] == [{"arm": 1, "outcome": "counted"}]  # its own only
    public = batched.get("/v1/experiments/de").json()
    assert (public["votes"], public["messages"]) == ([0, 0, 0], 0)
    assert batched.get("/v1/experiments/de/waiting").json()["waiting"] == 3
    assert batched.get("/v1/experiments/nope/waiting").status_code == 404
    assert batched.get("/v1/agents/me", headers=bearer("de-x.y")).status_code == 401


def test_cde_and_ldp_agents_see_their_reports_counted(batched: httpx.Client) -> None:
    body = {"algorithm": "cde", "eta": 0.1, "delta": 0.05, "privacy": 0.8, "agents": 10}
    create_experiment(batched, id="cde", arms=ARMS, **body)
    (agent,) = enroll_agents(batched, "cde", 1)
    assert me(batched, agent.token)["reported"] is False
    batched.post("/v1/experiments/cde/report", json={"arm": 1}, headers=agent.headers)
    assert (me(batched, agent.token)["reported"], me(batched, agent.token)["waiting"]) == (True, 1)

    create_experiment(batched, id="ldp", arms=ARMS, algorithm="ldp", reports_per_agent=2)
    (device,) = enroll_agents(batched, "ldp", 1)
    assert me(batched, device.token)["reports_sent"] == 0
    report = {"arm": 0, "bit": 1, "seq": 1}
    batched.post("/v1/experiments/ldp/reports", json=report, headers=device.headers)
    mine = me(batched, device.token)
    assert (mine["reports_sent"], mine["reports_left"], mine["reported"]) == (1, 1, None)
