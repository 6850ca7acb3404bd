"""The coordinator's API contract on a Redis Cluster (DEXP_REDIS_CLUSTER): the same answers as on
one Redis, every script and transaction kept to the experiment's slot."""

from __future__ import annotations

import httpx
from redis.cluster import RedisCluster

from common import redis_keys as keys
from dexp.redis_cluster import LocalCluster
from tests.services.helpers import (
    ENROLLMENT_SECRET,
    Agent,
    admin_headers,
    bearer,
    coordinator,
    coordinator_settings,
    create_experiment,
    enroll_agents,
)

from .helpers import keys_on, wait_until

ARMS = ["A", "B", "C"]
M2 = {"delta": 0.5**1.5, "eta": 0.5}  # DE: M = 2


def vote(client: httpx.Client, exp: str, agent: Agent, arm: int, epoch: int = 0) -> httpx.Response:
    return client.post(
        f"/v1/experiments/{exp}/votes", json={"arm": arm, "epoch": epoch}, headers=agent.headers
    )


def test_create_enroll_vote_eliminate_identify_reset(client: httpx.Client) -> None:
    exp = "api-contract"
    created = create_experiment(client, id=exp, arms=ARMS, **M2)
    assert (created["threshold"], created["status"], created["remaining_arms"]) == (
        2,
        "exploring",
        [0, 1, 2],
    )
    assert exp in [e["id"] for e in client.get("/v1/experiments").json()["experiments"]]
    taken = client.post("/v1/experiments", json={"id": exp, "arms": ARMS}, headers=admin_headers())
    assert taken.status_code == 409, taken.text
    a, b, c = enroll_agents(client, exp, 3)
    assert [a.index, b.index, c.index] == [1, 2, 3]

    first = vote(client, exp, a, 2)
    assert first.status_code == 200 and first.json()["outcome"] == "counted", first.text
    assert vote(client, exp, a, 2).json()["outcome"] == "duplicate"
    gone = vote(client, exp, b, 2).json()
    assert (gone["outcome"], gone["version"]) == ("eliminated", 1)
    state = client.get(f"/v1/experiments/{exp}").json()
    assert state["remaining_arms"] == [0, 1] and state["votes"] == [0, 0, 2]
    assert [e["name"] for e in state["eliminations"]] == ["C"]
    me = client.get("/v1/agents/me", headers=a.headers).json()
    assert (me["agent_id"], me["voted_against"]) == (a.agent_id, [2])
    voters = client.get(f"/v1/experiments/{exp}/voters", headers=admin_headers()).json()
    assert sorted(voters["voters"][2]) == sorted([a.agent_id, b.agent_id])
    assert vote(client, exp, c, 2).json()["outcome"] == "arm_out"

    assert vote(client, exp, b, 1).json()["outcome"] == "counted"
    assert vote(client, exp, c, 1).json()["outcome"] in ("eliminated", "last_arm")
    best = client.get(f"/v1/experiments/{exp}/best-arm").json()
    assert (best["status"], best["best_arm"]) == ("identified", {"index": 0, "name": "A"}), best
    listed = client.get("/v1/experiments").json()["experiments"]
    assert next(e for e in listed if e["id"] == exp)["status"] == "identified"

    reset = client.post(f"/v1/experiments/{exp}/reset", json={}, headers=admin_headers())
    assert reset.status_code == 200, reset.text
    state = client.get(f"/v1/experiments/{exp}").json()
    assert (state["epoch"], state["remaining_arms"], state["votes"]) == (1, [0, 1, 2], [0, 0, 0])
    assert vote(client, exp, a, 2, epoch=0).json()["outcome"] == "stale_epoch"
    assert vote(client, exp, a, 2, epoch=1).json()["outcome"] == "counted"


def test_tickets_refusals_and_a_wrong_experiment(client: httpx.Client) -> None:
    exp, other = "api-tickets", "api-other"
    create_experiment(client, id=exp, arms=ARMS, **M2)
    create_experiment(client, id=other, arms=ARMS, **M2)
    issued = client.post(
        f"/v1/experiments/{exp}/tickets", json={"count": 2}, headers=admin_headers()
    )
    assert issued.status_code == 201, issued.text
    ticket = issued.json()["tickets"][0]
    enrolled = client.post("/v1/agents", json={"experiment": exp}, headers=bearer(ticket))
    assert enrolled.status_code == 201, enrolled.text
    again = client.post("/v1/agents", json={"experiment": exp}, headers=bearer(ticket))
    assert again.status_code == 401
    agent = Agent(**{k: enrolled.json()[k] for k in ("agent_id", "token", "index")})
    assert vote(client, other, agent, 0).status_code == 403  # enrolled elsewhere
    assert vote(client, exp, agent, 7).status_code == 422  # no arm 7
    assert vote(client, exp, Agent(agent.agent_id, agent.token + "x", 1), 0).status_code == 401
    assert vote(client, "api-missing", agent, 0).status_code in (401, 403, 404)
    assert client.get("/readyz").json() == {"status": "ready"}


def test_delete_removes_the_streams_on_every_node(
    client: httpx.Client, healthy_cluster: LocalCluster, cluster_client: RedisCluster
) -> None:
    """The agents' streams live in 16 shard slots over every master; deleting the experiment
    deletes them all, its keys and its entry in the index, and a new experiment of the same id
    starts empty."""
    exp = "api-delete"
    create_experiment(client, id=exp, arms=ARMS, **M2)
    agents = enroll_agents(client, exp, 40)
    streams = {a.stream(exp) for a in agents}
    for stream in streams:  # the groups made by enrollment; the load generator's activations
        cluster_client.xadd(stream, {"r": b"\x00"})
    legacy = keys.legacy_activations(exp, agents[0].agent_id)  # older versions' names
    unsecret = keys.unsecret_activations(exp, agents[1].agent_id)
    for old in (legacy, unsecret):
        cluster_client.xadd(old, {"r": b"\x00"})
    assert vote(client, exp, agents[0], 1).status_code == 200
    before = keys_on(healthy_cluster, f"dexp:{{{exp}*")
    assert set().union(*before.values()) >= streams | {keys.meta(exp), legacy, unsecret}
    assert sum(1 for found in before.values() if found & streams) == 3  # every master

    response = client.delete(f"/v1/experiments/{exp}", headers=admin_headers())
    assert response.status_code == 204, response.text
    after = keys_on(healthy_cluster, f"dexp:{{{exp}*")
    assert not set().union(*after.values()), after
    assert cluster_client.zscore(keys.EXPERIMENT_INDEX, exp) is None
    assert client.get(f"/v1/experiments/{exp}").status_code == 404
    assert vote(client, exp, agents[1], 1).status_code == 404
    create_experiment(client, id=exp, arms=ARMS, **M2)
    assert vote(client, exp, agents[1], 1).status_code == 401  # the old token stays dead
    fresh = client.get(f"/v1/experiments/{exp}").json()
    assert (fresh["agents"], fresh["votes"]) == (0, [0, 0, 0])
    assert client.delete(f"/v1/experiments/{exp}", headers=admin_headers()).status_code == 204


def test_open_enrollment_secret_and_unknown_routes(client: httpx.Client) -> None:
    exp = "api-open"
    create_experiment(client, id=exp, arms=ARMS, **M2)
    wrong = client.post("/v1/agents", json={"experiment": exp}, headers=bearer("nope-nope-nope"))
    assert wrong.status_code == 401
    ok = client.post("/v1/agents", json={"experiment": exp}, headers=bearer(ENROLLMENT_SECRET))
    assert ok.status_code == 201
    page = client.get(f"/v1/experiments/{exp}/agents", headers=admin_headers())
    assert page.status_code == 200 and len(page.json()["agents"]) == 1, page.text


def test_ldp_reports_decide_on_a_cluster_within_the_experiment_s_slot(
    client: httpx.Client, healthy_cluster: LocalCluster
) -> None:
    """LDP on a cluster: devices with tickets each send one private report (the scripts of
    lua/ldp_report.lua and lua/ldp_decide.lua on the experiment's slot), a replay changes nothing,
    and the coordinator identifies the arm whose reports are all ones; every key of the
    experiment is on one master."""
    exp = "api-ldp"
    create_experiment(
        client, id=exp, arms=ARMS, algorithm="ldp", dp_epsilon=4.0, epsilon=0.3, delta=0.2
    )
    issued = client.post(
        f"/v1/experiments/{exp}/tickets", json={"count": 400}, headers=admin_headers()
    )
    assert issued.status_code == 201, issued.text
    tickets = issued.json()["tickets"]
    doc = client.get(f"/v1/experiments/{exp}").json()
    sent = 0
    while doc["status"] == "exploring":
        assert sent < len(tickets), f"no decision after {sent} reports: {doc['estimates']}"
        enrolled = client.post(
            "/v1/agents", json={"experiment": exp}, headers=bearer(tickets[sent])
        )
        assert enrolled.status_code == 201, enrolled.text
        device = Agent(enrolled.json()["agent_id"], enrolled.json()["token"], 0)
        arm = sent % len(doc["remaining_arms"])
        body = {"arm": doc["remaining_arms"][arm], "bit": int(arm == 0), "seq": 1}
        path = f"/v1/experiments/{exp}/reports"
        reply = client.post(path, json=body, headers=device.headers)
        sent += 1
        if reply.status_code == 409:  # decided between the read and the report
            break
        assert reply.json()["outcome"] == "counted", reply.text
        again = client.post(path, json=body, headers=device.headers)
        assert again.json()["outcome"] == "duplicate"
        doc = client.get(f"/v1/experiments/{exp}").json()
    doc = client.get(f"/v1/experiments/{exp}").json()
    assert doc["status"] == "identified" and doc["remaining_arms"] == [0], doc
    assert doc["reports_total"] <= sent
    held = [found for found in keys_on(healthy_cluster, f"dexp:{{{exp}}}*").values() if found]
    assert len(held) == 1 and keys.meta(exp) in held[0]


def test_a_lease_renewed_and_a_lease_lapsed_keep_to_the_experiment_s_slot(
    healthy_cluster: LocalCluster, cluster_client: RedisCluster
) -> None:
    """Leases on the cluster (renew.lua and lapse.lua, in the experiment's slot; the index and
    the lapsed agent's stream in other slots): the renewed agent stays, the other leaves."""
    exp = "lease-lapse"
    settings = coordinator_settings(
        healthy_cluster.url, redis_cluster=True, experiment="", agent_lease_seconds=2.0
    )
    with (
        coordinator(settings) as server,
        httpx.Client(base_url=server.url, timeout=30.0, trust_env=False) as client,
    ):
        create_experiment(client, id=exp, arms=ARMS, **M2)
        kept, lapsing = (
            client.post(
                "/v1/agents",
                json={"experiment": exp, "lease": True},
                headers=bearer(ENROLLMENT_SECRET),
            ).json()
            for _ in range(2)
        )
        assert vote(client, exp, Agent(lapsing["agent_id"], lapsing["token"], 2), 1).is_success

        def renew_and_look() -> bool:
            reply = client.post("/v1/agents/leases", json={"tokens": [kept["token"]]})
            assert reply.json()["outcomes"] == ["renewed"], reply.text
            return cluster_client.zcard(keys.agents(exp)) == 1

        wait_until(renew_and_look, "the agent not renewed gone", timeout=30)
        assert cluster_client.zrange(keys.agents(exp), 0, -1) == [kept["agent_id"].encode()]
        lapsed = Agent(lapsing["agent_id"], lapsing["token"], 2)
        assert not cluster_client.exists(lapsed.stream(exp))
        assert cluster_client.hget(keys.stream_secrets(exp), lapsed.agent_id) is None
        doc = client.get(f"/v1/experiments/{exp}").json()
        assert (doc["agents"], doc["agents_departed"]) == (2, 1)  # its vote stands
        assert client.delete("/v1/agents/me", headers=bearer(kept["token"])).status_code == 200
        # the index leaves the experiment once it has no lease left (other tests' experiments,
        # on the same cluster, may stay listed in it: their leases are theirs)
        wait_until(
            lambda: not cluster_client.sismember(keys.LEASE_INDEX, exp),
            "the experiment out of the lease index",
            30,
        )
        assert cluster_client.zcard(keys.leases(exp)) == 0
