"""Agents that leave (DELETE /v1/agents/me) and agents that say they are simulated, over real HTTP
and real Redis (issue 37): an agent that leaves is no longer enrolled, fed or able to vote, and
the counts follow; what it voted this epoch stands, so it counts in N until a reset."""

from __future__ import annotations

from typing import Any

import httpx
import redis

from common import redis_keys as keys

from .helpers import ENROLLMENT_SECRET, Agent, admin_headers, bearer, create_experiment

M3 = {"delta": 0.2, "eta": 0.5}  # DE: M = 3


def enroll(client: httpx.Client, exp: str, n: int, **extra: Any) -> list[Agent]:
    agents = []
    for _ in range(n):
        response = client.post(
            "/v1/agents", json={"experiment": exp, **extra}, headers=bearer(ENROLLMENT_SECRET)
        )
        assert response.status_code == 201, response.text
        body = response.json()
        agents.append(Agent(body["agent_id"], body["token"], body["index"]))
    return agents


def counts(client: httpx.Client, exp: str) -> tuple[int, int, int, int]:
    doc = client.get(f"/v1/experiments/{exp}").json()
    return doc["agents"], doc["agents_departed"], doc["agents_simulated"], doc["certified_agents"]


def test_an_agent_that_leaves_is_gone_and_its_votes_stand_until_a_reset(
    client: httpx.Client, clean_redis: str
) -> None:
    create_experiment(client, id="fleet", arms=["A", "B", "C"], **M3)
    voter, quiet, *others = enroll(client, "fleet", 3, simulated=True) + enroll(client, "fleet", 2)
    assert counts(client, "fleet") == (5, 0, 3, 5)
    (mixed,) = [
        w for w in client.get("/v1/experiments/fleet").json()["warnings"] if "simulated" in w
    ]
    assert mixed.startswith("3 of the agents enrolled are simulated")
    vote = client.post(
        "/v1/experiments/fleet/votes", json={"arm": 2, "epoch": 0}, headers=voter.headers
    )
    assert vote.status_code == 200, vote.text
    store = redis.Redis.from_url(clean_redis)
    assert store.exists(voter.stream("fleet"))

    left = client.delete("/v1/agents/me", headers=voter.headers)
    assert left.status_code == 200, left.text
    assert left.json() == {"agent_id": voter.agent_id, "experiment": "fleet", "counted": True}
    assert client.delete("/v1/agents/me", headers=quiet.headers).json()["counted"] is False
    # 3 enrolled, and the voter that left: its vote stands, so it counts in N
    assert counts(client, "fleet") == (4, 1, 1, 4)
    enrolled = {a.decode() for a in store.zrange(keys.agents("fleet"), 0, -1)}
    assert enrolled == {a.agent_id for a in others}
    assert voter.agent_id not in enrolled  # the load generator no longer feeds it
    assert not store.exists(voter.stream("fleet"))
    assert store.hget(keys.stream_secrets("fleet"), voter.agent_id) is None
    doc = client.get("/v1/experiments/fleet").json()
    assert doc["votes"][2] == 1  # the vote stands
    # its token is dead: no vote, no second leave
    again = client.post(
        "/v1/experiments/fleet/votes", json={"arm": 1, "epoch": 0}, headers=voter.headers
    )
    assert again.status_code == 401, again.text
    twice = client.delete("/v1/agents/me", headers=voter.headers)
    assert twice.status_code == 401, twice.text
    assert client.delete("/v1/agents/me", headers=bearer("nobody.x")).status_code == 401

    # a reset empties the voter sets: the departed voter no longer counts
    reset = client.post("/v1/experiments/fleet/reset", headers=admin_headers())
    assert reset.status_code == 200, reset.text
    assert counts(client, "fleet") == (3, 0, 1, 3)
    listed = [e for e in client.get("/v1/experiments").json()["experiments"] if e["id"] == "fleet"]
    assert listed[0]["agents"] == 3
    store.close()
